/*
 * unit_attn.c: the attention unit, y = x + proj(attention(qkv(ln(x)))), pre-LN,
 * fused QKV projection, multi-head scaled dot-product attention (causal or
 * bidirectional per the arch), output projection and residual add.
 *
 * In ViT's last block (pt_unit_cls_rows_only) attention runs for the [CLS]
 * query alone (over every position's keys and values; attention_first_fwd,
 * or every query where a backend lacks it), and the projection and the
 * residual add on the [CLS] rows: y = x, then y's [CLS] rows =
 * x + proj(att) there.
 *
 * Parameters (see arch.c): ln.weight, ln.bias, qkv.weight [3d, d], qkv.bias,
 * proj.weight [d, d], proj.bias.
 */
#include "nn/unit.h"

enum { LN_W, LN_B, QKV_W, QKV_B, PROJ_W, PROJ_B };

typedef struct {
    void *mean, *rstd; /* [nT] */
    void *ln;          /* [nT, d] */
    void *qkv;         /* [nT, 3d] */
    void *probs;       /* what attention keeps for backward: [n, H, T, T] probabilities on the CPU */
    void *att;         /* [nT, d] */
    void *att0;        /* [n, d]: attention's output at [CLS] (last block of a ViT) */
} attn_saved;

typedef struct {
    void *datt, *dqkv, *dln;
    void *xc, *yc, *zc; /* [n, d]: [CLS] rows gathered (last block of a ViT) */
} attn_scratch;

/* The backend runs attention for the first query alone (both ops or neither
 * are used: backward must undo what forward did). */
static int first_query_ops(const pt_ops *op)
{
    return op->attention_first_fwd && op->attention_first_bwd;
}

static size_t saved_layout(const pt_arch *a, const pt_backend *be, int n, void *base,
                           attn_saved *s)
{
    const size_t rows = (size_t)n * pt_arch_tokens(a), T = pt_arch_tokens(a);
    pt_carve c = {base, 0};
    s->mean = pt_carve_take(&c, rows * be->real_size);
    s->rstd = pt_carve_take(&c, rows * be->real_size);
    s->ln = pt_carve_take(&c, rows * a->dim * be->act_size);
    s->qkv = pt_carve_take(&c, rows * 3 * a->dim * be->act_size);
    s->probs = pt_carve_take(&c, be->ops->attention_saved_bytes
                                     ? be->ops->attention_saved_bytes(be, n, (int)T, a->heads)
                                     : (size_t)n * a->heads * T * T * be->act_size);
    s->att = pt_carve_take(&c, rows * a->dim * be->act_size);
    s->att0 = pt_carve_take(&c, (size_t)n * a->dim * be->act_size);
    return c.used;
}

static size_t scratch_layout(const pt_arch *a, const pt_backend *be, int n, void *base,
                             attn_scratch *s)
{
    const size_t rows = (size_t)n * pt_arch_tokens(a);
    pt_carve c = {base, 0};
    s->datt = pt_carve_take(&c, rows * a->dim * be->act_size);
    s->dqkv = pt_carve_take(&c, rows * 3 * a->dim * be->act_size);
    s->dln = pt_carve_take(&c, rows * a->dim * be->act_size);
    s->xc = pt_carve_take(&c, (size_t)n * a->dim * be->act_size);
    s->yc = pt_carve_take(&c, (size_t)n * a->dim * be->act_size);
    s->zc = pt_carve_take(&c, (size_t)n * a->dim * be->act_size);
    return c.used;
}

static size_t saved_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    attn_saved s;
    return saved_layout(a, be, n, NULL, &s);
}

static size_t scratch_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    attn_scratch s;
    return scratch_layout(a, be, n, NULL, &s);
}

