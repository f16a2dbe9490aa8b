/*
 * cuda_tiles.h (internal to nn/, included by cuda_attention.cu only): the
 * building blocks of the tiled attention kernels.
 *
 * Engines compute warp-level products acc[16 x N] += A[16 x K] . B from
 * shared memory, A row-major and B either row-major [K x N] or given as its
 * transpose (row-major [N x K]); acc is stored to shared memory as float:
 *  - Wmma: bf16 tensor cores through nvcuda::wmma (float accumulators); the
 *    fragments' element layout is never assumed, only the API's semantics.
 *  - Ffma: float fused multiply-adds, no TF32.
 * Geo<E, HD, NW> is the shared-memory geometry of a block of NW warps for
 * head size HD; load_tile / store_rows16 move tiles between global and shared
 * memory with zero padding, 128-bit wide where rows allow it.
 */
#ifndef PT_NN_CUDA_TILES_H
#define PT_NN_CUDA_TILES_H

#include "nn/cuda_common.h"

#ifndef PT_CUDA_EMU
#include <mma.h>
#endif

/* ----------------------------------------------------------------- engines */

/* Tensor cores, bf16 operands: acc[16 x N] += A[16 x K] . B. */
struct Wmma {
    typedef bf16 op_t;
    static constexpr int PAD = 8; /* 16 bytes: rows of a tile start in different banks */
    template <int N>
    struct Acc {
        nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> f[N / 16];
    };
    template <int N>
    __device__ static void zero(Acc<N> &a)
    {
#pragma unroll
        for (int t = 0; t < N / 16; t++)
            nvcuda::wmma::fill_fragment(a.f[t], 0.0f);
    }
    /* A: 16 rows, row-major, leading dimension lda. B: [K x N] row-major, or
     * with BT the transpose stored row-major as [N x K] (so B(k, n) = B[n*ldb + k]). */
    template <int N, int K, bool BT>
    __device__ static void mma(Acc<N> &acc, const op_t *A, int lda, const op_t *B, int ldb)
    {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
        using namespace nvcuda;
#pragma unroll
        for (int k0 = 0; k0 < K; k0 += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
            wmma::load_matrix_sync(a, A + k0, lda);
#pragma unroll
            for (int t = 0; t < N / 16; t++) {
                if constexpr (BT) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
                    wmma::load_matrix_sync(b, B + (size_t)t * 16 * ldb + k0, ldb);
                    wmma::mma_sync(acc.f[t], a, b, acc.f[t]);
                } else {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
                    wmma::load_matrix_sync(b, B + (size_t)k0 * ldb + t * 16, ldb);
                    wmma::mma_sync(acc.f[t], a, b, acc.f[t]);
                }
            }
        }
#else
        __trap(); /* open() refuses GPUs older than sm_80 */
#endif
    }
    template <int N>
    __device__ static void store(const Acc<N> &acc, float *S, int lds)
    {
#pragma unroll
        for (int t = 0; t < N / 16; t++)
            nvcuda::wmma::store_matrix_sync(S + t * 16, acc.f[t], lds, nvcuda::wmma::mem_row_major);
    }
};

/* Float FMAs: lane l owns row l/2 of the warp's 16 and columns 8g + 4(l%2)
 * + {0..3} for g < N/8, as one float4 per g. */
