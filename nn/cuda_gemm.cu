/*
 * cuda_gemm.cu: the linear layer on the GPU. Matrix products go through
 * cuBLASLt with the bias (and the residual `add`, as the C matrix) fused into
 * the product's epilogue, so linear_fwd is one kernel; the bias gradient is a
 * deterministic column sum (cuda_misc.cu).
 *
 * Row-major [rows, cols] arrays are column-major [cols, rows] to cuBLAS, so
 *   y[rows,out] = x . w^T      is  Y^T (out x rows)  = op_T(W) . X^T
 *   dx[rows,in] = dy . w       is  dX^T (in x rows)  = W^T-as-stored . dY^T
 *   dw[out,in] += dy^T . x     is  dW^T (in x out)  += X^T . op_T(dY^T)
 * with W stored as an (in x out) column-major matrix of leading dimension in.
 *
 * Precision: compute type CUBLAS_COMPUTE_32F everywhere, which is true fp32
 * (TF32 only happens with the _FAST_TF32 compute types, never asked for). In
 * the bf16 backend the float32 weight (and bias) is converted to bf16 in
 * scratch right before each product; dw accumulates into float32 (C and D
 * float, A and B bf16), dx and y are bf16.
 *
 * Plans: a matmul descriptor, its layouts and the heuristic's algorithm are
 * cached per (shape, types, epilogue, pointer alignments), since alignment
 * decides which kernels are legal. When cuBLASLt has no algorithm for a case
 * (or PT_CUDA_GEMM=fallback), a plain tiled kernel in this file computes it.
 */
#include "nn/cuda_common.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ plan cache */

typedef struct gemm_key {
    int ta, tb, m, n, k, lda, ldb, ldc;
    int ab_bf16, cd_bf16, bias;
    int align_a, align_b, align_c, align_d, align_bias;
} gemm_key;

typedef struct gemm_plan {
    gemm_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    int ok; /* 0: cuBLASLt has no algorithm; use the fallback kernel */
} gemm_plan;

struct cuda_gemm_cache {
    gemm_plan *plans;
    int n, cap;
};

/* One product: D[m,n] = alpha op(A) op(B) + beta C (+ bias[m] per column). */
typedef struct gemm_args {
    int ta, tb, m, n, k;
    const void *A;
    int lda;
    const void *B;
    int ldb;
    const void *C;
    void *D;
    int ldc;
    int ab_bf16, cd_bf16;
    const void *bias; /* type of D */
    float beta;
} gemm_args;

static int alignment(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && a % (uintptr_t)al)
        al /= 2;
    return al;
}

void cuda_gemm_cache_free(cuda_impl *c)
{
    cuda_gemm_cache *g = c->gemm;
    if (!g)
        return;
    for (int i = 0; i < g->n; i++) {
        gemm_plan *p = &g->plans[i];
        if (p->desc)
            PT_LT(MatmulDescDestroy)(p->desc);
        if (p->a)
            PT_LT(MatrixLayoutDestroy)(p->a);
        if (p->b)
            PT_LT(MatrixLayoutDestroy)(p->b);
        if (p->c)
            PT_LT(MatrixLayoutDestroy)(p->c);
    }
    free(g->plans);
    free(g);
    c->gemm = NULL;
}

