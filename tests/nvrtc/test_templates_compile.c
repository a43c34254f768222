/* Every template renders and compiles with NVRTC for sm_80 and sm_90a, on a
 * machine without a GPU, over a spread of its parameters, and no function of
 * it spills registers unless the spill is listed, with its reason, in
 * justified_spills. A template added without an entry here fails the
 * coverage test. */
#include "testing.h"

#include "jit/compile.h"
#include "jit/nvrtc_loader.h"
#include "jit/render.h"
#include "jit/resource_usage.h"
#include "jit/templates.h"
#include "attention/kernels.h"

#include "../../templates/cmp_params.cuh"
#include "../../templates/fsa_qt_layout.cuh"
#include "../../templates/kvc_params.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct variant {
    const char *family;
    const char *dtype, *d, *g, *bk, *unroll, *k;
    const char *keys;
} variant;

static const variant variants[] = {
    {"fill", NULL, NULL, NULL, NULL, "4", NULL, NULL},
    {"sel_index", NULL, NULL, NULL, "16", NULL, "1", NULL},
    {"sel_index", NULL, NULL, NULL, "64", NULL, "16", NULL},
    {"sel_index", NULL, NULL, NULL, "256", NULL, "64", NULL},
    {"sel_fwd_main", "bf16", "128", "4", "64", NULL, NULL, NULL},
    {"sel_fwd_main", "f16", "96", "3", "16", NULL, NULL, NULL},
    {"sel_fwd_main", "bf16", "256", "1", "128", NULL, NULL, NULL},
    {"sel_fwd_main", "f16", "32", "16", "32", NULL, NULL, NULL},
    {"sel_fwd_reduce", "bf16", "128", "4", NULL, NULL, NULL, NULL},
    {"sel_fwd_reduce", "f16", "192", "7", NULL, NULL, NULL, NULL},
    {"sel_fwd_nsa", "bf16", "128", "16", "64", NULL, NULL, NULL},
    {"sel_fwd_nsa", "f16", "256", "24", "256", NULL, NULL, NULL},
    {"sel_fwd_nsa", "bf16", "64", "1", "16", NULL, NULL, NULL},
    {"sel_bwd_prep", "bf16", "128", NULL, NULL, NULL, NULL, NULL},
    {"sel_bwd_prep", "f16", "96", NULL, NULL, NULL, NULL, NULL},
    {"sel_bwd_main", "bf16", "128", "4", "64", NULL, NULL, "64"},
    {"sel_bwd_main", "f16", "256", "2", "128", NULL, NULL, "128"},
    {"sel_bwd_main", "bf16", "32", "32", "16", NULL, NULL, "16"},
    {"sel_bwd_main", "bf16", "96", "80", "256", NULL, NULL, "128"},
    {"sel_bwd_dq_nsa", "bf16", "128", "16", "64", NULL, NULL, NULL},
    {"sel_bwd_dq_nsa", "f16", "256", "40", "256", NULL, NULL, NULL},
    {"sel_bwd_reduce", "bf16", "128", "4", "64", NULL, NULL, NULL},
    {"sel_bwd_reduce", "f16", "192", "7", "128", NULL, NULL, NULL},
    {"sel_check", NULL, NULL, NULL, NULL, NULL, NULL, NULL},
    {"kvc_check", NULL, NULL, NULL, NULL, NULL, NULL, NULL},
    {"offsets_check", NULL, NULL, NULL, NULL, NULL, NULL, NULL},
};
#define N_VARIANTS (sizeof variants / sizeof variants[0])

/* Kernels over a paged KV cache also take the page size (and, when it
 * differs from d, the value head dim). */
typedef struct paged_variant {
    variant v;
    const char *page, *dv;
} paged_variant;

static const paged_variant paged_variants[] = {
    {.v = {.family = "kvc_fwd", .dtype = "bf16", .d = "128", .g = "4", .bk = "64", .k = "16"},
     .page = "64"},
    {.v = {.family = "kvc_fwd", .dtype = "bf16", .d = "128", .g = "16", .bk = "64", .k = "16"},
     .page = "1"},
    {.v = {.family = "kvc_fwd", .dtype = "f16", .d = "64", .g = "1", .bk = "16", .k = "64"},
     .page = "256"},
    {.v = {.family = "kvc_fwd", .dtype = "bf16", .d = "96", .g = "8", .bk = "128", .k = "8"},
     .page = "32"},
    {.v = {.family = "kvc_fwd", .dtype = "f16", .d = "256", .g = "64", .bk = "256", .k = "4"},
     .page = "16"},
    {.v = {.family = "kvc_fwd", .dtype = "bf16", .d = "32", .g = "3", .bk = "32", .k = "5"},
     .page = "128"},
    {.v = {.family = "kvc_fwd", .dtype = "bf16", .d = "192", .g = "16", .bk = "64", .k = "16"},
     .page = "64", .dv = "128"},
    {.v = {.family = "kvc_fwd", .dtype = "f16", .d = "64", .g = "4", .bk = "32", .k = "8"}, .page = "16", .dv = "128"},
    {.v = {.family = "kvc_fwd", .dtype = "bf16", .d = "128", .g = "2", .bk = "64", .k = "16"}, .page = "1", .dv = "256"},
    /* tensor-map copies of two page boxes per block (sm_90a) */
    {.v = {.family = "kvc_fwd", .dtype = "bf16", .d = "128", .g = "4", .bk = "128", .k = "8"}, .page = "128"},
};
#define N_PAGED_VARIANTS (sizeof paged_variants / sizeof paged_variants[0])

/* Kernels with a value head dim dv of their own (the others take d for it):
 * query-tile attention (compressed, sliding window) and the selected
 * attention with Dk (d) != Dv, NSA's 192 / 128 among them; the selection
 * kernel also takes the compression's kernel size l and stride. */
typedef struct cmp_variant {
    variant v;
    const char *dv, *l, *stride;
    const char *wg; /* the plan's warpgroup variant on sm_90a where the kernel does not take dv (the selection) */
} cmp_variant;

