/* Shared test helpers: temporary directories, seeded random numbers, host
 * conversions to and from bf16/fp16, and the GPU-or-skip check. */
#ifndef FSA_TESTING_H
#define FSA_TESTING_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs these first. */
#include <cmocka.h>

#include "fsa.h"

#define FSA_TEST_SKIP_CODE 77

/* Runs `call` and expects `want`; a failed call must also leave the
 * thread's error record with that status and a message. */
#define EXPECT_STATUS(want, call)                                                                          \
    do {                                                                                                   \
        fsa_status st_ = (call);                                                                           \
        if (st_ != (want))                                                                                 \
            fail_msg("line %d: %s returned %s, expected %s (%s)", __LINE__, #call, fsa_status_name(st_),  \
                     fsa_status_name(want), fsa_last_error());                                            \
        if ((want) != FSA_STATUS_OK) {                                                                     \
            assert_int_equal(fsa_last_error_info()->status, (want));                                       \
            assert_true(fsa_last_error_info()->message[0] != '\0');                                        \
        }                                                                                                  \
    } while (0)

/* A fresh empty directory under $FSA_TEST_TMPDIR (else /tmp); caller frees
 * the string and removes the tree with fsa_test_rmtree. */
char *fsa_test_mkdtemp(const char *prefix);
void fsa_test_rmtree(const char *path);
/* Every file (0644) and directory (0755) below and at path readable by all, writable by the
 * owner only: what an image build leaves. 0, or -1 when a chmod failed. */
int fsa_test_make_tree_readable(const char *path);
/* Flips a few bits of the byte `from_end` bytes before the end of a file (a damaged cache entry). */
void fsa_test_damage_file(const char *path, long from_end);
/* Runs body(out, arg) in a forked child (for what a process does once, or with its streams or environment
 * changed) and copies the `size` bytes it leaves at `out` back into the caller's `out`; a child that fails
 * to hand them over, or exits otherwise than 0, fails the test. The pipe's write end sits above descriptor 9,
 * out of the way of a body that closes its standard streams. */
void fsa_test_in_child(void *out, size_t size, void (*body)(void *out, const void *arg), const void *arg);
/* Runs this test binary again with `argv` (argv[0] its name) on the build's
 * fake libcuda.so.1 (first on LD_LIBRARY_PATH; run through ctest), in the
 * caller's environment less LD_LIBRARY_PATH and the variables named
 * `drop_prefix`* (except those named `keep_prefix`*, which may be NULL),
 * plus the NULL-terminated "NAME=value" settings `extra`. Returns the
 * child's exit status; a child killed by a signal fails the test. */
int fsa_test_run_on_fake_driver(char *const argv[], const char *drop_prefix, const char *keep_prefix,
                                const char *const extra[]);

/* Deterministic generator (splitmix64). */
typedef struct fsa_rng {
    uint64_t state;
} fsa_rng;
uint64_t fsa_rng_next(fsa_rng *r);
double fsa_rng_uniform(fsa_rng *r); /* [0, 1) */
double fsa_rng_normal(fsa_rng *r);
int fsa_rng_int(fsa_rng *r, int lo, int hi); /* [lo, hi] */

/* Random cases of the GPU tests, drawn besides their fixed tables.
 * FSA_TEST_RANDOM=N cases (unset: `fallback`, or when that is negative 4, 1
 * under FSA_TEST_QUICK=1) from FSA_TEST_SEED=S (decimal, or hexadecimal
 * after 0x; unset: the test's `fallback`). A malformed value prints why and
 * exits 1, GPU or not: a typo must not quietly run the defaults. Case i's
 * seed is the (i + 1)-th output of fsa_rng {S}; FSA_TEST_SEED set to
 * fsa_test_random_rerun_seed(S, i) with FSA_TEST_RANDOM=1 draws that case
 * alone, in every test the same way. */
int fsa_test_random_count(int fallback);
uint64_t fsa_test_random_seed(uint64_t fallback);
uint64_t fsa_test_random_case_seed(uint64_t base, int i);
uint64_t fsa_test_random_rerun_seed(uint64_t base, int i);

/* FSA_TEST_CASES=name,name,... runs only the fixed cases named (e.g. one that the quick subset leaves
 * out, under compute-sanitizer) and no random ones. fsa_test_case_listed: 1 when `name` is listed, 0
 * when not, -1 when the variable is unset. fsa_test_check_case_list: every listed name must be one of
 * the n cases name_of(0 .. n-1), else it prints why and exits 1 (a mistyped list would select nothing,
 * and the tests would pass having checked none). */
