/*
 * cuda_attention.cu: tiled ("flash") multi-head attention, forward and
 * backward, in memory linear in T: no [T, T] matrix is ever stored.
 *
 * Layout: qkv [n, T, 3, H, hd] (row stride 3d, d = H*hd), out and dout
 * [n, T, d]. What forward keeps for backward (the op's `probs` buffer,
 * attention_saved_bytes long) is one float per query row: the log-sum-exp of
 * its scaled scores, in base 2, lse[(b*H + h)*T + i].
 *
 * Tiles: a block of NW warps takes BR = 16*NW query rows (or BC = BR key rows
 * in the dK/dV kernel) of one (example, head); each warp owns 16 of those rows
 * for the whole kernel, so the softmax and every elementwise step touch only
 * the warp's own rows and need __syncwarp, not __syncthreads. Operand tiles
 * (Q, K, V, dO) live in shared memory, zero-padded past T and past hd up to
 * the instantiated head size HD (16, 32, 64 or 128), so any T and any
 * hd <= 128 work and padding adds nothing to any dot product. Masked scores
 * (causal j > i, or j >= L) become exact zeros after the exponential.
 *
 * Padding mask (lens, BERT): example b has L = lens[b] real keys (clamped to
 * [1, T] as the CPU backend does; L = T without a mask). Key and value tiles
 * are loaded as zeros from row L on, so padded positions are never read as
 * keys or values; the forward and dQ kernels stop their key loops at the
 * tile holding key L - 1 (whole tiles past it are skipped) and mask the
 * columns j >= L inside it, so each row's max, sum and log-sum-exp run over
 * its real keys only; padded query rows i >= L are computed like any other
 * (they attend to the real keys). A dK/dV block whose key tile starts at or
 * past L runs no query tile at all, and every block writes its key rows j >= L
 * as exact zeros (set in the staging, not left to arithmetic on zeros).
 *
 * Products are warp-level 16 x N tiles through one of two engines:
 *  - Wmma (bf16 backend): bf16 tensor cores through nvcuda::wmma, float
 *    accumulators; P and dS are rounded to bf16 before their products, as in
 *    FlashAttention-2.
 *  - Ffma (fp32 backend): float fused multiply-adds, no TF32, so results match
 *    the CPU backend to float rounding.
 *
 * Forward (per query tile): pass 1 runs over key tiles keeping the row max m
 * and sum l online; pass 2 recomputes the scores, forms P = exp2(s - lse)
 * exactly (no rescaling of the output accumulator is ever needed, so it stays
 * in registers), and accumulates O = P V.
 *
 * Backward, deterministically (no atomics), in three kernels:
 *  - delta kernel (a warp per query row and head): D_i = rowsum(dO_i * O_i)
 *    from the forward's saved output O, in float;
 *  - dQ kernel (per query tile): forms dS = P (dP - D) with dP = dO V^T and
 *    accumulates dQ = scale dS K.
 *  - dK/dV kernel (per key tile): works on transposed tiles S^T = K Q^T so
 *    its warps own key rows; accumulates dV = P^T dO and dK = scale dS^T Q over
 *    the query tiles (only those at or after the key tile when causal).
 * Work per block grows with the tile index when causal; blocks are numbered
 * so the longest start first.
 *
 * Dropout on the probabilities (BERT's attention dropout, cuda_drop): every
 * place that forms P multiplies it by the mask element of (query i, key j),
 * e = (h T + i) T + j, made from its hash where it is needed (nothing is
 * stored): the forward's O = (P M) V (so D, from the saved O, is rowsum(dO * O)
 * of the dropped output); the dQ kernel's dS = P (dP M - D); the dK/dV
 * kernel's dV = (P M)^T dO and the same dS.
 */
#include "nn/cuda_tiles.h"

#define LOG2E 1.4426950408889634f

#ifndef PT_CUDA_ARCHS
#define PT_CUDA_ARCHS "(unknown)"
#endif

