/*
 * unit_mlp.c: the MLP unit, y = x + fc2(gelu(fc1(ln(x)))), pre-LN, GELU in
 * PyTorch's default erf form.
 *
 * In ViT's last block (pt_unit_cls_rows_only) the branch runs on the [CLS]
 * rows alone: y = x, then y's [CLS] rows = x + fc2(gelu(fc1(ln(x)))) there.
 *
 * Parameters (see arch.c): ln.weight, ln.bias, fc1.weight [h, d], fc1.bias,
 * fc2.weight [d, h], fc2.bias.
 */
#include "nn/unit.h"

enum { LN_W, LN_B, FC1_W, FC1_B, FC2_W, FC2_B };

typedef struct {
    void *mean, *rstd; /* [nT] */
    void *ln;          /* [nT, d] */
    void *pre;         /* [nT, h] fc1 output, GELU input (in training of an active
                          unit, GELU's derivative there once GELU has run) */
    void *act;         /* [nT, h] GELU output */
} mlp_saved;

typedef struct {
    void *dact, *dln;
    void *xc, *yc, *zc; /* [n, d]: [CLS] rows gathered (last block of a ViT) */
} mlp_scratch;

static size_t saved_layout(const pt_arch *a, const pt_backend *be, int n, void *base, mlp_saved *s)
{
    const size_t rows = (size_t)n * pt_arch_tokens(a);
    pt_carve c = {base, 0};
    s->mean = pt_carve_take(&c, rows * be->real_size);
    s->rstd = pt_carve_take(&c, rows * be->real_size);
    s->ln = pt_carve_take(&c, rows * a->dim * be->act_size);
    s->pre = pt_carve_take(&c, rows * a->mlp_hidden * be->act_size);
    s->act = pt_carve_take(&c, rows * a->mlp_hidden * be->act_size);
    return c.used;
}

static size_t scratch_layout(const pt_arch *a, const pt_backend *be, int n, void *base,
                             mlp_scratch *s)
{
    const size_t rows = (size_t)n * pt_arch_tokens(a);
    pt_carve c = {base, 0};
    s->dact = pt_carve_take(&c, rows * a->mlp_hidden * be->act_size);
    s->dln = pt_carve_take(&c, rows * a->dim * be->act_size);
    s->xc = pt_carve_take(&c, (size_t)n * a->dim * be->act_size);
    s->yc = pt_carve_take(&c, (size_t)n * a->dim * be->act_size);
    s->zc = pt_carve_take(&c, (size_t)n * a->dim * be->act_size);
    return c.used;
}

static size_t saved_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    mlp_saved s;
    return saved_layout(a, be, n, NULL, &s);
}

static size_t scratch_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    mlp_scratch s;
    return scratch_layout(a, be, n, NULL, &s);
}

static int forward(const pt_unit_call *c, const pt_batch *batch, const void *x, void *y,
                   pt_stats *stats, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int d = a->dim, h = a->mlp_hidden, T = pt_arch_tokens(a);
    const int cls = pt_unit_cls_rows_only(c), rows = cls ? c->n : c->n * T;
    mlp_saved s;
    mlp_scratch w;
    saved_layout(a, c->be, c->n, c->saved, &s);
    scratch_layout(a, c->be, c->n, c->scratch, &w);
    const void *in = x;
    void *out = y;
    if (cls) {
        op->copy_rows(c->be, w.xc, d, x, T * d, c->n, d, 0);
        in = w.xc;
        out = w.yc;
    }
    op->layernorm_fwd(c->be, s.ln, s.mean, s.rstd, in, pt_unit_param(c, c->p, LN_W),
                      pt_unit_param(c, c->p, LN_B), rows, d, pt_arch_ln_eps(a));
    op->linear_fwd(c->be, s.pre, s.ln, pt_unit_param(c, c->p, FC1_W),
                   pt_unit_param(c, c->p, FC1_B), rows, h, d, NULL);
    /* an active unit in training keeps GELU's derivative where its input was */
    op->gelu_fwd(c->be, s.act, pt_unit_backward_follows(c) ? s.pre : NULL, s.pre,
                 (size_t)rows * h);
    op->linear_fwd(c->be, out, s.act, pt_unit_param(c, c->p, FC2_W),
                   pt_unit_param(c, c->p, FC2_B), rows, d, h, in);
    if (cls) {
        op->copy(c->be, y, x, PT_ACT(c, (size_t)c->n * T * d));
        op->copy_rows(c->be, y, T * d, w.yc, d, c->n, d, 0);
    }
    return 0;
}

static int backward(const pt_unit_call *c, const pt_batch *batch, const void *x, const void *dy,
                    void *dx, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int d = a->dim, h = a->mlp_hidden, T = pt_arch_tokens(a);
    const int cls = pt_unit_cls_rows_only(c), rows = cls ? c->n : c->n * T;
    mlp_saved s;
    mlp_scratch w;
    saved_layout(a, c->be, c->n, c->saved, &s);
    scratch_layout(a, c->be, c->n, c->scratch, &w);
    const void *in = x, *din = dy;
    void *dout = dx;
    if (cls) {
        /* dy is 0 away from the [CLS] rows, where y was x: dx = dy there */
        op->copy_rows(c->be, w.xc, d, x, T * d, c->n, d, 0);
        op->copy_rows(c->be, w.yc, d, dy, T * d, c->n, d, 0);
        in = w.xc;
        din = w.yc;
        dout = dx ? w.zc : NULL;
    }
    /* dact = (din fc2.w) * GELU'(pre), in one pass where the backend can */
    pt_linear_bwd_mul(c->be, w.dact, pt_unit_param(c, c->g, FC2_W), pt_unit_param(c, c->g, FC2_B),
                      din, s.act, pt_unit_param(c, c->p, FC2_W), rows, d, h, s.pre);
    op->linear_bwd(c->be, w.dln, pt_unit_param(c, c->g, FC1_W), pt_unit_param(c, c->g, FC1_B),
                   w.dact, s.ln, pt_unit_param(c, c->p, FC1_W), rows, h, d);
    op->layernorm_bwd(c->be, dout, pt_unit_param(c, c->g, LN_W), pt_unit_param(c, c->g, LN_B),
                      w.dln, in, s.mean, s.rstd, pt_unit_param(c, c->p, LN_W), rows, d, din);
    if (cls && dx) {
        op->copy(c->be, dx, dy, PT_ACT(c, (size_t)c->n * T * d));
        op->copy_rows(c->be, dx, T * d, w.zc, d, c->n, d, 0);
    }
    return 0;
}

static int linears(const pt_arch *a, int dims[][2])
{
    dims[0][0] = a->mlp_hidden, dims[0][1] = a->dim;
    dims[1][0] = a->dim, dims[1][1] = a->mlp_hidden;
    return 2;
}

const pt_unit_impl pt_unit_mlp = {saved_bytes, scratch_bytes, forward, backward, linears};
