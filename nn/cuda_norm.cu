/*
 * cuda_norm.cu: LayerNorm forward and backward on the GPU, one warp per row.
 *
 * Forward: mean, then the variance from (x - mean)^2 (two passes, as the CPU
 * does, so the variance does not cancel), then y; mean and rstd are saved as
 * float32 whatever the activation type. Rows are re-read from L1 rather than
 * held in registers, so any width works.
 *
 * Backward, deterministically: dx needs only its own row, but dw and db sum
 * over rows. Each block takes a fixed range of rows; each warp of the block
 * takes every nw-th row of the range and accumulates dy * xhat and dy into
 * its own private float slice (a lane always owns the same columns, so no
 * two threads ever touch one accumulator). The block then adds its warps'
 * slices in warp order into one partial per block, and a second kernel adds
 * the partials in block order into dw and db. The block count depends only
 * on the shape, so the summation order, hence every bit, is fixed. Slices
 * live in shared memory when they fit, in scratch global memory otherwise.
 *
 * Vector path: when the width is a multiple of 8 and every pointer is 16-byte
 * aligned, each lane moves 8 elements per 128-bit access (bf16) or two.
 */
#include "nn/cuda_common.h"


enum { LN_THREADS = 256, LN_MAX_BLOCKS = 256, LN_SMEM_LIMIT = 48 * 1024 };

/* Calls body(i, v) for each element i of a row that this lane owns, with v
 * the element of `row` as a float; the same lane owns the same i in every row. */
template <typename T, bool VEC, typename F>
__device__ __forceinline__ void for_row(const T *row, int dim, int lane, F body)
{
    if (VEC) {
        for (int j = lane * 8; j < dim; j += 256) {
            float v[8];
            ld8(row + j, v);
#pragma unroll
            for (int e = 0; e < 8; e++)
                body(j + e, v[e]);
        }
    } else {
        for (int i = lane; i < dim; i += 32)
            body(i, to_f(row[i]));
    }
}

/* p[0..8) += v, as two 128-bit accesses (p 16-byte aligned). */
__device__ __forceinline__ void add8(float *p, const float v[8])
{
    PT_CHECK_ALIGN(p, 16);
    float4 *q = reinterpret_cast<float4 *>(p);
    float4 a = q[0], b = q[1];
    a.x += v[0], a.y += v[1], a.z += v[2], a.w += v[3];
    b.x += v[4], b.y += v[5], b.z += v[6], b.w += v[7];
    q[0] = a;
    q[1] = b;
}

template <typename T, bool VEC>
__global__ void __launch_bounds__(LN_THREADS) ln_fwd_kernel(T *y, float *mean, float *rstd, const T *x,
                                                            const float *w, const float *b, int rows, int dim,
                                                            float eps)
{
    const int row = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows)
        return; /* whole warps leave together */
    const T *xr = x + (size_t)row * dim;
    T *yr = y + (size_t)row * dim;
    float s = 0.0f;
    for_row<T, VEC>(xr, dim, lane, [&](int, float v) { s += v; });
    const float m = warp_sum(s) / (float)dim;
    float q = 0.0f;
    for_row<T, VEC>(xr, dim, lane, [&](int, float v) { q += (v - m) * (v - m); });
    const float rs = 1.0f / sqrtf(warp_sum(q) / (float)dim + eps);
    if (VEC) {
        for (int j = lane * 8; j < dim; j += 256) {
            float v[8], wv[8], bv[8];
            ld8(xr + j, v);
            ld8(w + j, wv);
            ld8(b + j, bv);
#pragma unroll
            for (int e = 0; e < 8; e++)
                v[e] = (v[e] - m) * rs * wv[e] + bv[e];
            st8(yr + j, v);
        }
    } else {
        for (int i = lane; i < dim; i += 32)
            yr[i] = from_f<T>((to_f(xr[i]) - m) * rs * w[i] + b[i]);
    }
    if (lane == 0) {
        if (mean)
            mean[row] = m;
        if (rstd)
            rstd[row] = rs;
    }
}

/*
 * acc_global: NULL to keep the warps' slices in shared memory, else the
 * scratch holding gridDim.x * nw slices of 2 * dim floats. part: gridDim.x
 * partials of 2 * dim floats (dw then db), or NULL when neither is wanted.
 */
