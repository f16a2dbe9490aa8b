/*
 * gemm_speed.c: pipetrain's float32 matrix product kernels (nn/cpu_gemm.h)
 * against OpenBLAS sgemm, on the shapes the models use, measured in the
 * same run at each thread count asked for.
 *
 * Forward, y = x w^T (nn/cpu_gemm.c) against one sgemm call: M rows (a
 * micro-batch's tokens: 128 x 17 = 2176 for the demo ViT's batch, and 17
 * and 34 for one or two examples as the cache's recomputation sees them) by
 * (N, K) = (out, in) of the layers of d = 64 and d = 256 models and a
 * narrow d = 32 one. Ours runs on a thread pool of pipetrain's
 * (nn/cpu_pool.h) of the thread count, OpenBLAS on its own (OpenMP)
 * threads, set to the same count.
 *
 * Backward, the linear layer's dx = dy w and dw += dy^T x, ours
 * (pt_gemm_nn_f32, pt_gemm_tn_f32, and the two in one pool run as the
 * backend runs them) against the OpenBLAS path the backend had before:
 * single-threaded sgemm calls on fixed blocks of the output (dx in blocks
 * of rows, dw in blocks along its longer side), as tasks on the same pool,
 * OpenBLAS set to one thread on each of its threads. Shapes: the layers of
 * the demo ViT (d = 64, 128 x 17 = 2176 rows), a wide ViT (d = 256, 128 x
 * 50 = 6400 rows) and BERT-MiniLM (d = 384, 32 x 32 = 1024 rows): (out, in)
 * = (3d, d), (d, d), (4d, d), (d, 4d).
 *
 * Each side runs for about --min-time seconds per sample, the two alternate
 * --repeats times, and the fastest single call of each is kept, so load
 * from other users of a shared machine does not decide the ratio. Both
 * include everything a call costs (ours packs w on every call, as the
 * backend does).
 *
 * usage: gemm_speed [--threads 1,2] [--min-time 0.05] [--repeats 5] [--only fwd|bwd]
 *                   [--bwd-shape ROWS,OUT,IN]   (the backward of that shape alone)
 * prints one line per (threads, shape[, product]) and the geometric mean of
 * the ratios (OpenBLAS's time / ours: above 1, ours is faster).
 */
#include "nn/cpu_gemm.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    int M, N, K;
    float *x, *w, *y;
} shape;

static pt_pool *pool;

static void run_ours(void *arg)
{
    shape *s = arg;
    pt_gemm_nt_f32(pool, s->y, s->x, s->w, NULL, NULL, s->M, s->N, s->K);
}

static void run_blas(void *arg)
{
    shape *s = arg;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->M, s->N, s->K, 1.0f, s->x, s->K, s->w,
                s->K, 0.0f, s->y, s->N);
}

/* The fastest single call among those made in min_time seconds. On a
 * shared machine most calls may be slowed by other work (and with two
 * threads, one descheduled thread stalls the other at every barrier); the
 * fastest call is the one that ran undisturbed, for either side alike. */
static double sample(void (*fn)(void *), void *arg, double min_time)
{
    double t0 = now(), best = 1e30, t = t0;
    do {
        const double a = now();
        fn(arg);
        t = now();
        best = fmin(best, t - a);
    } while (t - t0 < min_time);
    return best;
}

/* Fastest of `repeats` alternating samples of each side: *ours, *blas. */
static void race(void (*ours)(void *), void (*blas)(void *), void *arg, double min_time,
                 int repeats, double *t_ours, double *t_blas)
{
    *t_ours = *t_blas = 1e30;
    for (int r = 0; r < repeats; r++) {
        *t_ours = fmin(*t_ours, sample(ours, arg, min_time));
        *t_blas = fmin(*t_blas, sample(blas, arg, min_time));
    }
}

static float *random_floats(size_t n)
{
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "gemm_speed: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        p[i] = (float)rand() / RAND_MAX - 0.5f;
    return p;
}

/* Largest |a - b| over n elements, relative to the largest |b|, or -1 if a
 * NaN appears. */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double err = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (d != d)
            return -1;
        err = fmax(err, d);
        mx = fmax(mx, fabs((double)b[i]));
    }
    return mx > 0 ? err / mx : err;
}

/* ----------------------------------------------------------------- forward */

