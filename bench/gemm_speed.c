/*
 * gemm_speed.c: the float32 forward linear, y = x w^T, by pipetrain's kernel
 * (nn/cpu_gemm.c) and by OpenBLAS sgemm, on the shapes the models use,
 * measured in the same run at each thread count asked for.
 *
 * Shapes: M rows (a micro-batch's tokens: 128 x 17 = 2176 for the demo ViT's
 * batch, and 17 and 34 for one or two examples as the cache's recomputation
 * sees them) by (N, K) = (out, in) of the layers of d = 64 and d = 256
 * models and a narrow d = 32 one. Each side runs for about --min-time
 * seconds per sample, the two alternate --repeats times, and the fastest
 * single call of each is kept, so load from other users of a shared machine
 * does not decide the ratio. Both include everything a call costs (ours
 * packs w on every call, as the backend does). Ours runs on a thread pool
 * of pipetrain's (nn/cpu_pool.h) of the thread count, OpenBLAS on its own
 * (OpenMP) threads, set to the same count.
 *
 * usage: gemm_speed [--threads 1,2] [--min-time 0.05] [--repeats 5]
 * prints one line per (threads, shape) and the geometric mean of the ratios.
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

static void run_ours(shape *s)
{
    pt_gemm_nt_f32(pool, s->y, s->x, s->w, NULL, NULL, s->M, s->N, s->K);
}

static void run_blas(shape *s)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->M, s->N, s->K, 1.0f, s->x, s->K, s->w,
                s->K, 0.0f, s->y, s->N);
}

/* The fastest single call among those made in min_time seconds. On a
 * shared machine most calls may be slowed by other work (and with two
 * threads, one descheduled thread stalls the other at every barrier); the
 * fastest call is the one that ran undisturbed, for either side alike. */
static double sample(void (*fn)(shape *), shape *s, double min_time)
{
    double t0 = now(), best = 1e30, t = t0;
    do {
        const double a = now();
        fn(s);
        t = now();
        best = fmin(best, t - a);
    } while (t - t0 < min_time);
    return best;
}

int main(int argc, char **argv)
{
    const char *threads_arg = "1,2";
    double min_time = 0.05;
    int repeats = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads_arg = argv[++i];
        else if (!strcmp(argv[i], "--min-time") && i + 1 < argc)
            min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc)
            repeats = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--threads 1,2] [--min-time 0.05] [--repeats 5]\n", argv[0]);
            return 2;
        }
    }
    static const int Ms[] = {2176, 34, 17};
    static const int NKs[][2] = {{192, 64}, {64, 64},   {256, 64},  {64, 256},
                                 {96, 32},  {768, 256}, {256, 1024}};
    printf("kernel: %s; OpenBLAS: %s\n", pt_gemm_f32_isa(), openblas_get_config());
    printf("%7s %5s %5s %7s %12s %12s %7s\n", "threads", "M", "N", "K", "ours GF/s", "blas GF/s",
           "ratio");
    char *list = strdup(threads_arg);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        const int th = atoi(tok) > 0 ? atoi(tok) : 1;
        if (pt_pool_create(&pool, th, NULL)) {
            fprintf(stderr, "cannot start %d threads\n", th);
            return 1;
        }
        openblas_set_num_threads(th);
        double log_sum = 0;
        int count = 0;
        for (size_t m = 0; m < sizeof Ms / sizeof *Ms; m++)
            for (size_t j = 0; j < sizeof NKs / sizeof *NKs; j++) {
                shape s = {Ms[m], NKs[j][0], NKs[j][1], NULL, NULL, NULL};
                s.x = malloc((size_t)s.M * s.K * sizeof(float));
                s.w = malloc((size_t)s.N * s.K * sizeof(float));
                s.y = malloc((size_t)s.M * s.N * sizeof(float));
                float *ref = malloc((size_t)s.M * s.N * sizeof(float));
                srand(1);
                for (size_t i = 0; i < (size_t)s.M * s.K; i++)
                    s.x[i] = (float)rand() / RAND_MAX - 0.5f;
                for (size_t i = 0; i < (size_t)s.N * s.K; i++)
                    s.w[i] = (float)rand() / RAND_MAX - 0.5f;
                /* the two must compute the same thing before their speed means anything */
                run_blas(&s);
                memcpy(ref, s.y, (size_t)s.M * s.N * sizeof(float));
                run_ours(&s);
                double err = 0, mx = 0;
                for (size_t i = 0; i < (size_t)s.M * s.N; i++) {
                    err = fmax(err, fabs((double)s.y[i] - ref[i]));
                    mx = fmax(mx, fabs((double)ref[i]));
                }
                if (!(err <= 1e-5 * mx)) {
                    fprintf(stderr, "M=%d N=%d K=%d: results differ (%g of %g)\n", s.M, s.N, s.K,
                            err, mx);
                    return 1;
                }
                double best_ours = 1e30, best_blas = 1e30;
                for (int r = 0; r < repeats; r++) {
                    best_ours = fmin(best_ours, sample(run_ours, &s, min_time));
                    best_blas = fmin(best_blas, sample(run_blas, &s, min_time));
                }
                const double flops = 2.0 * s.M * s.N * s.K;
                const double ratio = best_blas / best_ours;
                printf("%7d %5d %5d %7d %12.1f %12.1f %7.2f\n", th, s.M, s.N, s.K,
                       flops / best_ours * 1e-9, flops / best_blas * 1e-9, ratio);
                fflush(stdout);
                log_sum += log(ratio);
                count++;
                free(s.x);
                free(s.w);
                free(s.y);
                free(ref);
            }
        printf("%7d geometric mean of ours / OpenBLAS: %.2f\n", th, exp(log_sum / count));
        pt_pool_destroy(pool);
    }
    free(list);
    return 0;
}
