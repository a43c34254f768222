/* Plans: validate a selected-attention descriptor, decide which paths fit
 * the target, compile or load their kernels (workspace layouts and chunks: plan_layout.c). */
#include "plan.h"
#include "metadata_check.h"
#include "tuning.h"

#include "base/status_internal.h"
#include "base/struct_size.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STAGE "plan"

/* fsa_sel_layout_fit takes the descriptor's algorithm as its order. */
_Static_assert(FSA_ALGORITHM_AUTO == FSA_SEL_ORDER_AUTO && FSA_ALGORITHM_FSA == FSA_SEL_ORDER_FSA &&
                   FSA_ALGORITHM_NSA == FSA_SEL_ORDER_NSA,
               "the layout's orders are the descriptor's");


static fsa_status validate_desc(const fsa_selected_attention_desc *d)
{
    fsa_status st = FSA_STATUS_OK;
    if (d->dtype != FSA_DTYPE_BF16 && d->dtype != FSA_DTYPE_F16)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "dtype %d is neither bf16 nor f16", (int)d->dtype);
    if (d->head_dim < 16 || d->head_dim > 256 || d->head_dim % 16 != 0)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "head_dim %d: must be a multiple of 16 from 16 to 256",
                 d->head_dim);
    if (d->value_dim < 16 || d->value_dim > 256 || d->value_dim % 16 != 0)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE,
                 "value_dim %lld: must be 0 (= head_dim) or a multiple of 16 from 16 to 256", (long long)d->value_dim);
    if (d->num_q_heads < 1 || d->num_kv_heads < 1)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "num_q_heads %d and num_kv_heads %d must be positive",
                 d->num_q_heads, d->num_kv_heads);
    if (d->num_q_heads % d->num_kv_heads != 0)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "num_q_heads %d is not a multiple of num_kv_heads %d",
                 d->num_q_heads, d->num_kv_heads);
    if (d->num_q_heads / d->num_kv_heads > 128)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "group size %d: at most 128 query heads per KV head",
                 d->num_q_heads / d->num_kv_heads);
    int bk = d->block_size;
    if (bk != 16 && bk != 32 && bk != 64 && bk != 128 && bk != 256)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "block_size %d: must be 16, 32, 64, 128 or 256", bk);
    if (d->top_k < 1 || d->top_k > FSA_MAX_TOP_K)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "top_k %d: must be 1..%d", d->top_k, FSA_MAX_TOP_K);
    if (!isfinite(d->scale) || d->scale < 0.0f)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "scale must be finite and >= 0 (0 = 1/sqrt(head_dim))");
    if (d->algorithm != FSA_ALGORITHM_AUTO && d->algorithm != FSA_ALGORITHM_FSA &&
        d->algorithm != FSA_ALGORITHM_NSA)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "unknown algorithm %d", (int)d->algorithm);
    if (d->backward != 0 && d->backward != 1)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "backward must be 0 or 1");
cleanup:
    return st;
}

int fsa_nsa_grid_fits(const fsa_plan *plan)
{
    return (int64_t)plan->desc.num_kv_heads * fsa_nsa_head_groups(plan->group) <= FSA_GRID_MAX_ROWS;
}

/* The forward kernels the descriptor asks for (the index kernels with
 * either); a path whose kernels were not loaded is marked unavailable. */
static fsa_status load_fwd_kernels(fsa_plan *plan, int want_fsa, int want_nsa)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_context *ctx = plan->ctx;
    const fsa_kernel_config *c = &plan->config;
    fsa_fwd_kernels *k = &plan->fwd;
    plan->fsa_available = plan->fsa_available && want_fsa;
    plan->nsa_available = plan->nsa_available && want_nsa;
    if (plan->fsa_available) {
        FSA_CHECK(fsa_kernel_load(&k->count, FSA_K_COUNT, ctx, c));
        FSA_CHECK(fsa_kernel_load(&k->scatter, FSA_K_SCATTER, ctx, c));
        FSA_CHECK(fsa_kernel_load(&k->main, plan->fwd_wg ? FSA_K_FWD_MAIN_WG : FSA_K_FWD_MAIN, ctx, c));
        FSA_CHECK(fsa_kernel_load(&k->reduce, FSA_K_FWD_REDUCE, ctx, c));
        FSA_CHECK(fsa_kernel_persistent_grid(&plan->main_grid, ctx, &k->main));
    }
    if (plan->nsa_available) FSA_CHECK(fsa_kernel_load(&k->nsa, FSA_K_FWD_NSA, ctx, c));
cleanup:
    return st;
}