static int forward(int th, double min_time, int repeats, double *log_sum, int *count)
{
    static const int Ms[] = {2176, 34, 17};
    static const int NKs[][2] = {{192, 64}, {64, 64},   {256, 64},  {64, 256},
                                 {96, 32},  {768, 256}, {256, 1024}};
    openblas_set_num_threads(th);
    for (size_t m = 0; m < sizeof Ms / sizeof *Ms; m++)
        for (size_t j = 0; j < sizeof NKs / sizeof *NKs; j++) {
            shape s = {Ms[m], NKs[j][0], NKs[j][1], NULL, NULL, NULL};
            srand(1);
            s.x = random_floats((size_t)s.M * s.K);
            s.w = random_floats((size_t)s.N * s.K);
            s.y = random_floats((size_t)s.M * s.N);
            float *ref = malloc((size_t)s.M * s.N * sizeof(float));
            /* the two must compute the same thing before their speed means anything */
            run_blas(&s);
            memcpy(ref, s.y, (size_t)s.M * s.N * sizeof(float));
            run_ours(&s);
            const double err = rel_diff(s.y, ref, (size_t)s.M * s.N);
            if (!(err >= 0 && err <= 1e-5)) {
                fprintf(stderr, "M=%d N=%d K=%d: results differ (%g relative)\n", s.M, s.N, s.K,
                        err);
                return 1;
            }
            double best_ours, best_blas;
            race(run_ours, run_blas, &s, min_time, repeats, &best_ours, &best_blas);
            const double flops = 2.0 * s.M * s.N * s.K;
            const double ratio = best_blas / best_ours;
            printf("%7d %5d %5d %7d %12.1f %12.1f %7.2f\n", th, s.M, s.N, s.K,
                   flops / best_ours * 1e-9, flops / best_blas * 1e-9, ratio);
            fflush(stdout);
            *log_sum += log(ratio);
            (*count)++;
            free(s.x);
            free(s.w);
            free(s.y);
            free(ref);
        }
    return 0;
}

/* ---------------------------------------------------------------- backward */

typedef struct {
    int rows, out, in;
    float *dy, *x, *w, *dx, *dw;
    /* the OpenBLAS path's blocks (as the float64 oracle has them, nn/cpu_linear.c) */
    int dw_by_rows, dw_width, dw_tasks, dx_rows, dx_tasks;
    /* ours, both products in one run */
    pt_gemm_tn tn;
    long tn_tasks;
} bshape;

enum { DW_BLOCK = 256, DX_BLOCK_FMAS = 1 << 23, DX_MIN_ROWS = 64, BWD_ALIGN = 16 };

static int block_width(int n, int most)
{
    const int blocks = (n + most - 1) / most;
    const int w = ((n + blocks - 1) / blocks + BWD_ALIGN - 1) / BWD_ALIGN * BWD_ALIGN;
    return w < n ? w : n;
}

static void blas_plan(bshape *b)
{
    b->dw_by_rows = b->out >= b->in;
    const int n = b->dw_by_rows ? b->out : b->in;
    b->dw_width = block_width(n, DW_BLOCK);
    b->dw_tasks = (n + b->dw_width - 1) / b->dw_width;
    const double per = (double)DX_BLOCK_FMAS / ((double)b->out * b->in);
    b->dx_rows = block_width(b->rows, per < DX_MIN_ROWS ? DX_MIN_ROWS
                                      : per > b->rows ? b->rows
                                                      : (int)per);
    b->dx_tasks = (b->rows + b->dx_rows - 1) / b->dx_rows;
}

static void blas_dw_block(const bshape *b, long t)
{
    const int rows = b->rows, out = b->out, in = b->in, wd = b->dw_width;
    if (b->dw_by_rows) {
        const int o0 = (int)t * wd, m = out - o0 < wd ? out - o0 : wd;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, in, rows, 1.0f, b->dy + o0, out,
                    b->x, in, 1.0f, b->dw + (size_t)o0 * in, in);
    } else {
        const int i0 = (int)t * wd, n = in - i0 < wd ? in - i0 : wd;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, n, rows, 1.0f, b->dy, out,
                    b->x + i0, in, 1.0f, b->dw + i0, in);
    }
}

static void blas_dx_block(const bshape *b, long t)
{
    const int r0 = (int)t * b->dx_rows, m = b->rows - r0 < b->dx_rows ? b->rows - r0 : b->dx_rows;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, b->in, b->out, 1.0f,
                b->dy + (size_t)r0 * b->out, b->out, b->w, b->in, 0.0f, b->dx + (size_t)r0 * b->in,
                b->in);
}

static void blas_dw_task(void *ctx, long t, int thread)
{
    (void)thread;
    blas_dw_block(ctx, t);
}

static void blas_dx_task(void *ctx, long t, int thread)
{
    (void)thread;
    blas_dx_block(ctx, t);
}

