/*
 * cpu_attention.c: multi-head scaled dot-product attention for the CPU
 * backend (compiled for float32 and float64, see cpu_real.h).
 *
 * One (example, head) pair at a time, a few pairs a task on the backend's
 * thread pool (nn/cpu_pool.h), with scratch per thread. Per pair the
 * keys (forward) or values (backward) are transposed into a [hd][Tp] scratch
 * with Tp = T rounded up to the block width VW and zero padding, so a row of
 * scores is VW-wide blocks of multiply-adds with unit stride and no horizontal
 * reductions; everything else is an axpy along the head dimension. The pair
 * functions are inlined into one copy per common head size, so the loops over
 * the head dimension have constant trip counts.
 *
 * probs [n, H, T, T] holds the softmax probabilities for backward, zero above
 * the diagonal when causal. With dropout on the probabilities, the forward
 * multiplies them by the mask into the score scratch before the weighted sum
 * of values (probs keeps them undropped), and the backward makes the same
 * dropped probabilities again from the mask's hash: dV takes them, and dP is
 * the dropped one times the mask. Each pair writes only its own rows of out
 * and its own columns of dqkv, so the result does not depend on the thread
 * count or on which thread runs a pair.
 * Nor does a pair's forward depend on the other pairs of the batch: every
 * loop's order and every vector/scalar path is fixed by T and hd (the
 * explicit vectors above, tails chosen by index), and the scratch that the
 * compiler-vectorised softmax loops run over is 64-byte aligned
 * (pt_cpu_scratch), so no path depends on where a thread's scratch sits.
 */
#include "nn/cpu_real.h"

#include <stdlib.h>
#include <string.h>

enum { VW = 16 };

#define INLINE static inline __attribute__((always_inline))

/* VW elements in registers: GCC keeps these accumulators out of memory, which
 * it does not do for an array indexed in an `omp simd` loop. */
typedef real vreal __attribute__((vector_size(VW * sizeof(real))));
/* the same, for unaligned loads and stores through any pointer */
typedef real vreal_u __attribute__((vector_size(VW * sizeof(real)), aligned(sizeof(real)),
                                     may_alias));

INLINE vreal vload(const real *p) { return *(const vreal_u *)p; }
INLINE void vstore(real *p, vreal v) { *(vreal_u *)p = v; }

static int padded(int T) { return (T + VW - 1) / VW * VW; }

/* s[j] = scale * sum_c a[c] * bt[c][j] for j < nblocks * VW. Two accumulators
 * per block halve the chain of dependent multiply-adds (their latency, not
 * their count, bounds this loop). */
INLINE void score_row(real *s, const real *a, const real *bt, int hd, int Tp, int nblocks,
                      real scale)
{
    for (int jb = 0; jb < nblocks; jb++) {
        vreal acc0 = {0}, acc1 = {0};
        const real *col = bt + jb * VW;
        int c = 0;
        for (; c + 1 < hd; c += 2) {
            acc0 += a[c] * vload(col + (size_t)c * Tp);
            acc1 += a[c + 1] * vload(col + (size_t)(c + 1) * Tp);
        }
        if (c < hd)
            acc0 += a[c] * vload(col + (size_t)c * Tp);
        vstore(s + jb * VW, (acc0 + acc1) * scale);
    }
}

/* o[c] = sum_{j < nj} w[j * wstride] * rows[j][c] for c < hd; rows have the given stride. */
INLINE void weighted_rows(real *o, const real *w, size_t wstride, const real *rows, size_t stride,
                          int nj, int hd)
{
    int c0 = 0;
    for (; c0 + VW <= hd; c0 += VW) {
        vreal acc0 = {0}, acc1 = {0};
        int j = 0;
        for (; j + 1 < nj; j += 2) {
            acc0 += w[j * wstride] * vload(rows + (size_t)j * stride + c0);
            acc1 += w[(j + 1) * wstride] * vload(rows + (size_t)(j + 1) * stride + c0);
        }
        if (j < nj)
            acc0 += w[j * wstride] * vload(rows + (size_t)j * stride + c0);
        vstore(o + c0, acc0 + acc1);
    }
    for (int c = c0; c < hd; c++) {
        real acc = 0;
        for (int j = 0; j < nj; j++)
            acc += w[j * wstride] * rows[(size_t)j * stride + c];
        o[c] = acc;
    }
}

