/*
 * cuda_embed.cu: the embedding ops of the CUDA backend: ViT patches and token
 * assembly, GPT token and position embeddings, forward and backward.
 *
 * Determinism: no float atomics. Position and CLS gradients are column sums
 * (cuda_misc.cu). The token embedding's backward sorts the rows by token with
 * a stable radix sort (CUB), so each token's rows stay in row order, finds the
 * runs of equal tokens, and lets one block sum each run, in that order, into
 * its row of dwte.
 */
#include "nn/cuda_common.h"

#ifndef PT_CUDA_EMU
#include <cub/cub.cuh>
#else
#include <algorithm>
#endif

/* -------------------------------------------------------------- embeddings */

/* patches[b, py*gw + px, (ch*p + y)*p + x] = images[b, ch, py*p + y, px*p + x] */
template <typename T>
__global__ void patchify_kernel(T *patches, const T *images, int n, int C, int H, int W, int p)
{
    const int gh = H / p, gw = W / p, plen = C * p * p;
    const size_t total = (size_t)n * gh * gw * plen;
    GRID_STRIDE(o, 0, total)
    {
        size_t e = o % plen, patch = o / plen;
        int b = (int)(patch / ((size_t)gh * gw)), pi = (int)(patch % ((size_t)gh * gw));
        int py = pi / gw, px = pi % gw;
        int ch = (int)(e / ((size_t)p * p)), y = (int)(e / p % p), x = (int)(e % p);
        patches[o] = images[(((size_t)b * C + ch) * H + (size_t)py * p + y) * W + (size_t)px * p + x];
    }
}

template <typename T>
static void op_patchify(pt_backend *be, void *patches, const void *images, int n, int C, int H, int W, int p)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed || n <= 0 || p <= 0)
        return;
    size_t total = (size_t)n * (H / p) * (W / p) * C * p * p;
    PT_LAUNCH(patchify_kernel<T>, cuda_blocks(total, CUDA_THREADS), CUDA_THREADS, 0, c->stream, (T *)patches,
              (const T *)images, n, C, H, W, p);
    CUDA_LAUNCHED(c, "patchify_kernel");
}

/* x[b, 0] = cls + pos[0]; x[b, t] = proj[b, t - 1] + pos[t] */
template <typename T>
__global__ void vit_assemble_kernel(T *x, const T *proj, const float *cls, const float *pos, int n, int T_,
                                    int d)
{
    const size_t total = (size_t)n * T_ * d;
    GRID_STRIDE(i, 0, total)
    {
        size_t col = i % d, bt = i / d;
        int t = (int)(bt % T_), b = (int)(bt / T_);
        float v = t == 0 ? cls[col] : to_f(proj[((size_t)b * (T_ - 1) + t - 1) * d + col]);
        x[i] = from_f<T>(v + pos[(size_t)t * d + col]);
    }
}

template <typename T>
static void op_vit_assemble_fwd(pt_backend *be, void *x, const void *proj, const void *cls, const void *pos,
                                int n, int T_, int d)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed || n <= 0)
        return;
    PT_LAUNCH(vit_assemble_kernel<T>, cuda_blocks((size_t)n * T_ * d, CUDA_THREADS), CUDA_THREADS, 0,
              c->stream, (T *)x, (const T *)proj, (const float *)cls, (const float *)pos, n, T_, d);
    CUDA_LAUNCHED(c, "vit_assemble_kernel");
}

template <typename T>
static void op_vit_assemble_bwd(pt_backend *be, void *dproj, void *dcls, void *dpos, const void *dx, int n,
                                int T_, int d)
{
    cuda_impl *c = cuda_of(be);
    const T *g = (const T *)dx;
    const size_t row = (size_t)T_ * d;
    if (dproj) /* dproj[b] = dx[b, 1:] */
        cuda_copy_rows<T>(c, (T *)dproj, row - d, g + d, row, n, (int)(row - d), 0);
    if (dpos) /* dpos[t] += sum_b dx[b, t]: one column per element of an example */
        cuda_colsum_add<T>(c, (float *)dpos, g, n, (int)row, row);
    if (dcls)
        cuda_colsum_add<T>(c, (float *)dcls, g, n, d, row);
}

