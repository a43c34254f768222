/**
 * @file fsa.h
 * fsa-jit: shape-specialized sparse selected attention, compiled at run time.
 *
 * The whole public API, for C11 and C++; no CUDA header is needed to include
 * it. Device pointers are passed as uint64_t values (CUdeviceptr), streams as
 * void * (CUstream; NULL is the legacy default stream).
 *
 * Conventions:
 * - Every function that can fail returns fsa_status (0 = FSA_STATUS_OK); on
 *   failure fsa_last_error() gives the detail for the calling thread. Beside
 *   the statuses each function lists, any function that allocates host
 *   memory may return FSA_STATUS_OUT_OF_MEMORY, and plan creation on a
 *   device FSA_STATUS_NO_DRIVER (a driver without an entry point it needs)
 *   or FSA_STATUS_INTERNAL (a loaded kernel unlike the library's table).
 * - Outputs come first. What a function hands out through `**out` belongs to
 *   the caller, who releases it with the matching destroy function; destroy
 *   functions accept NULL. A `const char *` a function returns belongs to the
 *   library. Host structs and strings passed in are read during the call only
 *   (the library copies what it keeps); device memory named in the arguments
 *   is used by the enqueued work until it completes on the stream.
 * - Structs that can grow start with `size_t struct_size`; initialize them
 *   with their ..._INIT macro, which sets it to the size the caller was
 *   compiled with. The library accepts any struct_size from the struct's first
 *   published size up to its current one, except one that ends inside a
 *   field added after the first version (no version ends there; refused
 *   whatever else the call holds, even with nothing to do): fields past the caller's
 *   struct_size read as zero, and zero means the default for every field added
 *   later; an output struct gets only the fields its struct_size covers. Other
 *   sizes give FSA_STATUS_STRUCT_SIZE. Fields are only appended, each one at
 *   or after the end of the previous version's struct.
 * - CUDA: a context on a device retains that device's primary context (the
 *   one the CUDA runtime and PyTorch use). A call that uses the driver makes it
 *   current for the duration of the call and then restores whatever context
 *   the calling thread had. Streams must belong to that primary context.
 * - Threads: a context and its plans may be used from several threads at
 *   once, except where a function says otherwise (the destroy functions).
 *   Context and plan creation, and a context's first compile (which may be
 *   its first fsa_fill_u32), read environment variables (FSA_*, CUDA_HOME,
 *   CUDA_PATH; XDG_CACHE_HOME and HOME for the default cache directory;
 *   README): do not change the environment (setenv, putenv) while they may
 *   run.
 * - Synchronization: the launch functions (fsa_selected_attention_fwd,
 *   fsa_selected_attention_bwd, fsa_fill_u32 once its kernel is loaded) only
 *   enqueue work on the caller's stream: no host synchronization, no
 *   allocation, and they can be captured in a CUDA graph. Two exceptions,
 *   both off by default: with tuning on (fsa_context_options.tune) the first
 *   uncaptured call of a shape bucket without a tuning record waits for its
 *   timings (a paged-cache plan's also allocates scratch batches), and in
 *   check mode (fsa_context_options.check) an uncaptured call waits for the
 *   metadata check's verdict. Those waits (and the timings' scratch
 *   allocations) run on the call's stream in relaxed capture mode, so another
 *   thread may capture meanwhile, in global mode too (unless the call's
 *   stream is the legacy default stream and the captured one a blocking
 *   stream: the legacy stream waits for it). Functions that
 *   compile or load kernels (fsa_plan_create, the first fsa_fill_u32 of a
 *   context, fsa_cache_verify on a device) block the calling thread and must
 *   not run during a stream capture, in this thread or (global mode)
 *   another; nor fsa_plan_tune, which uses the legacy stream.
 */
#ifndef FSA_H
#define FSA_H

/* The API is split by concern into the headers of fsa/, included in the
 * order their declarations build on one another; each part includes the parts
 * it needs, so it also compiles alone. This header stays the one to include. */
#include "fsa/version.h"
#include "fsa/common.h"
#include "fsa/status.h"
#include "fsa/context.h"
#include "fsa/cache.h"
#include "fsa/fill.h"
#include "fsa/selected.h"
#include "fsa/selected_bwd.h"
#include "fsa/kvcache.h"
#include "fsa/compressed.h"
#include "fsa/window.h"
#include "fsa/gate.h"

#endif /* FSA_H */
