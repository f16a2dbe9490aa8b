/*
 * cpu_real.h (internal to nn/): the element type of the CPU backend files,
 * which are compiled twice: float32 (the training backend) and, with
 * PT_REAL_F64, float64 (the finite-difference oracle). Functions shared
 * between those files get the suffix of their element type via CPU_FN().
 */
#ifndef PT_NN_CPU_REAL_H
#define PT_NN_CPU_REAL_H

#include "nn/backend.h"
#include "nn/cpu_math.h"
#include "nn/cpu_pool.h"

#include <math.h>

#define PT_CAT2(a, b) a##b
#define PT_CAT(a, b) PT_CAT2(a, b)

#ifdef PT_REAL_F64
typedef double real;
#define GEMM cblas_dgemm
#define R_EXP(x) exp(x)
#define R_SQRT(x) sqrt(x)
#define R_FMA(a, b, c) fma(a, b, c)
#define R_CDF(x) pt_normal_cdf(x)
#define R_GELU_PARTS(x, cdf, pdf) pt_gelu_parts(x, cdf, pdf)
#define CPU_FN(name) PT_CAT(name, _f64)
#else
typedef float real;
#define GEMM cblas_sgemm
#define R_EXP(x) pt_expf(x)
#define R_SQRT(x) sqrtf(x)
#define R_FMA(a, b, c) fmaf(a, b, c)
#define R_CDF(x) pt_normal_cdff(x)
#define R_GELU_PARTS(x, cdf, pdf) pt_gelu_partsf(x, cdf, pdf)
#define CPU_FN(name) PT_CAT(name, _f32)
#endif

/* The backend's thread pool (be->impl, nn/cpu_pool.h) for a loop with enough
 * work to pay for waking threads; NULL, which runs the tasks on the caller,
 * for less. Either way the same tasks run, so the choice changes no bit. */
#define PAR_POOL(be, work) ((work) > 32768 ? (pt_pool *)(be)->impl : NULL)

/* Work per task, in elements touched, that a loop's tasks are sized to: a
 * few microseconds, so claiming one (an atomic operation) costs little, and
 * many tasks per thread, so a thread that is slow or descheduled for a
 * while leaves the rest to the others. */
enum { TASK_WORK = 16384 };

/* Items per task for a loop whose items cost item_work elements each: a
 * function of the problem size only, never of the thread count. */
static inline long per_task(size_t item_work)
{
    const size_t per = item_work ? TASK_WORK / item_work : TASK_WORK;
    return per < 1 ? 1 : (long)per;
}

/* How many tasks cover n items at per items each, and task t's items [*i0, *i1). */
static inline long tasks_for(long n, long per) { return n <= 0 ? 0 : (n + per - 1) / per; }
static inline void task_items(long t, long per, long n, long *i0, long *i1)
{
    *i0 = t * per;
    *i1 = *i0 + per < n ? *i0 + per : n;
}

/* Rows (or elements) per chunk of a chunked reduction: fixed, so sums do
 * not depend on threads. */
enum { CHUNK_ROWS = 64, CHUNK_ELEMS = 8192 };

/* Scratch inside an op, zeroed and 64-byte aligned; aborts when even that
 * is impossible (see cpu_ops.c). */
void *CPU_FN(pt_cpu_scratch)(size_t bytes);

/* The ops of the table (nn/cpu_ops.c), one file per kind: the linear layer
 * (cpu_linear.c), LayerNorm (cpu_norm.c), embeddings (cpu_embed.c), attention
 * (cpu_attention.c; the first query alone, cpu_attention_first.c) and the
 * elementwise and reduction ops (cpu_misc.c). */

void CPU_FN(pt_cpu_linear_fwd)(pt_backend *be, void *y, const void *x, const void *w, const void *b,
                               int rows, int out, int in, const void *add);
#ifndef PT_REAL_F64 /* the float64 oracle composes it (nn/backend.h) */
void CPU_FN(pt_cpu_linear_bwd_mul)(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
                                   const void *x, const void *w, int rows, int out, int in,
                                   const void *mul);
#endif
void CPU_FN(pt_cpu_linear_bwd)(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
                               const void *x, const void *w, int rows, int out, int in);
