/*
 * cpu_norm.c: the CPU backend's LayerNorm, forward and backward, each row
 * in a fixed order of its own. Compiled twice, as every CPU backend file is
 * (nn/cpu_real.h); the ops table and the determinism rules all of them
 * follow are in nn/cpu_ops.c.
 */
#include "nn/cpu_real.h"
#include "nn/cpu_lanes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -------------------------------------------------------------- layernorm */

/* Rows per group of the layernorm forward: their sums are independent
 * chains of additions and folds, run side by side so that one row's latency
 * hides another's. (The backward's row has more to do and runs alone: four
 * rows side by side were faster at d 64 but slower at d 256.) */
enum { LN_ROWS = 4 };

/* Per row: the sum of x and then of (x - mean)^2 in lanes order (cpu_lanes.h:
 * LANES partial sums, lane l adding elements l, l + LANES, ..., then
 * lanes_fold), the output by explicit fused multiply-adds, so a row's bits
 * depend on the row alone (not on the rows it shares a group or a task
 * with). A task's rows run in groups of LN_ROWS. */
typedef struct {
    real *y, *mean, *rstd;
    const real *x, *w, *b;
    int rows, dim;
    double eps;
    long per;
} ln_fwd_job;

static void ln_fwd_task(void *ctx, long t, int thread)
{
    (void)thread;
    const ln_fwd_job *j = ctx;
    real *y = j->y, *mean = j->mean, *rstd = j->rstd;
    const real *x = j->x, *w = j->w, *b = j->b;
    const int dim = j->dim;
    const double eps = j->eps;
    long t0, t1;
    task_items(t, j->per, j->rows, &t0, &t1);
    for (int r0 = (int)t0; r0 < t1; r0 += LN_ROWS) {
        const int nr = t1 - r0 < LN_ROWS ? (int)(t1 - r0) : LN_ROWS;
        const real *xr[LN_ROWS];
        real m[LN_ROWS], rs[LN_ROWS];
        for (int g = 0; g < LN_ROWS; g++)
            xr[g] = x + (size_t)(r0 + (g < nr ? g : 0)) * dim;
#ifdef PT_LANES_PAIR
        lanes_pair pa[LN_ROWS];
        for (int g = 0; g < LN_ROWS; g++)
            pa[g] = lanes_pair_zero();
        for (int i = 0; i < dim; i += LANES)
            for (int g = 0; g < LN_ROWS; g++)
                pa[g] = lanes_pair_add(pa[g], lanes_pair_at(xr[g], i, dim, 0));
        for (int g = 0; g < LN_ROWS; g++) {
            m[g] = lanes_pair_fold(pa[g]) / dim;
            pa[g] = lanes_pair_zero();
        }
        for (int i = 0; i < dim; i += LANES)
            for (int g = 0; g < LN_ROWS; g++)
                pa[g] = lanes_pair_add_sq_diff(pa[g], lanes_pair_at(xr[g], i, dim, m[g]), m[g]);
        for (int g = 0; g < LN_ROWS; g++)
            rs[g] = (real)1 / R_SQRT(lanes_pair_fold(pa[g]) / dim + (real)eps);
#else
        lanes_v acc[LN_ROWS];
        for (int g = 0; g < LN_ROWS; g++)
            acc[g] = (lanes_v){0};
        for (int i = 0; i < dim; i += LANES)
            for (int g = 0; g < LN_ROWS; g++)
                acc[g] += lanes_at(xr[g], i, dim, 0);
        for (int g = 0; g < LN_ROWS; g++) {
            m[g] = lanes_fold(acc[g]) / dim;
            acc[g] = (lanes_v){0};
        }
        for (int i = 0; i < dim; i += LANES)
            for (int g = 0; g < LN_ROWS; g++) {
                const lanes_v d = lanes_at(xr[g], i, dim, m[g]) - m[g];
                acc[g] += d * d;
            }
        for (int g = 0; g < LN_ROWS; g++)
            rs[g] = (real)1 / R_SQRT(lanes_fold(acc[g]) / dim + (real)eps);
#endif
        for (int g = 0; g < nr; g++) {
            real *yr = y + (size_t)(r0 + g) * dim;
            const real mg = m[g], rg = rs[g];
            const real *xg = xr[g];
#pragma omp simd
            for (int i = 0; i < dim; i++)
                yr[i] = R_FMA((xg[i] - mg) * rg, w[i], b[i]);
            mean[r0 + g] = mg;
            rstd[r0 + g] = rg;
        }
    }
}