template <typename T, bool VEC>
__global__ void __launch_bounds__(LN_THREADS)
    ln_bwd_kernel(T *dx, float *acc_global, float *part, const T *dy, const T *x, const float *mean,
                  const float *rstd, const float *w, const T *add, int rows, int dim, int rows_per_block)
{
    PT_DYNAMIC_SMEM(ln_smem_bytes);
    float *ln_smem = (float *)ln_smem_bytes;
    const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const size_t slice = 2 * (size_t)dim;
    float *block_acc = part ? (acc_global ? acc_global + (size_t)blockIdx.x * nw * slice : ln_smem) : NULL;
    float *acc = block_acc ? block_acc + warp * slice : NULL;
    if (acc) {
        for (size_t i = lane; i < slice; i += 32)
            acc[i] = 0.0f;
        __syncwarp();
    }
    const int r0 = blockIdx.x * rows_per_block;
    const int r1 = min(rows, r0 + rows_per_block);
    for (int r = r0 + warp; r < r1; r += nw) {
        const T *xr = x + (size_t)r * dim, *dyr = dy + (size_t)r * dim;
        const float m = mean[r], rs = rstd[r];
        float sg = 0.0f, sgx = 0.0f;
        if (dx) {
            /* g = dy * w; dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) */
            if (VEC) {
                for (int j = lane * 8; j < dim; j += 256) {
                    float xv[8], gv[8], wv[8];
                    ld8(xr + j, xv);
                    ld8(dyr + j, gv);
                    ld8(w + j, wv);
#pragma unroll
                    for (int e = 0; e < 8; e++) {
                        float g = gv[e] * wv[e];
                        sg += g;
                        sgx += g * (xv[e] - m) * rs;
                    }
                }
            } else {
                for (int i = lane; i < dim; i += 32) {
                    float g = to_f(dyr[i]) * w[i];
                    sg += g;
                    sgx += g * (to_f(xr[i]) - m) * rs;
                }
            }
            sg = warp_sum(sg) / (float)dim;
            sgx = warp_sum(sgx) / (float)dim;
        }
        T *dxr = dx ? dx + (size_t)r * dim : NULL;
        const T *ar = add ? add + (size_t)r * dim : NULL;
        if (VEC) {
            for (int j = lane * 8; j < dim; j += 256) {
                float xv[8], gv[8], wv[8], av[8], out[8];
                ld8(xr + j, xv);
                ld8(dyr + j, gv);
#pragma unroll
                for (int e = 0; e < 8; e++)
                    xv[e] = (xv[e] - m) * rs; /* xhat */
                if (acc) {
                    float gx[8];
#pragma unroll
                    for (int e = 0; e < 8; e++)
                        gx[e] = gv[e] * xv[e];
                    add8(acc + j, gx);
                    add8(acc + dim + j, gv);
                }
                if (dxr) {
                    ld8(w + j, wv);
                    if (ar)
                        ld8(ar + j, av);
#pragma unroll
                    for (int e = 0; e < 8; e++)
                        out[e] = (ar ? av[e] : 0.0f) + rs * (gv[e] * wv[e] - sg - xv[e] * sgx);
                    st8(dxr + j, out);
                }
            }
        } else {
            for (int i = lane; i < dim; i += 32) {
                const float xh = (to_f(xr[i]) - m) * rs, g = to_f(dyr[i]);
                if (acc) {
                    acc[i] += g * xh;
                    acc[dim + i] += g;
                }
                /* dim 1: the output is the bias whatever x is, so dx is 0
                 * (the formula gives a fused product's rounding error, times
                 * rstd up to 1e6: see cpu_norm.c) */
                if (dxr)
                    dxr[i] = from_f<T>((ar ? to_f(ar[i]) : 0.0f) +
                                       (dim == 1 ? 0.0f : rs * (g * w[i] - sg - xh * sgx)));
            }
        }
    }
    if (!part)
        return; /* uniform over the block */
    __syncthreads();
    float *out = part + (size_t)blockIdx.x * slice;
    for (size_t i = threadIdx.x; i < slice; i += blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < nw; k++)
            s += block_acc[k * slice + i];
        out[i] = s;
    }
}

/* dw[i] += sum over blocks of part[b][i]; db from the second half. */
__global__ void ln_bwd_finish_kernel(float *dw, float *db, const float *part, int blocks, int dim)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= dim)
        return;
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < blocks; k++) {
        sw += part[(size_t)k * 2 * dim + i];
        sb += part[(size_t)k * 2 * dim + dim + i];
    }
    if (dw)
        dw[i] += sw;
    if (db)
        db[i] += sb;
}

