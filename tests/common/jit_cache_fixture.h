/* The fixture and helpers that the JIT cache tests (tests/nvrtc/test_jit_cache_*.c)
 * share, without a GPU: offline contexts (FSA_DEVICE_NONE) compile the real
 * "fill" template and the forward kernels with NVRTC and publish them to a
 * disk cache in a fresh directory per test; these helpers make the contexts,
 * ask for kernels and look at what the cache holds.
 *
 * The in-process kernel table is process-wide and never shrinks, so every
 * test that needs a new kernel asks for fill with an UNROLL value no other
 * test of this process used (fresh_unroll); a child process
 * (jit_cache_child.h) starts with an empty table and may ask for the
 * parent's kernel. */
#ifndef FSA_JIT_CACHE_FIXTURE_H
#define FSA_JIT_CACHE_FIXTURE_H

#include "testing.h"

#include "jit/context.h"
#include "jit/disk_cache.h"
#include "jit/module_cache.h"

#include <stddef.h>
#include <stdint.h>

#define FILL_TARGET "sm_80"
#define PLAN_TARGET "sm_90a"

fsa_status create_context(fsa_context **out, const char *dir, const char *target, fsa_cache_mode mode,
                          fsa_jit_mode jit, int log);

/* A request for the fill kernel with one UNROLL value. */
typedef struct fill_req {
    char unroll[16];
    fsa_param params[1];
    fsa_kernel_request req;
} fill_req;

void fill_req_init(fill_req *f, int unroll);
fsa_status get_fill(fsa_module **out, fsa_context *ctx, int unroll);
/* The context's cache counters (all bits set when they cannot be read). */
fsa_cache_stats stats_of(const fsa_context *ctx);
/* The small forward shape of the plan tests: bf16, D 64, 2 query heads, 1 KV head, blocks of 64, top 4. */
fsa_selected_attention_desc small_desc(fsa_algorithm algorithm, uint64_t workspace_limit);

/* An UNROLL value no other request of this process used. */
int fresh_unroll(void);
/* A context, or the test fails. */
fsa_context *context_or_fail(const char *dir, const char *target, fsa_cache_mode mode, fsa_jit_mode jit, int log);
/* The fill kernel, or the test fails. */
fsa_module *fill_or_fail(fsa_context *ctx, int unroll);

/* Entries as fsa_cache_list or fsa_cache_verify report them. */
typedef struct entry_list {
    size_t n;
    struct {
        char name[160];
        char target[24];
        char path[1024];
        uint64_t bytes;
        int valid;
    } e[32];
} entry_list;

/* An fsa_cache_list / fsa_cache_verify callback that collects into an entry_list. */
int collect_entry(const fsa_cache_entry_info *info, void *user);
/* Lists (verify = 0) or verifies (verify = 1) the cache at dir through a
 * read-write context; *bad_out gets verify's count of bad entries. */
entry_list inspect_cache(const char *dir, int verify, uint64_t *bad_out);
/* Files and directories below dir (dir itself not counted). */
int count_below(const char *dir);
/* "dir/leaf"; the caller frees it. */
char *path_in(const char *dir, const char *leaf);
/* The single entry of a cache that holds one, checked to be where it
 * belongs: <dir>/v1/<target>/<name>.<hex>.cubin. */
void the_one_entry(char *path_out, size_t cap, const char *dir, const char *target, const char *name,
                   const char *hex);

/* A fresh kernel that a context of this process compiled into the cache at
 * dir (which held nothing of it): its unroll and name, the path of its one
 * entry, and the module (which outlives the context). */
typedef struct cached_fill {
    int u;
    char us[16], name[32], path[1024];
    fsa_module *m;
} cached_fill;

cached_fill cache_a_fresh_fill(const char *dir);
/* The disk cache at dir, opened read-write, or the test fails. */
fsa_disk_cache *open_disk(const char *dir);

/* Per-test fixture: a fresh empty cache directory (*state), removed
 * afterwards (also when the test fails). */
int setup_dir(void **state);
int teardown_dir(void **state);

#endif
