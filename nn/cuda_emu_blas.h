/*
 * cuda_emu_blas.h (internal to nn/, tests only; included by cuda_emu.h): the
 * cuBLASLt calls the CUDA backend makes, as a reference implementation of
 * their documented semantics on the CPU: column-major matrices described by
 * layouts (rows, cols, leading dimension, bf16 or float), transposes of A and
 * B, D = alpha op(A) op(B) + beta C with C and D separate or the same, and the
 * bias epilogue (one bias per row of D, of D's type). The heuristic checks
 * that the shapes agree, as the real one does, and always finds an algorithm.
 */
#ifndef PT_NN_CUDA_EMU_BLAS_H
#define PT_NN_CUDA_EMU_BLAS_H

/* --------------------------------------------------------------- cuBLASLt */

typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_SUPPORTED = 15 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType_t;
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA,
    CUBLASLT_MATMUL_DESC_TRANSB,
    CUBLASLT_MATMUL_DESC_EPILOGUE,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER
} cublasLtMatmulDescAttributes_t;
enum { CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4 };
typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES
} cublasLtMatmulPreferenceAttributes_t;

struct emu_lt_desc {
    int ta, tb;
    uint32_t epilogue;
    const void *bias;
    cublasComputeType_t compute;
};
struct emu_lt_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
typedef struct emu_lt_handle *cublasLtHandle_t;
typedef emu_lt_desc *cublasLtMatmulDesc_t;
typedef emu_lt_layout *cublasLtMatrixLayout_t;
typedef struct emu_lt_pref *cublasLtMatmulPreference_t;
typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
} cublasLtMatmulHeuristicResult_t;

static inline const char *cublasLtGetStatusString(cublasStatus_t s)
{
    return s ? "emulated failure" : "success";
}
static inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    *h = (cublasLtHandle_t)1;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t)
{
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c,
                                                      cudaDataType_t)
{
    *d = new emu_lt_desc{0, 0, CUBLASLT_EPILOGUE_DEFAULT, NULL, c};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                                            cublasLtMatmulDescAttributes_t a, const void *v,
                                                            size_t n)
{
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
        d->ta = *(const int32_t *)v == CUBLAS_OP_T;
        break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
        d->tb = *(const int32_t *)v == CUBLAS_OP_T;
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        d->epilogue = *(const uint32_t *)v;
        break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        memcpy(&d->bias, v, sizeof d->bias);
        break;
    }
    return n ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}
static inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t t,
                                                        uint64_t rows, uint64_t cols, int64_t ld)
{
    if (ld < (int64_t)rows)
        return CUBLAS_STATUS_NOT_SUPPORTED; /* the real one refuses this too */
    *l = new emu_lt_layout{t, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    *p = (cublasLtMatmulPreference_t)1;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
                                                                  cublasLtMatmulPreferenceAttributes_t,
                                                                  const void *, size_t)
{
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t)
{
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t
cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                               cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
                               cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t *res,
                               int *found)
{
    /* shapes must agree as cuBLASLt checks them */
    uint64_t m = d->ta ? a->cols : a->rows, k = d->ta ? a->rows : a->cols;
    uint64_t kb = d->tb ? b->cols : b->rows, n = d->tb ? b->rows : b->cols;
    if (k != kb || c->rows != m || c->cols != n || dd->rows != m || dd->cols != n || a->type != b->type) {
        fprintf(stderr, "cuda_emu: cuBLASLt shapes disagree: op(A) %llux%llu op(B) %llux%llu C %llux%llu\n",
                (unsigned long long)m, (unsigned long long)k, (unsigned long long)kb, (unsigned long long)n,
                (unsigned long long)c->rows, (unsigned long long)c->cols);
        abort();
    }
    memset(res, 0, sizeof *res);
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

static inline float emu_lt_get(const void *p, cudaDataType_t t, size_t i)
{
    return t == CUDA_R_16BF ? __bfloat162float(((const __nv_bfloat16 *)p)[i]) : ((const float *)p)[i];
}

static inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void *alpha,
                                            const void *A, cublasLtMatrixLayout_t a, const void *B,
                                            cublasLtMatrixLayout_t b, const void *beta, const void *C,
                                            cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t dl,
                                            const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t)
{
    const uint64_t m = dl->rows, n = dl->cols, k = d->ta ? a->rows : a->cols;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    std::vector<float> out(m * n);
    for (uint64_t j = 0; j < n; j++)
        for (uint64_t i = 0; i < m; i++) {
            double s = 0;
            for (uint64_t q = 0; q < k; q++) {
                float av =
                    d->ta ? emu_lt_get(A, a->type, q + i * a->ld) : emu_lt_get(A, a->type, i + q * a->ld);
                float bv =
                    d->tb ? emu_lt_get(B, b->type, j + q * b->ld) : emu_lt_get(B, b->type, q + j * b->ld);
                s += (double)av * bv;
            }
            float v = al * (float)s;
            if (be != 0.0f)
                v += be * emu_lt_get(C, c->type, i + j * c->ld);
            if (d->epilogue == CUBLASLT_EPILOGUE_BIAS)
                v += emu_lt_get(d->bias, dl->type, i);
            out[i + j * m] = v;
        }
    for (uint64_t j = 0; j < n; j++)
        for (uint64_t i = 0; i < m; i++) {
            if (dl->type == CUDA_R_16BF)
                ((__nv_bfloat16 *)D)[i + j * dl->ld] = __float2bfloat16_rn(out[i + j * m]);
            else
                ((float *)D)[i + j * dl->ld] = out[i + j * m];
        }
    return CUBLAS_STATUS_SUCCESS;
}

#endif
