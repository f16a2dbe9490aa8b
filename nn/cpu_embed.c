/*
 * cpu_embed.c: the CPU backend's embedding ops: ViT patches and token
 * assembly, GPT and BERT token and position embeddings, forward and
 * backward. Compiled twice, as every CPU backend file is (nn/cpu_real.h);
 * the ops table and the determinism rules all of them follow are in
 * nn/cpu_ops.c.
 */
#include "nn/cpu_real.h"
#include "nn/cpu_lanes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -------------------------------------------------------------- embedding */

/* The embedding ops' jobs: their arguments under their own names; tasks of
 * `per` examples (or rows, or token positions). */
typedef struct {
    real *patches;
    const real *images;
    int n, C, H, W, p;
    long per;
} patchify_job;

static void patchify_task(void *ctx, long t, int thread)
{
    (void)thread;
    const patchify_job *j = ctx;
    real *patches = j->patches;
    const real *images = j->images;
    const int C = j->C, H = j->H, W = j->W, p = j->p;
    const int gh = H / p, gw = W / p, plen = C * p * p;
    long b0, b1;
    task_items(t, j->per, j->n, &b0, &b1);
    for (int b = (int)b0; b < b1; b++)
        for (int py = 0; py < gh; py++)
            for (int px = 0; px < gw; px++) {
                real *dst = patches + ((size_t)b * gh * gw + (size_t)py * gw + px) * plen;
                for (int c = 0; c < C; c++)
                    for (int y = 0; y < p; y++) {
                        const real *src = images + (((size_t)b * C + c) * H + (size_t)py * p + y) * W +
                                          (size_t)px * p;
                        memcpy(dst + ((size_t)c * p + y) * p, src, (size_t)p * sizeof *src);
                    }
            }
}

void CPU_FN(pt_cpu_patchify)(pt_backend *be, void *patches_, const void *images_, int n, int C,
                             int H, int W, int p)
{
    patchify_job j = {patches_, images_, n, C, H, W, p, per_task((size_t)C * H * W)};
    pt_pool_run(PAR_POOL(be, (size_t)n * C * H * W), tasks_for(n, j.per), patchify_task, &j);
}

typedef struct {
    real *x, *dproj, *dcls, *dpos;
    const real *proj, *cls, *pos, *dx;
    const int32_t *tokens;
    int n, T, d;
    long per;
} embed_job;

static void vit_assemble_fwd_task(void *ctx, long t_, int thread)
{
    (void)thread;
    const embed_job *j = ctx;
    real *x = j->x;
    const real *proj = j->proj, *cls = j->cls, *pos = j->pos;
    const int T = j->T, d = j->d;
    long b0, b1;
    task_items(t_, j->per, j->n, &b0, &b1);
    for (int b = (int)b0; b < b1; b++) {
        real *xb = x + (size_t)b * T * d;
#pragma omp simd
        for (int c = 0; c < d; c++)
            xb[c] = cls[c] + pos[c];
        for (int t = 1; t < T; t++) {
            const real *pr = proj + ((size_t)b * (T - 1) + t - 1) * d;
#pragma omp simd
            for (int c = 0; c < d; c++)
                xb[(size_t)t * d + c] = pr[c] + pos[(size_t)t * d + c];
        }
    }
}

void CPU_FN(pt_cpu_vit_assemble_fwd)(pt_backend *be, void *x_, const void *proj_, const void *cls_,
                                     const void *pos_, int n, int T, int d)
{
    embed_job j = {.x = x_, .proj = proj_, .cls = cls_, .pos = pos_, .n = n, .T = T, .d = d,
                   .per = per_task((size_t)T * d)};
    pt_pool_run(PAR_POOL(be, (size_t)n * T * d), tasks_for(n, j.per), vit_assemble_fwd_task, &j);
}