int fsa_test_case_listed(const char *name);
void fsa_test_check_case_list(const char *(*name_of)(size_t i), size_t n);
/* FSA_TEST_LAYOUTS=1,2 runs only the smaller layouts listed (FSA_QT_SMALL_FWD / FSA_QT_SMALL_BWD values) in
 * the tests that loop over them; unset, every one. A tool as slow as racecheck can then take one layout per
 * process. A name other than 1 or 2, or a list naming none, prints why and exits 1 (it would check nothing). */
int fsa_test_layout_listed(const char *layout);

/* Round to nearest even; NaN stays NaN. */
uint16_t fsa_f32_to_bf16(float x);
float fsa_bf16_to_f32(uint16_t x);
uint16_t fsa_f32_to_f16(float x);
float fsa_f16_to_f32(uint16_t x);

/* Device memory for GPU tests, through the library's driver loader. Each
 * call fails the test on a driver error. The context made by
 * fsa_test_gpu_context_or_skip is current on the calling thread. */
uint64_t fsa_test_dalloc(size_t bytes);
void fsa_test_dfree(uint64_t ptr);
void fsa_test_h2d(uint64_t dst, const void *src, size_t bytes);
void fsa_test_d2h(void *dst, uint64_t src, size_t bytes);
void fsa_test_dfill(uint64_t dst, uint8_t byte, size_t bytes);
void fsa_test_sync(void);
/* Waits for `stream` (a non-blocking stream: fsa_test_sync does not wait for it). */
void fsa_test_stream_sync(void *stream);

/* Capture and replay, for the graph tests: fsa_test_capture_begin makes a
 * non-blocking stream (g->stream, for the library calls) and starts a global
 * capture on it; fsa_test_capture_end ends the capture and instantiates the
 * graph; fsa_test_graph_replay launches the instance and waits for it;
 * fsa_test_graph_free releases what was made. Each driver call fails the test
 * on an error. */
typedef struct {
    void *stream; /* CUstream */
    void *graph;  /* CUgraph */
    void *exec;   /* CUgraphExec */
} fsa_test_graph;
void fsa_test_capture_begin(fsa_test_graph *g);
void fsa_test_capture_end(fsa_test_graph *g);
void fsa_test_graph_replay(const fsa_test_graph *g);
void fsa_test_graph_free(fsa_test_graph *g);

/* fn(arg, stream) on a thread of its own, waited for: a server's second
 * thread calling the library while this one captures (in global mode, as
 * PyTorch does). Returns fn's status; `message` gets that thread's error
 * record. `stream` must exist before the capture began. The work fn queued
 * on `stream` may still be running when this returns: fsa_test_stream_sync
 * before reading its outputs. */
typedef fsa_status (*fsa_test_call_fn)(void *arg, void *stream);
fsa_status fsa_test_call_on_another_thread(fsa_test_call_fn fn, void *arg, void *stream, char *message,
                                           size_t message_size);

/* The on/off test variable `name`: 1, on, true, yes (any case) are 1; unset,
 * empty, 0, off, false, no are 0; anything else prints why and exits 1 (as
 * the library's own switches refuse it: "false" must not read as on). */
int fsa_test_env_switch(const char *name);
/* FSA_TEST_QUICK (fsa_test_env_switch): the GPU tests' quick subset. */
int fsa_test_quick(void);
/* Whether FSA_TEST_REQUIRE_GPU is on (fsa_test_env_switch): the
 * machine is meant to have a usable GPU, so a GPU test that finds none must
 * fail, not skip (a driver-loader or device-detection bug would otherwise
 * turn the GPU suite into skips that pass). */
int fsa_test_gpu_required(void);
/* Leaves a GPU test that found no usable GPU (`why`, printf-style): exit 77
 * (skipped), or exit 1 with the reason when fsa_test_gpu_required(). */
__attribute__((noreturn, format(printf, 1, 2))) void fsa_test_exit_without_gpu(const char *why, ...);

/* Exits the process with 77 (CTest: skipped) unless a context can be made on
 * device 0 (exit 1 instead when fsa_test_gpu_required()). Returns that context
 * otherwise. */
fsa_context *fsa_test_gpu_context_or_skip(const char *cache_dir);
/* Whether a plan's refusal (st and the message of fsa_last_error) is the
 * documented FSA_STATUS_UNSUPPORTED naming shared memory, on a GPU with less
 * shared memory per block than sm_90's: a shape that only sm_90 holds (on
 * the 99 KB GPUs the backward at Dk + Dv over 500, docs/semantics.md). A
 * fixed case so refused is reported and not run there; on sm_90-class GPUs
 * every refusal fails. */
