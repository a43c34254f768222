/* The kernel table: families (template, parameters), entry points, launch
 * shapes; loading and launching a kernel. */
#include "kernels.h"

#include "base/status_internal.h"
#include "base/util.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Template parameters, in the order a family lists them. */
typedef enum tparam {
    TP_DTYPE,
    TP_HEAD_DIM,
    TP_VALUE_DIM,
    TP_GROUP,
    TP_BLOCK_SIZE,
    TP_TOP_K,
    TP_KEYS,
    TP_PAGE_SIZE,
    TP_KERNEL_SIZE,
    TP_STRIDE,
    TP_WGMMA,
    TP_BWD_WGMMA,
    TP_SEL_BWD_WG,
    TP_TMA,
    TP_SEL_VARIANT,
    TP_FWD_WG,
    TP_QT_FWD,
    TP_QT_BWD,
    TP_KVC_LAYOUT,
    TP_SEL_LAYOUT,
    TP_N
} tparam;

#define FIELD(f) offsetof(fsa_kernel_config, f)
static const struct {
    const char *name; /* {{NAME}} in the template */
    const char *tag;  /* prefix in the readable kernel name */
    size_t field;     /* the configuration's int it renders (DTYPE: none, rendered apart) */
} tparams[TP_N] = {
    [TP_DTYPE] = {"DTYPE", "", 0},
    [TP_HEAD_DIM] = {"HEAD_DIM", "d", FIELD(head_dim)},
    [TP_VALUE_DIM] = {"VALUE_DIM", "dv", FIELD(value_dim)},
    [TP_GROUP] = {"GROUP", "g", FIELD(group)},
    [TP_BLOCK_SIZE] = {"BLOCK_SIZE", "bk", FIELD(block_size)},
    [TP_TOP_K] = {"TOP_K", "k", FIELD(top_k)},
    [TP_KEYS] = {"KEYS", "ks", FIELD(bwd_keys)},
    [TP_PAGE_SIZE] = {"PAGE_SIZE", "p", FIELD(page_size)},
    [TP_KERNEL_SIZE] = {"KERNEL_SIZE", "l", FIELD(kernel_size)},
    [TP_STRIDE] = {"STRIDE", "s", FIELD(stride)},
    [TP_WGMMA] = {"WGMMA", "wg", FIELD(wgmma)},
    [TP_BWD_WGMMA] = {"BWD_WGMMA", "bwg", FIELD(bwd_wgmma)},
    [TP_SEL_BWD_WG] = {"SEL_BWD_WG", "v", FIELD(sel_bwd_wg)},
    [TP_TMA] = {"TMA", "tma", FIELD(kvc_tma)},
    [TP_SEL_VARIANT] = {"SEL_VARIANT", "sv", FIELD(cmp_sel_variant)},
    [TP_FWD_WG] = {"FWD_WG", "fv", FIELD(fwd_wg_variant)},
    [TP_QT_FWD] = {"QT_FWD", "qf", FIELD(qt_fwd)},
    [TP_QT_BWD] = {"QT_BWD", "qb", FIELD(qt_bwd)},
    [TP_KVC_LAYOUT] = {"KVC_LAYOUT", "kl", FIELD(kvc_layout)},
    [TP_SEL_LAYOUT] = {"SEL_LAYOUT", "sl", FIELD(sel_layout)},
};
#undef FIELD
static int *config_int(fsa_kernel_config *c, tparam t) { return (int *)((char *)c + tparams[t].field); }

#define MAX_FAMILY_PARAMS 9
typedef enum family_id {
    FAM_INDEX,
    FAM_FWD_MAIN,
    FAM_FWD_MAIN_WG,
    FAM_FWD_REDUCE,
    FAM_FWD_NSA,
    FAM_BWD_PREP,
    FAM_BWD_MAIN,
    FAM_BWD_MAIN_WG,
    FAM_BWD_REDUCE,
    FAM_BWD_DQ_NSA,
    FAM_KVC,
    FAM_CMP_FWD,
    FAM_CMP_SELECT,
    FAM_CMP_BWD,
    FAM_SWA_FWD,
    FAM_SWA_BWD,
    FAM_GATE,
    FAM_N
} family_id;

