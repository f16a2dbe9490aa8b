/*
 * unit_attn.c: the attention unit, y = x + proj(attention(qkv(ln(x)))), pre-LN,
 * fused QKV projection, multi-head scaled dot-product attention (causal or
 * bidirectional per the arch), output projection and residual add.
 *
 * In ViT's last block (pt_unit_cls_rows_only) attention runs for the [CLS]
 * query alone, over every position's keys and values (attention_first_fwd),
 * so the query's projection runs on the [CLS] rows alone too (the first d
 * rows of qkv.weight), the keys' and values' on every row (the other 2d),
 * and the output projection and the residual add on the [CLS] rows:
 * y = x, then y's [CLS] rows = x + proj(att) there. A backend without
 * attention_first_fwd computes every query and projects them all.
 *
 * Parameters (see arch.c): ln.weight, ln.bias, qkv.weight [3d, d], qkv.bias,
 * proj.weight [d, d], proj.bias.
 */
#include "nn/unit.h"

enum { LN_W, LN_B, QKV_W, QKV_B, PROJ_W, PROJ_B };

typedef struct {
    void *mean, *rstd; /* [nT] */
    void *ln;          /* [nT, d] */
    void *qkv;         /* [nT, 3d]; [nT, 2d] keys and values with attention_first */
    void *lnc, *q0;    /* [n, d]: ln at [CLS] and its query (with attention_first) */
    void *probs;       /* what attention keeps for backward: [n, H, T, T] probabilities on the CPU */
    void *att;         /* [nT, d] */
    void *att0;        /* [n, d]: attention's output at [CLS] (last block of a ViT) */
} attn_saved;