int fsa_test_refused_for_shared_memory(const fsa_context *ctx, fsa_status st, const char *message);

/* The environment under which a plan created meanwhile takes the mma.sync
 * query-tile kernels (FSA_WGMMA=0, FSA_WGMMA_BWD=0) in their smaller layouts:
 * FSA_QT_SMALL_FWD=fwd and FSA_QT_SMALL_BWD=bwd (NULL: as they were). The
 * variables are read at plan creation; _end puts back what was there. */
typedef struct fsa_test_small_layouts {
    char *saved[4];
} fsa_test_small_layouts;
void fsa_test_small_layouts_begin(fsa_test_small_layouts *s, const char *fwd, const char *bwd);
void fsa_test_small_layouts_end(fsa_test_small_layouts *s);

/* Whether the context's disk cache holds a kernel of the context's target
 * whose readable name starts with `prefix` and has `part` as whole fields
 * (e.g. "cmp_fwd_", "_qf3"; "_qb1" is not "_qb15"): how a test sees which
 * variant of a kernel a plan compiled. */
int fsa_test_cache_has_kernel(fsa_context *ctx, const char *prefix, const char *part);

/* Fails the test unless, for a nonzero `layout`, the cache holds a kernel
 * named `prefix`..._<tag><layout> (the layout parameter's field of its name):
 * the plan just created compiled that layout's kernel, not the default one. */
void fsa_test_expect_layout_kernel(fsa_context *ctx, const char *prefix, const char *tag, int layout);

/* The shared memory per block of the context's target (bytes). */
int fsa_test_max_smem(const fsa_context *ctx);
/* Sets environment variable `name` to `value` (NULL: unsets it) and returns
 * what it held before (NULL: unset), for fsa_test_env_restore: a test's way
 * to plan under a library variable (FSA_WGMMA, FSA_QT_SMALL_FWD) and leave
 * the process as it found it. */
char *fsa_test_env_swap(const char *name, const char *value);
/* Puts back what fsa_test_env_swap returned (and frees it). */
void fsa_test_env_restore(const char *name, char *saved);
/* A second context on the same device with check mode on (after
 * fsa_test_gpu_context_or_skip); exits on failure. */
fsa_context *fsa_test_check_context(const char *cache_dir);

/* The contexts of a check-mode test: a fresh cache directory, a plain
 * context (exit 77 without a GPU) and one in check mode, both over it. */
typedef struct fsa_test_contexts {
    char *cache_dir;
    fsa_context *plain, *check;
} fsa_test_contexts;
void fsa_test_contexts_make(fsa_test_contexts *c, const char *prefix);
void fsa_test_contexts_free(fsa_test_contexts *c);

/* Entries named `name` (a kernel family, e.g. "offsets_check") in the cache
 * of ctx's target. */
int fsa_test_cache_count(fsa_context *ctx, const char *name);

/* A device buffer's bytes in a new host buffer (the caller frees it). */
unsigned char *fsa_test_image(uint64_t dev, size_t bytes);
/* Fails unless every byte of the device buffer is `poison` (nothing wrote it). */
void fsa_test_assert_untouched(uint64_t dev, size_t bytes, uint8_t poison);
/* Fails unless every 16-bit element of a strided image of n_elems elements that is not one of the
 * T x H x D logical elements (t, h, d) at t * ts + h * hs + d still holds `poison`: the padding of a
 * strided output (columns past D in a head, gaps between heads or tokens) is never written. `what`
 * names the tensor in the failure. */
void fsa_test_assert_padding_untouched(const uint16_t *img, size_t n_elems, int T, int H, int D, int64_t ts,
                                       int64_t hs, uint16_t poison, const char *what);
/* Fails unless the last error comes from `stage` and its message holds `what`. */
void fsa_test_expect_error(const char *stage, const char *what);

/* A plan-choice query (`get` over `query`, a test's own arguments) given each
 * struct_size that ends inside an appended field of fsa_plan_choice (splits,
 * reserved): FSA_STATUS_STRUCT_SIZE with nothing written. Then the first
 * version's size: FSA_STATUS_OK with its fields written. */
void fsa_test_plan_choice_sizes(fsa_status (*get)(fsa_plan_choice *out, const void *query), const void *query);

/* The GNU build ID of a 64-bit ELF file, read from the file's own notes (the
 * check on what the library reads from memory); 0 when it has none. */
size_t fsa_test_build_id_of_file(uint8_t *out, size_t cap, const char *path);

#endif
