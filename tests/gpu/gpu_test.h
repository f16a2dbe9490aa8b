/*
 * gpu_test.h: what the GPU tests share: opening the CUDA backend next to the
 * CPU float32 oracle (or skipping when there is no GPU), tensors that live on
 * both, and the normwise comparison max|gpu - cpu| / max|cpu|.
 *
 * Inputs are random and never all zero. In the bf16 backend, activation
 * inputs are rounded to bf16 on the host before both backends get them, so
 * the CPU computes from exactly the values the GPU holds and the difference
 * measures only the GPU's own arithmetic.
 *
 * PT_TEST_SMALL=1 makes the tests pick smaller shapes: ctest sets it for the
 * builds that run the backend on the CPU emulation of CUDA (nn/cuda_emu.h),
 * and scripts/gpu_check.sh for the runs under compute-sanitizer.
 */
#ifndef PT_TESTS_GPU_TEST_H
#define PT_TESTS_GPU_TEST_H

#include "nn/backend.h"

#include <CUnit/Basic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FP32_TOL 1e-4
#define BF16_TOL 2e-2

static inline int gpu_small(void)
{
    const char *e = getenv("PT_TEST_SMALL");
    return e && strcmp(e, "1") == 0;
}

/* The CUDA backend of the given precision and the CPU float32 backend. */
typedef struct gpu_pair {
    pt_backend *cpu, *gpu;
    int bf16;
    double tol;
} gpu_pair;

static const char *const gpu_names[2] = {"cuda", "cuda-bf16"};

/* 1 with both open; 0 (and "skipped: no GPU" printed) when there is no GPU
 * to use or no CUDA in the build (PT_ENODEV). A GPU that is there but fails
 * to open fails the test, where it used to be skipped as if absent. */
static inline int pair_open(gpu_pair *P, int bf16)
{
    pt_err err = {0};
    memset(P, 0, sizeof *P);
    int rc = pt_backend_open(&P->gpu, gpu_names[bf16], 1, &err);
    if (rc == PT_ENODEV) {
        static int told;
        printf(told++ ? "skipped: no GPU " : "skipped: no GPU (%s) ", err.msg);
        return 0;
    }
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL_FATAL(pt_backend_open(&P->cpu, "cpu", 0, &err), 0);
    P->bf16 = bf16;
    P->tol = bf16 ? BF16_TOL : FP32_TOL;
    CU_ASSERT_EQUAL(pt_backend_act_size(P->gpu), bf16 ? 2u : 4u);
    CU_ASSERT_EQUAL(pt_backend_real_size(P->gpu), 4u);
    return 1;
}

static inline void pair_close(gpu_pair *P)
{
    pt_err err = {0};
    int rc = pt_backend_sync(P->gpu, &err);
    if (rc)
        printf("\n  backend failed: %s", err.msg);
    CU_ASSERT_EQUAL(rc, 0);
    pt_backend_close(P->gpu);
    pt_backend_close(P->cpu);
}

/* ------------------------------------------------------------- host bf16 */

static inline float round_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return f;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* --------------------------------------------------------------- tensors */

/* n elements on both backends: activation elements, or parameter elements
 * (float on both). `offset` elements of padding in front make the pointers
 * deliberately misaligned. */
typedef struct tpair {
    char *cbase, *gbase;
    void *c, *g;
    size_t n;
    int par;
} tpair;

static inline size_t elem_size(const pt_backend *be, int par)
{
    return par ? pt_backend_real_size(be) : pt_backend_act_size(be);
}

static inline tpair tp_new_at(gpu_pair *P, size_t n, int par, size_t offset)
{
    tpair t = {0};
    t.n = n;
    t.par = par;
    t.cbase = pt_backend_alloc(P->cpu, (n + offset) * elem_size(P->cpu, par));
    t.gbase = pt_backend_alloc(P->gpu, (n + offset) * elem_size(P->gpu, par));
    CU_ASSERT_FATAL(t.cbase && t.gbase);
    t.c = t.cbase + offset * elem_size(P->cpu, par);
    t.g = t.gbase + offset * elem_size(P->gpu, par);
    return t;
}

static inline tpair tp_new(gpu_pair *P, size_t n, int par) { return tp_new_at(P, n, par, 0); }