void CPU_FN(pt_cpu_layernorm_fwd)(pt_backend *be, void *y_, void *mean_, void *rstd_,
                                  const void *x_, const void *w_, const void *b_, int rows, int dim,
                                  double eps)
{
    ln_fwd_job j = {y_, mean_, rstd_, x_, w_, b_, rows, dim, eps, per_task((size_t)dim)};
    pt_pool_run(PAR_POOL(be, (size_t)rows * dim), tasks_for(rows, j.per), ln_fwd_task, &j);
}

typedef struct {
    real *dx, *part;
    const real *dy, *x, *mean, *rstd, *w, *add;
    int rows, dim;
} ln_bwd_job;

/* task t: chunk t of CHUNK_ROWS rows */
static void ln_bwd_task(void *ctx, long t, int thread)
{
    (void)thread;
    const ln_bwd_job *j = ctx;
    real *dx = j->dx, *part = j->part;
    const real *dy = j->dy, *x = j->x, *mean = j->mean, *rstd = j->rstd, *w = j->w, *add = j->add;
    const int rows = j->rows, dim = j->dim;
    for (int c = (int)t; c < t + 1; c++) {
        real *pw = part ? part + (size_t)c * 2 * dim : NULL, *pb = pw ? pw + dim : NULL;
        int r1 = (c + 1) * CHUNK_ROWS < rows ? (c + 1) * CHUNK_ROWS : rows;
        for (int r = c * CHUNK_ROWS; r < r1; r++) {
            const real *xr = x + (size_t)r * dim, *dyr = dy + (size_t)r * dim;
            const real m = mean[r], rs = rstd[r];
            /* one pass: pw += dy * xhat and pb += dy (rows in order: the
             * chunk fixes these sums' order), and for dx = rstd * (g -
             * mean(g) - xhat * mean(g * xhat)), g = dy * w, the row's two
             * sums: LANES partial sums, then the lanes added in order (the
             * order GCC gave the omp simd reduction this replaces, so the
             * bits are the same; the layouts' tests compare runs whose
             * rounding differences grow over training, and a new order
             * moved some of them across their tolerances) */
#ifdef PT_LANES_PAIR
            /* the same operations on pairs (cpu_lanes.h), rounded as GCC
             * compiles the lanes_v loop below under -ffp-contract=fast
             * (checked bit for bit against it): acc_gx's last product fused
             * into its addition, the dw partial's product rounded before
             * its addition */
            const __m256 mv = _mm256_set1_ps(m), rsv = _mm256_set1_ps(rs);
            lanes_pair acc_g = lanes_pair_zero(), acc_gx = lanes_pair_zero();
            for (int i = 0; i < dim; i += LANES) {
                const lanes_pair dyv = lanes_pair_at(dyr, i, dim, 0), xv = lanes_pair_at(xr, i, dim, m);
                const lanes_pair xm = {_mm256_sub_ps(xv.lo, mv), _mm256_sub_ps(xv.hi, mv)};
                if (pw) {
                    const lanes_pair pwv = lanes_pair_at(pw, i, dim, 0);
                    lanes_pair_put(pw, i, dim,
                                   lanes_pair_add(pwv, lanes_pair_rounded_mul(
                                                           dyv, (lanes_pair){_mm256_mul_ps(xm.lo, rsv),
                                                                             _mm256_mul_ps(xm.hi, rsv)})));
                    lanes_pair_put(pb, i, dim, lanes_pair_add(lanes_pair_at(pb, i, dim, 0), dyv));
                }
                const lanes_pair wv = lanes_pair_at(w, i, dim, 0);
                const lanes_pair gv = {_mm256_mul_ps(dyv.lo, wv.lo), _mm256_mul_ps(dyv.hi, wv.hi)};
                acc_g = lanes_pair_add(acc_g, gv);
                acc_gx = (lanes_pair){_mm256_fmadd_ps(_mm256_mul_ps(gv.lo, xm.lo), rsv, acc_gx.lo),
                                      _mm256_fmadd_ps(_mm256_mul_ps(gv.hi, xm.hi), rsv, acc_gx.hi)};
            }
            if (!dx)
                continue;
            const real sg = lanes_pair_sum_in_order(acc_g) / dim,
                       sgx = lanes_pair_sum_in_order(acc_gx) / dim;
#else
            lanes_v acc_g = {0}, acc_gx = {0};
            for (int i = 0; i < dim; i += LANES) {
                const lanes_v dyv = lanes_at(dyr, i, dim, 0), xv = lanes_at(xr, i, dim, m);
                if (pw) {
                    const lanes_v xhat = (xv - m) * rs;
                    lanes_put(pw, i, dim, lanes_at(pw, i, dim, 0) + dyv * xhat);
                    lanes_put(pb, i, dim, lanes_at(pb, i, dim, 0) + dyv);
                }
                const lanes_v gv = dyv * lanes_at(w, i, dim, 0);
                acc_g += gv;
                acc_gx += gv * (xv - m) * rs;
            }
            if (!dx)
                continue;
            const real sg = lanes_sum_in_order(acc_g) / dim, sgx = lanes_sum_in_order(acc_gx) / dim;
#endif
            real *dxr = dx + (size_t)r * dim;
            if (dim == 1) {
                /* one feature: the output is the bias whatever x is, so dx
                 * is exactly 0 (the formula's dy w - sg, contracted into a
                 * fused multiply-add, is the product's rounding error, which
                 * rstd, up to 1e6 at BERT's epsilon, turns into noise that
                 * AdamW then follows) */
                dxr[0] = add ? add[r] : 0;
                continue;
            }
            if (add) {
                const real *ar = add + (size_t)r * dim;
#pragma omp simd
                for (int i = 0; i < dim; i++)
                    dxr[i] = ar[i] + rs * (dyr[i] * w[i] - sg - (xr[i] - m) * rs * sgx);
            } else {
#pragma omp simd
                for (int i = 0; i < dim; i++)
                    dxr[i] = rs * (dyr[i] * w[i] - sg - (xr[i] - m) * rs * sgx);
            }
        }
    }
}

void CPU_FN(pt_cpu_layernorm_bwd)(pt_backend *be, void *dx_, void *dw_, void *db_, const void *dy_,
                                  const void *x_, const void *mean_, const void *rstd_,
                                  const void *w_, int rows, int dim, const void *add_)
{
    real *dx = dx_, *dw = dw_, *db = db_;
    int chunks = (rows + CHUNK_ROWS - 1) / CHUNK_ROWS;
    real *part = (dw || db) ? CPU_FN(pt_cpu_scratch)((size_t)chunks * 2 * dim * sizeof *part) : NULL;
    ln_bwd_job j = {dx, part, dy_, x_, mean_, rstd_, w_, add_, rows, dim};
    pt_pool_run(PAR_POOL(be, (size_t)rows * dim), chunks, ln_bwd_task, &j);
    if (part) {
        for (int c = 0; c < chunks; c++) {
            const real *pw = part + (size_t)c * 2 * dim, *pb = pw + dim;
            for (int i = 0; i < dim; i++) {
                if (dw)
                    dw[i] += pw[i];
                if (db)
                    db[i] += pb[i];
            }
        }
        free(part);
    }
}