static const struct {
    const char *template_name; /* templates/<name>.cu */
    int n_params;
    tparam params[MAX_FAMILY_PARAMS];
} families[FAM_N] = {
    [FAM_INDEX] = {"sel_index", 2, {TP_BLOCK_SIZE, TP_TOP_K}},
    [FAM_FWD_MAIN] = {"sel_fwd_main", 5, {TP_DTYPE, TP_HEAD_DIM, TP_VALUE_DIM, TP_GROUP, TP_BLOCK_SIZE}},
    [FAM_FWD_MAIN_WG] = {"sel_fwd_main_wg", 6, {TP_DTYPE, TP_HEAD_DIM, TP_VALUE_DIM, TP_GROUP, TP_BLOCK_SIZE, TP_FWD_WG}},
    [FAM_FWD_REDUCE] = {"sel_fwd_reduce", 3, {TP_DTYPE, TP_VALUE_DIM, TP_GROUP}},
    [FAM_FWD_NSA] = {"sel_fwd_nsa", 5, {TP_DTYPE, TP_HEAD_DIM, TP_VALUE_DIM, TP_GROUP, TP_BLOCK_SIZE}},
    [FAM_BWD_PREP] = {"sel_bwd_prep", 2, {TP_DTYPE, TP_VALUE_DIM}},
    [FAM_BWD_MAIN] = {"sel_bwd_main", 6, {TP_DTYPE, TP_HEAD_DIM, TP_VALUE_DIM, TP_GROUP, TP_BLOCK_SIZE, TP_KEYS}},
    [FAM_BWD_MAIN_WG] = {"sel_bwd_main_wg", 6,
                         {TP_DTYPE, TP_HEAD_DIM, TP_VALUE_DIM, TP_GROUP, TP_BLOCK_SIZE, TP_SEL_BWD_WG}},
    [FAM_BWD_REDUCE] = {"sel_bwd_reduce", 5, {TP_DTYPE, TP_HEAD_DIM, TP_VALUE_DIM, TP_GROUP, TP_BLOCK_SIZE}},
    [FAM_BWD_DQ_NSA] = {"sel_bwd_dq_nsa", 5, {TP_DTYPE, TP_HEAD_DIM, TP_VALUE_DIM, TP_GROUP, TP_BLOCK_SIZE}},
    [FAM_KVC] = {"kvc_fwd", 8,
                 {TP_DTYPE, TP_HEAD_DIM, TP_VALUE_DIM, TP_GROUP, TP_BLOCK_SIZE, TP_TOP_K, TP_PAGE_SIZE, TP_TMA}},
    [FAM_CMP_FWD] = {"cmp_fwd", 5, {TP_DTYPE, TP_HEAD_DIM, TP_VALUE_DIM, TP_GROUP, TP_WGMMA}},
    [FAM_CMP_SELECT] = {"cmp_select", 9,
                        {TP_DTYPE, TP_HEAD_DIM, TP_GROUP, TP_BLOCK_SIZE, TP_TOP_K, TP_KERNEL_SIZE, TP_STRIDE, TP_WGMMA,
                         TP_SEL_VARIANT}},
    [FAM_CMP_BWD] = {"cmp_bwd", 5, {TP_DTYPE, TP_HEAD_DIM, TP_VALUE_DIM, TP_GROUP, TP_BWD_WGMMA}},
    [FAM_SWA_FWD] = {"swa_fwd", 5, {TP_DTYPE, TP_HEAD_DIM, TP_VALUE_DIM, TP_GROUP, TP_WGMMA}},
    [FAM_SWA_BWD] = {"swa_bwd", 5, {TP_DTYPE, TP_HEAD_DIM, TP_VALUE_DIM, TP_GROUP, TP_BWD_WGMMA}},
    [FAM_GATE] = {"nsa_gate", 2, {TP_DTYPE, TP_VALUE_DIM}},
};