static const cmp_variant cmp_variants[] = {
    {.v = {.family = "cmp_fwd", .dtype = "bf16", .d = "128", .g = "4"}, .dv = "128"},
    {.v = {.family = "cmp_fwd", .dtype = "bf16", .d = "192", .g = "16"}, .dv = "128"},
    {.v = {.family = "cmp_fwd", .dtype = "f16", .d = "256", .g = "1"}, .dv = "256"},
    {.v = {.family = "cmp_fwd", .dtype = "f16", .d = "64", .g = "3"}, .dv = "32"},
    {.v = {.family = "cmp_fwd", .dtype = "bf16", .d = "16", .g = "7"}, .dv = "192"},
    {.v = {.family = "cmp_bwd", .dtype = "bf16", .d = "128", .g = "4"}, .dv = "128"},
    {.v = {.family = "cmp_bwd", .dtype = "bf16", .d = "192", .g = "16"}, .dv = "128"},
    {.v = {.family = "cmp_bwd", .dtype = "f16", .d = "256", .g = "1"}, .dv = "256"},
    {.v = {.family = "cmp_bwd", .dtype = "f16", .d = "64", .g = "3"}, .dv = "32"},
    {.v = {.family = "cmp_bwd", .dtype = "bf16", .d = "16", .g = "7"}, .dv = "256"},
    /* the warpgroup backward (sm_90a) with 32 query columns per product: Dk + Dv over 256 */
    {.v = {.family = "cmp_bwd", .dtype = "f16", .d = "256", .g = "2"}, .dv = "64"},
    {.v = {.family = "swa_fwd", .dtype = "bf16", .d = "128", .g = "4"}, .dv = "128"},
    {.v = {.family = "swa_fwd", .dtype = "bf16", .d = "192", .g = "16"}, .dv = "128"},
    {.v = {.family = "swa_fwd", .dtype = "f16", .d = "256", .g = "1"}, .dv = "256"},
    {.v = {.family = "swa_fwd", .dtype = "f16", .d = "32", .g = "5"}, .dv = "64"},
    {.v = {.family = "swa_bwd", .dtype = "bf16", .d = "128", .g = "4"}, .dv = "128"},
    {.v = {.family = "swa_bwd", .dtype = "bf16", .d = "192", .g = "16"}, .dv = "128"},
    {.v = {.family = "swa_bwd", .dtype = "f16", .d = "256", .g = "1"}, .dv = "256"},
    {.v = {.family = "swa_bwd", .dtype = "f16", .d = "64", .g = "2"}, .dv = "64"},
    {.v = {.family = "swa_bwd", .dtype = "bf16", .d = "32", .g = "3"}, .dv = "96"},
    {.v = {.family = "swa_bwd", .dtype = "bf16", .d = "64", .g = "16"}, .dv = "64"},
    {.v = {.family = "cmp_select", .dtype = "bf16", .d = "128", .g = "1", .bk = "64", .k = "16"}, .l = "32", .stride = "16"},
    {.v = {.family = "cmp_select", .dtype = "bf16", .d = "128", .g = "4", .bk = "64", .k = "16"}, .l = "32", .stride = "16"},
    {.v = {.family = "cmp_select", .dtype = "bf16", .d = "192", .g = "16", .bk = "64", .k = "16"}, .l = "32", .stride = "16"},
    /* NSA's 192 / 128: the warp-specialized selection (its ring on mbarriers), spread lists at G 16, lane lists at G 2 */
    {.v = {.family = "cmp_select", .dtype = "bf16", .d = "192", .g = "16", .bk = "64", .k = "16"}, .l = "32", .stride = "16", .wg = "6"},
    {.v = {.family = "cmp_select", .dtype = "bf16", .d = "192", .g = "2", .bk = "64", .k = "16"}, .l = "32", .stride = "16", .wg = "6"},
    {.v = {.family = "cmp_select", .dtype = "f16", .d = "256", .g = "1", .bk = "256", .k = "64"}, .l = "64", .stride = "4"},
    {.v = {.family = "cmp_select", .dtype = "f16", .d = "64", .g = "5", .bk = "16", .k = "1"}, .l = "16", .stride = "16"},
    {.v = {.family = "cmp_select", .dtype = "bf16", .d = "32", .g = "2", .bk = "32", .k = "33"}, .l = "8", .stride = "32"},
    {.v = {.family = "sel_fwd_main", .dtype = "bf16", .d = "192", .g = "4", .bk = "64"}, .dv = "128"},
    {.v = {.family = "sel_fwd_main", .dtype = "f16", .d = "64", .g = "2", .bk = "64"}, .dv = "128"},
    {.v = {.family = "sel_fwd_main", .dtype = "bf16", .d = "128", .g = "16", .bk = "32"}, .dv = "64"},
    {.v = {.family = "sel_fwd_reduce", .dtype = "bf16", .g = "4"}, .dv = "128"},
    {.v = {.family = "sel_fwd_main_wg", .dtype = "bf16", .d = "128", .g = "4", .bk = "64"}, .dv = "128"},
    {.v = {.family = "sel_fwd_main_wg", .dtype = "f16", .d = "128", .g = "16", .bk = "32"}, .dv = "128"},
    {.v = {.family = "sel_fwd_main_wg", .dtype = "bf16", .d = "64", .g = "1", .bk = "64"}, .dv = "128"},
    {.v = {.family = "sel_fwd_main_wg", .dtype = "f16", .d = "64", .g = "3", .bk = "32"}, .dv = "64"},
    {.v = {.family = "sel_fwd_main_wg", .dtype = "bf16", .d = "192", .g = "16", .bk = "64"}, .dv = "128"},
    {.v = {.family = "sel_fwd_nsa", .dtype = "bf16", .d = "192", .g = "16", .bk = "64"}, .dv = "128"},
    {.v = {.family = "sel_fwd_nsa", .dtype = "f16", .d = "64", .g = "8", .bk = "32"}, .dv = "128"},
    {.v = {.family = "sel_bwd_prep", .dtype = "bf16"}, .dv = "64"},
    {.v = {.family = "sel_bwd_main", .dtype = "bf16", .d = "192", .g = "4", .bk = "64", .keys = "64"}, .dv = "128"},
    {.v = {.family = "sel_bwd_main", .dtype = "f16", .d = "64", .g = "1", .bk = "64", .keys = "64"}, .dv = "128"},
    {.v = {.family = "sel_bwd_main", .dtype = "bf16", .d = "128", .g = "16", .bk = "128", .keys = "128"}, .dv = "64"},
    {.v = {.family = "sel_bwd_main_wg", .dtype = "bf16", .d = "128", .g = "4", .bk = "64"}, .dv = "128"},
    {.v = {.family = "sel_bwd_main_wg", .dtype = "f16", .d = "64", .g = "3", .bk = "64"}, .dv = "128"},
    {.v = {.family = "sel_bwd_main_wg", .dtype = "bf16", .d = "128", .g = "128", .bk = "64"}, .dv = "64"},
    /* NSA's 192 / 128: two warpgroups split by output (dK; dV and dq) */
    {.v = {.family = "sel_bwd_main_wg", .dtype = "bf16", .d = "192", .g = "16", .bk = "64"}, .dv = "128"},
    {.v = {.family = "sel_bwd_dq_nsa", .dtype = "bf16", .d = "192", .g = "16", .bk = "64"}, .dv = "128"},
    {.v = {.family = "sel_bwd_dq_nsa", .dtype = "f16", .d = "64", .g = "4", .bk = "32"}, .dv = "128"},
    {.v = {.family = "sel_bwd_reduce", .dtype = "bf16", .d = "192", .g = "4", .bk = "64"}, .dv = "128"},
    {.v = {.family = "sel_bwd_reduce", .dtype = "bf16", .d = "64", .g = "2", .bk = "32"}, .dv = "128"},
    /* NSA's gates: a row's lanes 16 (Dv 128), 32 with some idle (192), 2 (16) */
    {.v = {.family = "nsa_gate", .dtype = "bf16"}, .dv = "128"},
    {.v = {.family = "nsa_gate", .dtype = "f16"}, .dv = "192"},
    {.v = {.family = "nsa_gate", .dtype = "bf16"}, .dv = "16"},
};
#define N_CMP_VARIANTS (sizeof cmp_variants / sizeof cmp_variants[0])

