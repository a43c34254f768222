/* The Hopper warpgroup building blocks of templates/fsa_wgmma.cuh on the
 * GPU, one warpgroup at a time, against float64 products on the host: the
 * swizzled cp.async loaders with S = A B^T (both operands K-major from
 * shared memory, two 64-column panels deep) and O = P V (P from registers,
 * V transposed from a swizzled tile, two panels wide), in bf16 and fp16.
 * The probe kernels are compiled through the library's NVRTC path for the
 * context's target; devices other than sm_90 skip. */
#include "testing.h"

#include "jit/compile.h"
#include "jit/context.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 64
#define DEPTH 128 /* S = A B^T: A 64 x 128, B 64 x 128 */
#define KEYS 64   /* O = P V: P 64 x 64, V 64 x 128 */
#define COLS 128  /* the output is 64 x 128 fp32 (S uses its first 64 columns) */

static const char *probe_source =
    "#include \"fsa_wgmma.cuh\"\n"
    "using namespace fsa;\n"
    "template <class DT>\n"
    "__device__ void probe(const u16 *a, const u16 *b, float *out, int mode) {\n"
    "    extern __shared__ __align__(16) unsigned char smem[];\n"
    "    const u32 base = (smem_addr(smem) + 1023u) & ~1023u;\n"
    "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
    "    auto rows_of = [](const u16 *t, int pitch) { return [=](int r) { return RowSrc{t + r * pitch, true}; }; };\n"
    "    float d[16][4];\n"
    "    frag_zero<16>(d);\n"
    "    if (mode == 0) {\n"
    "        const u32 as = base, bs = base + fsa_sw128_bytes(64, 128);\n"
    "        load_tile_sw128_async<64, 128, 128>(as, rows_of(a, 128));\n"
    "        load_tile_sw128_async<64, 128, 128>(bs, rows_of(b, 128));\n"
    "        cp_async_commit();\n"
    "        cp_async_wait<0>();\n"
    "        wg_fence_async_smem();\n"
    "        __syncthreads();\n"
    "        wg_mma_abt<DT, 128, 64>(*reinterpret_cast<float(*)[8][4]>(&d[0]), as, bs);\n"
    "    } else {\n"
    "        load_tile_sw128_async<64, 128, 128>(base, rows_of(b, 128));\n"
    "        cp_async_commit();\n"
    "        cp_async_wait<0>();\n"
    "        wg_fence_async_smem();\n"
    "        __syncthreads();\n"
    "        float p[8][4];\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < 8; j++)\n"
    "#pragma unroll\n"
    "            for (int e = 0; e < 4; e++)\n"
    "                p[j][e] = DT::to_float(a[(16 * warp + frag_row(lane, e)) * 64 + frag_col(lane, j, e)]);\n"
    "        u32 pa[4][4];\n"
    "        wg_p_to_a<DT, 4>(pa, p);\n"
    "        wg_mma_pv<DT, 4, 128>(d, pa, base);\n"
    "    }\n"
    "    wg_commit();\n"
    "    wg_wait<0>();\n"
    "    wg_hold<16>(d);\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < 16; j++)  /* constant indices: d stays in registers */\n"
    "#pragma unroll\n"
    "        for (int e = 0; e < 4; e++) out[(16 * warp + frag_row(lane, e)) * 128 + frag_col(lane, j, e)] = d[j][e];\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(128) probe_bf16(const u16 *a, const u16 *b, float *out, int mode) {\n"
    "    probe<dtype_bf16>(a, b, out, mode);\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(128) probe_f16(const u16 *a, const u16 *b, float *out, int mode) {\n"
    "    probe<dtype_f16>(a, b, out, mode);\n"
    "}\n";

#define PROBE_SMEM (1024 + 2 * 64 * 128 * 2)

static fsa_context *g_ctx;
static char *g_cache_dir;
static CUlibrary g_lib;
static CUfunction g_probe[2]; /* bf16, fp16 */

static uint16_t to_dtype(float x, int f16) { return f16 ? fsa_f32_to_f16(x) : fsa_f32_to_bf16(x); }
static float from_dtype(uint16_t x, int f16) { return f16 ? fsa_f16_to_f32(x) : fsa_bf16_to_f32(x); }

/* Runs one probe (mode 0: S = A B^T, 1: O = P V) on random inputs and
 * compares every output element with the float64 product; prints the first
 * mismatches (row, column, got, expected) before failing. */
