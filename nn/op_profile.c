/*
 * op_profile.c: timing of every backend op (run.profile_ops); the
 * floating-point peak of the cores it is compared with is measured in
 * cpu_peak.c.
 *
 * pt_backend_profile_ops puts a layer in front of a host backend's ops table:
 * a copy of the table whose entries time the call to the real op and add the
 * time, a nominal FLOP count and a nominal byte count to one row per (op,
 * shape). A backend without the layer runs exactly as before (the units call
 * through be->ops, which then points at the backend's own table), so the
 * switch costs nothing when it is off. With the layer on, each op still gets
 * the same arguments in the same order, so training gives the same bits.
 *
 * The ops of the CPU backend finish before they return, so the wall time
 * around a call is the op's time (a device backend queues its work; the layer
 * refuses one rather than report the time to queue).
 *
 * Nominal counts: a matrix product of m x k by k x n is 2mnk FLOPs; attention
 * is its four (backward: eight) products of T x T x hd per head, half of them
 * when causal; elementwise ops count their arithmetic as written (an erf or
 * an exp as one). Bytes are each operand read or written once: the least
 * traffic the op could have, not what the caches saw.
 */
#include "nn/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    OP_LINEAR_FWD, OP_LINEAR_BWD, OP_LAYERNORM_FWD, OP_LAYERNORM_BWD, OP_GELU_FWD, OP_GELU_BWD,
    OP_ATTENTION_FWD, OP_ATTENTION_BWD, OP_MEAN_POOL_FWD, OP_MEAN_POOL_BWD, OP_DROPOUT, OP_PATCHIFY,
    OP_VIT_ASSEMBLE_FWD, OP_VIT_ASSEMBLE_BWD, OP_TOKEN_EMBED_FWD, OP_TOKEN_EMBED_BWD,
    OP_COPY_ROWS, OP_CROSS_ENTROPY, OP_ADAMW, OP_SUMSQ, OP_SCALE, OP_ZERO, OP_COPY, OP_UPLOAD,
    OP_DOWNLOAD, OP_PAR_FROM_F32, OP_PAR_TO_F32, OP_ACT_FROM_F32, OP_ACT_TO_F32,
    OP_ATTENTION_FIRST_FWD, OP_ATTENTION_FIRST_BWD, OP_LINEAR_BWD_MUL, OP_KINDS
};

static const char *const op_names[OP_KINDS] = {
    "linear_fwd", "linear_bwd", "layernorm_fwd", "layernorm_bwd", "gelu_fwd", "gelu_bwd",
    "attention_fwd", "attention_bwd", "mean_pool_fwd", "mean_pool_bwd", "dropout", "patchify",
    "vit_assemble_fwd", "vit_assemble_bwd", "token_embed_fwd", "token_embed_bwd", "copy_rows",
    "cross_entropy", "adamw", "sumsq", "scale", "zero", "copy", "upload", "download",
    "par_from_f32", "par_to_f32", "act_from_f32", "act_to_f32", "attention_first_fwd",
    "attention_first_bwd", "linear_bwd_mul",
};

enum { MAX_ROWS = 256, DIMS = 5 };

typedef struct {
    int op;
    long long dim[DIMS]; /* the shape that tells this row from the op's others */
    int64_t calls;
    double seconds, flops, bytes;
    double best; /* the fastest call */
} prof_row;

/* The table must stay the first member: an op finds its profiler from
 * be->ops, which points at it. */
typedef struct {
    pt_ops table;
    const pt_ops *inner;
    int recording;
    int rows;                         /* rows in use of the first MAX_ROWS */
    prof_row row[MAX_ROWS + OP_KINDS]; /* then one catch-all row per op */
} prof;