static fsa_status load_bwd_kernels(fsa_plan *plan)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_context *ctx = plan->ctx;
    const fsa_kernel_config *c = &plan->config;
    fsa_bwd_kernels *k = &plan->bwd;
    FSA_CHECK(fsa_kernel_load(&k->count, FSA_K_COUNT, ctx, c));
    FSA_CHECK(fsa_kernel_load(&k->scatter, FSA_K_SCATTER, ctx, c));
    FSA_CHECK(fsa_kernel_load(&k->sort, FSA_K_SORT, ctx, c));
    FSA_CHECK(fsa_kernel_load(&k->prep, FSA_K_BWD_PREP, ctx, c));
    FSA_CHECK(fsa_kernel_load(&k->main, plan->bwd_wg ? FSA_K_BWD_MAIN_WG : FSA_K_BWD_MAIN, ctx, c));
    FSA_CHECK(fsa_kernel_load(&k->main_kv, FSA_K_BWD_MAIN_KV, ctx, c));
    FSA_CHECK(fsa_kernel_load(&k->sums, FSA_K_BWD_SUMS, ctx, c));
    if (plan->bwd_nsa_available) FSA_CHECK(fsa_kernel_load(&k->dq_nsa, FSA_K_BWD_DQ_NSA, ctx, c));
    FSA_CHECK(fsa_kernel_load(&k->dkv_sum, FSA_K_BWD_DKV_SUM, ctx, c));
    FSA_CHECK(fsa_kernel_persistent_grid(&plan->bwd_grid, ctx, &k->main));
cleanup:
    return st;
}

/* The backward main kernel takes the largest key slice of the block (at most
 * FSA_BWD_MAX_KEYS keys) whose shared memory fits in its layout (one Q/dO
 * stage where two do not fit even 16 keys: fsa_sel_layout_fit); the other
 * backward kernels do not depend on it. Fails when even 16 keys do not fit. */
static fsa_status plan_backward(fsa_plan *plan, int max_smem)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_selected_attention_desc *desc = &plan->desc;
    fsa_kernel_config *c = &plan->config;
    fsa_kernel main, dq_nsa;
    /* Slices sized in the layout the target needs: where FSA_SEL_LAYOUT_ONE_STAGE (tests) adds one stage to a
     * default that fits, the kernel keeps the default's slices, so the two give the same bits. */
    const int layout = c->sel_layout;
    c->sel_layout = (layout & ~FSA_SEL_LAYOUT_BWD_ONE_STAGE) | (plan->sel_layout_needed & FSA_SEL_LAYOUT_BWD_ONE_STAGE);
    c->bwd_keys = desc->block_size < FSA_BWD_MAX_KEYS ? desc->block_size : FSA_BWD_MAX_KEYS;
    fsa_kernel_describe(&main, FSA_K_BWD_MAIN, c);
    while ((int)fsa_kernel_smem_total(&main) > max_smem && c->bwd_keys > 16) {
        c->bwd_keys /= 2;
        fsa_kernel_describe(&main, FSA_K_BWD_MAIN, c);
    }
    c->sel_layout = layout;
    fsa_kernel_describe(&main, FSA_K_BWD_MAIN, c);
    fsa_kernel_describe(&dq_nsa, FSA_K_BWD_DQ_NSA, c);
    /* The heuristic never takes the NSA-order dq (choose.c): a forced NSA plan
     * loads it, and an AUTO plan only when tuning may measure it. */
    plan->bwd_nsa_available = (int)fsa_kernel_smem_total(&dq_nsa) <= max_smem && fsa_nsa_grid_fits(plan) &&
                              (desc->algorithm == FSA_ALGORITHM_NSA ||
                               (desc->algorithm == FSA_ALGORITHM_AUTO && plan->tune.level != FSA_TUNE_LEVEL_OFF));
    if ((int)fsa_kernel_smem_total(&main) > max_smem)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE,
                 "the backward needs %u bytes of shared memory even with 16-key slices; target %s allows %d",
                 fsa_kernel_smem_total(&main), plan->ctx->target, max_smem);
    if (desc->algorithm == FSA_ALGORITHM_NSA && (int)fsa_kernel_smem_total(&dq_nsa) > max_smem)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE,
                 "the NSA-order backward needs %u bytes of shared memory; target %s allows %d",
                 fsa_kernel_smem_total(&dq_nsa), plan->ctx->target, max_smem);
    /* Each launch of the main kernel takes whole 16-column steps of dK and dV. */
    const int parts = fsa_bwd_d_parts(c->head_dim, c->value_dim);
    if (c->head_dim / parts % 16 != 0 || c->value_dim / parts % 16 != 0)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE,
                 "the backward with head_dim %d and value_dim %d: when together over %d, both must be "
                 "multiples of 32",
                 c->head_dim, c->value_dim, FSA_BWD_ONE_PASS_COLS);
    /* The FSA order's main kernel on warpgroup products where the target has them (FSA_WGMMA_SEL_BWD). */
    fsa_kernel main_wg;
    fsa_kernel_describe(&main_wg, FSA_K_BWD_MAIN_WG, c);
    const int wg = fsa_kernel_sel_bwd_wgmma(plan->ctx, c->head_dim, c->value_dim);
    plan->bwd_wg = wg && fsa_bwd_wg_ok(c->head_dim, c->value_dim, desc->block_size) &&
                   c->bwd_keys == FSA_BWD_WG_KEYS && (int)fsa_kernel_smem_total(&main_wg) <= max_smem;
    c->sel_bwd_wg = plan->bwd_wg ? wg : 0;
    plan->bwd_available = 1;