static void blas_both_task(void *ctx, long t, int thread)
{
    (void)thread;
    const bshape *b = ctx;
    if (t < b->dw_tasks)
        blas_dw_block(b, t);
    else
        blas_dx_block(b, t - b->dw_tasks);
}

static void run_blas_dx(void *arg)
{
    bshape *b = arg;
    pt_pool_run(pool, b->dx_tasks, blas_dx_task, b);
}

static void run_blas_dw(void *arg)
{
    bshape *b = arg;
    pt_pool_run(pool, b->dw_tasks, blas_dw_task, b);
}

static void run_blas_both(void *arg)
{
    bshape *b = arg;
    pt_pool_run(pool, (long)b->dw_tasks + b->dx_tasks, blas_both_task, b);
}

static void run_ours_dx(void *arg)
{
    bshape *b = arg;
    pt_gemm_nn_f32(pool, b->dx, b->dy, b->w, b->rows, b->in, b->out);
}

static void run_ours_dw(void *arg)
{
    bshape *b = arg;
    pt_gemm_tn_f32(pool, b->dw, NULL, b->dy, b->x, b->rows, b->out, b->in);
}

static void tn_task(void *ctx, long t, int thread)
{
    (void)thread;
    pt_gemm_tn_task(ctx, t);
}

static void tn_reduce_task(void *ctx, long t, int thread)
{
    (void)thread;
    pt_gemm_tn_reduce_task(ctx, t);
}

/* as the backend runs them: dx's tiles and dw's partial sums by chunks of
 * rows in one run, then their sum (nn/cpu_linear.c) */
static void run_ours_both(void *arg)
{
    bshape *b = arg;
    b->tn_tasks = pt_gemm_tn_plan(&b->tn, b->dw, NULL, b->dy, b->x, b->rows, b->out, b->in);
    pt_gemm_nn_f32_with(pool, b->dx, b->dy, b->w, NULL, b->rows, b->in, b->out, b->tn_tasks,
                        b->tn.chunks, tn_task, &b->tn);
    pt_pool_run(pool, pt_gemm_tn_reduce_tasks(&b->tn), tn_reduce_task, &b->tn);
    pt_gemm_tn_done(&b->tn);
}

static void blas_one_thread(void) { openblas_set_num_threads(1); }

/* --bwd-shape ROWS,OUT,IN: the backward products of that one shape instead */
static int bwd_shape[3];

