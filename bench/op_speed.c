/*
 * op_speed.c: the time of single calls of the CPU backend's ops on the demo
 * ViT's shapes (batch 128 x 17 tokens, d = 64, 4 heads, MLP 256), or with
 * --model wide on torch_speed's wide ViT's (128 x 50 tokens, d = 256, 8
 * heads, MLP 1024): the
 * linear forward and backward of each of its four layer shapes, attention,
 * GELU and LayerNorm forward and backward, and AdamW. Each op is called
 * --reps times in a row and the fastest and the median call are printed,
 * with GFLOP/s (nominal, as run.profile_ops counts them) of the fastest: on
 * a machine shared with other work the fastest call is the one that ran
 * undisturbed. Inputs are random; nothing is checked (the tests do that).
 *
 * It calls the backend only through pt_backend_open and its ops table, so
 * the same source built against another pipetrain's nn library measures
 * that one (how the linear backward was compared before and after its
 * products moved from sgemm blocks to pipetrain's kernels, nn/cpu_linear.c).
 *
 * usage: op_speed [--threads 1] [--reps 300] [--only SUBSTRING] [--model demo|wide]
 */
#include "nn/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *rnd(size_t n)
{
    float *p = aligned_alloc(64, (n * sizeof *p + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "op_speed: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        p[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * 0.2f;
    return p;
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int reps = 300;
static const char *only = "";
static double *times;

#define TIME(name, flops, call)                                                                    \
    do {                                                                                           \
        if (!strstr(name, only))                                                                   \
            break;                                                                                 \
        for (int r_ = 0; r_ < reps; r_++) {                                                        \
            const double t_ = now();                                                               \
            call;                                                                                  \
            times[r_] = now() - t_;                                                                \
        }                                                                                          \
        qsort(times, (size_t)reps, sizeof *times, by_value);                                       \
        printf("%-24s fastest %9.1f us  median %9.1f us", name, 1e6 * times[0],                    \
               1e6 * times[reps / 2]);                                                             \
        if ((flops) > 0)                                                                           \
            printf("  %7.1f GFLOP/s", (flops) / times[0] * 1e-9);                                  \
        printf("\n");                                                                              \
        fflush(stdout);                                                                            \
    } while (0)

int main(int argc, char **argv)
{
    int threads = 1, wide = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--model") && i + 1 < argc &&
                 (!strcmp(argv[i + 1], "demo") || !strcmp(argv[i + 1], "wide")))
            wide = !strcmp(argv[++i], "wide");
        else {
            fprintf(stderr, "usage: %s [--threads 1] [--reps 300] [--only SUBSTRING] [--model demo|wide]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "op_speed: --threads and --reps must be at least 1\n");
        return 2;
    }
    times = malloc((size_t)reps * sizeof *times);
    pt_backend *be;
    pt_err err = {0};
    if (!times || pt_backend_open(&be, "cpu", threads, &err)) {
        fprintf(stderr, "op_speed: cannot open the CPU backend: %s\n", err.msg);
        return 1;
    }
    const pt_ops *o = be->ops;
    const int N = 128, T = wide ? 50 : 17, ROWS = N * T, D = wide ? 256 : 64, H = wide ? 8 : 4;
    const int HD = D / H, MLP = 4 * D;
    printf("%s ViT shapes, %d thread%s, fastest and median of %d calls\n", wide ? "wide" : "demo",
           threads, threads == 1 ? "" : "s", reps);
    const int shapes[][2] = {{3 * D, D}, {D, D}, {MLP, D}, {D, MLP}}; /* (out, in) */
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int out = shapes[s][0], in = shapes[s][1];
        float *x = rnd((size_t)ROWS * in), *w = rnd((size_t)out * in), *b = rnd((size_t)out);
        float *y = rnd((size_t)ROWS * out), *dy = rnd((size_t)ROWS * out);
        float *dx = rnd((size_t)ROWS * in), *dw = rnd((size_t)out * in), *db = rnd((size_t)out);
        const double flops = 2.0 * ROWS * out * in;
        char name[64];
        snprintf(name, sizeof name, "linear_fwd %dx%d", out, in);
        TIME(name, flops, o->linear_fwd(be, y, x, w, b, ROWS, out, in, NULL));
        snprintf(name, sizeof name, "linear_bwd %dx%d", out, in);
        TIME(name, 2 * flops, o->linear_bwd(be, dx, dw, db, dy, x, w, ROWS, out, in));
        free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db);
    }
    float *qkv = rnd((size_t)ROWS * 3 * D), *att = rnd((size_t)ROWS * D);
    float *probs = rnd((size_t)N * H * T * T), *dqkv = rnd((size_t)ROWS * 3 * D);
    const double att_flops = 4.0 * N * H * T * T * HD;
    TIME("attention_fwd", att_flops, o->attention_fwd(be, att, probs, qkv, N, T, H, HD, 0, NULL, NULL));
    TIME("attention_bwd", 2 * att_flops,
         o->attention_bwd(be, dqkv, att, qkv, probs, att, N, T, H, HD, 0, NULL, NULL));
    const size_t n = (size_t)ROWS * MLP;
    float *gx = rnd(n), *gy = rnd(n), *gd = rnd(n), *gg = rnd(n);
    TIME("gelu_fwd", 0, o->gelu_fwd(be, gy, gg, gx, n));
    TIME("gelu_bwd", 0, o->gelu_bwd(be, gy, gd, gg, n));
    float *lx = rnd((size_t)ROWS * D), *ly = rnd((size_t)ROWS * D), *lw = rnd(D), *lb = rnd(D);
    float *mean = rnd(ROWS), *rstd = rnd(ROWS), *ldx = rnd((size_t)ROWS * D);
    float *ldw = rnd(D), *ldb = rnd(D);
    TIME("layernorm_fwd", 0, o->layernorm_fwd(be, ly, mean, rstd, lx, lw, lb, ROWS, D, 1e-5));
    TIME("layernorm_bwd", 0,
         o->layernorm_bwd(be, ldx, ldw, ldb, ly, lx, mean, rstd, lw, ROWS, D, NULL));
    const size_t P = (size_t)MLP * D; /* the largest weight of a block */
    float *p = rnd(P), *g = rnd(P), *m = rnd(P), *v = rnd(P);
    for (size_t i = 0; i < P; i++)
        v[i] *= v[i];
    const pt_adamw_args a = {1e-3, 0.9, 0.999, 1e-8, 0.05, 0.1, 0.001, 1.0};
    TIME("adamw MLP weight", 0, o->adamw(be, p, g, m, v, P, &a));
    free(qkv), free(att), free(probs), free(dqkv), free(gx), free(gy), free(gd);
    free(lx), free(ly), free(lw), free(lb), free(mean), free(rstd), free(ldx), free(ldw), free(ldb);
    free(p), free(g), free(m), free(v), free(times);
    pt_backend_close(be);
    return 0;
}