/* A score in log2 units, s * sl2 rounded once (__fmul_rn is never fused
 * into an add): a row's max, its sum and both passes, forward and backward,
 * must see the same value. Written s * sl2 - ref, the compiler contracts it
 * into one fused multiply-add (nvcc's default, the emulation's
 * -ffp-contract=fast), which subtracts from the exact product, while the max
 * took the rounded one: the top key then weighed 2^e, e the product's
 * rounding error, which the row's log-sum-exp m + log2(l), rounded to m's
 * ulp, cannot take back. The probabilities no longer summed to 1: a
 * one-hot row's output was off by 0.03% where s * sl2 is about 1e4, 40%
 * about 1e7, a factor 5e4 about 3e8 (test_cuda_ops'
 * attention_offset_scores). */
__device__ __forceinline__ float log2_score(float s, float sl2)
{
    return __fmul_rn(s, sl2);
}

/* Example b's real keys: lens[b] clamped to [1, T], as the CPU backend's
 * key_count, or T without a mask. Every thread reads the same value. */
__device__ __forceinline__ int key_count(const int32_t *lens, int b, int Tn)
{
    if (!lens)
        return Tn;
    const int L = lens[b];
    return L < 1 ? 1 : L > Tn ? Tn : L;
}

/* Rows first.. of the warp's 16 staged rows (float, stride LDO) become zeros. */
template <int HD, int LDO>
__device__ void zero_rows16(float *s, int first)
{
    const int lane = threadIdx.x & 31;
    for (int idx = lane; idx < 16 * HD; idx += 32) {
        const int r = idx / HD;
        if (r >= first)
            s[r * LDO + idx % HD] = 0.0f;
    }
}

/* ------------------------------------------------------------------ forward */