static int backward(int th, double min_time, int repeats, double *log_sum, int *count)
{
    static const struct {
        const char *name;
        int rows, d;
    } models[] = {{"vit-demo", 128 * 17, 64}, {"vit-wide", 128 * 50, 256}, {"minilm", 32 * 32, 384},
                  {"custom", 0, 0}};
    openblas_set_num_threads(1); /* the workers were set so when the pool started */
    for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
        const int d = models[m].d, custom = !strcmp(models[m].name, "custom");
        if (custom != (bwd_shape[0] > 0))
            continue; /* --bwd-shape: that shape alone */
        const int shapes[][2] = {{3 * d, d}, {d, d}, {4 * d, d}, {d, 4 * d}};
        for (size_t j = 0; j < (custom ? 1 : sizeof shapes / sizeof *shapes); j++) {
            bshape b;
            memset(&b, 0, sizeof b);
            b.rows = custom ? bwd_shape[0] : models[m].rows;
            b.out = custom ? bwd_shape[1] : shapes[j][0];
            b.in = custom ? bwd_shape[2] : shapes[j][1];
            const size_t ndy = (size_t)b.rows * b.out, nx = (size_t)b.rows * b.in;
            const size_t nw = (size_t)b.out * b.in;
            srand(1);
            b.dy = random_floats(ndy);
            b.x = random_floats(nx);
            b.w = random_floats(nw);
            b.dx = random_floats(nx);
            b.dw = random_floats(nw);
            blas_plan(&b);
            /* the same results first: dx, and the increment of dw */
            float *ref_dx = malloc(nx * sizeof(float)), *ref_dw = malloc(nw * sizeof(float));
            float *dw0 = malloc(nw * sizeof(float));
            memcpy(dw0, b.dw, nw * sizeof(float));
            run_blas_both(&b);
            memcpy(ref_dx, b.dx, nx * sizeof(float));
            memcpy(ref_dw, b.dw, nw * sizeof(float));
            memcpy(b.dw, dw0, nw * sizeof(float));
            run_ours_both(&b);
            for (size_t i = 0; i < nw; i++) {
                ref_dw[i] -= dw0[i];
                b.dw[i] -= dw0[i];
            }
            const double e_dx = rel_diff(b.dx, ref_dx, nx), e_dw = rel_diff(b.dw, ref_dw, nw);
            if (!(e_dx >= 0 && e_dx <= 1e-5 && e_dw >= 0 && e_dw <= 1e-5)) {
                fprintf(stderr, "%s rows=%d out=%d in=%d: results differ (dx %g, dw %g)\n",
                        models[m].name, b.rows, b.out, b.in, e_dx, e_dw);
                return 1;
            }
            static const struct {
                const char *what;
                void (*ours)(void *), (*blas)(void *);
                double fmas; /* per rows * out * in */
            } products[] = {{"dx", run_ours_dx, run_blas_dx, 1},
                            {"dw", run_ours_dw, run_blas_dw, 1},
                            {"dx+dw", run_ours_both, run_blas_both, 2}};
            for (size_t p = 0; p < sizeof products / sizeof *products; p++) {
                double best_ours, best_blas;
                race(products[p].ours, products[p].blas, &b, min_time, repeats, &best_ours,
                     &best_blas);
                const double flops = 2.0 * products[p].fmas * b.rows * b.out * b.in;
                const double ratio = best_blas / best_ours;
                printf("%7d %-8s %5d %5d %5d %-6s %12.1f %12.1f %7.2f\n", th, models[m].name,
                       b.rows, b.out, b.in, products[p].what, flops / best_ours * 1e-9,
                       flops / best_blas * 1e-9, ratio);
                fflush(stdout);
                log_sum[p] += log(ratio);
                count[p]++;
            }
            free(b.dy), free(b.x), free(b.w), free(b.dx), free(b.dw);
            free(ref_dx), free(ref_dw), free(dw0);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *threads_arg = "1,2", *only = "";
    double min_time = 0.05;
    int repeats = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads_arg = argv[++i];
        else if (!strcmp(argv[i], "--min-time") && i + 1 < argc)
            min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc)
            repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--bwd-shape") && i + 1 < argc &&
                 sscanf(argv[i + 1], "%d,%d,%d", &bwd_shape[0], &bwd_shape[1], &bwd_shape[2]) == 3 &&
                 bwd_shape[0] > 0 && bwd_shape[1] > 0 && bwd_shape[2] > 0)
            i++;
        else {
            fprintf(stderr,
                    "usage: %s [--threads 1,2] [--min-time 0.05] [--repeats 5] [--only fwd|bwd]\n"
                    "       [--bwd-shape ROWS,OUT,IN]\n",
                    argv[0]);
            return 2;
        }
    }
    const int fwd = strcmp(only, "bwd") != 0, bwd = strcmp(only, "fwd") != 0;
    printf("kernels: %s; OpenBLAS: %s\n", pt_gemm_f32_isa(), openblas_get_config());
    char *list = strdup(threads_arg);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        const int th = atoi(tok) > 0 ? atoi(tok) : 1;
        if (pt_pool_create(&pool, th, blas_one_thread)) {
            fprintf(stderr, "cannot start %d threads\n", th);
            return 1;
        }
        if (fwd) {
            double log_sum = 0;
            int count = 0;
            printf("forward y = x w^T: ours against one sgemm call on OpenBLAS's %d thread%s\n", th,
                   th == 1 ? "" : "s");
            printf("%7s %5s %5s %7s %12s %12s %7s\n", "threads", "M", "N", "K", "ours GF/s",
                   "blas GF/s", "ratio");
            if (forward(th, min_time, repeats, &log_sum, &count))
                return 1;
            printf("%7d geometric mean of ours / OpenBLAS: %.2f\n", th, exp(log_sum / count));
        }
        if (bwd) {
            double log_sum[3] = {0};
            int count[3] = {0};
            printf("backward dx = dy w, dw += dy^T x: ours against single-threaded sgemm blocks, "
                   "both on a pool of %d\n", th);
            printf("%7s %-8s %5s %5s %5s %-6s %12s %12s %7s\n", "threads", "model", "rows", "out",
                   "in", "prod", "ours GF/s", "blas GF/s", "ratio");
            if (backward(th, min_time, repeats, log_sum, count))
                return 1;
            printf("%7d geometric mean of ours / OpenBLAS: dx %.2f, dw %.2f, dx+dw %.2f\n", th,
                   exp(log_sum[0] / count[0]), exp(log_sum[1] / count[1]),
                   exp(log_sum[2] / count[2]));
        }
        pt_pool_destroy(pool);
    }
    free(list);
    return 0;
}