#ifndef PT_REAL_F64 /* the float64 oracle's products keep nothing between calls */
void CPU_FN(pt_cpu_linear_work_bytes)(const pt_backend *be, int rows, int out, int in,
                                      size_t *pack, size_t *parts);
void CPU_FN(pt_cpu_release_work)(pt_backend *be);
#endif

void CPU_FN(pt_cpu_layernorm_fwd)(pt_backend *be, void *y, void *mean, void *rstd, const void *x,
                                  const void *w, const void *b, int rows, int dim, double eps);
void CPU_FN(pt_cpu_layernorm_bwd)(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
                                  const void *x, const void *mean, const void *rstd, const void *w,
                                  int rows, int dim, const void *add);

void CPU_FN(pt_cpu_patchify)(pt_backend *be, void *patches, const void *images, int n, int C, int H,
                             int W, int p);
void CPU_FN(pt_cpu_vit_assemble_fwd)(pt_backend *be, void *x, const void *proj, const void *cls,
                                     const void *pos, int n, int T, int d);
void CPU_FN(pt_cpu_vit_assemble_bwd)(pt_backend *be, void *dproj, void *dcls, void *dpos,
                                     const void *dx, int n, int T, int d);
void CPU_FN(pt_cpu_token_embed_fwd)(pt_backend *be, void *x, const int32_t *tokens, const void *wte,
                                    const void *wpe, int n, int T, int d);
void CPU_FN(pt_cpu_token_embed_bwd)(pt_backend *be, void *dwte, void *dwpe, const void *dx,
                                    const int32_t *tokens, int n, int T, int d);

void CPU_FN(pt_cpu_gelu_fwd)(pt_backend *be, void *y, void *dydx, const void *x, size_t n);
void CPU_FN(pt_cpu_gelu_bwd)(pt_backend *be, void *dx, const void *dy, const void *dydx, size_t n);
void CPU_FN(pt_cpu_copy_rows)(pt_backend *be, void *dst, int dst_stride, const void *src,
                              int src_stride, int rows, int cols, int accumulate);
void CPU_FN(pt_cpu_mean_pool_fwd)(pt_backend *be, void *y, const void *x, const int32_t *lens,
                                  int n, int T, int d);
void CPU_FN(pt_cpu_mean_pool_bwd)(pt_backend *be, void *dx, const void *dy, const int32_t *lens,
                                  int n, int T, int d);
void CPU_FN(pt_cpu_dropout)(pt_backend *be, void *y, const void *x, const void *add, int n,
                            size_t per, const pt_dropout *drop);
double CPU_FN(pt_cpu_cross_entropy)(pt_backend *be, void *dlogits, const void *logits,
                                    const int32_t *targets, int rows, int classes, double scale,
                                    int64_t *correct);
void CPU_FN(pt_cpu_adamw)(pt_backend *be, void *p, const void *g, void *m, void *v, size_t n,
                          const pt_adamw_args *a);
double CPU_FN(pt_cpu_sumsq)(pt_backend *be, const void *x, size_t n);
void CPU_FN(pt_cpu_scale)(pt_backend *be, void *x, size_t n, double f);

void CPU_FN(pt_cpu_attention_fwd)(pt_backend *be, void *out, void *probs, const void *qkv, int n,
                                  int T, int H, int hd, int causal, const int32_t *lens,
                                  const pt_dropout *drop);
size_t CPU_FN(pt_cpu_attention_work_bytes)(const pt_backend *be, int n, int T, int H, int hd,
                                          int dropout);
void CPU_FN(pt_cpu_attention_bwd)(pt_backend *be, void *dqkv, const void *dout, const void *qkv,
                                  const void *probs, const void *out, int n, int T, int H, int hd,
                                  int causal, const int32_t *lens, const pt_dropout *drop);
void CPU_FN(pt_cpu_attention_first_fwd)(pt_backend *be, void *out0, void *probs0, const void *q0,
                                        const void *kv, int n, int T, int H, int hd);
void CPU_FN(pt_cpu_attention_first_bwd)(pt_backend *be, void *dq0, void *dkv, const void *dout0,
                                        const void *q0, const void *kv, const void *probs0, int n,
                                        int T, int H, int hd);

#endif
