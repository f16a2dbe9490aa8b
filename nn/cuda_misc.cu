/*
 * cuda_misc.cu: the elementwise and reduction ops of the CUDA backend: GELU,
 * dropout, row copies, mean pooling over each example's real tokens, cross-entropy,
 * AdamW, sums of squares and scaling, and the deterministic column sum other
 * files use for bias-like gradients.
 *
 * Determinism: no float atomics anywhere. Column sums add per-block partials
 * in block order; reductions reported to the host (loss, sum of squares) are
 * trees of fixed shape in double. Block counts depend only on the shape,
 * never on the device.
 */
#include "nn/cuda_common.h"

#include <limits.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------- GELU */

__device__ __forceinline__ float gelu_cdf(float x)
{
    return normcdff(x);
}
__device__ __forceinline__ float gelu_pdf(float x)
{
    return 0.39894228040143267794f * expf(-0.5f * x * x);
}

/* y = x Phi(x) and, unless dydx is NULL, dydx = Phi(x) + x phi(x); dydx may
 * alias x (each element is read before it is written). */
template <typename T>
__global__ void gelu_fwd_kernel(T *y, T *dydx, const T *x, size_t n, int vec)
{
    const size_t n8 = vec ? n / 8 : 0;
    GRID_STRIDE(i, 0, n8)
    {
        float v[8], o[8];
        ld8(x + 8 * i, v);
#pragma unroll
        for (int e = 0; e < 8; e++)
            o[e] = v[e] * gelu_cdf(v[e]);
        st8(y + 8 * i, o);
        if (dydx) {
#pragma unroll
            for (int e = 0; e < 8; e++)
                o[e] = gelu_cdf(v[e]) + v[e] * gelu_pdf(v[e]);
            st8(dydx + 8 * i, o);
        }
    }
    GRID_STRIDE(i, 8 * n8, n)
    {
        float v = to_f(x[i]);
        y[i] = from_f<T>(v * gelu_cdf(v));
        if (dydx)
            dydx[i] = from_f<T>(gelu_cdf(v) + v * gelu_pdf(v));
    }
}

/* dx = dy * dydx (the forward's); dx may alias dy. */
template <typename T>
__global__ void gelu_bwd_kernel(T *dx, const T *dy, const T *dydx, size_t n, int vec)
{
    const size_t n8 = vec ? n / 8 : 0;
    GRID_STRIDE(i, 0, n8)
    {
        float v[8], g[8];
        ld8(dydx + 8 * i, v);
        ld8(dy + 8 * i, g);
#pragma unroll
        for (int e = 0; e < 8; e++)
            g[e] *= v[e];
        st8(dx + 8 * i, g);
    }
    GRID_STRIDE(i, 8 * n8, n)
    {
        dx[i] = from_f<T>(to_f(dy[i]) * to_f(dydx[i]));
    }
}

template <typename T>
static void op_gelu_fwd(pt_backend *be, void *y, void *dydx, const void *x, size_t n)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed || !n)
        return;
    int vec = cuda_aligned(y, 16) && cuda_aligned(x, 16) && (!dydx || cuda_aligned(dydx, 16));
    PT_LAUNCH(gelu_fwd_kernel<T>, cuda_blocks(n / 8 + 1, CUDA_THREADS), CUDA_THREADS, 0, c->stream, (T *)y,
              (T *)dydx, (const T *)x, n, vec);
    CUDA_LAUNCHED(c, "gelu_fwd_kernel");
}

template <typename T>
static void op_gelu_bwd(pt_backend *be, void *dx, const void *dy, const void *dydx, size_t n)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed || !n)
        return;
    int vec = cuda_aligned(dx, 16) && cuda_aligned(dy, 16) && cuda_aligned(dydx, 16);
    PT_LAUNCH(gelu_bwd_kernel<T>, cuda_blocks(n / 8 + 1, CUDA_THREADS), CUDA_THREADS, 0, c->stream, (T *)dx,
              (const T *)dy, (const T *)dydx, n, vec);
    CUDA_LAUNCHED(c, "gelu_bwd_kernel");
}

/* ---------------------------------------------------------------- dropout */

/* y = add + x * mask / (1 - p) as one fused multiply-add in float (or
 * x * mask / (1 - p) without add), the CPU backend's formula; elementwise,
 * so y may alias x or add. */
