/*
 * cuda_common.h (internal to nn/, CUDA sources only): the CUDA backend's
 * state, its error discipline, and the small device helpers every kernel file
 * shares.
 *
 * Error discipline: ops return nothing, so every CUDA, cuBLASLt and launch
 * result is checked where it happens and the first failure is recorded in the
 * backend (sticky: later ones keep the first message). Once failed, ops do
 * no more work; `status` reports the failure without waiting, `sync` waits
 * for the stream and reports it.
 *
 * Ordering: all work, kernels and copies alike, goes on the backend's own
 * stream, so memory the arena hands out again after a free is only reused by
 * work queued after everything that used it before.
 *
 * Precision: act_t is float (the fp32 backend) or bf16 (the bf16 backend);
 * parameters, gradients, moments and LayerNorm statistics are float in both.
 * Every reduction accumulates in float (or double for sums reported to the
 * host).
 */
#ifndef PT_NN_CUDA_COMMON_H
#define PT_NN_CUDA_COMMON_H

#include <stdint.h>

#ifdef PT_CUDA_EMU
/* The kernels and ops compiled as plain C++ against a CPU emulation of the
 * CUDA programming model (cuda_emu.h), so tests can run them without a GPU. */
#include "nn/cuda_emu.h"
#else
#include <cuda_bf16.h>
#include <cuda_runtime.h>

/* kernel<<<grid, block, smem, stream>>>(args); kernel may be a parenthesised
 * template-id with commas. */
#define PT_LAUNCH(kernel, grid, block, smem, stream, ...)                                                    \
    do {                                                                                                     \
        auto pt_kernel_ = kernel;                                                                            \
        pt_kernel_<<<grid, block, smem, stream>>>(__VA_ARGS__);                                              \
    } while (0)
/* The block's dynamic shared memory, 128-byte aligned. */
#define PT_DYNAMIC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
/* Alignment that vector accesses need (asserted only under emulation). */
#define PT_CHECK_ALIGN(p, n) ((void)0)
#endif

#include "nn/cuda_lt.h"

extern "C" {
#include "nn/backend.h"
#include "nn/cuda_arena.h"
}

typedef __nv_bfloat16 bf16;

/* Growable per-purpose scratch buffers (device memory from the arena). Each
 * op uses its own slots, so no two live uses within one op collide. */
enum cuda_scratch_slot {
    SCR_GEMM_W,    /* bf16 copy of a weight, or an aligned copy of an fp32 one */
    SCR_GEMM_BIAS, /* the bias for the cuBLASLt epilogue */
    SCR_PARTIAL,   /* per-block partial sums of deterministic reductions */
    SCR_PARTIAL2,  /* the same, for a second reduction in one op */
    SCR_ATTN,      /* attention backward: rowsum(dO * O) per query */
    SCR_SORT,      /* token embedding backward: sorted rows and CUB's temp */
    SCR_ROWS,      /* cross-entropy per-row results */
    SCR_COUNT
};

/* Pinned host staging ring for host <-> device copies (see cuda_backend.cu). */
enum { CUDA_RING_EVENTS = 64 };
typedef struct cuda_ring {
    char *buf;
    size_t cap, head;
    struct {
        size_t start, end;
    } live[CUDA_RING_EVENTS];
    cudaEvent_t ev[CUDA_RING_EVENTS];
    int first, count; /* FIFO of live regions in live[] / ev[] */
} cuda_ring;

typedef struct cuda_gemm_cache cuda_gemm_cache;

typedef struct cuda_impl {
    pt_ops ops;
    int use_bf16;
    int device;
    int device_count; /* devices the process sees */
    char device_name[256];
    unsigned char uuid[16];
    size_t total_memory;
    int sm_count;
    size_t smem_optin;
    int grid_y_max; /* the launch grid's y limit (65535) */
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *lt_ws;
    size_t lt_ws_bytes;
    int no_cublaslt; /* PT_CUDA_GEMM=fallback: own GEMM kernel only (tests) */
    cuda_gemm_cache *gemm;
    cuda_arena arena;
    struct {
        void *p;
        size_t bytes;
    } scratch[SCR_COUNT];
    cuda_ring ring;
    void *host_result; /* pinned, 64 bytes: reductions reported to the host */
    void *dev_result;  /* device, 64 bytes */
    int failed;
    int code;
    char msg[1024];
} cuda_impl;

static inline cuda_impl *cuda_of(pt_backend *be)
{
    return (cuda_impl *)be->impl;
}
static inline const cuda_impl *cuda_of_const(const pt_backend *be)
{
    return (const cuda_impl *)be->impl;
}