/* The kernels' shared-memory layout parameter: the query-tile kernels'
 * mma.sync layout (fsa_qt_layout.cuh), QT_FWD in the forwards, QT_BWD in the
 * backwards; the paged-cache kernel's KVC_LAYOUT and the selected mma.sync
 * kernels' SEL_LAYOUT (fsa_layout.cuh; each family its own bit of the plan's
 * bits, family_sel_bit); the other families have none (0). It follows the
 * parameters where it is not 0, the template's {{QT_FWD=0}} default
 * otherwise, so the kernels of the default
 * layout keep their keys and names and a smaller layout never shares their
 * cache entries. */
static const tparam family_layout[FAM_N] = {
    [FAM_CMP_FWD] = TP_QT_FWD,
    [FAM_SWA_FWD] = TP_QT_FWD,
    [FAM_CMP_BWD] = TP_QT_BWD,
    [FAM_SWA_BWD] = TP_QT_BWD,
    [FAM_KVC] = TP_KVC_LAYOUT,
    [FAM_FWD_MAIN] = TP_SEL_LAYOUT,
    [FAM_FWD_NSA] = TP_SEL_LAYOUT,
    [FAM_BWD_MAIN] = TP_SEL_LAYOUT,
    [FAM_BWD_DQ_NSA] = TP_SEL_LAYOUT,
};
/* The bit of a plan's FSA_SEL_LAYOUT_* bits that is a selected family's SEL_LAYOUT. */
static const int family_sel_bit[FAM_N] = {
    [FAM_FWD_MAIN] = FSA_SEL_LAYOUT_FWD_ONE_STAGE,
    [FAM_FWD_NSA] = FSA_SEL_LAYOUT_NSA_ONE_STAGE,
    [FAM_BWD_MAIN] = FSA_SEL_LAYOUT_BWD_ONE_STAGE,
    [FAM_BWD_DQ_NSA] = FSA_SEL_LAYOUT_DQ_ONE_STAGE,
};

/* Every kernel's family and entry point: the one place entry names are written. */
static const struct {
    family_id family;
    const char *entry;
} kernels[FSA_K_N] = {
    [FSA_K_COUNT] = {FAM_INDEX, "fsa_sel_count"},
    [FSA_K_SCATTER] = {FAM_INDEX, "fsa_sel_scatter"},
    [FSA_K_SORT] = {FAM_INDEX, "fsa_sel_sort"},
    [FSA_K_FWD_MAIN] = {FAM_FWD_MAIN, "fsa_sel_fwd_main"},
    [FSA_K_FWD_MAIN_WG] = {FAM_FWD_MAIN_WG, "fsa_sel_fwd_main_wg"},
    [FSA_K_FWD_REDUCE] = {FAM_FWD_REDUCE, "fsa_sel_fwd_reduce"},
    [FSA_K_FWD_NSA] = {FAM_FWD_NSA, "fsa_sel_fwd_nsa"},
    [FSA_K_BWD_PREP] = {FAM_BWD_PREP, "fsa_sel_bwd_prep"},
    [FSA_K_BWD_MAIN] = {FAM_BWD_MAIN, "fsa_sel_bwd_main"},
    [FSA_K_BWD_MAIN_KV] = {FAM_BWD_MAIN, "fsa_sel_bwd_main_kv"},
    [FSA_K_BWD_MAIN_WG] = {FAM_BWD_MAIN_WG, "fsa_sel_bwd_main_wg"},
    [FSA_K_BWD_SUMS] = {FAM_BWD_REDUCE, "fsa_sel_bwd_sums"},
    [FSA_K_BWD_DQ_NSA] = {FAM_BWD_DQ_NSA, "fsa_sel_bwd_dq_nsa"},
    [FSA_K_BWD_DKV_SUM] = {FAM_BWD_REDUCE, "fsa_sel_bwd_dkv_sum"},
    [FSA_K_KVC_FWD] = {FAM_KVC, "fsa_kvc_fwd"},
    [FSA_K_CMP_FWD] = {FAM_CMP_FWD, "fsa_cmp_fwd"},
    [FSA_K_CMP_SELECT] = {FAM_CMP_SELECT, "fsa_cmp_select"},
    [FSA_K_CMP_BWD_DQ] = {FAM_CMP_BWD, "fsa_cmp_bwd_dq"},
    [FSA_K_CMP_BWD_DKV] = {FAM_CMP_BWD, "fsa_cmp_bwd_dkv"},
    [FSA_K_CMP_BWD_DKV_SUM] = {FAM_CMP_BWD, "fsa_cmp_bwd_dkv_sum"},
    [FSA_K_SWA_FWD] = {FAM_SWA_FWD, "fsa_swa_fwd"},
    [FSA_K_SWA_BWD_DQ] = {FAM_SWA_BWD, "fsa_swa_bwd_dq"},
    [FSA_K_SWA_BWD_DKV] = {FAM_SWA_BWD, "fsa_swa_bwd_dkv"},
    [FSA_K_GATE_FWD] = {FAM_GATE, "fsa_gate_fwd"},
    [FSA_K_GATE_BWD] = {FAM_GATE, "fsa_gate_bwd"},
};