static int forward(const pt_unit_call *c, const pt_batch *batch, const void *x, void *y,
                   pt_stats *stats, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int T = pt_arch_tokens(a), d = a->dim, rows = c->n * T;
    attn_saved s;
    saved_layout(a, c->be, c->n, c->saved, &s);
    op->layernorm_fwd(c->be, s.ln, s.mean, s.rstd, x, pt_unit_param(c, c->p, LN_W),
                      pt_unit_param(c, c->p, LN_B), rows, d, pt_arch_ln_eps(a));
    op->linear_fwd(c->be, s.qkv, s.ln, pt_unit_param(c, c->p, QKV_W),
                   pt_unit_param(c, c->p, QKV_B), rows, 3 * d, d, NULL);
    if (pt_unit_cls_rows_only(c)) {
        /* the [CLS] query alone where the backend can, else every query */
        if (first_query_ops(op)) {
            op->attention_first_fwd(c->be, s.att0, s.probs, s.qkv, c->n, T, a->heads,
                                    d / a->heads);
        } else {
            op->attention_fwd(c->be, s.att, s.probs, s.qkv, c->n, T, a->heads, d / a->heads,
                              a->causal, NULL, NULL);
            op->copy_rows(c->be, s.att0, d, s.att, T * d, c->n, d, 0);
        }
        attn_scratch w;
        scratch_layout(a, c->be, c->n, c->scratch, &w);
        op->copy_rows(c->be, w.xc, d, x, T * d, c->n, d, 0);
        op->linear_fwd(c->be, w.yc, s.att0, pt_unit_param(c, c->p, PROJ_W),
                       pt_unit_param(c, c->p, PROJ_B), c->n, d, d, w.xc);
        op->copy(c->be, y, x, PT_ACT(c, (size_t)rows * d));
        op->copy_rows(c->be, y, T * d, w.yc, d, c->n, d, 0);
        return 0;
    }
    op->attention_fwd(c->be, s.att, s.probs, s.qkv, c->n, T, a->heads, d / a->heads, a->causal,
                      NULL, NULL);
    op->linear_fwd(c->be, y, s.att, pt_unit_param(c, c->p, PROJ_W),
                   pt_unit_param(c, c->p, PROJ_B), rows, d, d, x);
    return 0;
}

static int backward(const pt_unit_call *c, const pt_batch *batch, const void *x, const void *dy,
                    void *dx, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int T = pt_arch_tokens(a), d = a->dim, rows = c->n * T;
    attn_saved s;
    attn_scratch w;
    saved_layout(a, c->be, c->n, c->saved, &s);
    scratch_layout(a, c->be, c->n, c->scratch, &w);
    if (pt_unit_cls_rows_only(c)) {
        /* dy is 0 away from the [CLS] rows, and so is datt */
        op->copy_rows(c->be, w.yc, d, dy, T * d, c->n, d, 0);
        op->linear_bwd(c->be, w.zc, pt_unit_param(c, c->g, PROJ_W),
                       pt_unit_param(c, c->g, PROJ_B), w.yc, s.att0,
                       pt_unit_param(c, c->p, PROJ_W), c->n, d, d);
        if (first_query_ops(op)) {
            op->attention_first_bwd(c->be, w.dqkv, w.zc, s.qkv, s.probs, c->n, T, a->heads,
                                    d / a->heads);
        } else {
            op->zero(c->be, w.datt, PT_ACT(c, (size_t)rows * d));
            op->copy_rows(c->be, w.datt, T * d, w.zc, d, c->n, d, 0);
            op->attention_bwd(c->be, w.dqkv, w.datt, s.qkv, s.probs, s.att, c->n, T, a->heads,
                              d / a->heads, a->causal, NULL, NULL);
        }
    } else {
        op->linear_bwd(c->be, w.datt, pt_unit_param(c, c->g, PROJ_W),
                       pt_unit_param(c, c->g, PROJ_B), dy, s.att, pt_unit_param(c, c->p, PROJ_W),
                       rows, d, d);
        op->attention_bwd(c->be, w.dqkv, w.datt, s.qkv, s.probs, s.att, c->n, T, a->heads,
                          d / a->heads, a->causal, NULL, NULL);
    }
    op->linear_bwd(c->be, w.dln, pt_unit_param(c, c->g, QKV_W),
                   pt_unit_param(c, c->g, QKV_B), w.dqkv, s.ln, pt_unit_param(c, c->p, QKV_W),
                   rows, 3 * d, d);
    /* dx = dy (the residual path) + the branch's gradient */
    op->layernorm_bwd(c->be, dx, pt_unit_param(c, c->g, LN_W), pt_unit_param(c, c->g, LN_B),
                      w.dln, x, s.mean, s.rstd, pt_unit_param(c, c->p, LN_W), rows,
                      d, dy);
    return 0;
}

const pt_unit_impl pt_unit_attn = {saved_bytes, scratch_bytes, forward, backward};