template <class E, typename T, int HD, int NW>
__global__ void __launch_bounds__(NW * 32)
    attn_fwd_kernel(T *out, float *lse, const T *qkv, const int32_t *lens, int Tn, int H, int hd, int causal,
                    float sl2, int vec, cuda_drop dr)
{
    typedef Geo<E, HD, NW> G;
    typedef typename E::op_t O;
    PT_DYNAMIC_SMEM(smem);
    O *sQ = (O *)smem, *sK = (O *)(smem + G::TILE), *sV = (O *)(smem + 2 * G::TILE);
    float *sS = (float *)(smem + 3 * G::TILE);
    O *sP = (O *)(smem + 3 * G::TILE + G::SBYTES);
    float *sO = (float *)(smem + G::TILE); /* over sK and sV after the last tile */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, p = lane & 1;
    const int nq = (Tn + G::BR - 1) / G::BR, qb = nq - 1 - (int)blockIdx.y;
    const int bh = blockIdx.x, b = bh / H, h = bh % H, d = H * hd;
    const size_t stride = 3 * (size_t)d;
    const T *base = qkv + (size_t)b * Tn * stride + (size_t)h * hd;
    const int q0 = qb * G::BR, w0 = warp * 16, i = q0 + w0 + r;
    const int L = key_count(lens, b, Tn); /* keys j >= L are masked */
    const int nk = min(causal ? qb + 1 : (Tn + G::BC - 1) / G::BC, (L + G::BC - 1) / G::BC);
    const float *srow = sS + (w0 + r) * G::LDS;
    /* dropout: the example's hash row and this row's element of key 0 */
    const uint64_t drow = dr.on ? pt_dropout_row(dr.key, dr.ids[b]) : 0;
    const uint64_t e_i = ((uint64_t)h * Tn + (uint64_t)i) * Tn;

    load_tile<T, O, HD, G::BR, G::LD>(sQ, base + (size_t)q0 * stride, stride, Tn - q0, hd, vec);

    /* pass 1: row max m and sum l of exp2(s - m), online over key tiles */
    float m = -INFINITY, l = 0.0f;
    for (int kb = 0; kb < nk; kb++) {
        const int k0 = kb * G::BC;
        __syncthreads(); /* the previous tile's readers are done */
        load_tile<T, O, HD, G::BC, G::LD>(sK, base + d + (size_t)k0 * stride, stride, L - k0, hd, vec);
        __syncthreads();
        product<E, G::BC, HD, true>(sS + w0 * G::LDS, G::LDS, sQ + w0 * G::LD, G::LD, sK, G::LD);
        __syncwarp();
        float bm = -INFINITY;
        for (int t = 0; t < G::BC / 4; t++) {
            const int col = 4 * t + 2 * p;
            PT_CHECK_ALIGN(srow + col, 8);
            const float2 s = *reinterpret_cast<const float2 *>(srow + col);
            if (visible(i, k0 + col, L, causal))
                bm = fmaxf(bm, log2_score(s.x, sl2));
            if (visible(i, k0 + col + 1, L, causal))
                bm = fmaxf(bm, log2_score(s.y, sl2));
        }
        bm = fmaxf(bm, __shfl_xor_sync(FULL_MASK, bm, 1));
        const float mn = fmaxf(m, bm), ref = mn == -INFINITY ? 0.0f : mn;
        float sum = 0.0f;
        for (int t = 0; t < G::BC / 4; t++) {
            const int col = 4 * t + 2 * p;
            const float2 s = *reinterpret_cast<const float2 *>(srow + col);
            if (visible(i, k0 + col, L, causal))
                sum += exp2f(log2_score(s.x, sl2) - ref);
            if (visible(i, k0 + col + 1, L, causal))
                sum += exp2f(log2_score(s.y, sl2) - ref);
        }
        sum += __shfl_xor_sync(FULL_MASK, sum, 1);
        l = l * exp2f(m - ref) + sum;
        m = mn;
    }
    const float lse2 = m + log2f(l);

    /* pass 2: O = sum over key tiles of exp2(s - lse) V */
    typename E::template Acc<HD> o;
    E::zero(o);
    for (int kb = 0; kb < nk; kb++) {
        const int k0 = kb * G::BC;
        __syncthreads();
        load_tile<T, O, HD, G::BC, G::LD>(sK, base + d + (size_t)k0 * stride, stride, L - k0, hd, vec);
        load_tile<T, O, HD, G::BC, G::LD>(sV, base + 2 * d + (size_t)k0 * stride, stride, L - k0, hd, vec);
        __syncthreads();
        product<E, G::BC, HD, true>(sS + w0 * G::LDS, G::LDS, sQ + w0 * G::LD, G::LD, sK, G::LD);
        __syncwarp();
        O *prow = sP + (w0 + r) * G::LDP;
        for (int t = 0; t < G::BC / 4; t++) {
            const int col = 4 * t + 2 * p;
            const float2 s = *reinterpret_cast<const float2 *>(srow + col);
            float p0 = visible(i, k0 + col, L, causal) ? exp2f(log2_score(s.x, sl2) - lse2) : 0.0f;
            float p1 = visible(i, k0 + col + 1, L, causal) ? exp2f(log2_score(s.y, sl2) - lse2) : 0.0f;
            if (dr.on) {
                p0 *= drop_mul(dr, drow, e_i + k0 + col);
                p1 *= drop_mul(dr, drow, e_i + k0 + col + 1);
            }
            st2(prow + col, p0, p1);
        }
        __syncwarp();
        E::template mma<HD, G::BC, false>(o, sP + w0 * G::LDP, G::LDP, sV, G::LD);
    }
    __syncthreads(); /* every warp is done with sK and sV: the staging may overwrite them */
    E::store(o, sO + w0 * G::LDO, G::LDO);
    __syncwarp();
    store_rows16<T, HD, G::LDO>(out + ((size_t)b * Tn + q0 + w0) * d + (size_t)h * hd, d, sO + w0 * G::LDO,
                                Tn - q0 - w0, hd, vec);
    if (p == 0 && i < Tn)
        lse[(size_t)bh * Tn + i] = lse2;
}

/* --------------------------------------------------------- backward: delta */

/* D[(b H + h) T + i] = sum over c < hd of dout * out at row (b, i), head h: a
 * warp per (example, head, query row), lanes over the head's columns, summed
 * lane by lane and then across the warp in a fixed order. */
template <typename T>
__global__ void __launch_bounds__(256)
    attn_delta_kernel(float *Dg, const T *dout, const T *out, int n, int Tn, int H, int hd)
{
    const int lane = threadIdx.x & 31;
    const size_t row = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); /* (b H + h) T + i */
    if (row >= (size_t)n * H * Tn)
        return;
    const int i = (int)(row % Tn), bh = (int)(row / Tn), b = bh / H, h = bh % H;
    const size_t at = ((size_t)b * Tn + i) * (size_t)H * hd + (size_t)h * hd;
    float s = 0.0f;
    for (int col = lane; col < hd; col += 32)
        s += to_f(dout[at + col]) * to_f(out[at + col]);
    for (int off = 16; off > 0; off >>= 1)
        s += __shfl_xor_sync(FULL_MASK, s, off);
    if (lane == 0)
        Dg[row] = s;
}