/* Builds the descriptor and layouts of a plan and asks the heuristic. */
static int plan_build(cuda_impl *c, gemm_plan *p, const gemm_args *g)
{
    const gemm_key *k = &p->key;
    cudaDataType_t ab = k->ab_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cudaDataType_t cd = k->cd_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasOperation_t ta = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t epi = k->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (CUBLAS_CHECK(c, PT_LT(MatmulDescCreate)(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) ||
        CUBLAS_CHECK(c,
                     PT_LT(MatmulDescSetAttribute)(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) ||
        CUBLAS_CHECK(c,
                     PT_LT(MatmulDescSetAttribute)(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)) ||
        CUBLAS_CHECK(
            c, PT_LT(MatmulDescSetAttribute)(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)))
        return -1;
    if (k->bias && CUBLAS_CHECK(c, PT_LT(MatmulDescSetAttribute)(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                                  &g->bias, sizeof g->bias)))
        return -1;
    /* layouts describe the matrices as stored (before the transposes) */
    if (CUBLAS_CHECK(
            c, PT_LT(MatrixLayoutCreate)(&p->a, ab, k->ta ? k->k : k->m, k->ta ? k->m : k->k, k->lda)) ||
        CUBLAS_CHECK(
            c, PT_LT(MatrixLayoutCreate)(&p->b, ab, k->tb ? k->n : k->k, k->tb ? k->k : k->n, k->ldb)) ||
        CUBLAS_CHECK(c, PT_LT(MatrixLayoutCreate)(&p->c, cd, k->m, k->n, k->ldc)))
        return -1;
    cublasLtMatmulPreference_t pref;
    if (CUBLAS_CHECK(c, PT_LT(MatmulPreferenceCreate)(&pref)))
        return -1;
    uint64_t ws = c->lt_ws_bytes;
    uint32_t al[4] = {(uint32_t)k->align_a, (uint32_t)k->align_b, (uint32_t)k->align_c, (uint32_t)k->align_d};
    int bad =
        CUBLAS_CHECK(c, PT_LT(MatmulPreferenceSetAttribute)(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &ws, sizeof ws)) ||
        CUBLAS_CHECK(c, PT_LT(MatmulPreferenceSetAttribute)(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                             &al[0], sizeof al[0])) ||
        CUBLAS_CHECK(c, PT_LT(MatmulPreferenceSetAttribute)(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                             &al[1], sizeof al[1])) ||
        CUBLAS_CHECK(c, PT_LT(MatmulPreferenceSetAttribute)(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                             &al[2], sizeof al[2])) ||
        CUBLAS_CHECK(c, PT_LT(MatmulPreferenceSetAttribute)(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                             &al[3], sizeof al[3]));
    if (!bad) {
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        /* "not supported" is an answer (no algorithm), not a failure */
        cublasStatus_t s =
            PT_LT(MatmulAlgoGetHeuristic)(c->lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, &res, &found);
        if (s == CUBLAS_STATUS_SUCCESS && found > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
            p->algo = res.algo;
            p->ok = 1;
        } else if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED) {
            bad = CUBLAS_CHECK(c, s);
        }
    }
    if (CUBLAS_CHECK(c, PT_LT(MatmulPreferenceDestroy)(pref)))
        bad = 1;
    return bad ? -1 : 0;
}

static gemm_plan *plan_for(cuda_impl *c, const gemm_args *g)
{
    gemm_key k;
    memset(&k, 0, sizeof k); /* keys are compared with memcmp */
    k.ta = g->ta, k.tb = g->tb, k.m = g->m, k.n = g->n, k.k = g->k;
    k.lda = g->lda, k.ldb = g->ldb, k.ldc = g->ldc;
    k.ab_bf16 = g->ab_bf16, k.cd_bf16 = g->cd_bf16, k.bias = g->bias != NULL;
    k.align_a = alignment(g->A), k.align_b = alignment(g->B);
    /* C is D where the product has none (Matmul gets g->C ? g->C : g->D) */
    k.align_c = alignment(g->C ? g->C : g->D), k.align_d = alignment(g->D);
    k.align_bias = g->bias ? alignment(g->bias) : 0;
    if (!c->gemm && !(c->gemm = (cuda_gemm_cache *)calloc(1, sizeof *c->gemm))) {
        cuda_record(c, PT_ENOMEM, "out of host memory for cuBLASLt plans");
        return NULL;
    }
    cuda_gemm_cache *cache = c->gemm;
    for (int i = 0; i < cache->n; i++)
        if (memcmp(&cache->plans[i].key, &k, sizeof k) == 0)
            return &cache->plans[i];
    if (cache->n == cache->cap) {
        int cap = cache->cap ? 2 * cache->cap : 32;
        gemm_plan *np = (gemm_plan *)realloc(cache->plans, (size_t)cap * sizeof *np);
        if (!np) {
            cuda_record(c, PT_ENOMEM, "out of host memory for cuBLASLt plans");
            return NULL;
        }
        cache->plans = np;
        cache->cap = cap;
    }
    gemm_plan *p = &cache->plans[cache->n++];
    memset(p, 0, sizeof *p);
    p->key = k;
    if (plan_build(c, p, g))
        return NULL; /* recorded; the entry stays with ok = 0 and is freed at close */
    return p;
}

/* 0: done by cuBLASLt; 1: no algorithm (use the fallback); -1: failed. */
static int lt_gemm(cuda_impl *c, const gemm_args *g)
{
    if (c->no_cublaslt)
        return 1;
    gemm_plan *p = plan_for(c, g);
    if (!p)
        return -1;
    if (!p->ok)
        return 1;
    if (g->bias && CUBLAS_CHECK(c, PT_LT(MatmulDescSetAttribute)(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                                  &g->bias, sizeof g->bias)))
        return -1;
    const float alpha = 1.0f, beta = g->beta;
    return CUBLAS_CHECK(c, PT_LT(Matmul)(c->lt, p->desc, &alpha, g->A, p->a, g->B, p->b, &beta,
                                          g->C ? g->C : g->D, p->c, g->D, p->c, &p->algo, c->lt_ws,
                                          c->lt_ws_bytes, c->stream))
               ? -1
               : 0;
}

/* ------------------------------------------------------- fallback kernel */

/*
 * out[i, j] = beta * add[i, j] + bias[j] + sum_k A(i, k) B(k, j) for i < M,
 * j < N, in row-major terms with A(i, k) = A[i*sai + k*sak] and B(k, j) =
 * B[k*sbk + j*sbj], so strides express any transpose. 64 x 64 tiles, 16-deep
 * slices of k through shared memory; thread (ty, tx) owns rows ty + 16 a and
 * columns tx + 16 b (a, b < 4). Sums are float. add may alias out.
 */
template <typename TA, typename TB, typename TO>
__global__ void __launch_bounds__(256)
    gemm_fallback_kernel(TO *out, int ldo, const TO *add, float beta, const float *bias, const TA *A,
                         size_t sai, size_t sak, const TB *B, size_t sbk, size_t sbj, int M, int N, int K)
{
    __shared__ float As[16][64 + 1], Bs[16][64 + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int j0 = blockIdx.x * 64;
    /* row tiles in steps of gridDim.y: the grid's y is at most 65535 (M of
     * 4M rows and more takes several) */
    for (int i0 = blockIdx.y * 64; i0 < M; i0 += gridDim.y * 64) {
        float acc[4][4] = {};
        for (int k0 = 0; k0 < K; k0 += 16) {
            for (int e = threadIdx.x; e < 64 * 16; e += 256) {
                int ii = e % 64, kk = e / 64, i = i0 + ii, k = k0 + kk;
                As[kk][ii] = i < M && k < K ? to_f(A[(size_t)i * sai + (size_t)k * sak]) : 0.0f;
                int j = j0 + ii;
                Bs[kk][ii] = j < N && k < K ? to_f(B[(size_t)k * sbk + (size_t)j * sbj]) : 0.0f;
            }
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < 16; kk++) {
                float a[4], b[4];
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    a[q] = As[kk][ty + 16 * q];
                    b[q] = Bs[kk][tx + 16 * q];
                }
#pragma unroll
                for (int q = 0; q < 4; q++)
#pragma unroll
                    for (int r = 0; r < 4; r++)
                        acc[q][r] += a[q] * b[r];
            }
            __syncthreads();
        }
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                int i = i0 + ty + 16 * q, j = j0 + tx + 16 * r;
                if (i < M && j < N) {
                    size_t o = (size_t)i * ldo + j;
                    float v = acc[q][r] + (bias ? bias[j] : 0.0f);
                    if (add && beta != 0.0f)
                        v += beta * to_f(add[o]);
                    out[o] = from_f<TO>(v);
                }
            }
    }
}