static void run_probe(int f16, int mode)
{
    const size_t a_elems = ROWS * DEPTH, b_elems = 64 * 128;
    uint16_t *a = malloc(a_elems * 2), *b = malloc(b_elems * 2);
    float *out = malloc(ROWS * COLS * 4);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(out);
    fsa_rng rng = {0x5eed0000u + (uint64_t)(2 * f16 + mode)};
    for (size_t i = 0; i < a_elems; i++) a[i] = to_dtype((float)(2 * fsa_rng_uniform(&rng) - 1), f16);
    for (size_t i = 0; i < b_elems; i++) b[i] = to_dtype((float)(2 * fsa_rng_uniform(&rng) - 1), f16);
    const uint64_t da = fsa_test_dalloc(a_elems * 2), db = fsa_test_dalloc(b_elems * 2),
                   dout = fsa_test_dalloc(ROWS * COLS * 4);
    fsa_test_h2d(da, a, a_elems * 2);
    fsa_test_h2d(db, b, b_elems * 2);
    fsa_test_dfill(dout, 0xff, ROWS * COLS * 4); /* NaN: an element never written fails */
    uint64_t a_arg = da, b_arg = db, out_arg = dout;
    void *args[] = {&a_arg, &b_arg, &out_arg, &mode};
    const CUresult r = g_ctx->cu->LaunchKernel(g_probe[f16], 1, 1, 1, 128, 1, 1, PROBE_SMEM, NULL, args, NULL);
    if (r != CUDA_SUCCESS) fail_msg("probe launch: driver error %d", (int)r);
    fsa_test_sync();
    fsa_test_d2h(out, dout, ROWS * COLS * 4);

    const int cols = mode == 0 ? 64 : 128, depth = mode == 0 ? DEPTH : KEYS;
    int bad = 0;
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < cols; j++) {
            double want = 0, mag = 0;
            for (int k = 0; k < depth; k++) {
                /* mode 0: A row i . B row j; mode 1: P (a as 64 x 64) row i . V column j */
                const double x = from_dtype(a[mode == 0 ? i * DEPTH + k : i * KEYS + k], f16);
                const double y = from_dtype(b[mode == 0 ? j * DEPTH + k : k * 128 + j], f16);
                want += x * y;
                mag += fabs(x * y);
            }
            const float got = out[i * COLS + j];
            if (!(fabs(got - want) <= 1e-5 * mag + 1e-6)) {
                if (bad < 8)
                    print_message("  %s mode %d: [%d][%d] = %.6f, expected %.6f\n", f16 ? "f16" : "bf16", mode, i, j,
                                  got, want);
                bad++;
            }
        }
    if (bad) print_message("  %s mode %d: %d of %d elements wrong\n", f16 ? "f16" : "bf16", mode, bad, ROWS * cols);
    assert_int_equal(bad, 0);
    fsa_test_dfree(da);
    fsa_test_dfree(db);
    fsa_test_dfree(dout);
    free(a);
    free(b);
    free(out);
}

static void test_q_k_transpose_product_matches_float64_in_bf16_and_fp16(void **state)
{
    (void)state;
    run_probe(0, 0);
    run_probe(1, 0);
}

static void test_p_v_product_with_p_in_registers_matches_float64_in_bf16_and_fp16(void **state)
{
    (void)state;
    run_probe(0, 1);
    run_probe(1, 1);
}

static CUfunction load_probe(const char *name)
{
    CUkernel k;
    CUfunction fn;
    if (g_ctx->cu->LibraryGetKernel(&k, g_lib, name) != CUDA_SUCCESS) return NULL;
    if (g_ctx->cu->KernelGetFunction(&fn, k) != CUDA_SUCCESS) return NULL;
    if (g_ctx->cu->FuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, PROBE_SMEM) != CUDA_SUCCESS)
        return NULL;
    return fn;
}

static int setup(void **state)
{
    (void)state;
    g_cache_dir = fsa_test_mkdtemp("wgmma-cache");
    g_ctx = fsa_test_gpu_context_or_skip(g_cache_dir);
    if (strcmp(g_ctx->target, "sm_90a") != 0) {
        /* A compute capability 9.0 device that does not get sm_90a is a detection fault, not a reason to skip. */
        if (g_ctx->cc_major == 9 && g_ctx->cc_minor == 0 && fsa_test_gpu_required()) {
            fprintf(stderr, "a compute capability 9.0 device compiles for %s, not sm_90a\n", g_ctx->target);
            exit(1);
        }
        fprintf(stderr, "skipping: warpgroup products need sm_90a (this device compiles for %s)\n", g_ctx->target);
        exit(FSA_TEST_SKIP_CODE);
    }
    const fsa_nvrtc_api *nvrtc;
    fsa_compile_options opts;
    fsa_cubin cubin;
    if (fsa_nvrtc_load(&nvrtc) != FSA_STATUS_OK || fsa_compile_options_for(&opts, g_ctx->target) != FSA_STATUS_OK ||
        fsa_compile(&cubin, nvrtc, probe_source, "wgmma_probe.cu", &opts) != FSA_STATUS_OK) {
        fprintf(stderr, "probe compile: %s\n", fsa_last_error());
        return -1;
    }
    const CUresult r = g_ctx->cu->LibraryLoadData(&g_lib, cubin.data, NULL, NULL, 0, NULL, NULL, 0);
    fsa_cubin_free(&cubin);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "probe load: driver error %d\n", (int)r);
        return -1;
    }
    g_probe[0] = load_probe("probe_bf16");
    g_probe[1] = load_probe("probe_f16");
    return g_probe[0] && g_probe[1] ? 0 : -1;
}

/* The probe library, the context and its cache directory. */
static int teardown(void **state)
{
    (void)state;
    g_ctx->cu->LibraryUnload(g_lib);
    fsa_context_destroy(g_ctx);
    fsa_test_rmtree(g_cache_dir);
    free(g_cache_dir);
    return 0;
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_q_k_transpose_product_matches_float64_in_bf16_and_fp16),
    cmocka_unit_test(test_p_v_product_with_p_in_registers_matches_float64_in_bf16_and_fp16),
};

/* Skips (exit 77) inside setup without an sm_90a device. */
int main(void) { return cmocka_run_group_tests(tests, setup, teardown); }