cleanup:
    return st;
}

fsa_status fsa_plan_create(fsa_plan **out, fsa_context *ctx, const fsa_selected_attention_desc *desc)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_plan *plan = NULL;
    if (out != NULL) *out = NULL; /* NULL on every failure, the NULL arguments' included */
    if (out == NULL || ctx == NULL || desc == NULL)
        FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "out, context and descriptor must not be NULL");
    /* The caller's descriptor may be an older, shorter version: newer fields read as zero. */
    fsa_selected_attention_desc d;
    FSA_CHECK(fsa_struct_read(&d, sizeof d, desc, FSA_SELECTED_ATTENTION_DESC_FIRST_SIZE, STAGE,
                              "fsa_selected_attention_desc"));
    FSA_APPENDED_FIELD(fsa_selected_attention_desc, value_dim, FSA_SELECTED_ATTENTION_DESC_FIRST_SIZE);
    FSA_CHECK(FSA_STRUCT_FIELD_WHOLE(&d, fsa_selected_attention_desc, value_dim, STAGE));
    if (d.value_dim == 0) d.value_dim = d.head_dim;
    desc = &d;
    FSA_CHECK(validate_desc(desc));
    plan = calloc(1, sizeof *plan);
    FSA_CHECK_ALLOC(plan, STAGE);
    plan->ctx = ctx;
    plan->desc = *desc;
    plan->group = desc->num_q_heads / desc->num_kv_heads;
    plan->tune.level = (fsa_tune_level)ctx->tune;
    plan->scale = fsa_softmax_scale(desc->scale, desc->head_dim);
    /* Read once, here: the size query and the call agree. */
    plan->index_per_chunk = fsa_env_int("FSA_INDEX_ONCE", 0, 1, 1) == 0;
    plan->bwd_item_rounds = fsa_env_int("FSA_BWD_ITEM_ROUNDS", 1, 8, 0);
    plan->bwd_list_rounds = fsa_env_int("FSA_BWD_LIST_ROUNDS", 1, FSA_BWD_MAX_ITEM_ROUNDS, 0);

    plan->config = (fsa_kernel_config){.dtype = desc->dtype, .head_dim = desc->head_dim,
                                       .value_dim = (int)desc->value_dim, .group = plan->group,
                                       .block_size = desc->block_size, .top_k = desc->top_k};

    const int max_smem = ctx->max_smem_per_block; /* the device's, else the target's */
    fsa_kernel main, nsa;
    /* The warpgroup main kernel where the target has warpgroup products (FSA_WGMMA=0 keeps mma.sync). */
    plan->fwd_wg = fsa_kernel_wgmma(ctx, desc->head_dim, (int)desc->value_dim) != 0 &&
                   fsa_fwd_wg_ok(desc->head_dim, (int)desc->value_dim, desc->block_size);
    plan->config.fwd_wg_variant = plan->fwd_wg ? fsa_kernel_fwd_wg_variant() : 0;
    /* Each mma.sync kernel's default layout where it fits, else one stage: the FSA-order forward's wherever
     * one tile fits, the NSA order's where neither default forward fits (fsa_sel_layout_fit);
     * FSA_SEL_LAYOUT_ONE_STAGE=1 (tests) adds one stage where the default fits. The warpgroup forward has
     * its own layout: its place drops the FSA order's bit. Kernels fitting neither keep the default's bytes,
     * refused below as before. */
    plan->sel_layout_needed = fsa_sel_layout_fit(desc->head_dim, (int)desc->value_dim, desc->block_size, plan->group,
                                                 (int)desc->algorithm, max_smem, 0);
    plan->config.sel_layout = fsa_sel_layout_fit(desc->head_dim, (int)desc->value_dim, desc->block_size, plan->group,
                                                 (int)desc->algorithm, max_smem, fsa_kernel_sel_forced()) &
                              ~(plan->fwd_wg ? FSA_SEL_LAYOUT_FWD_ONE_STAGE : 0);
    fsa_kernel_describe(&main, plan->fwd_wg ? FSA_K_FWD_MAIN_WG : FSA_K_FWD_MAIN, &plan->config);
    fsa_kernel_describe(&nsa, FSA_K_FWD_NSA, &plan->config);
    plan->fsa_available = fsa_plan_fwd_item_entries(plan) >= 1 && (int)fsa_kernel_smem_total(&main) <= max_smem;
    plan->nsa_available = (int)fsa_kernel_smem_total(&nsa) <= max_smem && fsa_nsa_grid_fits(plan);
    if (desc->algorithm == FSA_ALGORITHM_FSA && !plan->fsa_available)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE,
                 "the FSA path does not fit: group %d (at most %d), %u bytes of shared memory (target %s allows %d)",
                 plan->group, FSA_FWD_MAX_GROUP, fsa_kernel_smem_total(&main), ctx->target, max_smem);
    if (desc->algorithm == FSA_ALGORITHM_NSA && !fsa_nsa_grid_fits(plan))
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE,
                 "the NSA path needs a grid row per KV head and group of query heads: %d KV heads at group %d "
                 "exceed the grid's %d rows",
                 desc->num_kv_heads, plan->group, FSA_GRID_MAX_ROWS);
    if (desc->algorithm == FSA_ALGORITHM_NSA && !plan->nsa_available)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "the NSA path needs %u bytes of shared memory; target %s allows %d",
                 fsa_kernel_smem_total(&nsa), ctx->target, max_smem);
    if (!plan->fsa_available && !plan->nsa_available) {
        char why_fsa[96], why_nsa[128];
        if (fsa_plan_fwd_item_entries(plan) < 1)
            snprintf(why_fsa, sizeof why_fsa, "takes groups up to %d (group %d)", FSA_FWD_MAX_GROUP, plan->group);
        else
            snprintf(why_fsa, sizeof why_fsa, "needs %u bytes of shared memory", fsa_kernel_smem_total(&main));
        if (!fsa_nsa_grid_fits(plan))
            snprintf(why_nsa, sizeof why_nsa, "needs a grid row per KV head and head group (%d KV heads at group %d)",
                     desc->num_kv_heads, plan->group);
        else
            snprintf(why_nsa, sizeof why_nsa, "needs %u bytes of shared memory", fsa_kernel_smem_total(&nsa));
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "no forward path fits target %s (%d bytes of shared memory a block): "
                 "the FSA order %s, the NSA order %s", ctx->target, max_smem, why_fsa, why_nsa);
    }
    /* Every FSA-order call and every backward would refuse such a shape (and the NSA order's grid rows take
     * far fewer KV heads): say so before compiling. The forward's persistent grid, known once its kernel
     * loads, takes a few steps more from the room: checked again then. */
    FSA_CHECK(fsa_check_token_entries(plan, STAGE));
    if (desc->backward) FSA_CHECK(plan_backward(plan, max_smem));

    if (plan->bwd_available) FSA_CHECK(load_bwd_kernels(plan));
    FSA_CHECK(load_fwd_kernels(plan, desc->algorithm != FSA_ALGORITHM_NSA, desc->algorithm != FSA_ALGORITHM_FSA));
    FSA_CHECK(fsa_check_token_entries(plan, STAGE));
    FSA_CHECK(fsa_metadata_checker_create(&plan->checker, ctx, FSA_CHECK_SELECTED));
    fsa_tune_load_records(plan);
    *out = plan;
    plan = NULL;
cleanup:
    fsa_plan_destroy(plan);
    return st;
}

void fsa_plan_destroy(fsa_plan *plan)
{
    if (plan == NULL) return;
    fsa_metadata_checker_destroy(plan->checker, plan->ctx);
    free(plan);
}

int fsa_plan_fwd_item_entries(const fsa_plan *plan)
{
    const fsa_selected_attention_desc *d = &plan->desc;
    return plan->fwd_wg ? fsa_fwd_wg_item_entries(plan->group)
                        : fsa_fwd_item_entries(plan->group, d->head_dim, (int)d->value_dim);
}
