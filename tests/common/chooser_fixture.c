/* The chooser tests' fixture and stand-in driver (chooser_fixture.h). */
#include "chooser_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------ a plan without kernels */

void make_plan(fsa_plan *p, fsa_context *ctx, int group, fsa_algorithm alg, fsa_tune_level level)
{
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    p->desc = (fsa_selected_attention_desc)FSA_SELECTED_ATTENTION_DESC_INIT;
    p->desc.num_kv_heads = 2;
    p->desc.num_q_heads = 2 * group;
    p->desc.algorithm = alg;
    p->desc.backward = 1;
    p->desc.value_dim = p->desc.head_dim; /* resolved, as fsa_plan_create leaves it */
    p->group = group;
    p->fsa_available = alg != FSA_ALGORITHM_NSA;
    p->nsa_available = alg != FSA_ALGORITHM_FSA;
    p->bwd_available = 1;
    p->bwd_nsa_available = alg == FSA_ALGORITHM_NSA || level != FSA_TUNE_LEVEL_OFF;
    p->tune.level = level;
}

int chooser_setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (f == NULL) return -1;
    f->root = fsa_test_mkdtemp("fsa_tuning");
    if (f->root == NULL || fsa_disk_cache_open(&f->ctx.disk, f->root, 0) != FSA_STATUS_OK) return -1;
    f->ctx.target = "sm_90a";
    snprintf(f->ctx.gpu_name, sizeof f->ctx.gpu_name, "NVIDIA Test GPU");
    f->ctx.sm_count = 132;
    f->ctx.tune = FSA_TUNE_LEVEL_ON;
    make_plan(&f->plan, &f->ctx, 4, FSA_ALGORITHM_AUTO, FSA_TUNE_LEVEL_ON);
    *state = f;
    return 0;
}

int chooser_teardown(void **state)
{
    fixture *f = *state;
    fsa_disk_cache_close(f->ctx.disk);
    fsa_test_rmtree(f->root);
    free(f->root);
    free(f);
    return 0;
}

/* ------------------------------------------------------------ a stand-in driver */

int g_capturing, g_runs[2];
static fsa_algorithm g_last;

static CUresult fake_is_capturing(CUstream s, CUstreamCaptureStatus *st)
{
    (void)s;
    *st = g_capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
static CUresult fake_event_create(CUevent *e, unsigned flags)
{
    (void)flags;
    *e = (CUevent)(uintptr_t)0x1000;
    return CUDA_SUCCESS;
}
static CUresult fake_event_destroy(CUevent e) { (void)e; return CUDA_SUCCESS; }
static CUresult fake_event_record(CUevent e, CUstream s) { (void)e, (void)s; return CUDA_SUCCESS; }
static CUresult fake_event_sync(CUevent e) { (void)e; return CUDA_SUCCESS; }
/* The NSA order "takes" 0.5 ms, the FSA order 1 ms. */
static CUresult fake_elapsed(float *ms, CUevent a, CUevent b)
{
    (void)a, (void)b;
    *ms = g_last == FSA_ALGORITHM_NSA ? 0.5f : 1.0f;
    return CUDA_SUCCESS;
}

static fsa_status fake_run(const void *call, const fsa_plan *plan, const fsa_variant *v, CUstream stream)
{
    (void)call, (void)plan, (void)stream;
    g_last = v->order;
    g_runs[v->order == FSA_ALGORITHM_NSA]++;
    return FSA_STATUS_OK;
}

const fsa_cu_api *fake_driver(void)
{
    static fsa_cu_api cu;
    cu.StreamIsCapturing = fake_is_capturing;
    cu.EventCreate = fake_event_create;
    cu.EventDestroy = fake_event_destroy;
    cu.EventRecord = fake_event_record;
    cu.EventSynchronize = fake_event_sync;
    cu.EventElapsedTime = fake_elapsed;
    return &cu;
}

fsa_variant pick(fsa_plan *plan, int64_t T, int *measured)
{
    fsa_variant v;
    g_runs[0] = g_runs[1] = 0;
    assert_int_equal(fsa_tune_pick(&v, measured, plan, FSA_OP_FWD, T, NULL, fake_run, NULL), FSA_STATUS_OK);
    return v;
}

char *record_path(const fsa_plan *plan, fsa_op_kind op, int64_t T)
{
    fsa_kernel_key key;
    assert_int_equal(fsa_tune_record_key(&key, plan, op, fsa_tune_bucket(T)), FSA_STATUS_OK);
    char *path = fsa_disk_cache_record_path(plan->ctx->disk, &key, plan->ctx->target);
    fsa_key_free(&key);
    assert_non_null(path);
    return path;
}

int record_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}