/* bt[c][j] = rows[j][c] for j < T; rows have the given stride. */
INLINE void transpose_in(real *bt, const real *rows, size_t stride, int T, int Tp, int hd)
{
    for (int j = 0; j < T; j++)
        for (int c = 0; c < hd; c++)
            bt[(size_t)c * Tp + j] = rows[(size_t)j * stride + c];
}

/* Dropout of one (example, head) pair's probabilities: the example's hash
 * row, the element index of (query 0, key 0), the threshold and the scale
 * of kept elements; on = 0: none. */
typedef struct {
    int on;
    uint64_t row, base;
    uint32_t thr;
    real keep;
} pair_drop;

/* dst[i] = src[i] * mask(query i, key j) for i < T (the pair's probabilities
 * of key j are a row of the transposed layout; element (i, j) is base + i T + j). */
INLINE void drop_row(real *dst, const real *src, const pair_drop *dr, int j, int T)
{
    const uint64_t e0 = dr->base + (uint64_t)j;
#pragma omp simd
    for (int i = 0; i < T; i++)
        dst[i] = src[i] * (pt_dropout_bits(dr->row, e0 + (uint64_t)i * (uint64_t)T) >= dr->thr
                               ? dr->keep
                               : 0);
}

/* Marks a masked score; exp() of it is then replaced by an exact 0. */
#define MASKED ((real)-1e30)

/*
 * Scores are computed transposed, st[j][i] = k_j . q_i * scale (key rows,
 * query columns), so the softmax over keys j runs down columns: its max and
 * sum are vertical vector operations, with no horizontal reductions. probs
 * keeps the same transposed layout, pt[j][i] = P[i][j], row length T.
 * Causal: query i sees keys j <= i, so row j of st starts at column j.
 */
INLINE void fwd_pair(real *out, size_t out_stride, real *pt, const real *base, size_t stride,
                     int d, int T, int L, int hd, int causal, const pair_drop *dr, real *qt,
                     real *st, real *colmax, real *colsum)
{
    const int Tp = padded(T), nb = Tp / VW;
    const real scale = (real)1 / R_SQRT((real)hd);
    transpose_in(qt, base, stride, T, Tp, hd);
    for (int j = 0; j < L; j++) {
        real *row = st + (size_t)j * Tp;
        const int jb0 = causal ? j / VW : 0;
        for (int i = 0; i < jb0 * VW; i++)
            row[i] = MASKED;
        score_row(row + jb0 * VW, base + (size_t)j * stride + d, qt + jb0 * VW, hd, Tp, nb - jb0,
                  scale);
        if (causal)
            for (int i = jb0 * VW; i < j; i++)
                row[i] = MASKED;
    }
    for (int i = 0; i < Tp; i++) {
        colmax[i] = MASKED;
        colsum[i] = 0;
    }
    for (int j = 0; j < L; j++) {
        const real *row = st + (size_t)j * Tp;
#pragma omp simd
        for (int i = 0; i < Tp; i++)
            colmax[i] = row[i] > colmax[i] ? row[i] : colmax[i];
    }
    for (int j = 0; j < L; j++) {
        real *row = st + (size_t)j * Tp;
#pragma omp simd
        for (int i = 0; i < Tp; i++) {
            real e = R_EXP(row[i] - colmax[i]);
            e = row[i] > (real)0.5 * MASKED ? e : 0;
            row[i] = e;
            colsum[i] += e;
        }
    }
#pragma omp simd
    for (int i = 0; i < Tp; i++)
        colsum[i] = (real)1 / colsum[i];
    for (int j = 0; j < L; j++) {
        const real *row = st + (size_t)j * Tp;
        real *prow = pt + (size_t)j * T;
#pragma omp simd
        for (int i = 0; i < T; i++)
            prow[i] = row[i] * colsum[i];
    }
    for (int j = L; j < T; j++) /* padded keys: no query sees them */
        memset(pt + (size_t)j * T, 0, (size_t)T * sizeof *pt);
    /* the weights of the values: the probabilities, or (dropout) the dropped
     * ones, over the scores they came from */
    const real *w = pt;
    size_t wstride = (size_t)T;
    if (dr->on) {
        for (int j = 0; j < L; j++)
            drop_row(st + (size_t)j * Tp, pt + (size_t)j * T, dr, j, T);
        w = st;
        wstride = (size_t)Tp;
    }
    for (int i = 0; i < T; i++) {
        const int nj = causal && i + 1 < L ? i + 1 : L;
        weighted_rows(out + (size_t)i * out_stride, w + i, wstride, base + 2 * d, stride, nj, hd);
    }
}