struct Ffma {
    typedef float op_t;
    static constexpr int PAD = 4; /* keeps rows 16-byte aligned for float4 */
    template <int N>
    struct Acc {
        float4 v[N / 8];
    };
    template <int N>
    __device__ static void zero(Acc<N> &a)
    {
#pragma unroll
        for (int g = 0; g < N / 8; g++)
            a.v[g] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    template <int N, int K, bool BT>
    __device__ static void mma(Acc<N> &acc, const op_t *A, int lda, const op_t *B, int ldb)
    {
        const int lane = threadIdx.x & 31, r = lane >> 1, p = lane & 1;
        const float *arow = A + r * lda;
        PT_CHECK_ALIGN(arow, 16);
        PT_CHECK_ALIGN(B, 16);
        if constexpr (!BT) {
#pragma unroll 4
            for (int kk = 0; kk < K; kk++) {
                const float a = arow[kk];
                const float *brow = B + (size_t)kk * ldb + 4 * p;
#pragma unroll
                for (int g = 0; g < N / 8; g++) {
                    const float4 b = *reinterpret_cast<const float4 *>(brow + 8 * g);
                    acc.v[g].x += a * b.x;
                    acc.v[g].y += a * b.y;
                    acc.v[g].z += a * b.z;
                    acc.v[g].w += a * b.w;
                }
            }
        } else {
            for (int kk = 0; kk < K; kk += 4) {
                const float4 a = *reinterpret_cast<const float4 *>(arow + kk);
#pragma unroll
                for (int g = 0; g < N / 8; g++) {
                    const float *bc = B + (size_t)(8 * g + 4 * p) * ldb + kk;
                    const float4 b0 = *reinterpret_cast<const float4 *>(bc);
                    const float4 b1 = *reinterpret_cast<const float4 *>(bc + ldb);
                    const float4 b2 = *reinterpret_cast<const float4 *>(bc + 2 * ldb);
                    const float4 b3 = *reinterpret_cast<const float4 *>(bc + 3 * ldb);
                    acc.v[g].x += a.x * b0.x + a.y * b0.y + a.z * b0.z + a.w * b0.w;
                    acc.v[g].y += a.x * b1.x + a.y * b1.y + a.z * b1.z + a.w * b1.w;
                    acc.v[g].z += a.x * b2.x + a.y * b2.y + a.z * b2.z + a.w * b2.w;
                    acc.v[g].w += a.x * b3.x + a.y * b3.y + a.z * b3.z + a.w * b3.w;
                }
            }
        }
    }
    template <int N>
    __device__ static void store(const Acc<N> &acc, float *S, int lds)
    {
        const int lane = threadIdx.x & 31, r = lane >> 1, p = lane & 1;
        PT_CHECK_ALIGN(S + r * lds, 16);
#pragma unroll
        for (int g = 0; g < N / 8; g++)
            *reinterpret_cast<float4 *>(S + r * lds + 8 * g + 4 * p) = acc.v[g];
    }
};

/* ---------------------------------------------------------------- geometry */

static constexpr size_t align128(size_t x)
{
    return (x + 127) / 128 * 128;
}

template <class E, int HD, int NW>
struct Geo {
    typedef typename E::op_t O;
    static constexpr int BR = 16 * NW, BC = 16 * NW; /* equal: the causal tile ranges rely on it */
    static constexpr int LD = HD + E::PAD;           /* Q, K, V, dO tiles (O) */
    static constexpr int LDS = BC + 4;               /* scores and dP (float) */
    static constexpr int LDP = BC + E::PAD;          /* P and dS (O) */
    static constexpr int LDO = HD + 4;               /* output staging (float) */
    static constexpr size_t TILE = align128((size_t)BR * LD * sizeof(O));
    static constexpr size_t SBYTES = align128((size_t)BR * LDS * sizeof(float));
    static constexpr size_t PBYTES = align128((size_t)BR * LDP * sizeof(O));
    static constexpr size_t STATS = align128(2 * (size_t)BR * sizeof(float));
    static constexpr size_t FWD = 3 * TILE + SBYTES + PBYTES;
    static constexpr size_t DQ = 4 * TILE + 2 * SBYTES + PBYTES;
    static constexpr size_t DKV = 4 * TILE + 2 * SBYTES + PBYTES + STATS;
    /* the output staging reuses two operand tiles once they are no longer read */
    static_assert((size_t)BR * LDO * sizeof(float) <= 2 * TILE, "staging must fit in two tiles");
    static_assert(HD % 16 == 0 && BC % 16 == 0, "tiles are multiples of 16");
};

/* ------------------------------------------------------------ tile movement */

/* rows x HD tile into shared memory (row stride LD), from src rows of the
 * given stride: rows >= nvalid and columns >= hd become zeros. vec: hd is a
 * multiple of 8 and src rows are 16-byte aligned. */
template <typename T, typename O, int HD, int ROWS, int LD>
__device__ void load_tile(O *dst, const T *src, size_t stride, int nvalid, int hd, int vec)
{
    if (vec && sizeof(T) == 2 && sizeof(O) == 2) {
        /* bf16 to bf16: 16-byte copies, no conversion */
        constexpr int CH = HD / 8;
        for (int idx = threadIdx.x; idx < ROWS * CH; idx += blockDim.x) {
            const int r = idx / CH, col = idx % CH * 8;
            uint4 v = {0, 0, 0, 0};
            if (r < nvalid && col < hd) {
                PT_CHECK_ALIGN(src + (size_t)r * stride + col, 16);
                v = *reinterpret_cast<const uint4 *>(src + (size_t)r * stride + col);
            }
            PT_CHECK_ALIGN(dst + r * LD + col, 16);
            *reinterpret_cast<uint4 *>(dst + r * LD + col) = v;
        }
    } else if (vec) {
        constexpr int CH = HD / 8;
        for (int idx = threadIdx.x; idx < ROWS * CH; idx += blockDim.x) {
            const int r = idx / CH, col = idx % CH * 8;
            float v[8];
            if (r < nvalid && col < hd) {
                ld8(src + (size_t)r * stride + col, v);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    v[e] = 0.0f;
            }
            st8(dst + r * LD + col, v);
        }
    } else {
        for (int idx = threadIdx.x; idx < ROWS * HD; idx += blockDim.x) {
            const int r = idx / HD, col = idx % HD;
            const float v = r < nvalid && col < hd ? to_f(src[(size_t)r * stride + col]) : 0.0f;
            dst[r * LD + col] = from_f<O>(v);
        }
    }
}

/* The warp's 16 staged rows (float, stride LDO) to global rows of the given
 * stride; only rows < nvalid and columns < hd are written. */
template <typename T, int HD, int LDO>
__device__ void store_rows16(T *dst, size_t stride, const float *src, int nvalid, int hd, int vec)
{
    const int lane = threadIdx.x & 31;
    if (vec) {
        constexpr int CH = HD / 8;
        for (int idx = lane; idx < 16 * CH; idx += 32) {
            const int r = idx / CH, col = idx % CH * 8;
            if (r < nvalid && col < hd) {
                float v[8];
                ld8(src + r * LDO + col, v);
                st8(dst + (size_t)r * stride + col, v);
            }
        }
    } else {
        for (int idx = lane; idx < 16 * HD; idx += 32) {
            const int r = idx / HD, col = idx % HD;
            if (r < nvalid && col < hd)
                dst[(size_t)r * stride + col] = from_f<T>(src[r * LDO + col]);
        }
    }
}

/* S[16 x N] (float, stride lds) = A[16 x K] . B (see the engines) */
template <class E, int N, int K, bool BT>
__device__ __forceinline__ void product(float *S, int lds, const typename E::op_t *A, int lda,
                                        const typename E::op_t *B, int ldb)
{
    typename E::template Acc<N> acc;
    E::zero(acc);
    E::template mma<N, K, BT>(acc, A, lda, B, ldb);
    E::store(acc, S, lds);
}

/* Key j is visible from query i when j < L, the example's real keys (T
 * without a padding mask), and j <= i when causal. Tile rows i >= T are
 * padding and see nothing in backward; in forward they are computed (never
 * stored) and see keys < L. */
__device__ __forceinline__ bool visible(int i, int j, int L, int causal)
{
    return j < L && (!causal || j <= i);
}

#endif