/* ------------------------------------------------------------ backward: dQ */

template <class E, typename T, int HD, int NW>
__global__ void __launch_bounds__(NW * 32)
    attn_dq_kernel(T *dqkv, const float *Dg, const T *dout, const T *qkv, const float *lse, const int32_t *lens,
                   int Tn, int H, int hd, int causal, float sl2, float scale, int vec, cuda_drop dr)
{
    typedef Geo<E, HD, NW> G;
    typedef typename E::op_t O;
    PT_DYNAMIC_SMEM(smem);
    O *sQ = (O *)smem, *sdO = (O *)(smem + G::TILE);
    O *sK = (O *)(smem + 2 * G::TILE), *sV = (O *)(smem + 3 * G::TILE);
    float *sS = (float *)(smem + 4 * G::TILE), *sdP = (float *)(smem + 4 * G::TILE + G::SBYTES);
    O *sP = (O *)(smem + 4 * G::TILE + 2 * G::SBYTES);
    float *sO = (float *)(smem + 2 * G::TILE); /* over sK and sV after the last tile */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, p = lane & 1;
    const int nq = (Tn + G::BR - 1) / G::BR, qb = nq - 1 - (int)blockIdx.y;
    const int bh = blockIdx.x, b = bh / H, h = bh % H, d = H * hd;
    const size_t stride = 3 * (size_t)d;
    const T *base = qkv + (size_t)b * Tn * stride + (size_t)h * hd;
    const T *gbase = dout + (size_t)b * Tn * d + (size_t)h * hd;
    const int q0 = qb * G::BR, w0 = warp * 16, i = q0 + w0 + r;
    const int L = key_count(lens, b, Tn);
    const int nk = min(causal ? qb + 1 : (Tn + G::BC - 1) / G::BC, (L + G::BC - 1) / G::BC);
    const float lse2 = i < Tn ? lse[(size_t)bh * Tn + i] : INFINITY;
    const float *srow = sS + (w0 + r) * G::LDS, *dprow = sdP + (w0 + r) * G::LDS;
    O *prow = sP + (w0 + r) * G::LDP;
    const uint64_t drow = dr.on ? pt_dropout_row(dr.key, dr.ids[b]) : 0;
    const uint64_t e_i = ((uint64_t)h * Tn + (uint64_t)i) * Tn;

    load_tile<T, O, HD, G::BR, G::LD>(sQ, base + (size_t)q0 * stride, stride, Tn - q0, hd, vec);
    load_tile<T, O, HD, G::BR, G::LD>(sdO, gbase + (size_t)q0 * d, d, Tn - q0, hd, vec);

    const float D = i < Tn ? Dg[(size_t)bh * Tn + i] : 0.0f; /* rowsum(dO * O), the delta kernel's */

    /* dS = P (dP - D) scale, dQ = dS K (dropout: dP is dO V^T times M) */
    typename E::template Acc<HD> acc;
    E::zero(acc);
    for (int kb = 0; kb < nk; kb++) {
        const int k0 = kb * G::BC;
        __syncthreads(); /* the previous tile is no longer read */
        load_tile<T, O, HD, G::BC, G::LD>(sK, base + d + (size_t)k0 * stride, stride, L - k0, hd, vec);
        load_tile<T, O, HD, G::BC, G::LD>(sV, base + 2 * d + (size_t)k0 * stride, stride, L - k0, hd, vec);
        __syncthreads();
        product<E, G::BC, HD, true>(sS + w0 * G::LDS, G::LDS, sQ + w0 * G::LD, G::LD, sK, G::LD);
        product<E, G::BC, HD, true>(sdP + w0 * G::LDS, G::LDS, sdO + w0 * G::LD, G::LD, sV, G::LD);
        __syncwarp();
        for (int t = 0; t < G::BC / 4; t++) {
            const int col = 4 * t + 2 * p;
            const float2 s = *reinterpret_cast<const float2 *>(srow + col);
            const float2 dp = *reinterpret_cast<const float2 *>(dprow + col);
            const float p0 =
                i < Tn && visible(i, k0 + col, L, causal) ? exp2f(log2_score(s.x, sl2) - lse2) : 0.0f;
            const float p1 =
                i < Tn && visible(i, k0 + col + 1, L, causal) ? exp2f(log2_score(s.y, sl2) - lse2) : 0.0f;
            const float m0 = dr.on ? drop_mul(dr, drow, e_i + k0 + col) : 1.0f;
            const float m1 = dr.on ? drop_mul(dr, drow, e_i + k0 + col + 1) : 1.0f;
            st2(prow + col, p0 * (dp.x * m0 - D) * scale, p1 * (dp.y * m1 - D) * scale);
        }
        __syncwarp();
        E::template mma<HD, G::BC, false>(acc, sP + w0 * G::LDP, G::LDP, sK, G::LD);
    }
    __syncthreads();
    E::store(acc, sO + w0 * G::LDO, G::LDO);
    __syncwarp();
    store_rows16<T, HD, G::LDO>(dqkv + ((size_t)b * Tn + q0 + w0) * stride + (size_t)h * hd, stride,
                                sO + w0 * G::LDO, Tn - q0 - w0, hd, vec);
}