template <typename TA, typename TB, typename TO>
static void gemm_fallback(cuda_impl *c, TO *out, int ldo, const TO *add, float beta, const float *bias,
                          const TA *A, size_t sai, size_t sak, const TB *B, size_t sbk, size_t sbj, int M,
                          int N, int K)
{
    const int row_tiles = (M + 63) / 64;
    dim3 grid((unsigned)((N + 63) / 64), (unsigned)(row_tiles < c->grid_y_max ? row_tiles : c->grid_y_max));
    PT_LAUNCH((gemm_fallback_kernel<TA, TB, TO>), grid, 256, 0, c->stream, out, ldo, add, beta, bias, A, sai,
              sak, B, sbk, sbj, M, N, K);
    CUDA_LAUNCHED(c, "gemm_fallback_kernel");
}

/* ------------------------------------------------------- weight staging */

__global__ void to_bf16_kernel(bf16 *dst, const float *src, size_t n, int vec)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t n8 = vec ? n / 8 : 0;
    for (size_t i = t; i < n8; i += stride) {
        float v[8];
        ld8(src + 8 * i, v);
        st8(dst + 8 * i, v);
    }
    for (size_t i = 8 * n8 + t; i < n; i += stride)
        dst[i] = __float2bfloat16_rn(src[i]);
}

/* bf16 copy of n floats in scratch slot `slot` (256-byte aligned). */
static const bf16 *as_bf16(cuda_impl *c, int slot, const float *src, size_t n)
{
    bf16 *dst = (bf16 *)cuda_scratch(c, slot, n * sizeof(bf16));
    if (!dst)
        return NULL;
    PT_LAUNCH(to_bf16_kernel, cuda_blocks(n / 8 + 1, 256), 256, 0, c->stream, dst, src, n,
              cuda_aligned(src, 16));
    return CUDA_LAUNCHED(c, "to_bf16_kernel") ? NULL : dst;
}