/*
 * With P, dP and dS all kept transposed like the scores ([key j][query i]):
 * dP^T[j][i] = v_j . dout_i, dot[i] = sum_j P dP, dS^T = P^T (dP^T - dot) scale,
 * dq_i = sum_j dS^T[j][i] k_j, dk_j = sum_i dS^T[j][i] q_i, dv_j = sum_i P^T[j][i] dout_i;
 * the last two are weighted sums along contiguous rows of dS^T and P^T.
 * Dropout (mask M, kept elements scaled): v_j . dout_i is the gradient of the
 * dropped probability, dP = that times M, and dv_j takes the dropped
 * probabilities (kept in pd); dot and dS are as without it.
 */
INLINE void bwd_pair(real *dbase, const real *dout, size_t out_stride, const real *probs,
                     const real *base, size_t stride, int d, int T, int L, int hd, int causal,
                     const pair_drop *dr, real *got, real *pt, real *ds, real *dot, real *pd)
{
    const int Tp = padded(T), nb = Tp / VW;
    const real scale = (real)1 / R_SQRT((real)hd);
    transpose_in(got, dout, out_stride, T, Tp, hd);
    for (int j = 0; j < L; j++) {
        memcpy(pt + (size_t)j * Tp, probs + (size_t)j * T, (size_t)T * sizeof *pt);
        const int jb0 = causal ? j / VW : 0;
        real *row = ds + (size_t)j * Tp;
        for (int i = 0; i < jb0 * VW; i++)
            row[i] = 0;
        score_row(row + jb0 * VW, base + (size_t)j * stride + 2 * d, got + jb0 * VW, hd, Tp,
                  nb - jb0, 1);
    }
    if (dr->on)
        for (int j = 0; j < L; j++) {
            real *prow = pd + (size_t)j * Tp, *drow = ds + (size_t)j * Tp;
            drop_row(prow, pt + (size_t)j * Tp, dr, j, T);
            drop_row(drow, drow, dr, j, T);
        }
    for (int i = 0; i < Tp; i++)
        dot[i] = 0;
    for (int j = 0; j < L; j++) {
        const real *p = pt + (size_t)j * Tp, *dp = ds + (size_t)j * Tp;
#pragma omp simd
        for (int i = 0; i < Tp; i++)
            dot[i] += p[i] * dp[i];
    }
    for (int j = 0; j < L; j++) {
        const real *p = pt + (size_t)j * Tp;
        real *row = ds + (size_t)j * Tp;
#pragma omp simd
        for (int i = 0; i < Tp; i++)
            row[i] = p[i] * (row[i] - dot[i]) * scale;
    }
    for (int i = 0; i < T; i++) {
        const int nj = causal && i + 1 < L ? i + 1 : L;
        weighted_rows(dbase + (size_t)i * stride, ds + i, Tp, base + d, stride, nj, hd);
    }
    for (int j = 0; j < L; j++) {
        const int i0 = causal ? j : 0;
        weighted_rows(dbase + (size_t)j * stride + d, ds + (size_t)j * Tp + i0, 1,
                      base + (size_t)i0 * stride, stride, T - i0, hd);
        weighted_rows(dbase + (size_t)j * stride + 2 * d, (dr->on ? pd : pt) + (size_t)j * Tp + i0,
                      1, dout + (size_t)i0 * out_stride, out_stride, T - i0, hd);
    }
    for (int j = L; j < T; j++) { /* padded keys and values: nothing depends on them */
        memset(dbase + (size_t)j * stride + d, 0, (size_t)hd * sizeof *dbase);
        memset(dbase + (size_t)j * stride + 2 * d, 0, (size_t)hd * sizeof *dbase);
    }
}