/* The one hexadecimal digit 0 .. max (up to 15: a, b, .. or A, B, ..) that
 * environment variable `variable` holds, else -1 (unset or anything else). */
static int env_digit(const char *variable, int max)
{
    const char *env = getenv(variable);
    if (env == NULL || env[0] == '\0' || env[1] != '\0') return -1;
    const char x = env[0];
    const int v = x >= '0' && x <= '9' ? x - '0' : x >= 'a' && x <= 'f' ? x - 'a' + 10 : x >= 'A' && x <= 'F' ? x - 'A' + 10 : -1;
    return v <= max ? v : -1;
}

/* A warpgroup variant: 0 off sm_90a; else the one digit (0 .. max) the
 * variable names, as pick grants it for the head dims, or the default. */
static int wgmma_variant(const fsa_context *ctx, const char *variable, int max, int (*pick)(int, int, int),
                         int (*fallback)(int, int), int dk, int dv)
{
    if (ctx->arch.major != 9 || ctx->arch.suffix != 'a') return 0;
    const int v = env_digit(variable, max);
    return v >= 0 ? pick(v, dk, dv) : fallback(dk, dv);
}

int fsa_kernel_wgmma(const fsa_context *ctx, int dk, int dv)
{
    return wgmma_variant(ctx, "FSA_WGMMA", 6, fsa_qt_wg_pick, fsa_qt_wg_default, dk, dv);
}

int fsa_kernel_bwd_wgmma(const fsa_context *ctx, int dk, int dv)
{
    return wgmma_variant(ctx, "FSA_WGMMA_BWD", 5, fsa_qt_wgb_pick, fsa_qt_wgb_default, dk, dv);
}

int fsa_kernel_sel_bwd_wgmma(const fsa_context *ctx, int dk, int dv)
{
    return wgmma_variant(ctx, "FSA_WGMMA_SEL_BWD", 2, fsa_bwd_wg_pick, fsa_bwd_wg_default, dk, dv);
}

int fsa_kernel_cmp_sel_variant(int wgmma, int dk)
{
    if (!fsa_cmp_sel_mbar(wgmma, dk)) return 0;
    const int v = env_digit("FSA_CMP_SEL", FSA_CMP_SEL_VARIANT_MAX);
    return v >= 0 ? v : FSA_CMP_SEL_VARIANT_DEFAULT;
}

int fsa_kernel_qt_fwd_forced(void)
{
    switch (fsa_env_int("FSA_QT_SMALL_FWD", 0, 2, 0)) {
    case 1: return FSA_QT_FWD_ONE_SET | FSA_QT_FWD_KEYS_32;
    case 2: return FSA_QT_FWD_ONE_SET;
    default: return 0;
    }
}