/* The operand cuBLASLt reads for a float32 parameter: a bf16 copy in the
 * bf16 backend; in the fp32 backend the parameter itself, or an aligned copy
 * when it is not 16-byte aligned (parameters sit at element offsets in their
 * unit's blob; misaligned operands would rule out the fast kernels). */
template <typename T>
static const void *param_operand(cuda_impl *c, int slot, const float *p, size_t n);

template <>
const void *param_operand<bf16>(cuda_impl *c, int slot, const float *p, size_t n)
{
    return as_bf16(c, slot, p, n);
}

template <>
const void *param_operand<float>(cuda_impl *c, int slot, const float *p, size_t n)
{
    if (cuda_aligned(p, 16))
        return p;
    float *dst = (float *)cuda_scratch(c, slot, n * sizeof(float));
    if (!dst ||
        CUDA_CHECK(c, cudaMemcpyAsync(dst, p, n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream)))
        return NULL;
    return dst;
}

/* ------------------------------------------------------------------ ops */

template <typename T>
static int is_bf16()
{
    return sizeof(T) == 2;
}

template <typename T>
static void op_linear_fwd(pt_backend *be, void *y, const void *x, const void *w, const void *b, int rows,
                          int out, int in, const void *add)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed || rows <= 0 || out <= 0 || in <= 0)
        return;
    gemm_args g = {1,
                   0,
                   out,
                   rows,
                   in,
                   NULL,
                   in,
                   x,
                   in,
                   add ? add : y,
                   y,
                   out,
                   is_bf16<T>(),
                   is_bf16<T>(),
                   NULL,
                   add ? 1.0f : 0.0f};
    if (!c->no_cublaslt) {
        g.A = param_operand<T>(c, SCR_GEMM_W, (const float *)w, (size_t)out * in);
        g.bias = b ? param_operand<T>(c, SCR_GEMM_BIAS, (const float *)b, (size_t)out) : NULL;
        if (!g.A || (b && !g.bias))
            return;
    }
    int rc = lt_gemm(c, &g);
    if (rc == 1) /* y[r, o] = add + b[o] + sum_i x[r, i] w[o, i] */
        gemm_fallback<T, float, T>(c, (T *)y, out, (const T *)add, add ? 1.0f : 0.0f, (const float *)b,
                                   (const T *)x, in, 1, (const float *)w, 1, in, rows, out, in);
}

template <typename T>
static void op_linear_bwd(pt_backend *be, void *dx, void *dw, void *db, const void *dy, const void *x,
                          const void *w, int rows, int out, int in)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed || rows <= 0 || out <= 0 || in <= 0)
        return;
    if (dx) {
        gemm_args g = {0,   0,    in, rows, out,          NULL,         in,   dy,
                       out, NULL, dx, in,   is_bf16<T>(), is_bf16<T>(), NULL, 0.0f};
        if (!c->no_cublaslt && !(g.A = param_operand<T>(c, SCR_GEMM_W, (const float *)w, (size_t)out * in)))
            return;
        int rc = lt_gemm(c, &g);
        if (rc == 1) /* dx[r, i] = sum_o dy[r, o] w[o, i] */
            gemm_fallback<T, float, T>(c, (T *)dx, in, NULL, 0.0f, NULL, (const T *)dy, out, 1,
                                       (const float *)w, in, 1, rows, in, out);
    }
    if (dw) {
        gemm_args g = {0, 1, in, out, rows, x, in, dy, out, dw, dw, in, is_bf16<T>(), 0, NULL, 1.0f};
        int rc = lt_gemm(c, &g);
        if (rc == 1) /* dw[o, i] += sum_r dy[r, o] x[r, i] */
            gemm_fallback<T, T, float>(c, (float *)dw, in, (const float *)dw, 1.0f, NULL, (const T *)dy, 1,
                                       out, (const T *)x, in, 1, out, in, rows);
    }
    if (db)
        cuda_colsum_add<T>(c, (float *)db, (const T *)dy, rows, out, (size_t)out);
}

void cuda_fill_gemm_ops(pt_ops *ops, int use_bf16)
{
    ops->linear_fwd = use_bf16 ? op_linear_fwd<bf16> : op_linear_fwd<float>;
    ops->linear_bwd = use_bf16 ? op_linear_bwd<bf16> : op_linear_bwd<float>;
}