/* Example b's valid keys: lens[b] clamped to [1, T], or T without a mask. */
static int key_count(const int32_t *lens, int b, int T)
{
    if (!lens)
        return T;
    return lens[b] < 1 ? 1 : lens[b] > T ? T : lens[b];
}

/* Example b, head h's dropout (none without drop or with p = 0). */
static pair_drop pair_dropout(const pt_dropout *drop, int b, int h, int T)
{
    pair_drop dr = {0, 0, 0, 0, 0};
    if (drop && drop->p > 0) {
        dr.on = 1;
        dr.row = pt_dropout_row(drop->key, drop->ids[b]);
        dr.base = (uint64_t)h * (uint64_t)T * (uint64_t)T;
        dr.thr = pt_dropout_threshold(drop->p);
        dr.keep = (real)(1.0 / (1.0 - drop->p));
    }
    return dr;
}

/* Calls body with HD a compile-time constant for the common head sizes. */
#define DISPATCH_HD(hd, body)                                                                      \
    switch (hd) {                                                                                  \
    case 16: {                                                                                     \
        const int HD = 16;                                                                         \
        body;                                                                                      \
    } break;                                                                                       \
    case 32: {                                                                                     \
        const int HD = 32;                                                                         \
        body;                                                                                      \
    } break;                                                                                       \
    case 64: {                                                                                     \
        const int HD = 64;                                                                         \
        body;                                                                                      \
    } break;                                                                                       \
    default: {                                                                                     \
        const int HD = hd;                                                                         \
        body;                                                                                      \
    }                                                                                              \
    }

/* The arguments of a call, and each thread's scratch (made by the thread's
 * first pair, zeroed then and only then). */
typedef struct {
    real *out, *probs; /* backward: dqkv, NULL */
    const real *qkv, *dout, *saved_probs;
    const int32_t *lens;
    int n, T, H, hd, causal;
    const pt_dropout *drop; /* NULL: none */
    long per;       /* pairs per task */
    real **scratch; /* [pool threads] */
} attn_job;

static real *thread_scratch(const attn_job *j, int thread, size_t elems)
{
    if (!j->scratch[thread])
        j->scratch[thread] = CPU_FN(pt_cpu_scratch)(elems * sizeof(real));
    return j->scratch[thread];
}

/* Multiply-adds per task: a pair of the demo ViT (T 17, hd 16) takes about
 * a microsecond, and claiming a task about a tenth of that, so a task holds
 * a dozen such pairs. */
enum { PAIR_TASK_WORK = 1 << 16 };

/* Runs fn on every (example, head) pair of the job, PAIR_TASK_WORK's worth a
 * task (so the pairs of a task are set by the shapes alone), then frees the
 * scratch. */
static void run_pairs(pt_backend *be, attn_job *j, pt_pool_fn fn)
{
    pt_pool *pool = PAR_POOL(be, (size_t)j->n * j->H * j->T * j->T * j->hd);
    const int threads = pt_pool_threads(pool);
    j->scratch = CPU_FN(pt_cpu_scratch)((size_t)threads * sizeof *j->scratch);
    const size_t pair = (size_t)j->T * j->T * j->hd;
    j->per = pair < PAIR_TASK_WORK ? (long)(PAIR_TASK_WORK / (pair ? pair : 1)) : 1;
    pt_pool_run(pool, tasks_for((long)j->n * j->H, j->per), fn, j);
    for (int i = 0; i < threads; i++)
        free(j->scratch[i]);
    free(j->scratch);
}