template <typename T>
__global__ void dropout_kernel(T *y, const T *x, const T *add, size_t per, size_t n, cuda_drop d)
{
    GRID_STRIDE(i, 0, n)
    {
        const size_t b = i / per;
        const float m = drop_mul(d, pt_dropout_row(d.key, d.ids[b]), i - b * per);
        const float v = to_f(x[i]);
        y[i] = from_f<T>(add ? fmaf(v, m, to_f(add[i])) : v * m);
    }
}

template <typename T>
static void op_dropout(pt_backend *be, void *y, const void *x, const void *add, int n, size_t per,
                       const pt_dropout *drop)
{
    cuda_impl *c = cuda_of(be);
    const size_t total = (size_t)n * per;
    if (c->failed || !total)
        return;
    /* p = 0 keeps everything: threshold 0, scale 1 */
    const cuda_drop d = {drop->ids, drop->key, pt_dropout_threshold(drop->p),
                         (float)(1.0 / (1.0 - drop->p)), 1};
    PT_LAUNCH(dropout_kernel<T>, cuda_blocks(total, CUDA_THREADS), CUDA_THREADS, 0, c->stream, (T *)y,
              (const T *)x, (const T *)add, per, total, d);
    CUDA_LAUNCHED(c, "dropout_kernel");
}

/* ------------------------------------------------------------- row copies */

template <typename T>
__global__ void copy_rows_kernel(T *dst, size_t ds, const T *src, size_t ss, int rows, int cols, int acc)
{
    const size_t n = (size_t)rows * cols;
    GRID_STRIDE(i, 0, n)
    {
        size_t r = i / (size_t)cols, col = i % (size_t)cols;
        T *o = dst + r * ds + col;
        float v = to_f(src[r * ss + col]);
        *o = from_f<T>(acc ? to_f(*o) + v : v);
    }
}

template <typename T>
void cuda_copy_rows(cuda_impl *c, T *dst, size_t ds, const T *src, size_t ss, int rows, int cols, int acc)
{
    if (c->failed || rows <= 0 || cols <= 0)
        return;
    PT_LAUNCH(copy_rows_kernel<T>, cuda_blocks((size_t)rows * cols, CUDA_THREADS), CUDA_THREADS, 0, c->stream,
              dst, ds, src, ss, rows, cols, acc);
    CUDA_LAUNCHED(c, "copy_rows_kernel");
}

template void cuda_copy_rows<float>(cuda_impl *, float *, size_t, const float *, size_t, int, int, int);
template void cuda_copy_rows<bf16>(cuda_impl *, bf16 *, size_t, const bf16 *, size_t, int, int, int);

template <typename T>
static void op_copy_rows(pt_backend *be, void *dst, int dst_stride, const void *src, int src_stride, int rows,
                         int cols, int accumulate)
{
    cuda_copy_rows<T>(cuda_of(be), (T *)dst, (size_t)dst_stride, (const T *)src, (size_t)src_stride, rows,
                      cols, accumulate);
}

/* ------------------------------------------------------------ column sums */

/*
 * Block (32, 8) sums 32 columns over its range of rows: lane y takes rows
 * y, y + 8, ... of the range, then the 8 lane sums are added in order. With
 * one row block it adds into dst directly, else it writes its partial.
 */
template <typename T>
__global__ void colsum_kernel(float *dst, float *part, const T *src, int rows, int cols, size_t stride,
                              int rows_per_block)
{
    __shared__ float sh[8][33];
    const int col = blockIdx.x * 32 + threadIdx.x;
    const int r0 = blockIdx.y * rows_per_block, r1 = min(rows, r0 + rows_per_block);
    float s = 0.0f;
    if (col < cols)
        for (int r = r0 + threadIdx.y; r < r1; r += 8)
            s += to_f(src[(size_t)r * stride + col]);
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        float t = 0.0f;
        for (int k = 0; k < 8; k++)
            t += sh[k][threadIdx.x];
        if (part)
            part[(size_t)blockIdx.y * cols + col] = t;
        else
            dst[col] += t;
    }
}

__global__ void colsum_finish_kernel(float *dst, const float *part, int blocks, int cols)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols)
        return;
    float t = 0.0f;
    for (int k = 0; k < blocks; k++)
        t += part[(size_t)k * cols + col];
    dst[col] += t;
}