/* Spills allowed in shipped kernels: family, entry point, target (NULL:
 * any), the most spill bytes per thread (stores and loads), and why. Each
 * entry must still match a spill, so the table cannot outlive its reasons. */
typedef struct justified_spill {
    const char *family, *entry, *target;
    int max_bytes;
    const char *reason;
} justified_spill;

/* The last entry only ends the list. */
static const justified_spill justified_spills[] = {
    {"sel_fwd_main", "fsa_sel_fwd_main", NULL, 96,
     "two CTAs of eight warps per SM cap registers at 128 up to head dims of 128: a few spilled bytes per thread "
     "cost less than the four warps per SM they buy (bench/NOTES.md)"},
    {"cmp_select", "fsa_cmp_select", "sm_90a", 88,
     "four warpgroups at G 1 and 2 (FSA_CMP_SEL_FOUR_SMALL_G) where a lane keeps a whole top-k list (up to 16 "
     "entries): at 128 registers without the producer (variant 7) 88 bytes at G 1; the default's four consumers "
     "(with FSA_CMP_SEL_WS: 112 registers, the producer keeping 32, the scorer's constant fragments read from "
     "shared memory) 76 bytes at G 1, a few values reloaded per stage: 16 compute warps per SM instead "
     "of 12 measured faster than three consumers without spills (bench/NOTES.md, \"sel4\", \"csel\", \"cspill\")"},
    {"sel_bwd_reduce", "fsa_sel_bwd_sums", NULL, 32,
     "four CTAs of eight warps per SM (__launch_bounds__(256, 4)) cap registers at 64, where the dq and dK/dV "
     "sums of one kernel keep their loads in flight: a few spilled bytes per thread cost less than the fourth "
     "CTA's bytes in flight for HBM are worth (bench/NOTES.md, \"ilp2\": -2.6% backward at 8K, paper shape)"},
    {NULL, NULL, NULL, 0, NULL},
};
#define N_JUSTIFIED (sizeof justified_spills / sizeof justified_spills[0] - 1)

static const fsa_nvrtc_api *g_nvrtc;

/* The variant's template parameters. d fills HEAD_DIM where the template has
 * it, and VALUE_DIM too where the template has that and `dv` is NULL: a value
 * head dim equal to the query/key one. */
static size_t params_of(const variant *v, const char *text, const char *dv, fsa_param *out)
{
    size_t n = 0;
    if (v->dtype) out[n++] = (fsa_param){"DTYPE", v->dtype, ""};
    if (v->d && strstr(text, "{{HEAD_DIM}}")) out[n++] = (fsa_param){"HEAD_DIM", v->d, "d"};
    if (dv || (v->d && strstr(text, "{{VALUE_DIM}}"))) out[n++] = (fsa_param){"VALUE_DIM", dv ? dv : v->d, "dv"};
    if (v->g) out[n++] = (fsa_param){"GROUP", v->g, "g"};
    if (v->bk) out[n++] = (fsa_param){"BLOCK_SIZE", v->bk, "bk"};
    if (v->unroll) out[n++] = (fsa_param){"UNROLL", v->unroll, "u"};
    if (v->k) out[n++] = (fsa_param){"TOP_K", v->k, "k"};
    if (v->keys) out[n++] = (fsa_param){"KEYS", v->keys, "ks"};
    return n;
}

static const justified_spill *justification_for(const variant *v, const fsa_function_usage *f, const char *target)
{
    for (size_t i = 0; justified_spills[i].family != NULL; i++) {
        const justified_spill *j = &justified_spills[i];
        if (strcmp(j->family, v->family) == 0 && strcmp(j->entry, f->name) == 0 &&
            (j->target == NULL || strcmp(j->target, target) == 0))
            return j;
    }
    return NULL;
}

/* Fails on a spill that justified_spills does not allow; marks the entries
 * that allowed one in `used`. */