/* --------------------------------------------------------- backward: dK, dV */

template <class E, typename T, int HD, int NW>
__global__ void __launch_bounds__(NW * 32)
    attn_dkv_kernel(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dg,
                    const int32_t *lens, int Tn, int H, int hd, int causal, float sl2, float scale, int vec,
                    cuda_drop dr)
{
    typedef Geo<E, HD, NW> G;
    typedef typename E::op_t O;
    PT_DYNAMIC_SMEM(smem);
    O *sK = (O *)smem, *sV = (O *)(smem + G::TILE);
    O *sQ = (O *)(smem + 2 * G::TILE), *sdO = (O *)(smem + 3 * G::TILE);
    float *sS = (float *)(smem + 4 * G::TILE), *sdP = (float *)(smem + 4 * G::TILE + G::SBYTES);
    O *sP = (O *)(smem + 4 * G::TILE + 2 * G::SBYTES);
    float *sL = (float *)(smem + 4 * G::TILE + 2 * G::SBYTES + G::PBYTES), *sD = sL + G::BR;
    float *sO = (float *)(smem + 2 * G::TILE); /* over sQ and sdO after the last tile */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, p = lane & 1;
    const int nq = (Tn + G::BR - 1) / G::BR, kb = (int)blockIdx.y;
    const int bh = blockIdx.x, b = bh / H, h = bh % H, d = H * hd;
    const size_t stride = 3 * (size_t)d;
    const T *base = qkv + (size_t)b * Tn * stride + (size_t)h * hd;
    const T *gbase = dout + (size_t)b * Tn * d + (size_t)h * hd;
    const int k0 = kb * G::BC, w0 = warp * 16, j = k0 + w0 + r; /* this lane pair's key */
    const int L = key_count(lens, b, Tn);
    /* a tile of padded keys only: no query tile to run, its rows are written as zeros */
    const int qfirst = causal ? kb : 0, qend = k0 < L ? nq : qfirst;
    const float *srow = sS + (w0 + r) * G::LDS, *dprow = sdP + (w0 + r) * G::LDS;
    O *prow = sP + (w0 + r) * G::LDP;
    /* dropout: element (query ii, key j) is e_h + ii T + j */
    const uint64_t drow = dr.on ? pt_dropout_row(dr.key, dr.ids[b]) : 0;
    const uint64_t e_h = (uint64_t)h * Tn * Tn + (uint64_t)j;

    load_tile<T, O, HD, G::BC, G::LD>(sK, base + d + (size_t)k0 * stride, stride, L - k0, hd, vec);
    load_tile<T, O, HD, G::BC, G::LD>(sV, base + 2 * d + (size_t)k0 * stride, stride, L - k0, hd, vec);

    typename E::template Acc<HD> dk, dv;
    E::zero(dk);
    E::zero(dv);
    for (int qb = qfirst; qb < qend; qb++) {
        const int q0 = qb * G::BR;
        __syncthreads();
        load_tile<T, O, HD, G::BR, G::LD>(sQ, base + (size_t)q0 * stride, stride, Tn - q0, hd, vec);
        load_tile<T, O, HD, G::BR, G::LD>(sdO, gbase + (size_t)q0 * d, d, Tn - q0, hd, vec);
        for (int idx = threadIdx.x; idx < G::BR; idx += blockDim.x) {
            const int ii = q0 + idx;
            sL[idx] = ii < Tn ? lse[(size_t)bh * Tn + ii] : INFINITY;
            sD[idx] = ii < Tn ? Dg[(size_t)bh * Tn + ii] : 0.0f;
        }
        __syncthreads();
        /* transposed tiles: rows are this warp's keys, columns the tile's queries */
        product<E, G::BR, HD, true>(sS + w0 * G::LDS, G::LDS, sK + w0 * G::LD, G::LD, sQ, G::LD);
        product<E, G::BR, HD, true>(sdP + w0 * G::LDS, G::LDS, sV + w0 * G::LD, G::LD, sdO, G::LD);
        __syncwarp();
        for (int t = 0; t < G::BR / 4; t++) {
            const int col = 4 * t + 2 * p, ii = q0 + col;
            const float2 s = *reinterpret_cast<const float2 *>(srow + col);
            float p0 = ii < Tn && visible(ii, j, L, causal) ? exp2f(log2_score(s.x, sl2) - sL[col]) : 0.0f;
            float p1 =
                ii + 1 < Tn && visible(ii + 1, j, L, causal) ? exp2f(log2_score(s.y, sl2) - sL[col + 1]) : 0.0f;
            if (dr.on) {
                p0 *= drop_mul(dr, drow, e_h + (uint64_t)ii * Tn);
                p1 *= drop_mul(dr, drow, e_h + (uint64_t)(ii + 1) * Tn);
            }
            st2(prow + col, p0, p1);
        }
        __syncwarp();
        E::template mma<HD, G::BR, false>(dv, sP + w0 * G::LDP, G::LDP, sdO, G::LD);
        __syncwarp(); /* P^T is read; dS^T replaces it */
        for (int t = 0; t < G::BR / 4; t++) {
            const int col = 4 * t + 2 * p, ii = q0 + col;
            const float2 s = *reinterpret_cast<const float2 *>(srow + col);
            const float2 dp = *reinterpret_cast<const float2 *>(dprow + col);
            const float p0 = ii < Tn && visible(ii, j, L, causal) ? exp2f(log2_score(s.x, sl2) - sL[col]) : 0.0f;
            const float p1 =
                ii + 1 < Tn && visible(ii + 1, j, L, causal) ? exp2f(log2_score(s.y, sl2) - sL[col + 1]) : 0.0f;
            const float m0 = dr.on ? drop_mul(dr, drow, e_h + (uint64_t)ii * Tn) : 1.0f;
            const float m1 = dr.on ? drop_mul(dr, drow, e_h + (uint64_t)(ii + 1) * Tn) : 1.0f;
            st2(prow + col, p0 * (dp.x * m0 - sD[col]) * scale, p1 * (dp.y * m1 - sD[col + 1]) * scale);
        }
        __syncwarp();
        E::template mma<HD, G::BR, false>(dk, sP + w0 * G::LDP, G::LDP, sQ, G::LD);
    }
    __syncthreads();
    T *dst = dqkv + ((size_t)b * Tn + k0 + w0) * stride + (size_t)h * hd;
    const int real = L - k0 - w0; /* the warp's rows from this one on are padded keys */
    E::store(dk, sO + w0 * G::LDO, G::LDO);
    __syncwarp();
    if (real < 16)
        zero_rows16<HD, G::LDO>(sO + w0 * G::LDO, real);
    __syncwarp();
    store_rows16<T, HD, G::LDO>(dst + d, stride, sO + w0 * G::LDO, Tn - k0 - w0, hd, vec);
    __syncwarp();
    E::store(dv, sO + w0 * G::LDO, G::LDO);
    __syncwarp();
    if (real < 16)
        zero_rows16<HD, G::LDO>(sO + w0 * G::LDO, real);
    __syncwarp();
    store_rows16<T, HD, G::LDO>(dst + 2 * d, stride, sO + w0 * G::LDO, Tn - k0 - w0, hd, vec);
}