int fsa_kernel_qt_bwd_forced(void)
{
    switch (fsa_env_int("FSA_QT_SMALL_BWD", 0, 2, 0)) {
    case 1: return FSA_QT_BWD_DKV_BITS | FSA_QT_BWD_DQ_BITS;
    case 2: return FSA_QT_BWD_DKV_ONE_STAGE | FSA_QT_BWD_DQ_KEYS_32;
    default: return 0;
    }
}

int fsa_kernel_kvc_forced(void)
{
    return fsa_env_int("FSA_KVC_SMALL", 0, 1, 0) == 1 ? FSA_KVC_LAYOUT_ONE_STAGE : 0;
}

int fsa_kernel_sel_forced(void)
{
    return fsa_env_int("FSA_SEL_LAYOUT_ONE_STAGE", 0, 1, 0) == 1 ? FSA_SEL_LAYOUT_ALL : 0;
}

int fsa_kernel_fwd_wg_variant(void)
{
    const int v = env_digit("FSA_FWD_WG", FSA_FWD_WG_VARIANT_MAX);
    return v >= 0 ? v : FSA_FWD_WG_VARIANT_DEFAULT;
}

void fsa_kernel_describe(fsa_kernel *out, fsa_kernel_id id, const fsa_kernel_config *c)
{
    const int d = c->head_dim, dv = c->value_dim, g = c->group, bk = c->block_size;
    int threads = FSA_ROW_THREADS, smem = 0, smem_static = 0;
    switch (id) {
    case FSA_K_COUNT:
    case FSA_K_SCATTER:
    case FSA_K_SORT: threads = FSA_INDEX_THREADS; break;
    case FSA_K_FWD_MAIN:
        threads = fsa_fwd_threads(d, dv);
        smem = fsa_fwd_smem_bytes(d, dv, bk, fsa_fwd_stages(c->sel_layout));
        break;
    case FSA_K_FWD_MAIN_WG:
        threads = fsa_fwd_wg_threads();
        smem = fsa_fwd_wg_smem_bytes(d, dv, bk);
        smem_static = FSA_FWD_WG_SMEM_STATIC;
        break;
    case FSA_K_FWD_NSA:
        threads = FSA_NSA_THREADS;
        smem = fsa_nsa_fwd_smem_bytes(d, dv, fsa_nsa_fwd_stages(c->sel_layout));
        smem_static = fsa_nsa_fwd_smem_static(fsa_nsa_fwd_stages(c->sel_layout));
        break;
    case FSA_K_BWD_MAIN:
    case FSA_K_BWD_MAIN_KV:
        threads = fsa_bwd_threads(c->bwd_keys);
        smem = fsa_bwd_smem_bytes(d, dv, c->bwd_keys, g, fsa_bwd_stages(c->sel_layout));
        smem_static = FSA_BWD_SMEM_STATIC;
        break;
    case FSA_K_BWD_MAIN_WG:
        threads = fsa_bwd_wg_threads(d, dv);
        smem = fsa_bwd_wg_smem_bytes(d, dv);
        smem_static = FSA_BWD_SMEM_STATIC; /* the same work counter */
        break;
    case FSA_K_BWD_DQ_NSA:
        threads = FSA_NSA_THREADS;
        smem = fsa_nsa_dq_smem_bytes(d, dv, fsa_nsa_dq_stages(c->sel_layout));
        smem_static = fsa_nsa_dq_smem_static(fsa_nsa_dq_stages(c->sel_layout));
        break;
    case FSA_K_KVC_FWD:
        threads = FSA_KVC_THREADS;
        smem = fsa_kvc_smem_bytes(d, dv, g, c->kvc_tma, c->kvc_layout);
        smem_static = fsa_kvc_static_smem_bytes(g, c->top_k, c->kvc_tma, c->kvc_layout);
        break;
    /* Query-tile kernels (fsa_qt_layout.cuh): FSA_QT_THREADS (dK/dV: FSA_QT_DKV_THREADS), set below. */
    case FSA_K_CMP_FWD: smem = fsa_cmp_fwd_smem_bytes(d, dv, c->wgmma, c->qt_fwd); break;
    case FSA_K_SWA_FWD: smem = fsa_qt_fwd_kernel_smem(d, dv, c->wgmma, 1, c->qt_fwd); break;
    case FSA_K_CMP_SELECT:
        smem = fsa_cmp_sel_smem_bytes(d, g, c->top_k, bk, c->stride,
                                      fsa_cmp_sel_groups(c->wgmma, d, c->top_k, g, c->cmp_sel_variant),
                                      c->cmp_sel_variant);
        break;
    case FSA_K_CMP_BWD_DQ:
    case FSA_K_SWA_BWD_DQ:
        threads = fsa_qt_bwd_dq_threads(c->bwd_wgmma);
        smem = fsa_qt_bwd_dq_smem(d, dv, c->bwd_wgmma, c->qt_bwd);
        smem_static = c->bwd_wgmma ? fsa_qt_wgb_dq_static_smem(c->bwd_wgmma) : FSA_QT_DQ_STATIC_SMEM; /* the tile's deltas */
        break;
    case FSA_K_CMP_BWD_DKV:
    case FSA_K_SWA_BWD_DKV:
        threads = fsa_qt_bwd_dkv_threads(c->bwd_wgmma);
        smem = fsa_qt_bwd_dkv_smem(d, dv, c->bwd_wgmma, c->qt_bwd);
        break;
    case FSA_K_GATE_FWD:
    case FSA_K_GATE_BWD: threads = FSA_GATE_THREADS; break;
    default: break; /* row kernels: FSA_ROW_THREADS, static shared memory only */
    }
    const family_id f = kernels[id].family;
    if (f == FAM_CMP_FWD || f == FAM_CMP_SELECT || f == FAM_SWA_FWD) threads = FSA_QT_THREADS;
    if ((f == FAM_CMP_FWD || f == FAM_SWA_FWD) && c->wgmma) threads = fsa_qt_wg_threads(c->wgmma);
    if (id == FSA_K_CMP_SELECT)
        threads = fsa_cmp_sel_launch_threads(fsa_cmp_sel_groups(c->wgmma, d, c->top_k, g, c->cmp_sel_variant),
                                             c->cmp_sel_variant);
    out->fn = NULL;
    out->threads = (unsigned)threads;
    out->smem = (unsigned)smem;
    out->smem_static = (unsigned)fsa_static_smem_counted(smem_static);
    out->name = kernels[id].entry;
}