static void check_spills(const variant *v, const fsa_resource_usage *u, const char *target, int used[N_JUSTIFIED + 1])
{
    for (size_t i = 0; i < u->count; i++) {
        const fsa_function_usage *f = &u->functions[i];
        const int bytes = f->spill_store_bytes + f->spill_load_bytes;
        if (bytes == 0) continue;
        const justified_spill *j = justification_for(v, f, target);
        if (j == NULL || bytes > j->max_bytes)
            fail_msg("%s (%s d=%s g=%s bk=%s k=%s ks=%s) for %s spills %d bytes of stores and %d of loads per "
                     "thread at %d registers%s",
                     f->name, v->dtype ? v->dtype : "-", v->d ? v->d : "-", v->g ? v->g : "-", v->bk ? v->bk : "-",
                     v->k ? v->k : "-", v->keys ? v->keys : "-", target, f->spill_store_bytes, f->spill_load_bytes, f->registers,
                     j ? ", more than its justification allows" : "; remove the spill or justify it here");
        used[j - justified_spills] = 1;
    }
}

/* Every entry point the kernel table knows that takes dynamic shared memory declares no more static shared
 * memory than the table counts beside it (ptxas's report: the driver refuses dynamic plus static past the
 * limit, so the plans' fit checks add the table's count). */
static void check_static_shared_memory(const fsa_resource_usage *u, const fsa_param *params, size_t n, const char *file,
                                       const char *target)
{
    const fsa_kernel_config c = fsa_kernel_config_of_params(params, n);
    for (size_t i = 0; i < u->count; i++) {
        const fsa_function_usage *f = &u->functions[i];
        const int id = f->entry ? fsa_kernel_id_of_entry(f->name) : -1;
        if (id < 0) continue;
        fsa_kernel k;
        fsa_kernel_describe(&k, (fsa_kernel_id)id, &c);
        if (k.smem > 0 && f->shared_bytes > (int)k.smem_static)
            fail_msg("%s for %s: %s declares %d bytes of static shared memory, the kernel table counts %u", file, target,
                     f->name, f->shared_bytes, k.smem_static);
    }
}

static void compile_variant(const variant *v, const char *dv, const fsa_param *extra, size_t n_extra,
                            const char *target, int used[N_JUSTIFIED + 1])
{
    char file[64];
    snprintf(file, sizeof file, "%s.cu", v->family);
    const fsa_template *t = fsa_template_find(file);
    assert_non_null(t);
    fsa_param params[10];
    size_t n = params_of(v, t->text, dv, params);
    for (size_t i = 0; i < n_extra; i++) params[n++] = extra[i];
    /* The query-tile forwards on sm_90a: the default warpgroup variant wherever the head dims take it
     * (what FSA_WGMMA=4 gives; unasked, the library takes it on fewer dims: fsa_qt_wg_default). */
    char wg[2] = "0";
    if (strstr(t->text, "{{WGMMA}}") && strcmp(target, "sm_90a") == 0)
        wg[0] = (char)('0' + fsa_qt_wg_pick(FSA_QT_WG_DEFAULT, atoi(v->d), atoi(dv ? dv : v->d)));
    int wg_given = 0;
    for (size_t i = 0; i < n_extra; i++)
        if (strcmp(extra[i].name, "WGMMA") == 0) {
            wg_given = 1;
            wg[0] = extra[i].value[0];
        }
    if (strstr(t->text, "{{WGMMA}}") && !wg_given) params[n++] = (fsa_param){"WGMMA", wg, "wg"};
    /* The compressed selection on sm_90a: its default variant where its ring is on mbarriers. */
    char sv[4] = "0";
    if (strstr(t->text, "{{SEL_VARIANT}}") && strcmp(target, "sm_90a") == 0 && fsa_cmp_sel_mbar(atoi(wg), atoi(v->d)))
        snprintf(sv, sizeof sv, "%d", FSA_CMP_SEL_VARIANT_DEFAULT); /* (as kernels.c writes it: up to 15) */
    int sv_given = 0;
    for (size_t i = 0; i < n_extra; i++) sv_given |= strcmp(extra[i].name, "SEL_VARIANT") == 0;
    if (strstr(t->text, "{{SEL_VARIANT}}") && !sv_given) params[n++] = (fsa_param){"SEL_VARIANT", sv, "sv"};
    /* The query-tile backwards on sm_90a: the warpgroup backward's default wherever the head dims take it
     * (variant 4 up to Dk 192, 2 above). */
    char bwg[2] = "0";
    if (strstr(t->text, "{{BWD_WGMMA}}") && strcmp(target, "sm_90a") == 0)
        bwg[0] = (char)('0' + fsa_qt_wgb_default(atoi(v->d), atoi(dv ? dv : v->d)));
    int bwg_given = 0;
    for (size_t i = 0; i < n_extra; i++) bwg_given |= strcmp(extra[i].name, "BWD_WGMMA") == 0;
    if (strstr(t->text, "{{BWD_WGMMA}}") && !bwg_given) params[n++] = (fsa_param){"BWD_WGMMA", bwg, "bwg"};
    /* The selected backward's warpgroup main kernel: variant 1 unless given. */
    int sel_given = 0;
    for (size_t i = 0; i < n_extra; i++) sel_given |= strcmp(extra[i].name, "SEL_BWD_WG") == 0;
    if (strstr(t->text, "{{SEL_BWD_WG}}") && !sel_given) params[n++] = (fsa_param){"SEL_BWD_WG", "1", "v"};
    /* The warpgroup forward main kernel: its default schedule unless given. */
    char fv[2] = {(char)('0' + FSA_FWD_WG_VARIANT_DEFAULT), '\0'};
    int fv_given = 0;
    for (size_t i = 0; i < n_extra; i++) fv_given |= strcmp(extra[i].name, "FWD_WG") == 0;
    if (strstr(t->text, "{{FWD_WG}}") && !fv_given) params[n++] = (fsa_param){"FWD_WG", fv, "fv"};
    /* The paged-cache attention on sm_90a: tensor-map copies wherever a stage is whole page boxes. */
    char tma[2] = "0";
    for (size_t i = 0; i < n_extra; i++)
        if (strcmp(extra[i].name, "PAGE_SIZE") == 0 && strcmp(target, "sm_90a") == 0 &&
            fsa_kvc_tma_fits(atoi(v->d), atoi(dv ? dv : v->d), atoi(v->bk), atoi(extra[i].value)))
            tma[0] = '1';
    int tma_given = 0;
    for (size_t i = 0; i < n_extra; i++) tma_given |= strcmp(extra[i].name, "TMA") == 0;
    if (strstr(t->text, "{{TMA}}") && !tma_given) params[n++] = (fsa_param){"TMA", tma, "tma"};
    char *src = NULL;
    if (fsa_render(&src, file, t->text, params, n) != FSA_STATUS_OK) fail_msg("render %s: %s", file, fsa_last_error());
    fsa_compile_options opts;
    assert_int_equal(fsa_compile_options_for(&opts, target), FSA_STATUS_OK);
    opts.verbose = 1; /* resource usage in the log */
    fsa_cubin cubin;
    fsa_status st = fsa_compile(&cubin, g_nvrtc, src, file, &opts);
    if (st != FSA_STATUS_OK) fail_msg("%s for %s: %s", file, target, fsa_last_error());
    assert_true(cubin.size > 1000);
    /* A cubin is an ELF image. */
    assert_memory_equal(cubin.data, "\x7f" "ELF", 4);
    print_message("  %-16s %-5s d=%-4s dv=%-4s g=%-3s bk=%-4s %-7s %6.0f ms %7zu bytes\n", v->family,
                  v->dtype ? v->dtype : "-", v->d ? v->d : "-", dv ? dv : "-", v->g ? v->g : "-", v->bk ? v->bk : "-",
                  target, cubin.ms, cubin.size);
    fsa_resource_usage u;
    assert_int_equal(fsa_resource_usage_parse(&u, cubin.log), FSA_STATUS_OK);
    size_t entries = 0;
    for (size_t i = 0; i < u.count; i++) {
        const fsa_function_usage *f = &u.functions[i];
        entries += (size_t)f->entry;
        print_message("    %-24s %3d registers, spills %4d/%4d bytes, stack %4d bytes, static shared %5d bytes\n", f->name,
                      f->registers, f->spill_store_bytes, f->spill_load_bytes, f->stack_bytes, f->shared_bytes);
    }
    /* The log did report on the kernels: a silent log would pass any spill. */
    if (entries == 0) fail_msg("%s for %s: no entry point in the ptxas log:\n%s", file, target, cubin.log);
    check_spills(v, &u, target, used);
    check_static_shared_memory(&u, params, n, file, target);
    fsa_resource_usage_free(&u);
    fsa_cubin_free(&cubin);
    free(src);
}