static prof *prof_of(pt_backend *be) { return (prof *)(void *)be->ops; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Adds one call to its row; shapes past MAX_ROWS share one row per op. */
static void account(prof *p, int op, long long a, long long b, long long c, long long d,
                    long long e, double seconds, double flops, double bytes)
{
    const long long dim[DIMS] = {a, b, c, d, e};
    int i = 0;
    for (; i < p->rows; i++)
        if (p->row[i].op == op && memcmp(p->row[i].dim, dim, sizeof dim) == 0)
            break;
    if (i == MAX_ROWS) {
        i = MAX_ROWS + op; /* the op's catch-all row, shape all -1 */
        if (p->row[i].calls == 0) {
            p->row[i].op = op;
            for (int k = 0; k < DIMS; k++)
                p->row[i].dim[k] = -1;
        }
    } else if (i == p->rows) {
        p->rows++;
        p->row[i].op = op;
        memcpy(p->row[i].dim, dim, sizeof dim);
    }
    if (p->row[i].calls == 0 || seconds < p->row[i].best)
        p->row[i].best = seconds;
    p->row[i].calls++;
    p->row[i].seconds += seconds;
    p->row[i].flops += flops;
    p->row[i].bytes += bytes;
}

/* Runs CALL on the real table; when recording, times it and accounts it to
 * op OP, shape A..E, with FLOPS and BYTES (evaluated only when recording). */
#define TIMED(be, CALL, OP, A, B, C, D, E, FLOPS, BYTES)                                      \
    do {                                                                                     \
        prof *p_ = prof_of(be);                                                              \
        const pt_ops *in_ = p_->inner;                                                       \
        if (!p_->recording) {                                                                \
            CALL;                                                                            \
            break;                                                                           \
        }                                                                                    \
        const double t0_ = now_s();                                                          \
        CALL;                                                                                \
        const double t_ = now_s() - t0_;                                                     \
        account(p_, OP, A, B, C, D, E, t_, (double)(FLOPS), (double)(BYTES));                \
    } while (0)

#define ES(be) ((double)(be)->act_size)
#define PS(be) ((double)(be)->real_size)

/* --------------------------------------------------------------- memory */

static void w_upload(pt_backend *be, void *dst, const void *src, size_t bytes)
{
    TIMED(be, in_->upload(be, dst, src, bytes), OP_UPLOAD, 0, 0, 0, 0, 0, 0, 2.0 * bytes);
}

static void w_download(pt_backend *be, void *dst, const void *src, size_t bytes)
{
    TIMED(be, in_->download(be, dst, src, bytes), OP_DOWNLOAD, 0, 0, 0, 0, 0, 0, 2.0 * bytes);
}

static void w_zero(pt_backend *be, void *dst, size_t bytes)
{
    TIMED(be, in_->zero(be, dst, bytes), OP_ZERO, 0, 0, 0, 0, 0, 0, bytes);
}

static void w_copy(pt_backend *be, void *dst, const void *src, size_t bytes)
{
    TIMED(be, in_->copy(be, dst, src, bytes), OP_COPY, 0, 0, 0, 0, 0, 0, 2.0 * bytes);
}

static void w_par_from_f32(pt_backend *be, void *dst, const float *src, size_t n)
{
    TIMED(be, in_->par_from_f32(be, dst, src, n), OP_PAR_FROM_F32, 0, 0, 0, 0, 0, 0,
          n * (4.0 + PS(be)));
}

static void w_par_to_f32(pt_backend *be, float *dst, const void *src, size_t n)
{
    TIMED(be, in_->par_to_f32(be, dst, src, n), OP_PAR_TO_F32, 0, 0, 0, 0, 0, 0,
          n * (4.0 + PS(be)));
}

static void w_act_from_f32(pt_backend *be, void *dst, const float *src, size_t n)
{
    TIMED(be, in_->act_from_f32(be, dst, src, n), OP_ACT_FROM_F32, 0, 0, 0, 0, 0, 0,
          n * (4.0 + ES(be)));
}

static void w_act_to_f32(pt_backend *be, float *dst, const void *src, size_t n)
{
    TIMED(be, in_->act_to_f32(be, dst, src, n), OP_ACT_TO_F32, 0, 0, 0, 0, 0, 0,
          n * (4.0 + ES(be)));
}

/* ----------------------------------------------------------------- math */

static void w_linear_fwd(pt_backend *be, void *y, const void *x, const void *w, const void *b,
                         int rows, int out, int in, const void *add)
{
    const double ro = (double)rows * out;
    TIMED(be, in_->linear_fwd(be, y, x, w, b, rows, out, in, add), OP_LINEAR_FWD, rows, out, in,
          (b != NULL) | (add != NULL) << 1, 0, 2.0 * ro * in + (b ? ro : 0) + (add ? ro : 0),
          ES(be) * ((double)rows * in + ro * (add ? 2 : 1)) + PS(be) * ((double)out * in + (b ? out : 0)));
}

/* linear_bwd's flops and bytes (with mul, also the product by mul [rows, in]) */
typedef struct {
    double flops, bytes;
} cost;

static cost linear_bwd_cost(const pt_backend *be, const void *dx, const void *dw, const void *db,
                            int mul, int rows, int out, int in)
{
    const double ro = (double)rows * out, prod = 2.0 * ro * in, ri = (double)rows * in;
    const double oi = (double)out * in;
    return (cost){(dx ? prod : 0) + (dw ? prod + oi : 0) + (db ? ro : 0) + (mul ? ri : 0),
                  ES(be) * (ro + (dx ? ri : 0) + (dw ? ri : 0) + (mul ? ri : 0)) +
                      PS(be) * ((dx ? oi : 0) + (dw ? 2.0 * oi : 0) + (db ? 2.0 * out : 0))};
}

static void w_linear_bwd(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
                         const void *x, const void *w, int rows, int out, int in)
{
    const cost c = linear_bwd_cost(be, dx, dw, db, 0, rows, out, in);
    TIMED(be, in_->linear_bwd(be, dx, dw, db, dy, x, w, rows, out, in), OP_LINEAR_BWD, rows, out,
          in, (dx != NULL) | (dw != NULL) << 1 | (db != NULL) << 2, 0, c.flops, c.bytes);
}

static void w_linear_bwd_mul(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
                             const void *x, const void *w, int rows, int out, int in,
                             const void *mul)
{
    const cost c = linear_bwd_cost(be, dx, dw, db, 1, rows, out, in);
    TIMED(be, in_->linear_bwd_mul(be, dx, dw, db, dy, x, w, rows, out, in, mul),
          OP_LINEAR_BWD_MUL, rows, out, in, (dx != NULL) | (dw != NULL) << 1 | (db != NULL) << 2,
          0, c.flops, c.bytes);
}

static void w_layernorm_fwd(pt_backend *be, void *y, void *mean, void *rstd, const void *x,
                            const void *w, const void *b, int rows, int dim, double eps)
{
    const double e = (double)rows * dim;
    TIMED(be, in_->layernorm_fwd(be, y, mean, rstd, x, w, b, rows, dim, eps), OP_LAYERNORM_FWD,
          rows, dim, 0, 0, 0, 7.0 * e, ES(be) * 2.0 * e + PS(be) * (2.0 * dim + 2.0 * rows));
}

static void w_layernorm_bwd(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
                            const void *x, const void *mean, const void *rstd, const void *w,
                            int rows, int dim, const void *add)
{
    const double e = (double)rows * dim;
    TIMED(be, in_->layernorm_bwd(be, dx, dw, db, dy, x, mean, rstd, w, rows, dim, add),
          OP_LAYERNORM_BWD, rows, dim, (dx != NULL) | (add != NULL) << 1, 0, 0,
          (dx ? 9.0 * e : 0) + 4.0 * e + (add ? e : 0),
          ES(be) * e * (2.0 + (dx ? 1 : 0) + (add ? 1 : 0)) + PS(be) * (5.0 * dim + 2.0 * rows));
}

static void w_gelu_fwd(pt_backend *be, void *y, void *dydx, const void *x, size_t n)
{
    TIMED(be, in_->gelu_fwd(be, y, dydx, x, n), OP_GELU_FWD, (long long)n, dydx != NULL, 0, 0, 0,
          (dydx ? 7.0 : 5.0) * n, ES(be) * (dydx ? 3.0 : 2.0) * n);
}

static void w_gelu_bwd(pt_backend *be, void *dx, const void *dy, const void *dydx, size_t n)
{
    TIMED(be, in_->gelu_bwd(be, dx, dy, dydx, n), OP_GELU_BWD, (long long)n, 0, 0, 0, 0, 1.0 * n,
          ES(be) * 3.0 * n);
}

/* score pairs per head: T^2, or T(T+1)/2 when causal */
static double att_pairs(int T, int causal) { return causal ? 0.5 * T * (T + 1.0) : (double)T * T; }

/* with dropout on the probabilities: one more multiply per pair (forward),
 * two (backward), the mask's hash not counted */
static int dropping(const pt_dropout *drop) { return drop && drop->p > 0; }

static void w_attention_fwd(pt_backend *be, void *out, void *probs, const void *qkv, int n, int T,
                            int H, int hd, int causal, const int32_t *lens, const pt_dropout *drop)
{
    const double pairs = (double)n * H * att_pairs(T, causal);
    TIMED(be, in_->attention_fwd(be, out, probs, qkv, n, T, H, hd, causal, lens, drop),
          OP_ATTENTION_FWD, n, T, H, hd, causal | (lens != NULL) << 1 | dropping(drop) << 2,
          4.0 * pairs * hd + (5.0 + dropping(drop)) * pairs,
          ES(be) * ((double)n * T * H * hd * 4.0 + (double)n * H * T * T));
}

static void w_attention_bwd(pt_backend *be, void *dqkv, const void *dout, const void *qkv,
                            const void *probs, const void *out, int n, int T, int H, int hd,
                            int causal, const int32_t *lens, const pt_dropout *drop)
{
    const double pairs = (double)n * H * att_pairs(T, causal);
    TIMED(be, in_->attention_bwd(be, dqkv, dout, qkv, probs, out, n, T, H, hd, causal, lens, drop),
          OP_ATTENTION_BWD, n, T, H, hd, causal | (lens != NULL) << 1 | dropping(drop) << 2,
          8.0 * pairs * hd + (3.0 + 2.0 * dropping(drop)) * pairs,
          ES(be) * ((double)n * T * H * hd * 7.0 + (double)n * H * T * T));
}

/* one query per (example, head) pair against T keys */
static void w_attention_first_fwd(pt_backend *be, void *out0, void *probs0, const void *q0,
                                  const void *kv, int n, int T, int H, int hd)
{
    const double pairs = (double)n * H * T;
    TIMED(be, in_->attention_first_fwd(be, out0, probs0, q0, kv, n, T, H, hd),
          OP_ATTENTION_FIRST_FWD, n, T, H, hd, 0, 4.0 * pairs * hd + 5.0 * pairs,
          ES(be) * ((double)n * T * H * hd * 2.0 + (double)n * H * hd * 2.0 + pairs));
}

static void w_attention_first_bwd(pt_backend *be, void *dq0, void *dkv, const void *dout0,
                                  const void *q0, const void *kv, const void *probs0, int n, int T,
                                  int H, int hd)
{
    const double pairs = (double)n * H * T;
    TIMED(be, in_->attention_first_bwd(be, dq0, dkv, dout0, q0, kv, probs0, n, T, H, hd),
          OP_ATTENTION_FIRST_BWD, n, T, H, hd, 0, 8.0 * pairs * hd + 4.0 * pairs,
          ES(be) * ((double)n * T * H * hd * 4.0 + (double)n * H * hd * 3.0 + pairs));
}

/* a multiply (and an add with `add`) per element, the mask's hash not counted */
static void w_dropout(pt_backend *be, void *y, const void *x, const void *add, int n, size_t per,
                      const pt_dropout *drop)
{
    const double e = (double)n * per;
    TIMED(be, in_->dropout(be, y, x, add, n, per, drop), OP_DROPOUT, n, (long long)per,
          add != NULL, 0, 0, (add ? 2.0 : 1.0) * e, ES(be) * e * (add ? 3.0 : 2.0));
}

static void w_mean_pool_fwd(pt_backend *be, void *y, const void *x, const int32_t *lens, int n,
                            int T, int d)
{
    const double e = (double)n * T * d;
    TIMED(be, in_->mean_pool_fwd(be, y, x, lens, n, T, d), OP_MEAN_POOL_FWD, n, T, d, 0, 0, e,
          ES(be) * (e + (double)n * d));
}

static void w_mean_pool_bwd(pt_backend *be, void *dx, const void *dy, const int32_t *lens, int n,
                            int T, int d)
{
    const double e = (double)n * T * d;
    TIMED(be, in_->mean_pool_bwd(be, dx, dy, lens, n, T, d), OP_MEAN_POOL_BWD, n, T, d, 0, 0, e,
          ES(be) * (e + (double)n * d));
}

static void w_patchify(pt_backend *be, void *patches, const void *images, int n, int C, int H,
                       int W, int pp)
{
    const double e = (double)n * C * H * W;
    TIMED(be, in_->patchify(be, patches, images, n, C, H, W, pp), OP_PATCHIFY, n, C, H, W, pp, 0,
          ES(be) * 2.0 * e);
}

static void w_vit_assemble_fwd(pt_backend *be, void *x, const void *proj, const void *cls,
                               const void *pos, int n, int T, int d)
{
    const double e = (double)n * T * d;
    TIMED(be, in_->vit_assemble_fwd(be, x, proj, cls, pos, n, T, d), OP_VIT_ASSEMBLE_FWD, n, T, d,
          0, 0, e, ES(be) * 2.0 * e + PS(be) * (double)T * d);
}

static void w_vit_assemble_bwd(pt_backend *be, void *dproj, void *dcls, void *dpos, const void *dx,
                               int n, int T, int d)
{
    const double e = (double)n * T * d;
    TIMED(be, in_->vit_assemble_bwd(be, dproj, dcls, dpos, dx, n, T, d), OP_VIT_ASSEMBLE_BWD, n, T,
          d, 0, 0, e, ES(be) * 2.0 * e + PS(be) * 2.0 * T * d);
}

static void w_token_embed_fwd(pt_backend *be, void *x, const int32_t *tokens, const void *wte,
                              const void *wpe, int n, int T, int d)
{
    const double e = (double)n * T * d;
    TIMED(be, in_->token_embed_fwd(be, x, tokens, wte, wpe, n, T, d), OP_TOKEN_EMBED_FWD, n, T, d,
          0, 0, e, ES(be) * e + PS(be) * e + 4.0 * n * T);
}

static void w_token_embed_bwd(pt_backend *be, void *dwte, void *dwpe, const void *dx,
                              const int32_t *tokens, int n, int T, int d)
{
    const double e = (double)n * T * d;
    TIMED(be, in_->token_embed_bwd(be, dwte, dwpe, dx, tokens, n, T, d), OP_TOKEN_EMBED_BWD, n, T,
          d, 0, 0, 2.0 * e, ES(be) * e + PS(be) * 2.0 * e + 4.0 * n * T);
}

static void w_copy_rows(pt_backend *be, void *dst, int dst_stride, const void *src,
                        int src_stride, int rows, int cols, int accumulate)
{
    const double e = (double)rows * cols;
    TIMED(be, in_->copy_rows(be, dst, dst_stride, src, src_stride, rows, cols, accumulate),
          OP_COPY_ROWS, rows, cols, accumulate, 0, 0, accumulate ? e : 0,
          ES(be) * e * (accumulate ? 3.0 : 2.0));
}

static double w_cross_entropy(pt_backend *be, void *dlogits, const void *logits,
                              const int32_t *targets, int rows, int classes, double scale,
                              int64_t *correct)
{
    double loss = 0.0;
    const double e = (double)rows * classes;
    TIMED(be, loss = in_->cross_entropy(be, dlogits, logits, targets, rows, classes, scale, correct),
          OP_CROSS_ENTROPY, rows, classes, dlogits != NULL, 0, 0, (dlogits ? 6.0 : 4.0) * e,
          ES(be) * e * (dlogits ? 2.0 : 1.0) + 4.0 * rows);
    return loss;
}

static void w_adamw(pt_backend *be, void *par, const void *g, void *m, void *v, size_t n,
                    const pt_adamw_args *args)
{
    /* m, v updates 5, the step with decay and bias corrections 7, sqrt 1 */
    TIMED(be, in_->adamw(be, par, g, m, v, n, args), OP_ADAMW, 0, 0, 0, 0, 0, 13.0 * n,
          PS(be) * 7.0 * n);
}

static double w_sumsq(pt_backend *be, const void *x, size_t n)
{
    double s = 0.0;
    TIMED(be, s = in_->sumsq(be, x, n), OP_SUMSQ, 0, 0, 0, 0, 0, 2.0 * n, PS(be) * n);
    return s;
}

static void w_scale(pt_backend *be, void *x, size_t n, double f)
{
    TIMED(be, in_->scale(be, x, n, f), OP_SCALE, 0, 0, 0, 0, 0, (double)n, PS(be) * 2.0 * n);
}

static void w_close(pt_backend *be)
{
    prof *p = prof_of(be);
    be->ops = p->inner;
    free(p);
    if (be->ops->close)
        be->ops->close(be);
}

int pt_backend_profile_ops(pt_backend *be, pt_err *err)
{
    if (!pt_backend_is_host(be))
        return pt_fail(err, PT_EINPUT, "timing ops needs a backend whose ops finish before they "
                       "return (cpu); this one is %s", be->name);
    if (be->ops->close == w_close)
        return 0; /* already on */
    prof *p = calloc(1, sizeof *p);
    if (!p)
        return pt_fail(err, PT_ENOMEM, "out of memory for the op profile");
    p->inner = be->ops;
    p->table = *be->ops;
    pt_ops *t = &p->table;
    /* only the ops the backend has: an optional op stays NULL */
#define WRAP(name)       \
    if (t->name)         \
        t->name = w_##name
    WRAP(upload);
    WRAP(download);
    WRAP(zero);
    WRAP(copy);
    WRAP(par_from_f32);
    WRAP(par_to_f32);
    WRAP(act_from_f32);
    WRAP(act_to_f32);
    WRAP(linear_fwd);
    WRAP(linear_bwd);
    WRAP(linear_bwd_mul);
    WRAP(layernorm_fwd);
    WRAP(layernorm_bwd);
    WRAP(gelu_fwd);
    WRAP(gelu_bwd);
    WRAP(attention_fwd);
    WRAP(attention_bwd);
    WRAP(attention_first_fwd);
    WRAP(attention_first_bwd);
    WRAP(mean_pool_fwd);
    WRAP(mean_pool_bwd);
    WRAP(dropout);
    WRAP(patchify);
    WRAP(vit_assemble_fwd);
    WRAP(vit_assemble_bwd);
    WRAP(token_embed_fwd);
    WRAP(token_embed_bwd);
    WRAP(copy_rows);
    WRAP(cross_entropy);
    WRAP(adamw);
    WRAP(sumsq);
    WRAP(scale);
#undef WRAP
    t->close = w_close;
    be->ops = t;
    return 0;
}

static prof *prof_if_on(const pt_backend *be)
{
    return be->ops->close == w_close ? (prof *)(void *)be->ops : NULL;
}

void pt_op_profile_record(pt_backend *be, int on)
{
    prof *p = prof_if_on(be);
    if (p)
        p->recording = on;
}

/* A row's shape in words: what tells it from the op's other rows. */
static void shape_words(const prof_row *r, char *out, size_t n)
{
    const long long *d = r->dim;
    if (d[0] == -1) {
        snprintf(out, n, "(other shapes)");
        return;
    }
    switch (r->op) {
    case OP_LINEAR_FWD:
        snprintf(out, n, "%lldx%lld . %lldx%lld^T%s%s", d[0], d[2], d[1], d[2], d[3] & 1 ? " +b" : "",
                 d[3] & 2 ? " +res" : "");
        break;
    case OP_LINEAR_BWD:
    case OP_LINEAR_BWD_MUL:
        snprintf(out, n, "%lldx%lld . %lldx%lld^T:%s%s%s%s", d[0], d[2], d[1], d[2],
                 d[3] & 1 ? " dx" : "", d[3] & 2 ? " dw" : "", d[3] & 4 ? " db" : "",
                 r->op == OP_LINEAR_BWD_MUL ? " *gelu'" : "");
        break;
    case OP_LAYERNORM_FWD:
        snprintf(out, n, "%lldx%lld", d[0], d[1]);
        break;
    case OP_LAYERNORM_BWD:
        snprintf(out, n, "%lldx%lld%s%s", d[0], d[1], d[2] & 1 ? "" : " (no dx)",
                 d[2] & 2 ? " +res" : "");
        break;
    case OP_GELU_FWD:
    case OP_GELU_BWD:
        snprintf(out, n, "%lld%s", d[0], d[1] ? " +dydx" : "");
        break;
    case OP_ATTENTION_FIRST_FWD:
    case OP_ATTENTION_FIRST_BWD:
        snprintf(out, n, "n=%lld T=%lld H=%lld hd=%lld, first query", d[0], d[1], d[2], d[3]);
        break;
    case OP_ATTENTION_FWD:
    case OP_ATTENTION_BWD:
        snprintf(out, n, "n=%lld T=%lld H=%lld hd=%lld%s%s%s", d[0], d[1], d[2], d[3],
                 d[4] & 1 ? " causal" : "", d[4] & 2 ? " masked" : "", d[4] & 4 ? " dropout" : "");
        break;
    case OP_DROPOUT:
        snprintf(out, n, "%lldx%lld%s", d[0], d[1], d[2] ? " +res" : "");
        break;
    case OP_PATCHIFY:
        snprintf(out, n, "%lldx%lldx%lldx%lld p=%lld", d[0], d[1], d[2], d[3], d[4]);
        break;
    case OP_MEAN_POOL_FWD:
    case OP_MEAN_POOL_BWD:
    case OP_VIT_ASSEMBLE_FWD:
    case OP_VIT_ASSEMBLE_BWD:
    case OP_TOKEN_EMBED_FWD:
    case OP_TOKEN_EMBED_BWD:
        snprintf(out, n, "%lldx%lldx%lld", d[0], d[1], d[2]);
        break;
    case OP_COPY_ROWS:
        snprintf(out, n, "%lldx%lld%s", d[0], d[1], d[2] ? " +=" : "");
        break;
    case OP_CROSS_ENTROPY:
        snprintf(out, n, "%lldx%lld%s", d[0], d[1], d[2] ? " +grad" : "");
        break;
    default:
        snprintf(out, n, "all");
        break;
    }
}

int pt_op_profile_stats(const pt_backend *be, pt_op_stat *out, int max)
{
    const prof *p = prof_if_on(be);
    if (!p)
        return 0;
    int k = 0;
    for (int i = 0; i < MAX_ROWS + OP_KINDS && k < max; i++) {
        const prof_row *r = &p->row[i];
        if (r->calls == 0)
            continue;
        pt_op_stat *s = &out[k++];
        memset(s, 0, sizeof *s);
        snprintf(s->op, sizeof s->op, "%s", op_names[r->op]);
        shape_words(r, s->shape, sizeof s->shape);
        s->calls = r->calls;
        s->seconds = r->seconds;
        s->flops = r->flops;
        s->bytes = r->bytes;
        s->best = r->best;
    }
    return k;
}