/* Records the first failure (later ones are dropped). */
void cuda_record(cuda_impl *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* 0 when e is cudaSuccess; otherwise records and returns -1. */
int cuda_check_at(cuda_impl *c, cudaError_t e, const char *what, const char *file, int line);
int cublas_check_at(cuda_impl *c, cublasStatus_t s, const char *what, const char *file, int line);
#define CUDA_CHECK(c, call) cuda_check_at((c), (call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(c, call) cublas_check_at((c), (call), #call, __FILE__, __LINE__)
/* After every kernel launch. */
#define CUDA_LAUNCHED(c, name) cuda_check_at((c), cudaGetLastError(), name, __FILE__, __LINE__)

/* Scratch slot `slot` with at least `bytes`; NULL (failure recorded) when the
 * arena cannot grow it. Contents are undefined. */
void *cuda_scratch(cuda_impl *c, int slot, size_t bytes);

/* Launch geometry for elementwise kernels: enough blocks to fill the device,
 * never more than the work needs (grid-stride loops cover the rest). */
static inline unsigned cuda_blocks(size_t work, unsigned threads)
{
    size_t b = (work + threads - 1) / threads;
    if (b < 1)
        b = 1;
    if (b > 65536)
        b = 65536;
    return (unsigned)b;
}

/* Threads per block of the elementwise kernels. */
enum { CUDA_THREADS = 256 };

/* for (i = start + this thread's index; i < n; i += threads in the grid) */
#define GRID_STRIDE(i, start, n)                                                                             \
    for (size_t i = (start) + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

static inline int cuda_aligned(const void *p, size_t to)
{
    return ((uintptr_t)p % to) == 0;
}

/* Filled in by each kernel file. */
void cuda_fill_gemm_ops(pt_ops *ops, int use_bf16);
void cuda_fill_norm_ops(pt_ops *ops, int use_bf16);
void cuda_fill_misc_ops(pt_ops *ops, int use_bf16);
void cuda_fill_embed_ops(pt_ops *ops, int use_bf16);
void cuda_fill_attention_ops(pt_ops *ops, int use_bf16);
/* Device attributes the attention kernels need (dynamic shared memory above
 * 48 KiB); 0 or -1 with the failure recorded. */
int cuda_attention_setup(cuda_impl *c);
void cuda_gemm_cache_free(cuda_impl *c);

/* dst[col] += sum over rows of src[row * stride + col], deterministic (fixed
 * per-block partials summed in a fixed order); src is act_t. */
template <typename T>
void cuda_colsum_add(cuda_impl *c, float *dst, const T *src, int rows, int cols, size_t stride);
/* dst[r * dst_stride + col] (+)= src[r * src_stride + col]. */
template <typename T>
void cuda_copy_rows(cuda_impl *c, T *dst, size_t dst_stride, const T *src, size_t src_stride, int rows,
                    int cols, int accumulate);

/* A dropout site as the kernels take it (by value): the examples' ids in
 * device memory, the site's key, the threshold and the scale of a kept
 * element (see nn/dropout.h); on = 0: none. */
typedef struct cuda_drop {
    const int64_t *ids;
    uint64_t key;
    uint32_t thr;
    float keep;
    int on;
} cuda_drop;

static inline cuda_drop cuda_drop_of(const pt_dropout *d)
{
    cuda_drop c = {NULL, 0, 0, 1.0f, 0};
    if (d && d->p > 0) {
        c.ids = d->ids;
        c.key = d->key;
        c.thr = pt_dropout_threshold(d->p);
        c.keep = (float)(1.0 / (1.0 - d->p));
        c.on = 1;
    }
    return c;
}

/* ------------------------------------------------------- device helpers */
#if defined(__CUDACC__) || defined(PT_CUDA_EMU)

/* What element e of an example whose hash row is `row` is multiplied by. */
__device__ __forceinline__ float drop_mul(const cuda_drop &d, uint64_t row, uint64_t e)
{
    return pt_dropout_bits(row, e) >= d.thr ? d.keep : 0.0f;
}

#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float to_f(float x)
{
    return x;
}
__device__ __forceinline__ float to_f(bf16 x)
{
    return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x)
{
    return x;
}
template <>
__device__ __forceinline__ bf16 from_f<bf16>(float x)
{
    return __float2bfloat16_rn(x);
}

/* Eight consecutive elements at a 16-byte aligned address, as floats. */
__device__ __forceinline__ void ld8(const float *p, float v[8])
{
    PT_CHECK_ALIGN(p, 16);
    float4 a = reinterpret_cast<const float4 *>(p)[0];
    float4 b = reinterpret_cast<const float4 *>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

__device__ __forceinline__ void ld8(const bf16 *p, float v[8])
{
    PT_CHECK_ALIGN(p, 16);
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = __bfloat1622float2(h[i]);
        v[2 * i] = f.x;
        v[2 * i + 1] = f.y;
    }
}

__device__ __forceinline__ void st8(float *p, const float v[8])
{
    PT_CHECK_ALIGN(p, 16);
    reinterpret_cast<float4 *>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4 *>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

__device__ __forceinline__ void st8(bf16 *p, const float v[8])
{
    PT_CHECK_ALIGN(p, 16);
    uint4 u;
    __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++)
        h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    *reinterpret_cast<uint4 *>(p) = u;
}

/* Two consecutive elements at an address aligned to their pair. */
__device__ __forceinline__ void st2(float *p, float a, float b)
{
    PT_CHECK_ALIGN(p, 8);
    *reinterpret_cast<float2 *>(p) = make_float2(a, b);
}
__device__ __forceinline__ void st2(bf16 *p, float a, float b)
{
    PT_CHECK_ALIGN(p, 4);
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
}

/* Butterfly reductions: every lane ends with the same bits (each step adds
 * the same two values on both lanes, and addition commutes). */
__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum(double v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

#endif /* __CUDACC__ || PT_CUDA_EMU */

#endif