/* Compiles the whole grid for `target`; every justification for it must have been needed. */
static void compile_every_variant(const char *target)
{
    int used[N_JUSTIFIED + 1] = {0};
    for (size_t i = 0; i < N_VARIANTS; i++) compile_variant(&variants[i], NULL, NULL, 0, target, used);
    for (size_t i = 0; i < N_PAGED_VARIANTS; i++) {
        const fsa_param page = {"PAGE_SIZE", paged_variants[i].page, "p"};
        compile_variant(&paged_variants[i].v, paged_variants[i].dv, &page, 1, target, used);
    }
    for (size_t i = 0; i < N_CMP_VARIANTS; i++) {
        const cmp_variant *c = &cmp_variants[i];
        fsa_param extra[3];
        size_t n = 0;
        if (c->l) extra[n++] = (fsa_param){"KERNEL_SIZE", c->l, "l"};
        if (c->stride) extra[n++] = (fsa_param){"STRIDE", c->stride, "s"};
        if (c->wg) {
            if (strcmp(target, "sm_90a") != 0) continue; /* (elsewhere the plan's variant is 0: compiled above) */
            extra[n++] = (fsa_param){"WGMMA", c->wg, "wg"};
        }
        compile_variant(&c->v, c->dv, extra, n, target, used);
    }
    for (size_t i = 0; justified_spills[i].family != NULL; i++) {
        const justified_spill *j = &justified_spills[i];
        if ((j->target == NULL || strcmp(j->target, target) == 0) && !used[i])
            fail_msg("%s in %s no longer spills for %s: remove its justification", j->entry, j->family, target);
    }
}

static void test_every_template_variant_compiles_for_sm_80_without_unjustified_spills(void **state)
{
    (void)state;
    compile_every_variant("sm_80");
}

static void test_every_template_variant_compiles_for_sm_90a_without_unjustified_spills(void **state)
{
    (void)state;
    compile_every_variant("sm_90a");
}

/* Every warpgroup variant of the query-tile forwards (FSA_WGMMA 1 to 6; the default is among the
 * variants above too) compiles for sm_90a without spills, at the standard and the paper's head dims. */
static void test_every_warpgroup_forward_variant_compiles_for_sm_90a(void **state)
{
    (void)state;
    static const variant shapes[] = {{"cmp_fwd", "bf16", "128", "4", NULL, NULL, NULL, NULL},
                                     {"swa_fwd", "f16", "192", "16", NULL, NULL, NULL, NULL}};
    static const char *dvs[] = {"128", "128"};
    int used[N_JUSTIFIED + 1] = {0};
    for (size_t i = 0; i < 2; i++)
        for (int j = 1; j <= 6; j++) {
            /* as a plan asking for variant j gets it at these head dims */
            char v[4];
            snprintf(v, sizeof v, "%d", fsa_qt_wg_pick(j, atoi(shapes[i].d), atoi(dvs[i])));
            const fsa_param wg = {"WGMMA", v, "wg"};
            compile_variant(&shapes[i], dvs[i], &wg, 1, "sm_90a", used);
        }
}

/* The query-tile mma.sync forwards in the smaller layouts of 99 KB targets (FSA_QT_FWD_*,
 * fsa_qt_fwd_layout_fit) compile without spills: for sm_86 those its plans take (the compressed forward
 * at 128 / 128 with one set of rows per warp, both at 192 / 128 with stages of 32 keys), and for sm_90a
 * with WGMMA 0 those FSA_QT_SMALL_FWD forces there for the GPU tests (1: also 32 keys at 128 / 128;
 * 2: the set alone). */