/* The family's module request: its parameters' values and every entry point
 * of the family (one module serves all of them). */
typedef struct request_buf {
    char values[TP_N][16];
    fsa_param params[MAX_FAMILY_PARAMS + 1];
    char entries[256];
} request_buf;

static fsa_kernel_request request_for(request_buf *b, family_id f, const fsa_kernel_config *c)
{
    snprintf(b->values[TP_DTYPE], sizeof b->values[0], "%s", c->dtype == FSA_DTYPE_BF16 ? "bf16" : "f16");
    fsa_kernel_config shown = *c;
    shown.sel_layout &= family_sel_bit[f]; /* a family renders its own layout bit */
    for (int t = TP_DTYPE + 1; t < TP_N; t++)
        snprintf(b->values[t], sizeof b->values[0], "%d", *config_int(&shown, (tparam)t));
    size_t n = 0;
    for (int i = 0; i < families[f].n_params; i++) {
        const tparam t = families[f].params[i];
        b->params[n++] = (fsa_param){tparams[t].name, b->values[t], tparams[t].tag};
    }
    const tparam layout = family_layout[f]; /* TP_DTYPE (0): the family has none */
    if (layout != TP_DTYPE && strcmp(b->values[layout], "0") != 0)
        b->params[n++] = (fsa_param){tparams[layout].name, b->values[layout], tparams[layout].tag};
    size_t at = 0;
    b->entries[0] = '\0';
    for (int k = 0; k < FSA_K_N; k++) {
        if (kernels[k].family != f) continue;
        at += (size_t)snprintf(b->entries + at, sizeof b->entries - at, "%s%s", at ? "\n" : "", kernels[k].entry);
    }
    const fsa_kernel_request r = {families[f].template_name, b->params, n, b->entries};
    return r;
}