template <typename T>
void cuda_colsum_add(cuda_impl *c, float *dst, const T *src, int rows, int cols, size_t stride)
{
    if (c->failed || rows <= 0 || cols <= 0 || !dst)
        return;
    const int col_blocks = (cols + 31) / 32;
    int row_blocks = (rows + 63) / 64; /* at least 64 rows per block... */
    int cap = 1024 / col_blocks;       /* ...and about 1024 blocks in all */
    if (cap < 1)
        cap = 1;
    if (cap > c->grid_y_max)
        cap = c->grid_y_max;
    if (row_blocks > cap)
        row_blocks = cap;
    const int rows_per_block = (rows + row_blocks - 1) / row_blocks;
    row_blocks = (rows + rows_per_block - 1) / rows_per_block;
    float *part = NULL;
    if (row_blocks > 1 &&
        !(part = (float *)cuda_scratch(c, SCR_PARTIAL2, (size_t)row_blocks * cols * sizeof(float))))
        return;
    PT_LAUNCH(colsum_kernel<T>, dim3((unsigned)col_blocks, (unsigned)row_blocks), dim3(32, 8), 0, c->stream,
              dst, part, src, rows, cols, stride, rows_per_block);
    if (CUDA_LAUNCHED(c, "colsum_kernel") || !part)
        return;
    PT_LAUNCH(colsum_finish_kernel, (cols + 255) / 256, 256, 0, c->stream, dst, part, row_blocks, cols);
    CUDA_LAUNCHED(c, "colsum_finish_kernel");
}

template void cuda_colsum_add<float>(cuda_impl *, float *, const float *, int, int, size_t);
template void cuda_colsum_add<bf16>(cuda_impl *, float *, const bf16 *, int, int, size_t);

/* -------------------------------------------------------------- mean pool */

/* Example b's real tokens: lens[b] clamped to [1, T], as the CPU backend. */
__device__ __forceinline__ int pool_len(const int32_t *lens, int b, int Tn)
{
    const int L = lens[b];
    return L < 1 ? 1 : L > Tn ? Tn : L;
}

/*
 * y[b, c] = (sum over t < L of x[b, t, c]) * (1 / L): one thread per output
 * element (per group of 8 consecutive ones on the vector path), a float sum
 * from x[b, 0] over t in order, then the one multiply, as the CPU backend
 * does. Both paths add the same values in the same order, so they give the
 * same bits, and no two threads share a sum.
 */
template <typename T>
__global__ void mean_pool_fwd_kernel(T *y, const T *x, const int32_t *lens, int n, int Tn, int d, int vec)
{
    const int g = vec ? 8 : 1, groups = d / g;
    GRID_STRIDE(k, 0, (size_t)n * groups)
    {
        const int b = (int)(k / (size_t)groups), c = (int)(k % (size_t)groups) * g;
        const int L = pool_len(lens, b, Tn);
        const float inv = 1.0f / (float)L;
        const T *xb = x + (size_t)b * Tn * d + c;
        if (vec) {
            float acc[8], v[8];
            ld8(xb, acc);
            for (int t = 1; t < L; t++) {
                ld8(xb + (size_t)t * d, v);
#pragma unroll
                for (int e = 0; e < 8; e++)
                    acc[e] += v[e];
            }
#pragma unroll
            for (int e = 0; e < 8; e++)
                acc[e] *= inv;
            st8(y + (size_t)b * d + c, acc);
        } else {
            float acc = to_f(xb[0]);
            for (int t = 1; t < L; t++)
                acc += to_f(xb[(size_t)t * d]);
            y[(size_t)b * d + c] = from_f<T>(acc * inv);
        }
    }
}

/* dx[b, t, c] = dy[b, c] * (1 / L) for t < L, 0 for the padding: every
 * element of dx is written. */