static void test_the_small_forward_layouts_compile_for_sm_86_and_sm_90a(void **state)
{
    (void)state;
    static const variant shapes[] = {{"cmp_fwd", "bf16", "128", "4", NULL, NULL, NULL, NULL},
                                     {"cmp_fwd", "bf16", "192", "16", NULL, NULL, NULL, NULL},
                                     {"swa_fwd", "f16", "128", "4", NULL, NULL, NULL, NULL},
                                     {"swa_fwd", "bf16", "192", "16", NULL, NULL, NULL, NULL}};
    static const char *dv = "128";
    static const int forced[] = {0, FSA_QT_FWD_ONE_SET | FSA_QT_FWD_KEYS_32, FSA_QT_FWD_ONE_SET};
    int used[N_JUSTIFIED + 1] = {0};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t f = 0; f < sizeof forced / sizeof forced[0]; f++) {
            const int dk = atoi(shapes[i].d), cmp = strcmp(shapes[i].family, "cmp_fwd") == 0;
            const int max = f == 0 ? 101376 : 232448;
            const int layout = cmp ? fsa_cmp_fwd_layout(dk, 128, 0, max, forced[f])
                                   : fsa_swa_fwd_layout(dk, 128, 0, max, forced[f]);
            if (layout == 0) continue; /* the default layout: compiled above */
            char qt[4];
            snprintf(qt, sizeof qt, "%d", layout);
            const fsa_param extra[] = {{"WGMMA", "0", "wg"}, {"QT_FWD", qt, "qf"}};
            compile_variant(&shapes[i], dv, extra, 2, f == 0 ? "sm_86" : "sm_90a", used);
        }
}

/* The query-tile mma.sync backwards in the smaller layouts (FSA_QT_BWD_*, fsa_qt_bwd_layout_fit) compile
 * without spills: for sm_86 (99 KB) and sm_80 (163 KB) those their plans take (sm_86: 128 / 128 dK/dV in one
 * stage and dq in stages of 32 keys, 192 / 128 dK/dV in one stage, 256 / 128 and 192 / 192 also tiles of
 * 32 rows and dq in one stage, 256 / 256 too though its plans refuse it; sm_80: 160 / 256 and 256 / 256
 * dK/dV in one stage), and for sm_90a with BWD_WGMMA 0 those FSA_QT_SMALL_BWD forces there for the GPU
 * tests (1: the smallest; 2: one stage and 32 keys). */
static void test_the_small_backward_layouts_compile_for_sm_86_sm_80_and_sm_90a(void **state)
{
    (void)state;
    static const struct {
        variant v;
        const char *dv;
    } shapes[] = {
        {{"cmp_bwd", "bf16", "128", "4", NULL, NULL, NULL, NULL}, "128"},
        {{"cmp_bwd", "bf16", "192", "16", NULL, NULL, NULL, NULL}, "128"},
        {{"cmp_bwd", "f16", "256", "1", NULL, NULL, NULL, NULL}, "128"},
        {{"cmp_bwd", "bf16", "192", "2", NULL, NULL, NULL, NULL}, "192"},
        {{"cmp_bwd", "f16", "256", "1", NULL, NULL, NULL, NULL}, "256"},
        {{"cmp_bwd", "bf16", "160", "4", NULL, NULL, NULL, NULL}, "256"},
        {{"swa_bwd", "f16", "128", "4", NULL, NULL, NULL, NULL}, "128"},
        {{"swa_bwd", "bf16", "192", "16", NULL, NULL, NULL, NULL}, "128"},
        {{"swa_bwd", "bf16", "256", "3", NULL, NULL, NULL, NULL}, "128"},
        {{"swa_bwd", "f16", "192", "1", NULL, NULL, NULL, NULL}, "192"},
        {{"swa_bwd", "f16", "256", "1", NULL, NULL, NULL, NULL}, "256"},
    };
    static const struct {
        const char *target;
        int max_smem, forced;
    } plans[] = {
        {"sm_86", 101376, 0},
        {"sm_80", 166912, 0},
        {"sm_90a", 232448, FSA_QT_BWD_DKV_BITS | FSA_QT_BWD_DQ_BITS},
        {"sm_90a", 232448, FSA_QT_BWD_DKV_ONE_STAGE | FSA_QT_BWD_DQ_KEYS_32},
    };
    int used[N_JUSTIFIED + 1] = {0};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t t = 0; t < sizeof plans / sizeof plans[0]; t++) {
            const int dk = atoi(shapes[i].v.d), dv = atoi(shapes[i].dv);
            const int layout = fsa_qt_bwd_layout(dk, dv, 0, plans[t].max_smem, plans[t].forced);
            if (layout == 0) continue; /* the default layout: compiled above */
            char qb[4];
            snprintf(qb, sizeof qb, "%d", layout);
            print_message("  QT_BWD=%s:\n", qb);
            const fsa_param extra[] = {{"BWD_WGMMA", "0", "bwg"}, {"QT_BWD", qb, "qb"}};
            compile_variant(&shapes[i].v, shapes[i].dv, extra, 2, plans[t].target, used);
        }
}

/* The compressed selection's variants (FSA_CMP_SEL 0 to 3: its lists, four warpgroups at G >= 4; 7: also
 * four at G 1 and 2, whose spill is justified above; 9: a producer warpgroup and three consumers; 15, the
 * default: the producer and four consumers, G 1's smaller spill justified above; the other values combine the same
 * bits) compile for sm_90a at the standard shape, G 1, 4 and 16, without other spills. */
static void test_every_compressed_selection_variant_compiles_for_sm_90a(void **state)
{
    (void)state;
    static const char *gs[] = {"1", "4", "16"}, *svs[] = {"0", "1", "2", "3", "7", "9", "15"};
    int used[N_JUSTIFIED + 1] = {0};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < sizeof svs / sizeof svs[0]; j++) {
            const variant shape = {.family = "cmp_select", .dtype = "bf16", .d = "128", .g = gs[i], .bk = "64", .k = "16"};
            const fsa_param extra[] = {{"KERNEL_SIZE", "32", "l"}, {"STRIDE", "16", "s"}, {"SEL_VARIANT", svs[j], "sv"}};
            compile_variant(&shape, NULL, extra, 3, "sm_90a", used);
        }
}

/* The selected backward's warpgroup main kernel, variant 2 (variant 1 is among the variants
 * above), at the standard and the smallest head dims, and split by output at Dk 192 with Dv 64. */