/* ------------------------------------------------------------------- host */

/* Sets the dynamic shared memory limit of one instantiation's kernels; the
 * first call on a GPU without code for it fails here, at open. */
template <class E, typename T, int HD, int NW>
static int setup_one(cuda_impl *c)
{
    typedef Geo<E, HD, NW> G;
    const size_t need[3] = {G::FWD, G::DQ, G::DKV};
    const void *fn[3] = {(const void *)attn_fwd_kernel<E, T, HD, NW>,
                         (const void *)attn_dq_kernel<E, T, HD, NW>,
                         (const void *)attn_dkv_kernel<E, T, HD, NW>};
    for (int k = 0; k < 3; k++) {
        if (need[k] > c->smem_optin)
            continue; /* refused with a message if ever launched */
        cudaError_t e =
            cudaFuncSetAttribute(fn[k], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need[k]);
        if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction ||
            e == cudaErrorUnsupportedPtxVersion) {
            (void)cudaGetLastError();
            cuda_record(c, PT_EBACKEND,
                        "this pipetrain has no GPU code for %s (%s; built for CUDA architectures %s): "
                        "rebuild with -DCMAKE_CUDA_ARCHITECTURES set for this GPU",
                        c->device_name, cudaGetErrorString(e), PT_CUDA_ARCHS);
            return -1;
        }
        if (CUDA_CHECK(c, e))
            return -1;
    }
    return 0;
}