static void fwd_task(void *ctx, long task, int thread)
{
    const attn_job *j = ctx;
    real *out = j->out, *probs = j->probs;
    const real *qkv = j->qkv;
    const int32_t *lens = j->lens;
    const int T = j->T, H = j->H, hd = j->hd, causal = j->causal;
    const int d = H * hd, Tp = padded(T);
    const size_t stride = 3 * (size_t)d;
    {
        /* zeroed once: the padding columns of qt are never written */
        real *qt = thread_scratch(j, thread, (size_t)hd * Tp + (size_t)T * Tp + 2 * (size_t)Tp);
        real *st = qt + (size_t)hd * Tp, *colmax = st + (size_t)T * Tp, *colsum = colmax + Tp;
        long bh0, bh1;
        task_items(task, j->per, (long)j->n * H, &bh0, &bh1);
        for (int bh = (int)bh0; bh < bh1; bh++) {
            const int b = bh / H, h = bh % H;
            const real *base = qkv + (size_t)b * T * stride + (size_t)h * hd;
            real *o = out + (size_t)b * T * d + (size_t)h * hd;
            real *P = probs + (size_t)bh * T * T;
            const int L = key_count(lens, b, T);
            const pair_drop dr = pair_dropout(j->drop, b, h, T);
            DISPATCH_HD(hd, fwd_pair(o, d, P, base, stride, d, T, L, HD, causal, &dr, qt, st,
                                     colmax, colsum));
        }
    }
}

void CPU_FN(pt_cpu_attention_fwd)(pt_backend *be, void *out_, void *probs_, const void *qkv_,
                                  int n, int T, int H, int hd, int causal, const int32_t *lens,
                                  const pt_dropout *drop)
{
    attn_job j = {out_, probs_, qkv_, NULL, NULL, lens, n, T, H, hd, causal, drop, 0, NULL};
    run_pairs(be, &j, fwd_task);
}

static void bwd_task(void *ctx, long task, int thread)
{
    const attn_job *j = ctx;
    real *dqkv = j->out;
    const real *dout = j->dout, *qkv = j->qkv, *probs = j->saved_probs;
    const int32_t *lens = j->lens;
    const int T = j->T, H = j->H, hd = j->hd, causal = j->causal;
    const int d = H * hd, Tp = padded(T);
    const size_t stride = 3 * (size_t)d;
    const size_t dropped = j->drop && j->drop->p > 0 ? (size_t)T * Tp : 0; /* pd */
    {
        /* zeroed once: the padding columns of got and pt are never written */
        real *got = thread_scratch(j, thread, (size_t)hd * Tp + 2 * (size_t)T * Tp + Tp + dropped);
        real *pt = got + (size_t)hd * Tp, *ds = pt + (size_t)T * Tp, *dot = ds + (size_t)T * Tp;
        real *pd = dot + Tp;
        long bh0, bh1;
        task_items(task, j->per, (long)j->n * H, &bh0, &bh1);
        for (int bh = (int)bh0; bh < bh1; bh++) {
            const int b = bh / H, h = bh % H;
            const real *base = qkv + (size_t)b * T * stride + (size_t)h * hd;
            const real *go = dout + (size_t)b * T * d + (size_t)h * hd;
            real *dbase = dqkv + (size_t)b * T * stride + (size_t)h * hd;
            const real *P = probs + (size_t)bh * T * T;
            const int L = key_count(lens, b, T);
            const pair_drop dr = pair_dropout(j->drop, b, h, T);
            DISPATCH_HD(hd, bwd_pair(dbase, go, d, P, base, stride, d, T, L, HD, causal, &dr, got,
                                     pt, ds, dot, pd));
        }
    }
}

void CPU_FN(pt_cpu_attention_bwd)(pt_backend *be, void *dqkv_, const void *dout_,
                                  const void *qkv_, const void *probs_, const void *out_, int n,
                                  int T, int H, int hd, int causal, const int32_t *lens,
                                  const pt_dropout *drop)
{
    (void)out_; /* the saved probabilities give everything backward needs */
    attn_job j = {dqkv_, NULL, qkv_, dout_, probs_, lens, n, T, H, hd, causal, drop, 0, NULL};
    run_pairs(be, &j, bwd_task);
}