template <typename T>
static void op_layernorm_fwd(pt_backend *be, void *y, void *mean, void *rstd, const void *x, const void *w,
                             const void *b, int rows, int dim, double eps)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed || rows <= 0 || dim <= 0)
        return;
    const int vec = dim % 8 == 0 && cuda_aligned(y, 16) && cuda_aligned(x, 16) && cuda_aligned(w, 16) &&
                    cuda_aligned(b, 16);
    const unsigned blocks = (unsigned)((rows + LN_THREADS / 32 - 1) / (LN_THREADS / 32));
    if (vec)
        PT_LAUNCH((ln_fwd_kernel<T, true>), blocks, LN_THREADS, 0, c->stream, (T *)y, (float *)mean,
                  (float *)rstd, (const T *)x, (const float *)w, (const float *)b, rows, dim, (float)eps);
    else
        PT_LAUNCH((ln_fwd_kernel<T, false>), blocks, LN_THREADS, 0, c->stream, (T *)y, (float *)mean,
                  (float *)rstd, (const T *)x, (const float *)w, (const float *)b, rows, dim, (float)eps);
    CUDA_LAUNCHED(c, "ln_fwd_kernel");
}

template <typename T>
static void op_layernorm_bwd(pt_backend *be, void *dx, void *dw, void *db, const void *dy, const void *x,
                             const void *mean, const void *rstd, const void *w, int rows, int dim,
                             const void *add)
{
    cuda_impl *c = cuda_of(be);
    const int want = dw || db;
    if (c->failed || rows <= 0 || dim <= 0 || (!dx && !want))
        return;
    /* warps per block: as many as let their slices fit in shared memory */
    const size_t slice_bytes = 2 * (size_t)dim * sizeof(float);
    int nw = LN_THREADS / 32;
    int global_acc = 0;
    if (want) {
        while (nw > 1 && nw * slice_bytes > LN_SMEM_LIMIT)
            nw--;
        global_acc = nw * slice_bytes > LN_SMEM_LIMIT;
        if (global_acc)
            nw = LN_THREADS / 32;
    }
    int blocks = (rows + nw - 1) / nw;
    if (blocks > LN_MAX_BLOCKS)
        blocks = LN_MAX_BLOCKS;
    const int rows_per_block = (rows + blocks - 1) / blocks;
    blocks = (rows + rows_per_block - 1) / rows_per_block;
    float *part = NULL, *acc = NULL;
    if (want) {
        part = (float *)cuda_scratch(c, SCR_PARTIAL, (size_t)blocks * slice_bytes);
        if (global_acc)
            acc = (float *)cuda_scratch(c, SCR_PARTIAL2, (size_t)blocks * nw * slice_bytes);
        if (!part || (global_acc && !acc))
            return;
    }
    const size_t smem = want && !global_acc ? nw * slice_bytes : 0;
    const int vec = dim % 8 == 0 && cuda_aligned(dy, 16) && cuda_aligned(x, 16) && cuda_aligned(w, 16) &&
                    (!dx || cuda_aligned(dx, 16)) && (!add || cuda_aligned(add, 16));
    if (vec)
        PT_LAUNCH((ln_bwd_kernel<T, true>), blocks, nw * 32, smem, c->stream, (T *)dx, acc, part,
                  (const T *)dy, (const T *)x, (const float *)mean, (const float *)rstd, (const float *)w,
                  (const T *)add, rows, dim, rows_per_block);
    else
        PT_LAUNCH((ln_bwd_kernel<T, false>), blocks, nw * 32, smem, c->stream, (T *)dx, acc, part,
                  (const T *)dy, (const T *)x, (const float *)mean, (const float *)rstd, (const float *)w,
                  (const T *)add, rows, dim, rows_per_block);
    if (CUDA_LAUNCHED(c, "ln_bwd_kernel") || !want)
        return;
    PT_LAUNCH(ln_bwd_finish_kernel, (dim + 255) / 256, 256, 0, c->stream, (float *)dw, (float *)db, part,
              blocks, dim);
    CUDA_LAUNCHED(c, "ln_bwd_finish_kernel");
}

void cuda_fill_norm_ops(pt_ops *ops, int use_bf16)
{
    ops->layernorm_fwd = use_bf16 ? op_layernorm_fwd<bf16> : op_layernorm_fwd<float>;
    ops->layernorm_bwd = use_bf16 ? op_layernorm_bwd<bf16> : op_layernorm_bwd<float>;
}