static void test_every_warpgroup_selected_backward_variant_compiles_for_sm_90a(void **state)
{
    (void)state;
    static const variant shapes[] = {{"sel_bwd_main_wg", "bf16", "128", "4", "64", NULL, NULL, NULL},
                                     {"sel_bwd_main_wg", "f16", "64", "3", "64", NULL, NULL, NULL},
                                     {"sel_bwd_main_wg", "f16", "192", "4", "64", NULL, NULL, NULL}};
    static const char *dvs[] = {"128", "64", "64"};
    int used[N_JUSTIFIED + 1] = {0};
    const fsa_param v2 = {"SEL_BWD_WG", "2", "v"};
    for (size_t i = 0; i < 3; i++) compile_variant(&shapes[i], dvs[i], &v2, 1, "sm_90a", used);
}

/* The warpgroup forward main kernel's other schedule (FSA_FWD_WG=0, fsa_layout.cuh; the default is among
 * the variants above), at the standard and the smallest head dims. */
static void test_the_warpgroup_forward_item_schedule_compiles_for_sm_90a(void **state)
{
    (void)state;
    static const variant shapes[] = {{"sel_fwd_main_wg", "bf16", "128", "4", "64", NULL, NULL, NULL},
                                     {"sel_fwd_main_wg", "f16", "64", "3", "32", NULL, NULL, NULL}};
    static const char *dvs[] = {"128", "64"};
    int used[N_JUSTIFIED + 1] = {0};
    const fsa_param fv = {"FWD_WG", "0", "fv"};
    for (size_t i = 0; i < 2; i++) compile_variant(&shapes[i], dvs[i], &fv, 1, "sm_90a", used);
}

/* The paged-cache kernel's deep ring (tensor-map copies with FSA_KVC_DEEP_STAGES buffers, one CTA per SM;
 * fsa_layout.cuh FSA_KVC_KERNEL_DEEP) at the benchmark's shape for each group size of four row tiles or
 * fewer, and the widest value rows the plan gives it. */
static void test_the_paged_deep_ring_compiles_for_sm_90a(void **state)
{
    (void)state;
    static const variant shapes[] = {{"kvc_fwd", "bf16", "128", "1", "64", NULL, "16", NULL},
                                     {"kvc_fwd", "bf16", "128", "4", "64", NULL, "16", NULL},
                                     {"kvc_fwd", "bf16", "128", "16", "64", NULL, "16", NULL},
                                     {"kvc_fwd", "bf16", "128", "2", "64", NULL, "16", NULL}};
    static const char *dvs[] = {NULL, NULL, NULL, "256"};
    char mode[4];
    snprintf(mode, sizeof mode, "%d", FSA_KVC_KERNEL_TMA | FSA_KVC_KERNEL_DEEP);
    const fsa_param extra[2] = {{"PAGE_SIZE", "64", "p"}, {"TMA", mode, "tma"}};
    int used[N_JUSTIFIED + 1] = {0};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) compile_variant(&shapes[i], dvs[i], extra, 2, "sm_90a", used);
}

/* The paged-cache kernel in its one-stage layout (FSA_KVC_LAYOUT_ONE_STAGE, fsa_kvc_layout_fit) compiles
 * without spills: for sm_86 the shapes its plans take so (NSA's 192 / 128 at G 8, 16 and 64, pages of 1
 * and 64; 256 / 128 at G 1 and 16; 256 / 256 at G 1 and 8; 128 / 256, whose merge area outgrows one
 * stage), and for sm_90a those FSA_KVC_SMALL=1 gives the GPU tests there (cp.async copies, TMA 0: 128 / 128
 * at G 1, 4 and 16, 192 / 128 at G 16, 256 / 128 at G 4). */
static void test_the_small_paged_layout_compiles_for_sm_86_and_sm_90a(void **state)
{
    (void)state;
    static const struct {
        const char *target, *d, *dv, *g, *page;
    } shapes[] = {
        {"sm_86", "192", "128", "8", "64"},   {"sm_86", "192", "128", "16", "1"},  {"sm_86", "192", "128", "64", "64"},
        {"sm_86", "256", "128", "1", "16"},   {"sm_86", "256", "128", "16", "64"}, {"sm_86", "256", "256", "1", "32"},
        {"sm_86", "256", "256", "8", "256"},  {"sm_86", "128", "256", "2", "32"},  {"sm_90a", "128", "128", "1", "64"},
        {"sm_90a", "128", "128", "4", "64"},  {"sm_90a", "128", "128", "16", "64"}, {"sm_90a", "192", "128", "16", "64"},
        {"sm_90a", "256", "128", "4", "64"},
    };
    int used[N_JUSTIFIED + 1] = {0};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int sm86 = strcmp(shapes[i].target, "sm_86") == 0;
        const int dk = atoi(shapes[i].d), dv = atoi(shapes[i].dv), g = atoi(shapes[i].g);
        /* sm_86: what its shared memory needs; sm_90a: what the override adds there */
        const int layout = fsa_kvc_layout_fit(dk, dv, g, 16, 0, sm86 ? 101376 : 232448, sm86 ? 0 : FSA_KVC_LAYOUT_ONE_STAGE);
        assert_int_equal(layout, FSA_KVC_LAYOUT_ONE_STAGE);
        char kl[4];
        snprintf(kl, sizeof kl, "%d", layout);
        const variant v = {.family = "kvc_fwd", .dtype = "bf16", .d = shapes[i].d, .g = shapes[i].g, .bk = "64", .k = "16"};
        const fsa_param extra[] = {{"PAGE_SIZE", shapes[i].page, "p"}, {"TMA", "0", "tma"}, {"KVC_LAYOUT", kl, "kl"}};
        print_message("  KVC_LAYOUT=%s:\n", kl);
        compile_variant(&v, shapes[i].dv, extra, 3, shapes[i].target, used);
    }
}

/* The selected-attention mma.sync kernels in their one-stage layouts (FSA_SEL_LAYOUT_*, fsa_sel_layout_fit)
 * compile without unjustified spills: for sm_86 the kernels its plans of head dims 192 and 256 take (the
 * FSA-order forward at 192 / 192 blocks of 64 and 256 / 256 blocks of 32, the NSA order, the backward main
 * kernel at 32 keys and the forced NSA order's dq at 256 / 256, and 16 / 256's NSA forward, whose merge
 * area outgrows one stage), and for sm_90a those FSA_SEL_LAYOUT_ONE_STAGE=1 gives the GPU tests there
 * (128 / 128 and 192 / 192, and the backward at 64 keys). */