fsa_kernel_config fsa_kernel_config_of_params(const fsa_param *params, size_t n)
{
    fsa_kernel_config c;
    memset(&c, 0, sizeof c);
    c.dtype = FSA_DTYPE_BF16;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(params[i].name, tparams[TP_DTYPE].name) == 0) {
            c.dtype = strcmp(params[i].value, "bf16") == 0 ? FSA_DTYPE_BF16 : FSA_DTYPE_F16;
            continue;
        }
        for (int t = TP_DTYPE + 1; t < TP_N; t++)
            if (strcmp(params[i].name, tparams[t].name) == 0) *config_int(&c, (tparam)t) = atoi(params[i].value);
    }
    if (c.value_dim == 0) c.value_dim = c.head_dim;
    return c;
}

int fsa_kernel_id_of_entry(const char *entry)
{
    for (int id = 0; id < FSA_K_N; id++)
        if (kernels[id].entry && strcmp(kernels[id].entry, entry) == 0) return id;
    return -1;
}

fsa_status fsa_kernel_load(fsa_kernel *out, fsa_kernel_id id, fsa_context *ctx, const fsa_kernel_config *c)
{
    request_buf b;
    fsa_kernel_describe(out, id, c);
    const fsa_kernel_request r = request_for(&b, kernels[id].family, c);
    return fsa_context_get_function(&out->fn, ctx, &r, out->name, (int)out->smem, (int)out->smem_static);
}

fsa_status fsa_kernel_check_smem(const fsa_kernel *k, const fsa_context *ctx, const char *stage)
{
    const unsigned need = fsa_kernel_smem_total(k);
    if ((int)need <= ctx->max_smem_per_block) return FSA_STATUS_OK;
    return fsa_error_set(FSA_STATUS_UNSUPPORTED, stage, "%s needs %u bytes of shared memory; target %s allows %d",
                         k->name, need, ctx->target, ctx->max_smem_per_block);
}

/* A grid's x size the driver takes (2^31 - 1 CTAs). Host checks keep every
 * call's grids far below it (the tensors of a larger one would not fit any
 * GPU), and not every kernel strides over its work, so a larger grid is an
 * error, never a clamp that would leave work undone. */
static fsa_status check_grid_x(const fsa_kernel *k, uint64_t gx)
{
    if (gx <= 0x7fffffffu) return FSA_STATUS_OK;
    char stage[40];
    snprintf(stage, sizeof stage, "launch %s", k->name);
    return fsa_error_set(FSA_STATUS_UNSUPPORTED, stage, "a grid of %llu CTAs in x, more than 2^31 - 1",
                         (unsigned long long)gx);
}

/* A launch's status: OK, or the driver's error naming the kernel. */
static fsa_status launch_status(const fsa_kernel *k, const fsa_cu_api *cu, CUresult r, const char *api)
{
    if (r == CUDA_SUCCESS) return FSA_STATUS_OK;
    char stage[40];
    snprintf(stage, sizeof stage, "launch %s", k->name);
    return fsa_cu_error(cu, r, stage, api);
}

fsa_status fsa_kernel_launch_3d(const fsa_kernel *k, const fsa_context *ctx, uint64_t gx, unsigned gy, unsigned gz,
                                CUstream stream, void *params)
{
    const fsa_cu_api *cu = ctx->cu;
    void *args[] = {params};
    if (gx == 0 || gy == 0 || gz == 0) return FSA_STATUS_OK;
    const fsa_status st = check_grid_x(k, gx);
    if (st != FSA_STATUS_OK) return st;
    const CUresult r = cu->LaunchKernel(k->fn, (unsigned)gx, gy, gz, k->threads, 1, 1, k->smem, stream, args, NULL);
    return launch_status(k, cu, r, "cuLaunchKernel");
}