template <typename T>
__global__ void mean_pool_bwd_kernel(T *dx, const T *dy, const int32_t *lens, int n, int Tn, int d, int vec)
{
    const int g = vec ? 8 : 1, groups = d / g;
    GRID_STRIDE(k, 0, (size_t)n * Tn * groups)
    {
        const size_t row = k / (size_t)groups; /* b * T + t */
        const int b = (int)(row / (size_t)Tn), t = (int)(row % (size_t)Tn), c = (int)(k % (size_t)groups) * g;
        const int L = pool_len(lens, b, Tn);
        const float inv = 1.0f / (float)L;
        T *o = dx + row * d + c;
        const T *in = dy + (size_t)b * d + c;
        if (vec) {
            float v[8];
            ld8(in, v);
#pragma unroll
            for (int e = 0; e < 8; e++)
                v[e] = t < L ? v[e] * inv : 0.0f;
            st8(o, v);
        } else {
            *o = from_f<T>(t < L ? to_f(*in) * inv : 0.0f);
        }
    }
}

template <typename T>
static void op_mean_pool_fwd(pt_backend *be, void *y, const void *x, const int32_t *lens, int n, int Tn, int d)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed || n <= 0 || Tn <= 0 || d <= 0)
        return;
    const int vec = d % 8 == 0 && cuda_aligned(y, 16) && cuda_aligned(x, 16);
    const size_t work = (size_t)n * (vec ? d / 8 : d);
    PT_LAUNCH(mean_pool_fwd_kernel<T>, cuda_blocks(work, CUDA_THREADS), CUDA_THREADS, 0, c->stream, (T *)y,
              (const T *)x, lens, n, Tn, d, vec);
    CUDA_LAUNCHED(c, "mean_pool_fwd_kernel");
}

template <typename T>
static void op_mean_pool_bwd(pt_backend *be, void *dx, const void *dy, const int32_t *lens, int n, int Tn, int d)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed || n <= 0 || Tn <= 0 || d <= 0)
        return;
    const int vec = d % 8 == 0 && cuda_aligned(dx, 16) && cuda_aligned(dy, 16);
    const size_t work = (size_t)n * Tn * (vec ? d / 8 : d);
    PT_LAUNCH(mean_pool_bwd_kernel<T>, cuda_blocks(work, CUDA_THREADS), CUDA_THREADS, 0, c->stream, (T *)dx,
              (const T *)dy, lens, n, Tn, d, vec);
    CUDA_LAUNCHED(c, "mean_pool_bwd_kernel");
}

/* ----------------------------------------------------------- cross-entropy */

/* One warp per row: max and first argmax, sum of exponentials, loss in
 * double, and dlogits = (softmax - onehot) * scale. */