/* x[r] = wte[tokens[r]] + wpe[r % T] */
template <typename T>
__global__ void token_embed_kernel(T *x, const int32_t *tokens, const float *wte, const float *wpe, int rows,
                                   int T_, int d, int vec)
{
    if (vec) {
        const int per = d / 8;
        GRID_STRIDE(i, 0, (size_t)rows * per)
        {
            size_t r = i / per, col = i % per * 8;
            float e[8], p[8];
            ld8(wte + (size_t)tokens[r] * d + col, e);
            ld8(wpe + (r % T_) * d + col, p);
#pragma unroll
            for (int k = 0; k < 8; k++)
                e[k] += p[k];
            st8(x + r * d + col, e);
        }
    } else {
        GRID_STRIDE(i, 0, (size_t)rows * d)
        {
            size_t r = i / d, col = i % d;
            x[i] = from_f<T>(wte[(size_t)tokens[r] * d + col] + wpe[(r % T_) * d + col]);
        }
    }
}

template <typename T>
static void op_token_embed_fwd(pt_backend *be, void *x, const int32_t *tokens, const void *wte,
                               const void *wpe, int n, int T_, int d)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed || n <= 0)
        return;
    int vec = d % 8 == 0 && cuda_aligned(x, 16) && cuda_aligned(wte, 16) && cuda_aligned(wpe, 16);
    size_t work = (size_t)n * T_ * (vec ? d / 8 : d);
    PT_LAUNCH(token_embed_kernel<T>, cuda_blocks(work, CUDA_THREADS), CUDA_THREADS, 0, c->stream, (T *)x,
              tokens, (const float *)wte, (const float *)wpe, n * T_, T_, d, vec);
    CUDA_LAUNCHED(c, "token_embed_kernel");
}

__global__ void iota_kernel(int32_t *v, int n)
{
    GRID_STRIDE(i, 0, (size_t)n) v[i] = (int32_t)i;
}

/*
 * Runs of equal tokens in sorted order: run k has token unique[k], length
 * counts[k] and starts at offsets[k] in rows[] (row indices, ascending within
 * a run). Block (32, 8) of grid (G, column blocks) takes runs k = blockIdx.x,
 * + G, ...: lane y sums rows y, y + 8, ... of the run for its column, then the
 * lanes' sums are added in order into dwte.
 */
template <typename T>
__global__ void embed_runs_kernel(float *dwte, const T *dx, const int32_t *rows, const int32_t *unique,
                                  const int32_t *counts, const int32_t *offsets, const int32_t *num_runs,
                                  int d)
{
    __shared__ float sh[8][33];
    const int col = blockIdx.y * 32 + threadIdx.x;
    const int runs = *num_runs;
    for (int k = blockIdx.x; k < runs; k += gridDim.x) {
        const int start = offsets[k], cnt = counts[k];
        float s = 0.0f;
        if (col < d)
            for (int q = threadIdx.y; q < cnt; q += 8)
                s += to_f(dx[(size_t)rows[start + q] * d + col]);
        sh[threadIdx.y][threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.y == 0 && col < d) {
            float t = 0.0f;
            for (int y = 0; y < 8; y++)
                t += sh[y][threadIdx.x];
            dwte[(size_t)unique[k] * d + col] += t;
        }
        __syncthreads(); /* sh is reused by the next run */
    }
}