int cuda_attention_setup(cuda_impl *c)
{
    return setup_one<Ffma, float, 16, 4>(c) || setup_one<Ffma, float, 32, 4>(c) ||
                   setup_one<Ffma, float, 64, 4>(c) || setup_one<Ffma, float, 128, 2>(c) ||
                   setup_one<Wmma, bf16, 16, 4>(c) || setup_one<Wmma, bf16, 32, 4>(c) ||
                   setup_one<Wmma, bf16, 64, 4>(c) || setup_one<Wmma, bf16, 128, 4>(c)
               ? -1
               : 0;
}

typedef struct attn_call {
    void *out;       /* forward: out; backward: dqkv */
    const void *qkv; /* both */
    const void *dout;
    const void *fwd_out; /* backward: the forward's out */
    float *lse;
    float *D;
    const int32_t *lens; /* NULL: no padding mask */
    int n, T, H, hd, causal, backward;
    cuda_drop drop;      /* on the probabilities; .on = 0: none */
} attn_call;

template <class E, typename T, int HD, int NW>
static void run(cuda_impl *c, const attn_call *a)
{
    typedef Geo<E, HD, NW> G;
    const size_t need = a->backward ? (G::DQ > G::DKV ? G::DQ : G::DKV) : G::FWD;
    if (need > c->smem_optin) {
        cuda_record(c, PT_EBACKEND,
                    "attention with head size %d needs %zu bytes of shared memory per block; %s allows %zu",
                    a->hd, need, c->device_name, c->smem_optin);
        return;
    }
    const int tiles = (a->T + G::BR - 1) / G::BR;
    const float scale = 1.0f / sqrtf((float)a->hd), sl2 = scale * LOG2E;
    /* 128-bit moves: whole groups of 8 elements in every row, aligned bases */
    const int vec = a->hd % 8 == 0 && cuda_aligned(a->qkv, 16) && cuda_aligned(a->out, 16) &&
                    (!a->dout || cuda_aligned(a->dout, 16));
    const dim3 grid((unsigned)(a->n * a->H), (unsigned)tiles);
    if (!a->backward) {
        PT_LAUNCH((attn_fwd_kernel<E, T, HD, NW>), grid, NW * 32, G::FWD, c->stream, (T *)a->out, a->lse,
                  (const T *)a->qkv, a->lens, a->T, a->H, a->hd, a->causal, sl2, vec, a->drop);
        CUDA_LAUNCHED(c, "attn_fwd_kernel");
        return;
    }
    const size_t rows = (size_t)a->n * a->H * a->T;
    PT_LAUNCH((attn_delta_kernel<T>), dim3((unsigned)((rows + 7) / 8)), 256, 0, c->stream, a->D,
              (const T *)a->dout, (const T *)a->fwd_out, a->n, a->T, a->H, a->hd);
    if (CUDA_LAUNCHED(c, "attn_delta_kernel"))
        return;
    PT_LAUNCH((attn_dq_kernel<E, T, HD, NW>), grid, NW * 32, G::DQ, c->stream, (T *)a->out, a->D,
              (const T *)a->dout, (const T *)a->qkv, a->lse, a->lens, a->T, a->H, a->hd, a->causal, sl2, scale,
              vec, a->drop);
    if (CUDA_LAUNCHED(c, "attn_dq_kernel"))
        return;
    PT_LAUNCH((attn_dkv_kernel<E, T, HD, NW>), grid, NW * 32, G::DKV, c->stream, (T *)a->out,
              (const T *)a->dout, (const T *)a->qkv, a->lse, a->D, a->lens, a->T, a->H, a->hd, a->causal, sl2,
              scale, vec, a->drop);
    CUDA_LAUNCHED(c, "attn_dkv_kernel");
}