template <typename T>
__global__ void xent_kernel(T *dlogits, const T *logits, const int32_t *targets, int rows, int classes,
                            float scale, double *row_loss, int *row_hit)
{
    const int row = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    const T *z = logits + (size_t)row * classes;
    float mx = -INFINITY;
    int arg = INT_MAX;
    for (int k = lane; k < classes; k += 32) {
        float v = to_f(z[k]);
        if (v > mx) {
            mx = v;
            arg = k;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(FULL_MASK, mx, o);
        int oa = __shfl_xor_sync(FULL_MASK, arg, o);
        if (om > mx || (om == mx && oa < arg)) {
            mx = om;
            arg = oa;
        }
    }
    float sum = 0.0f;
    for (int k = lane; k < classes; k += 32)
        sum += expf(to_f(z[k]) - mx);
    sum = warp_sum(sum);
    const int y = targets[row];
    if (lane == 0) {
        row_loss[row] = (double)mx + log((double)sum) - (double)to_f(z[y]);
        row_hit[row] = arg == y;
    }
    if (dlogits) {
        T *g = dlogits + (size_t)row * classes;
        const float k = scale / sum;
        for (int q = lane; q < classes; q += 32)
            g[q] = from_f<T>(expf(to_f(z[q]) - mx) * k - (q == y ? scale : 0.0f));
    }
}

/* One block: the sums of row_loss and row_hit in a fixed tree, into out. */
__global__ void xent_sum_kernel(double *out, const double *row_loss, const int *row_hit, int rows)
{
    __shared__ double sl[CUDA_THREADS];
    __shared__ long long sh[CUDA_THREADS];
    double l = 0.0;
    long long h = 0;
    for (int r = threadIdx.x; r < rows; r += CUDA_THREADS) {
        l += row_loss[r];
        h += row_hit[r];
    }
    sl[threadIdx.x] = l;
    sh[threadIdx.x] = h;
    __syncthreads();
    for (int s = CUDA_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            sl[threadIdx.x] += sl[threadIdx.x + s];
            sh[threadIdx.x] += sh[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[0] = sl[0];
        out[1] = (double)sh[0];
    }
}

/* Copies the first `count` doubles of dev_result to the host (one wait). */
static int fetch_result(cuda_impl *c, double *out, int count)
{
    if (CUDA_CHECK(c, cudaMemcpyAsync(c->host_result, c->dev_result, count * sizeof(double),
                                      cudaMemcpyDeviceToHost, c->stream)) ||
        CUDA_CHECK(c, cudaStreamSynchronize(c->stream)))
        return -1;
    memcpy(out, c->host_result, count * sizeof(double));
    return 0;
}

template <typename T>
static double op_cross_entropy(pt_backend *be, void *dlogits, const void *logits, const int32_t *targets,
                               int rows, int classes, double scale, int64_t *correct)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed || rows <= 0)
        return 0.0;
    const size_t loss_bytes = ((size_t)rows * sizeof(double) + 255) / 256 * 256;
    char *s = (char *)cuda_scratch(c, SCR_ROWS, loss_bytes + (size_t)rows * sizeof(int));
    if (!s)
        return 0.0;
    double *row_loss = (double *)s;
    int *row_hit = (int *)(s + loss_bytes);
    PT_LAUNCH(xent_kernel<T>, (unsigned)((rows + 7) / 8), CUDA_THREADS, 0, c->stream, (T *)dlogits,
              (const T *)logits, targets, rows, classes, (float)scale, row_loss, row_hit);
    if (CUDA_LAUNCHED(c, "xent_kernel"))
        return 0.0;
    PT_LAUNCH(xent_sum_kernel, 1, CUDA_THREADS, 0, c->stream, (double *)c->dev_result, row_loss, row_hit,
              rows);
    double out[2];
    if (CUDA_LAUNCHED(c, "xent_sum_kernel") || fetch_result(c, out, 2))
        return 0.0;
    *correct += (int64_t)out[1];
    return out[0];
}

/* -------------------------------------------------------------- optimizer */

typedef struct adamw_consts {
    float b1, b2, c1, c2, decay, step, bc2_sqrt, eps, gs;
} adamw_consts;

/* The CPU backend's operations (cpu_misc.c), its multiply-adds fused in
 * the same places explicitly: left to nvcc's contraction, p's update was a
 * multiply and a subtraction that ptxas may or may not fuse. */
__device__ __forceinline__ void adamw_one(float &p, float g, float &m, float &v, const adamw_consts &a)
{
    const float gi = g * a.gs;
    const float mi = fmaf(m, a.b1, a.c1 * gi);
    const float vi = fmaf(v, a.b2, a.c2 * gi * gi);
    m = mi;
    v = vi;
    p = fmaf(-a.step, mi / (sqrtf(vi) / a.bc2_sqrt + a.eps), p * a.decay);
}

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, adamw_consts a, int vec)
{
    const size_t n4 = vec ? n / 4 : 0;
    GRID_STRIDE(i, 0, n4)
    {
        float4 pp = reinterpret_cast<float4 *>(p)[i], gg = reinterpret_cast<const float4 *>(g)[i];
        float4 mm = reinterpret_cast<float4 *>(m)[i], vv = reinterpret_cast<float4 *>(v)[i];
        adamw_one(pp.x, gg.x, mm.x, vv.x, a);
        adamw_one(pp.y, gg.y, mm.y, vv.y, a);
        adamw_one(pp.z, gg.z, mm.z, vv.z, a);
        adamw_one(pp.w, gg.w, mm.w, vv.w, a);
        reinterpret_cast<float4 *>(p)[i] = pp;
        reinterpret_cast<float4 *>(m)[i] = mm;
        reinterpret_cast<float4 *>(v)[i] = vv;
    }
    GRID_STRIDE(i, 4 * n4, n) adamw_one(p[i], g[i], m[i], v[i], a);
}