static void test_the_small_selected_layouts_compile_for_sm_86_and_sm_90a(void **state)
{
    (void)state;
    static const struct {
        const char *target, *family, *d, *dv, *g, *bk, *keys;
        int layout;
    } shapes[] = {
        {"sm_86", "sel_fwd_main", "192", "192", "4", "64", NULL, FSA_SEL_LAYOUT_FWD_ONE_STAGE},
        {"sm_86", "sel_fwd_main", "256", "256", "16", "32", NULL, FSA_SEL_LAYOUT_FWD_ONE_STAGE},
        {"sm_86", "sel_fwd_nsa", "256", "256", "16", "64", NULL, FSA_SEL_LAYOUT_NSA_ONE_STAGE},
        {"sm_86", "sel_fwd_nsa", "16", "256", "2", "64", NULL, FSA_SEL_LAYOUT_NSA_ONE_STAGE},
        {"sm_86", "sel_bwd_main", "256", "256", "16", "64", "32", FSA_SEL_LAYOUT_BWD_ONE_STAGE},
        {"sm_86", "sel_bwd_dq_nsa", "256", "256", "16", "64", NULL, FSA_SEL_LAYOUT_DQ_ONE_STAGE},
        {"sm_90a", "sel_fwd_main", "128", "128", "4", "64", NULL, FSA_SEL_LAYOUT_FWD_ONE_STAGE},
        {"sm_90a", "sel_fwd_nsa", "192", "192", "4", "64", NULL, FSA_SEL_LAYOUT_NSA_ONE_STAGE},
        {"sm_90a", "sel_bwd_main", "128", "128", "4", "64", "64", FSA_SEL_LAYOUT_BWD_ONE_STAGE},
    };
    int used[N_JUSTIFIED + 1] = {0};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        char sl[4];
        snprintf(sl, sizeof sl, "%d", shapes[i].layout);
        const variant v = {.family = shapes[i].family, .dtype = "bf16", .d = shapes[i].d, .g = shapes[i].g,
                           .bk = shapes[i].bk, .keys = shapes[i].keys};
        const fsa_param extra = {"SEL_LAYOUT", sl, "sl"};
        print_message("  SEL_LAYOUT=%s:\n", sl);
        compile_variant(&v, shapes[i].dv, &extra, 1, shapes[i].target, used);
    }
}

static void test_every_kernel_template_has_a_compile_variant(void **state)
{
    (void)state;
    for (size_t i = 0; i < fsa_template_count; i++) {
        const char *name = fsa_templates[i].name;
        size_t len = strlen(name);
        if (len < 3 || strcmp(name + len - 3, ".cu") != 0) continue; /* headers compile through kernels */
        int covered = 0;
        for (size_t j = 0; j < N_VARIANTS + N_CMP_VARIANTS + N_PAGED_VARIANTS; j++) {
            const size_t paged = N_VARIANTS + N_CMP_VARIANTS;
            const char *family = j < N_VARIANTS ? variants[j].family
                                 : j < paged    ? cmp_variants[j - N_VARIANTS].v.family
                                                : paged_variants[j - paged].v.family;
            covered |= strlen(family) == len - 3 && strncmp(family, name, len - 3) == 0;
        }
        if (!covered) fail_msg("template %s has no compile variant in this test", name);
    }
}

static void test_a_compile_error_returns_the_nvrtc_log(void **state)
{
    (void)state;
    fsa_compile_options opts;
    assert_int_equal(fsa_compile_options_for(&opts, "sm_80"), FSA_STATUS_OK);
    fsa_cubin cubin;
    assert_int_equal(fsa_compile(&cubin, g_nvrtc, "extern \"C\" __global__ void k() { undeclared_thing(); }", "bad.cu", &opts),
                     FSA_STATUS_COMPILE_FAILED);
    const fsa_error_info *e = fsa_last_error_info();
    assert_int_equal(e->status, FSA_STATUS_COMPILE_FAILED);
    assert_string_equal(e->stage, "compile");
    assert_non_null(strstr(e->log, "undeclared_thing"));
    assert_non_null(strstr(fsa_last_error(), "undeclared_thing"));
}

static int setup(void **state)
{
    (void)state;
    if (fsa_nvrtc_load(&g_nvrtc) != FSA_STATUS_OK) {
        fprintf(stderr, "NVRTC is required for this test: %s\n", fsa_last_error());
        return -1;
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_kernel_template_has_a_compile_variant),
        cmocka_unit_test(test_a_compile_error_returns_the_nvrtc_log),
        cmocka_unit_test(test_every_template_variant_compiles_for_sm_80_without_unjustified_spills),
        cmocka_unit_test(test_every_template_variant_compiles_for_sm_90a_without_unjustified_spills),
        cmocka_unit_test(test_every_warpgroup_forward_variant_compiles_for_sm_90a),
        cmocka_unit_test(test_the_small_forward_layouts_compile_for_sm_86_and_sm_90a),
        cmocka_unit_test(test_the_small_backward_layouts_compile_for_sm_86_sm_80_and_sm_90a),
        cmocka_unit_test(test_every_compressed_selection_variant_compiles_for_sm_90a),
        cmocka_unit_test(test_every_warpgroup_selected_backward_variant_compiles_for_sm_90a),
        cmocka_unit_test(test_the_warpgroup_forward_item_schedule_compiles_for_sm_90a),
        cmocka_unit_test(test_the_paged_deep_ring_compiles_for_sm_90a),
        cmocka_unit_test(test_the_small_paged_layout_compiles_for_sm_86_and_sm_90a),
        cmocka_unit_test(test_the_small_selected_layouts_compile_for_sm_86_and_sm_90a),
    };
    /* FSA_TEST_FILTER=pattern (* and ? wildcards) runs only the matching tests (each compiles for minutes). */
    if (getenv("FSA_TEST_FILTER")) cmocka_set_test_filter(getenv("FSA_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, NULL);
}