/* Each task owns token positions t and sums over examples in order. */
static void vit_assemble_bwd_task(void *ctx, long t_, int thread)
{
    (void)thread;
    const embed_job *j = ctx;
    real *dproj = j->dproj, *dcls = j->dcls, *dpos = j->dpos;
    const real *dx = j->dx;
    const int n = j->n, T = j->T, d = j->d;
    long t0, t1;
    task_items(t_, j->per, T, &t0, &t1);
    for (int t = (int)t0; t < t1; t++) {
        real *dp = dpos + (size_t)t * d;
        for (int b = 0; b < n; b++) {
            const real *g = dx + ((size_t)b * T + t) * d;
#pragma omp simd
            for (int c = 0; c < d; c++)
                dp[c] += g[c];
            if (t == 0) {
#pragma omp simd
                for (int c = 0; c < d; c++)
                    dcls[c] += g[c];
            } else if (dproj) {
                memcpy(dproj + ((size_t)b * (T - 1) + t - 1) * d, g, (size_t)d * sizeof *g);
            }
        }
    }
}

void CPU_FN(pt_cpu_vit_assemble_bwd)(pt_backend *be, void *dproj_, void *dcls_, void *dpos_,
                                     const void *dx_, int n, int T, int d)
{
    embed_job j = {.dproj = dproj_, .dcls = dcls_, .dpos = dpos_, .dx = dx_, .n = n, .T = T,
                   .d = d, .per = per_task((size_t)n * d)};
    pt_pool_run(PAR_POOL(be, (size_t)n * T * d), tasks_for(T, j.per), vit_assemble_bwd_task, &j);
}

/* wte and wpe travel as proj and pos */
static void token_embed_fwd_task(void *ctx, long t, int thread)
{
    (void)thread;
    const embed_job *j = ctx;
    real *x = j->x;
    const real *wte = j->proj, *wpe = j->pos;
    const int32_t *tokens = j->tokens;
    const int T = j->T, d = j->d;
    long r0, r1;
    task_items(t, j->per, (long)j->n * T, &r0, &r1);
    for (int r = (int)r0; r < r1; r++) {
        const real *e = wte + (size_t)tokens[r] * d, *p = wpe + (size_t)(r % T) * d;
        real *xr = x + (size_t)r * d;
#pragma omp simd
        for (int c = 0; c < d; c++)
            xr[c] = e[c] + p[c];
    }
}

void CPU_FN(pt_cpu_token_embed_fwd)(pt_backend *be, void *x_, const int32_t *tokens,
                                    const void *wte_, const void *wpe_, int n, int T, int d)
{
    embed_job j = {.x = x_, .proj = wte_, .pos = wpe_, .tokens = tokens, .n = n, .T = T, .d = d,
                   .per = per_task((size_t)d)};
    pt_pool_run(PAR_POOL(be, (size_t)n * T * d), tasks_for((long)n * T, j.per),
                token_embed_fwd_task, &j);
}

/* dwpe travels as dpos */
static void token_embed_bwd_task(void *ctx, long t_, int thread)
{
    (void)thread;
    const embed_job *j = ctx;
    real *dwpe = j->dpos;
    const real *dx = j->dx;
    const int n = j->n, T = j->T, d = j->d;
    long t0, t1;
    task_items(t_, j->per, T, &t0, &t1);
    for (int t = (int)t0; t < t1; t++) {
        real *p = dwpe + (size_t)t * d;
        for (int b = 0; b < n; b++) {
            const real *g = dx + ((size_t)b * T + t) * d;
#pragma omp simd
            for (int c = 0; c < d; c++)
                p[c] += g[c];
        }
    }
}

void CPU_FN(pt_cpu_token_embed_bwd)(pt_backend *be, void *dwte_, void *dwpe_, const void *dx_,
                                    const int32_t *tokens, int n, int T, int d)
{
    real *dwte = dwte_;
    const real *dx = dx_;
    /* Rows sharing a token add into the same row of dwte, so this stays serial:
     * it is n*T*d additions, small next to any matrix multiply. */
    for (int r = 0; r < n * T; r++) {
        real *e = dwte + (size_t)tokens[r] * d;
        const real *g = dx + (size_t)r * d;
#pragma omp simd
        for (int c = 0; c < d; c++)
            e[c] += g[c];
    }
    embed_job j = {.dpos = dwpe_, .dx = dx_, .n = n, .T = T, .d = d, .per = per_task((size_t)n * d)};
    pt_pool_run(PAR_POOL(be, (size_t)n * T * d), tasks_for(T, j.per), token_embed_bwd_task, &j);
}