static void op_adamw(pt_backend *be, void *p, const void *g, void *m, void *v, size_t n,
                     const pt_adamw_args *args)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed || !n)
        return;
    /* the constants exactly as the CPU backend rounds them */
    adamw_consts a = {(float)args->beta1,
                      (float)args->beta2,
                      (float)(1.0 - args->beta1),
                      (float)(1.0 - args->beta2),
                      (float)(1.0 - args->lr * args->weight_decay),
                      (float)(args->lr / args->bias_corr1),
                      (float)sqrt(args->bias_corr2),
                      (float)args->eps,
                      (float)args->grad_scale};
    int vec = cuda_aligned(p, 16) && cuda_aligned(g, 16) && cuda_aligned(m, 16) && cuda_aligned(v, 16);
    PT_LAUNCH(adamw_kernel, cuda_blocks(n / 4 + 1, CUDA_THREADS), CUDA_THREADS, 0, c->stream, (float *)p,
              (const float *)g, (float *)m, (float *)v, n, a, vec);
    CUDA_LAUNCHED(c, "adamw_kernel");
}

/* ------------------------------------------------------ sum of squares */

enum { SUMSQ_MAX_BLOCKS = 1024, SUMSQ_PER_BLOCK = 8192 };

/* Block b sums squares of elements b*CUDA_THREADS + t, + gridDim.x*CUDA_THREADS, ...
 * (double), then a fixed tree; one partial per block. */
/* The block's threads' s summed by a fixed tree in sh; the total is in sh[0]
 * after the call (every thread of the block must call it). */
static __device__ void block_tree_sum(double *sh, double s)
{
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int k = CUDA_THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k)
            sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
}

__global__ void sumsq_kernel(double *part, const float *x, size_t n)
{
    __shared__ double sh[CUDA_THREADS];
    double s = 0.0;
    GRID_STRIDE(i, 0, n) s += (double)x[i] * (double)x[i];
    block_tree_sum(sh, s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = sh[0];
}

__global__ void sum_parts_kernel(double *out, const double *part, int blocks)
{
    __shared__ double sh[CUDA_THREADS];
    double s = 0.0;
    for (int b = threadIdx.x; b < blocks; b += CUDA_THREADS)
        s += part[b];
    block_tree_sum(sh, s);
    if (threadIdx.x == 0)
        out[0] = sh[0];
}

static double op_sumsq(pt_backend *be, const void *x, size_t n)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed || !n)
        return 0.0;
    size_t blocks = (n + SUMSQ_PER_BLOCK - 1) / SUMSQ_PER_BLOCK;
    if (blocks > SUMSQ_MAX_BLOCKS)
        blocks = SUMSQ_MAX_BLOCKS;
    double *part = (double *)cuda_scratch(c, SCR_PARTIAL, blocks * sizeof(double));
    if (!part)
        return 0.0;
    PT_LAUNCH(sumsq_kernel, (unsigned)blocks, CUDA_THREADS, 0, c->stream, part, (const float *)x, n);
    if (CUDA_LAUNCHED(c, "sumsq_kernel"))
        return 0.0;
    PT_LAUNCH(sum_parts_kernel, 1, CUDA_THREADS, 0, c->stream, (double *)c->dev_result, part, (int)blocks);
    double out;
    if (CUDA_LAUNCHED(c, "sum_parts_kernel") || fetch_result(c, &out, 1))
        return 0.0;
    return out;
}

__global__ void scale_kernel(float *x, size_t n, float f)
{
    GRID_STRIDE(i, 0, n) x[i] *= f;
}

static void op_scale(pt_backend *be, void *x, size_t n, double f)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed || !n)
        return;
    PT_LAUNCH(scale_kernel, cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, c->stream, (float *)x, n,
              (float)f);
    CUDA_LAUNCHED(c, "scale_kernel");
}

void cuda_fill_misc_ops(pt_ops *ops, int use_bf16)
{
#define PICK(name) (use_bf16 ? name<bf16> : name<float>)
    ops->gelu_fwd = PICK(op_gelu_fwd);
    ops->gelu_bwd = PICK(op_gelu_bwd);
    ops->copy_rows = PICK(op_copy_rows);
    ops->mean_pool_fwd = PICK(op_mean_pool_fwd);
    ops->mean_pool_bwd = PICK(op_mean_pool_bwd);
    ops->dropout = PICK(op_dropout);
    ops->cross_entropy = PICK(op_cross_entropy);
#undef PICK
    ops->adamw = op_adamw;
    ops->sumsq = op_sumsq;
    ops->scale = op_scale;
}