/* The instantiation for a head size: the smallest HD >= hd. */
template <typename T>
static void dispatch(cuda_impl *c, const attn_call *a);

template <>
void dispatch<float>(cuda_impl *c, const attn_call *a)
{
    if (a->hd <= 16)
        run<Ffma, float, 16, 4>(c, a);
    else if (a->hd <= 32)
        run<Ffma, float, 32, 4>(c, a);
    else if (a->hd <= 64)
        run<Ffma, float, 64, 4>(c, a);
    else
        run<Ffma, float, 128, 2>(c, a);
}

template <>
void dispatch<bf16>(cuda_impl *c, const attn_call *a)
{
    if (a->hd <= 16)
        run<Wmma, bf16, 16, 4>(c, a);
    else if (a->hd <= 32)
        run<Wmma, bf16, 32, 4>(c, a);
    else if (a->hd <= 64)
        run<Wmma, bf16, 64, 4>(c, a);
    else
        run<Wmma, bf16, 128, 4>(c, a);
}

static int check_shape(cuda_impl *c, int n, int T, int H, int hd)
{
    if (c->failed || n <= 0 || T <= 0 || H <= 0 || hd <= 0)
        return -1;
    if (hd > 128) {
        cuda_record(c, PT_EBACKEND, "attention head size %d: the CUDA backend supports up to 128", hd);
        return -1;
    }
    if ((size_t)n * H > 0x7fffffffu || (T + 15) / 16 > 65535) {
        cuda_record(c, PT_EBACKEND, "attention of %d x %d heads over %d tokens is too large for one launch",
                    n, H, T);
        return -1;
    }
    return 0;
}

template <typename T>
static void op_attention_fwd(pt_backend *be, void *out, void *probs, const void *qkv, int n, int Tn, int H,
                             int hd, int causal, const int32_t *lens, const pt_dropout *drop)
{
    cuda_impl *c = cuda_of(be);
    if (check_shape(c, n, Tn, H, hd))
        return;
    attn_call a = {out, qkv, NULL, NULL, (float *)probs, NULL, lens, n, Tn, H, hd, causal, 0, cuda_drop_of(drop)};
    dispatch<T>(c, &a);
}

template <typename T>
static void op_attention_bwd(pt_backend *be, void *dqkv, const void *dout, const void *qkv, const void *probs,
                             const void *out, int n, int Tn, int H, int hd, int causal, const int32_t *lens,
                             const pt_dropout *drop)
{
    cuda_impl *c = cuda_of(be);
    if (check_shape(c, n, Tn, H, hd))
        return;
    float *D = (float *)cuda_scratch(c, SCR_ATTN, (size_t)n * H * Tn * sizeof(float));
    if (!D)
        return;
    attn_call a = {dqkv, qkv, dout, out, (float *)probs, D, lens, n, Tn, H, hd, causal, 1, cuda_drop_of(drop)};
    dispatch<T>(c, &a);
}

void cuda_fill_attention_ops(pt_ops *ops, int use_bf16)
{
    ops->attention_fwd = use_bf16 ? op_attention_fwd<bf16> : op_attention_fwd<float>;
    ops->attention_bwd = use_bf16 ? op_attention_bwd<bf16> : op_attention_bwd<float>;
}