static inline void tp_free(gpu_pair *P, tpair *t)
{
    pt_backend_free(P->cpu, t->cbase);
    pt_backend_free(P->gpu, t->gbase);
    memset(t, 0, sizeof *t);
}

/* Gives both the same host values (rounded to bf16 first for bf16 activations). */
static inline void tp_set(gpu_pair *P, tpair *t, const float *v)
{
    float *h = malloc(t->n * sizeof *h + 1);
    for (size_t i = 0; i < t->n; i++)
        h[i] = P->bf16 && !t->par ? round_bf16(v[i]) : v[i];
    if (t->par) {
        P->cpu->ops->par_from_f32(P->cpu, t->c, h, t->n);
        P->gpu->ops->par_from_f32(P->gpu, t->g, h, t->n);
    } else {
        P->cpu->ops->act_from_f32(P->cpu, t->c, h, t->n);
        P->gpu->ops->act_from_f32(P->gpu, t->g, h, t->n);
    }
    free(h);
}

static uint64_t test_rng_state = 0x9e3779b97f4a7c15ull;

static inline double urand(void)
{
    test_rng_state = test_rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(test_rng_state >> 11) / 9007199254740992.0;
}

/* Uniform in [lo, hi), never exactly zero. */
static inline void tp_fill(gpu_pair *P, tpair *t, double lo, double hi)
{
    float *v = malloc(t->n * sizeof *v + 1);
    for (size_t i = 0; i < t->n; i++) {
        float x = (float)(lo + (hi - lo) * urand());
        v[i] = x != 0.0f ? x : (float)(0.5 * (lo + hi) + 1e-3);
    }
    tp_set(P, t, v);
    free(v);
}

static inline float *tp_get(gpu_pair *P, const tpair *t, int gpu)
{
    pt_backend *be = gpu ? P->gpu : P->cpu;
    float *h = malloc(t->n * sizeof *h + 1);
    if (t->par)
        be->ops->par_to_f32(be, h, gpu ? t->g : t->c, t->n);
    else
        be->ops->act_to_f32(be, h, gpu ? t->g : t->c, t->n);
    return h;
}

/* max |gpu - cpu| / max |cpu| (0 when both are all zero). */
static inline double tp_err(gpu_pair *P, const tpair *t)
{
    float *c = tp_get(P, t, 0), *g = tp_get(P, t, 1);
    double num = 0, den = 0;
    for (size_t i = 0; i < t->n; i++) {
        double e = fabs((double)g[i] - (double)c[i]);
        if (e > num || e != e)
            num = e != e ? INFINITY : e;
        if (fabs((double)c[i]) > den)
            den = fabs((double)c[i]);
    }
    free(c);
    free(g);
    return den > 0 ? num / den : num;
}

/* Asserts the normwise error of t is within tol and says so when it is not. */
#define EXPECT_CLOSE(P, t, tol, ...)                                                               \
    do {                                                                                           \
        double err_ = tp_err((P), &(t));                                                           \
        if (!(err_ <= (tol))) {                                                                    \
            printf("\n  [%s] ", gpu_names[(P)->bf16]);                                             \
            printf(__VA_ARGS__);                                                                   \
            printf(": normwise error %.3g > %.3g", err_, (double)(tol));                           \
        }                                                                                          \
        CU_ASSERT(err_ <= (tol));                                                                  \
    } while (0)

/* Raw bytes (int32 tokens and targets) to both. */
typedef struct ipair {
    void *c, *g;
} ipair;

static inline ipair ip_new(gpu_pair *P, const int32_t *v, size_t n)
{
    ipair t = {pt_backend_alloc(P->cpu, n * sizeof *v), pt_backend_alloc(P->gpu, n * sizeof *v)};
    CU_ASSERT_FATAL(t.c && t.g);
    P->cpu->ops->upload(P->cpu, t.c, v, n * sizeof *v);
    P->gpu->ops->upload(P->gpu, t.g, v, n * sizeof *v);
    return t;
}

static inline void ip_free(gpu_pair *P, ipair *t)
{
    pt_backend_free(P->cpu, t->c);
    pt_backend_free(P->gpu, t->g);
}

#endif
