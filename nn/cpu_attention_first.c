/*
 * cpu_attention_first.c: multi-head attention of the first query alone, for
 * the CPU backend (compiled twice, as every CPU backend file is:
 * nn/cpu_real.h).
 *
 * ViT's last block in training needs attention's output at [CLS] (each
 * example's position 0) only: per (example, head) pair, one query against
 * T keys. Rows are LANES-wide explicit vectors along the head dimension
 * (cpu_lanes.h: the last one masked, the same instructions for every
 * element), dot products one vector of partial sums added in a fixed tree,
 * so a pair's bits depend on T and hd only, not on where it sits or which
 * thread runs it.
 *
 * An example's heads are taken together, key row by key row: row t of kv
 * holds every head's key and value, [k | v], so each pass over the rows
 * (scores over the keys, the output over the values; in the backward the
 * probabilities' gradient over the values, then the rest over the keys)
 * reads one contiguous run of d elements per row, rows in order. (Head by
 * head, each pair read hd elements of every row, rows kilobytes apart: on
 * the wide ViT the first query ran at about 1.5 GB/s of kv read.) Each
 * head's arithmetic is what it was alone: every sum over t still runs in
 * ascending t, in the same vectors. */
#include "nn/cpu_real.h"
#include "nn/cpu_lanes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


typedef struct {
    real *out, *probs; /* backward: dq0, NULL */
    real *dkv;         /* backward */
    const real *q0, *kv, *dout, *saved_probs;
    int n, T, H, hd;
    long per;  /* examples per task */
    real **scratch; /* per pool thread: first_scratch(T, H, hd) elements */
} first_job;

/* a head's vectors along hd */
static int first_vectors(int hd) { return (hd + LANES - 1) / LANES; }

/* The backward's gradient of an example's scores (H x T, rounded up to
 * whole vectors; the forward keeps its scores in probs and leaves this
 * unused), then the heads' vector accumulators (H x first_vectors(hd)), then
 * in the backward the example's q and output gradient as vectors (the same
 * layout, each). */
static size_t first_scores(int T, int H) { return ((size_t)H * T + LANES - 1) / LANES * LANES; }
static size_t first_scratch(int T, int H, int hd)
{
    return first_scores(T, H) + 3 * (size_t)H * first_vectors(hd) * LANES;
}

/* q . k over hd elements, scaled */
static inline real first_dot(const real *q, const real *k, int hd, real scale)
{
    lanes_v acc = {0};
    for (int c = 0; c < hd; c += LANES)
        acc += lanes_at(q, c, hd, 0) * lanes_at(k, c, hd, 0);
    return lanes_fold(acc) * scale;
}

static void first_fwd_task(void *ctx, long task, int thread)
{
    const first_job *j = ctx;
    const int T = j->T, H = j->H, hd = j->hd, d = H * hd, nv = first_vectors(hd);
    const size_t stride = 2 * (size_t)d; /* kv's rows: [k | v] */
    const real scale = (real)(1.0 / sqrt((double)hd));
    lanes_v *acc = (lanes_v *)(j->scratch[thread] + first_scores(T, H));
    long b0, b1;
    task_items(task, j->per, j->n, &b0, &b1);
    for (long b = b0; b < b1; b++) {
        const real *q = j->q0 + (size_t)b * d, *kv = j->kv + (size_t)b * T * stride;
        real *probs = j->probs + (size_t)b * H * T, *o = j->out + (size_t)b * d;
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                probs[(size_t)h * T + t] =
                    first_dot(q + (size_t)h * hd, kv + (size_t)t * stride + (size_t)h * hd, hd, scale);
        for (int h = 0; h < H; h++) {
            real *p = probs + (size_t)h * T, top = -INFINITY, sum = 0;
            for (int t = 0; t < T; t++)
                top = p[t] > top ? p[t] : top;
            for (int t = 0; t < T; t++) {
                p[t] = R_EXP(p[t] - top);
                sum += p[t];
            }
            for (int t = 0; t < T; t++)
                p[t] /= sum;
        }
        for (int i = 0; i < H * nv; i++)
            acc[i] = (lanes_v){0};
        for (int t = 0; t < T; t++) {
            const real *v = kv + (size_t)t * stride + d;
            for (int h = 0; h < H; h++) {
                const real pt = probs[(size_t)h * T + t];
                for (int c = 0; c < nv; c++)
                    acc[h * nv + c] += pt * lanes_at(v + (size_t)h * hd, c * LANES, hd, 0);
            }
        }
        for (int h = 0; h < H; h++)
            for (int c = 0; c < nv; c++)
                lanes_put(o + (size_t)h * hd, c * LANES, hd, acc[h * nv + c]);
    }
}