template <typename T>
static void op_token_embed_bwd(pt_backend *be, void *dwte, void *dwpe, const void *dx, const int32_t *tokens,
                               int n, int T_, int d)
{
    cuda_impl *c = cuda_of(be);
    const int N = n * T_;
    if (c->failed || N <= 0)
        return;
    if (dwpe) /* dwpe[t] += sum_b dx[b, t] */
        cuda_colsum_add<T>(c, (float *)dwpe, (const T *)dx, n, T_ * d, (size_t)T_ * d);
    if (!dwte)
        return;
#ifdef PT_CUDA_EMU
    /* no CUB on the CPU: the same runs, from a stable sort on the host; the
     * scratch is laid out as below */
    const size_t arr = ((size_t)N * sizeof(int32_t) + 255) / 256 * 256;
    char *s = (char *)cuda_scratch(c, SCR_SORT, 7 * arr);
    if (!s)
        return;
    int32_t *rows = (int32_t *)(s + 2 * arr), *unique = (int32_t *)(s + 3 * arr);
    int32_t *counts = (int32_t *)(s + 4 * arr), *offsets = (int32_t *)(s + 5 * arr);
    int32_t *num_runs = (int32_t *)(s + 6 * arr);
    for (int r = 0; r < N; r++)
        rows[r] = r;
    std::stable_sort(rows, rows + N, [&](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
    int runs = 0;
    for (int q = 0; q < N; q++) {
        if (q == 0 || tokens[rows[q]] != tokens[rows[q - 1]]) {
            unique[runs] = tokens[rows[q]];
            offsets[runs] = q;
            counts[runs++] = 0;
        }
        counts[runs - 1]++;
    }
    *num_runs = runs;
#else
    /* scratch: iota, sorted keys, sorted rows, unique, counts, offsets, num_runs, CUB's temp */
    size_t t_sort = 0, t_rle = 0, t_scan = 0;
    int32_t *nil = NULL;
    if (CUDA_CHECK(c,
                   cub::DeviceRadixSort::SortPairs(NULL, t_sort, nil, nil, nil, nil, N, 0, 31, c->stream)) ||
        CUDA_CHECK(c, cub::DeviceRunLengthEncode::Encode(NULL, t_rle, nil, nil, nil, nil, N, c->stream)) ||
        CUDA_CHECK(c, cub::DeviceScan::ExclusiveSum(NULL, t_scan, nil, nil, N, c->stream)))
        return;
    size_t temp = t_sort > t_rle ? t_sort : t_rle;
    temp = temp > t_scan ? temp : t_scan;
    const size_t arr = ((size_t)N * sizeof(int32_t) + 255) / 256 * 256;
    char *s = (char *)cuda_scratch(c, SCR_SORT, 7 * arr + temp);
    if (!s)
        return;
    int32_t *iota = (int32_t *)s, *keys = (int32_t *)(s + arr), *rows = (int32_t *)(s + 2 * arr);
    int32_t *unique = (int32_t *)(s + 3 * arr), *counts = (int32_t *)(s + 4 * arr);
    int32_t *offsets = (int32_t *)(s + 5 * arr), *num_runs = (int32_t *)(s + 6 * arr);
    void *tmp = s + 7 * arr;
    /* Encode fills only the first num_runs counts; the scan reads all N */
    if (CUDA_CHECK(c, cudaMemsetAsync(counts, 0, arr, c->stream)))
        return;
    PT_LAUNCH(iota_kernel, cuda_blocks((size_t)N, CUDA_THREADS), CUDA_THREADS, 0, c->stream, iota, N);
    if (CUDA_LAUNCHED(c, "iota_kernel") ||
        /* stable: rows of one token stay in row order, so their sum has a fixed order */
        CUDA_CHECK(
            c, cub::DeviceRadixSort::SortPairs(tmp, t_sort, tokens, keys, iota, rows, N, 0, 31, c->stream)) ||
        CUDA_CHECK(c, cub::DeviceRunLengthEncode::Encode(tmp, t_rle, keys, unique, counts, num_runs, N,
                                                         c->stream)) ||
        CUDA_CHECK(c, cub::DeviceScan::ExclusiveSum(tmp, t_scan, counts, offsets, N, c->stream)))
        return;
#endif
    const int G = N < 1024 ? N : 1024;
    PT_LAUNCH(embed_runs_kernel<T>, dim3((unsigned)G, (unsigned)((d + 31) / 32)), dim3(32, 8), 0, c->stream,
              (float *)dwte, (const T *)dx, rows, unique, counts, offsets, num_runs, d);
    CUDA_LAUNCHED(c, "embed_runs_kernel");
}

void cuda_fill_embed_ops(pt_ops *ops, int use_bf16)
{
#define PICK(name) (use_bf16 ? name<bf16> : name<float>)
    ops->patchify = PICK(op_patchify);
    ops->vit_assemble_fwd = PICK(op_vit_assemble_fwd);
    ops->vit_assemble_bwd = PICK(op_vit_assemble_bwd);
    ops->token_embed_fwd = PICK(op_token_embed_fwd);
    ops->token_embed_bwd = PICK(op_token_embed_bwd);
#undef PICK
}