typedef struct {
    void *datt, *dqkv, *dln;
    void *xc, *yc, *zc; /* [n, d]: [CLS] rows gathered (last block of a ViT) */
    void *dq0, *dlnc;   /* [n, d]: the [CLS] query's gradient and ln's from it */
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
    s->lnc = pt_carve_take(&c, (size_t)n * a->dim * be->act_size);
    s->q0 = pt_carve_take(&c, (size_t)n * a->dim * be->act_size);
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
    s->dq0 = pt_carve_take(&c, (size_t)n * a->dim * be->act_size);
    s->dlnc = pt_carve_take(&c, (size_t)n * a->dim * be->act_size);
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
    const char *qkv_w = pt_unit_param(c, c->p, QKV_W), *qkv_b = pt_unit_param(c, c->p, QKV_B);
    if (pt_unit_cls_rows_only(c) && first_query_ops(op)) {
        /* keys and values at every row (qkv.weight's rows d .. 3d), the
         * query at the [CLS] rows alone (rows 0 .. d) */
        op->linear_fwd(c->be, s.qkv, s.ln, qkv_w + PT_PAR(c, (size_t)d * d), qkv_b + PT_PAR(c, d),
                       rows, 2 * d, d, NULL);
        op->copy_rows(c->be, s.lnc, d, s.ln, T * d, c->n, d, 0);
        op->linear_fwd(c->be, s.q0, s.lnc, qkv_w, qkv_b, c->n, d, d, NULL);
        op->attention_first_fwd(c->be, s.att0, s.probs, s.q0, s.qkv, c->n, T, a->heads,
                                d / a->heads);
    } else {
        op->linear_fwd(c->be, s.qkv, s.ln, qkv_w, qkv_b, rows, 3 * d, d, NULL);
        op->attention_fwd(c->be, s.att, s.probs, s.qkv, c->n, T, a->heads, d / a->heads,
                          a->causal, NULL, NULL);
    }
    if (pt_unit_cls_rows_only(c)) {
        if (!first_query_ops(op))
            op->copy_rows(c->be, s.att0, d, s.att, T * d, c->n, d, 0);
        attn_scratch w;
        scratch_layout(a, c->be, c->n, c->scratch, &w);
        op->copy_rows(c->be, w.xc, d, x, T * d, c->n, d, 0);
        op->linear_fwd(c->be, w.yc, s.att0, pt_unit_param(c, c->p, PROJ_W),
                       pt_unit_param(c, c->p, PROJ_B), c->n, d, d, w.xc);
        op->copy(c->be, y, x, PT_ACT(c, (size_t)rows * d));
        op->copy_rows(c->be, y, T * d, w.yc, d, c->n, d, 0);
        return 0;
    }
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
    const int cls_only = pt_unit_cls_rows_only(c);
    if (cls_only) {
        /* dy is 0 away from the [CLS] rows, and so is datt */
        op->copy_rows(c->be, w.yc, d, dy, T * d, c->n, d, 0);
        op->linear_bwd(c->be, w.zc, pt_unit_param(c, c->g, PROJ_W),
                       pt_unit_param(c, c->g, PROJ_B), w.yc, s.att0,
                       pt_unit_param(c, c->p, PROJ_W), c->n, d, d);
    } else {
        op->linear_bwd(c->be, w.datt, pt_unit_param(c, c->g, PROJ_W),
                       pt_unit_param(c, c->g, PROJ_B), dy, s.att, pt_unit_param(c, c->p, PROJ_W),
                       rows, d, d);
    }
    char *qkv_gw = pt_unit_param(c, c->g, QKV_W), *qkv_gb = pt_unit_param(c, c->g, QKV_B);
    const char *qkv_w = pt_unit_param(c, c->p, QKV_W);
    if (cls_only && first_query_ops(op)) {
        op->attention_first_bwd(c->be, w.dq0, w.dqkv, w.zc, s.q0, s.qkv, s.probs, c->n, T,
                                a->heads, d / a->heads);
        /* dln: from the keys and values at every row, plus from the query
         * at the [CLS] rows */
        op->linear_bwd(c->be, w.dln, qkv_gw + PT_PAR(c, (size_t)d * d), qkv_gb + PT_PAR(c, d),
                       w.dqkv, s.ln, qkv_w + PT_PAR(c, (size_t)d * d), rows, 2 * d, d);
        op->linear_bwd(c->be, w.dlnc, qkv_gw, qkv_gb, w.dq0, s.lnc, qkv_w, c->n, d, d);
        op->copy_rows(c->be, w.dln, T * d, w.dlnc, d, c->n, d, 1);
    } else {
        if (cls_only) {
            op->zero(c->be, w.datt, PT_ACT(c, (size_t)rows * d));
            op->copy_rows(c->be, w.datt, T * d, w.zc, d, c->n, d, 0);
        }
        op->attention_bwd(c->be, w.dqkv, w.datt, s.qkv, s.probs, s.att, c->n, T, a->heads,
                          d / a->heads, a->causal, NULL, NULL);
        op->linear_bwd(c->be, w.dln, qkv_gw, qkv_gb, w.dqkv, s.ln, qkv_w, rows, 3 * d, d);
    }
    /* dx = dy (the residual path) + the branch's gradient */
    op->layernorm_bwd(c->be, dx, pt_unit_param(c, c->g, LN_W), pt_unit_param(c, c->g, LN_B),
                      w.dln, x, s.mean, s.rstd, pt_unit_param(c, c->p, LN_W), rows,
                      d, dy);
    return 0;
}

/* qkv, and the output projection; in ViT's last block when only the [CLS]
 * rows go on (pt_unit_cls_rows_only), keys and values alone over every row
 * (2d x d: fewer weights than qkv, so possibly more partial sums), the
 * first token's query of the projection's shape */
static int linears(const pt_arch *a, int dims[][2])
{
    dims[0][0] = 3 * a->dim, dims[0][1] = a->dim;
    dims[1][0] = a->dim, dims[1][1] = a->dim;
    if (a->kind != PT_MODEL_VIT || a->full_last_block)
        return 2;
    dims[2][0] = 2 * a->dim, dims[2][1] = a->dim;
    return 3;
}

const pt_unit_impl pt_unit_attn = {saved_bytes, scratch_bytes, forward, backward, linears};