static void first_bwd_task(void *ctx, long task, int thread)
{
    const first_job *j = ctx;
    const int T = j->T, H = j->H, hd = j->hd, d = H * hd, nv = first_vectors(hd);
    const size_t stride = 2 * (size_t)d;
    const real scale = (real)(1.0 / sqrt((double)hd));
    real *dp = j->scratch[thread];
    lanes_v *acc = (lanes_v *)(dp + first_scores(T, H)), *qv = acc + H * nv, *gv = qv + H * nv;
    long b0, b1;
    task_items(task, j->per, j->n, &b0, &b1);
    for (long b = b0; b < b1; b++) {
        const size_t at = (size_t)b * T * stride;
        const real *q = j->q0 + (size_t)b * d, *kv = j->kv + at;
        real *dq = j->out + (size_t)b * d, *dkv = j->dkv + at;
        const real *probs = j->saved_probs + (size_t)b * H * T;
        const real *g = j->dout + (size_t)b * d;
        /* per head: dP_t = g . v_t; dS_t = P_t (dP_t - sum_u P_u dP_u),
         * scaled with the scores' scale; dq = sum_t dS_t k_t, dk_t = dS_t q,
         * dv_t = P_t g */
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                dp[(size_t)h * T + t] = first_dot(g + (size_t)h * hd,
                                                  kv + (size_t)t * stride + d + (size_t)h * hd, hd, 1);
        for (int h = 0; h < H; h++) {
            const real *p = probs + (size_t)h * T;
            real *dh = dp + (size_t)h * T, mean = 0;
            for (int t = 0; t < T; t++)
                mean = R_FMA(p[t], dh[t], mean);
            for (int t = 0; t < T; t++)
                dh[t] = p[t] * (dh[t] - mean) * scale;
        }
        for (int h = 0; h < H; h++)
            for (int c = 0; c < nv; c++) {
                acc[h * nv + c] = (lanes_v){0};
                qv[h * nv + c] = lanes_at(q + (size_t)h * hd, c * LANES, hd, 0);
                gv[h * nv + c] = lanes_at(g + (size_t)h * hd, c * LANES, hd, 0);
            }
        for (int t = 0; t < T; t++) {
            const real *k = kv + (size_t)t * stride;
            real *dk = dkv + (size_t)t * stride, *dv = dk + d;
            for (int h = 0; h < H; h++) {
                const real st = dp[(size_t)h * T + t], pt = probs[(size_t)h * T + t];
                const size_t o = (size_t)h * hd;
                for (int c = 0; c < nv; c++) {
                    const int e = c * LANES;
                    acc[h * nv + c] += st * lanes_at(k + o, e, hd, 0);
                    lanes_put(dk + o, e, hd, st * qv[h * nv + c]);
                    lanes_put(dv + o, e, hd, pt * gv[h * nv + c]);
                }
            }
        }
        for (int h = 0; h < H; h++)
            for (int c = 0; c < nv; c++)
                lanes_put(dq + (size_t)h * hd, c * LANES, hd, acc[h * nv + c]);
    }
}

/* Multiply-adds per task, as for the pairs of the whole attention
 * (cpu_attention.c): an example's heads are a few microseconds' work on the
 * wide ViT, so a task holds whole examples, several when they are small. */
enum { FIRST_TASK_WORK = 1 << 16 };

static void run_first(pt_backend *be, first_job *j, pt_pool_fn fn)
{
    const size_t example = (size_t)j->H * j->T * j->hd;
    pt_pool *pool = PAR_POOL(be, (size_t)j->n * example);
    const int threads = pt_pool_threads(pool);
    j->per = example < FIRST_TASK_WORK ? (long)(FIRST_TASK_WORK / (example ? example : 1)) : 1;
    j->scratch = CPU_FN(pt_cpu_scratch)((size_t)threads * sizeof *j->scratch);
    for (int i = 0; i < threads; i++)
        j->scratch[i] = CPU_FN(pt_cpu_scratch)(first_scratch(j->T, j->H, j->hd) * sizeof(real));
    pt_pool_run(pool, tasks_for(j->n, j->per), fn, j);
    for (int i = 0; i < threads; i++)
        free(j->scratch[i]);
    free(j->scratch);
}

void CPU_FN(pt_cpu_attention_first_fwd)(pt_backend *be, void *out0, void *probs0, const void *q0,
                                        const void *kv, int n, int T, int H, int hd)
{
    first_job j = {out0, probs0, NULL, q0, kv, NULL, NULL, n, T, H, hd, 0, NULL};
    run_first(be, &j, first_fwd_task);
}

void CPU_FN(pt_cpu_attention_first_bwd)(pt_backend *be, void *dq0, void *dkv, const void *dout0,
                                        const void *q0, const void *kv, const void *probs0, int n,
                                        int T, int H, int hd)
{
    first_job j = {dq0, NULL, dkv, q0, kv, dout0, probs0, n, T, H, hd, 0, NULL};
    run_first(be, &j, first_bwd_task);
}