uint64_t fsa_kernel_one_cta_per_sm(const fsa_context *ctx, uint64_t jobs)
{
    const uint64_t sms = ctx->sm_count > 0 ? (uint64_t)ctx->sm_count : 1;
    return jobs < sms ? jobs : sms;
}

fsa_status fsa_kernel_launch_query_tiles(const fsa_kernel *k, const fsa_context *ctx, int persistent, uint64_t tiles,
                                         unsigned heads, CUstream stream, void *params)
{
    if (persistent)
        return fsa_kernel_launch_3d(k, ctx, fsa_kernel_one_cta_per_sm(ctx, tiles * heads), 1, 1, stream, params);
    return fsa_kernel_launch_3d(k, ctx, tiles, heads, 1, stream, params);
}

int fsa_kernel_persistent_items_fit(const fsa_context *ctx, uint64_t jobs, uint64_t stages_per_job, int ring_stages)
{
    /* Offline (no SM count): no grid to size, and the call cannot launch; a device's own check decides
     * (a grid of one would refuse calls every device takes). */
    if (ctx->sm_count < 1) return 1;
    const uint64_t grid = fsa_kernel_one_cta_per_sm(ctx, jobs);
    if (grid == 0) return 1;
    const unsigned __int128 items = (unsigned __int128)(jobs / grid + (jobs % grid != 0)) * stages_per_job;
    return items <= (unsigned __int128)(INT32_MAX - ring_stages);
}

int fsa_kernel_can_cluster(const fsa_context *ctx)
{
    return ctx->cu != NULL && ctx->cu->LaunchKernelEx != NULL && ctx->cc_major >= 9;
}

fsa_status fsa_kernel_launch_clusters(const fsa_kernel *k, const fsa_context *ctx, uint64_t gx, unsigned gy,
                                      unsigned cluster_y, CUstream stream, void *params)
{
    const fsa_cu_api *cu = ctx->cu;
    void *args[] = {params};
    if (gx == 0 || gy == 0) return FSA_STATUS_OK;
    const fsa_status st = check_grid_x(k, gx);
    if (st != FSA_STATUS_OK) return st;
    CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
    attr.value.clusterDim.x = 1;
    attr.value.clusterDim.y = cluster_y;
    attr.value.clusterDim.z = 1;
    const CUlaunchConfig cfg = {.gridDimX = (unsigned)gx, .gridDimY = gy, .gridDimZ = 1,
                                .blockDimX = k->threads, .blockDimY = 1, .blockDimZ = 1,
                                .sharedMemBytes = k->smem, .hStream = stream, .attrs = &attr, .numAttrs = 1};
    const CUresult r = cu->LaunchKernelEx(&cfg, k->fn, args, NULL);
    return launch_status(k, cu, r, "cuLaunchKernelEx");
}

fsa_status fsa_kernel_launch(const fsa_kernel *k, const fsa_context *ctx, uint64_t gx, unsigned gy, CUstream stream,
                             void *params)
{
    return fsa_kernel_launch_3d(k, ctx, gx, gy, 1, stream, params);
}

fsa_status fsa_kernel_persistent_grid(int *grid_out, fsa_context *ctx, const fsa_kernel *k)
{
    fsa_status st = FSA_STATUS_OK;
    int per_sm = 0;
    *grid_out = 1;
    if (ctx->cu == NULL) return FSA_STATUS_OK;
    FSA_CHECK(fsa_context_enter(ctx));
    CUresult r = ctx->cu->OccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k->fn, (int)k->threads, (size_t)k->smem);
    fsa_context_leave(ctx);
    if (r != CUDA_SUCCESS) FSA_CHECK(fsa_cu_error(ctx->cu, r, "load", "cuOccupancyMaxActiveBlocksPerMultiprocessor"));
    *grid_out = ctx->sm_count * (per_sm > 0 ? per_sm : 1);
cleanup:
    return st;
}
