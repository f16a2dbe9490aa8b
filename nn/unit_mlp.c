/*
 * unit_mlp.c: the MLP unit, y = x + fc2(gelu(fc1(ln(x)))), pre-LN, GELU in
 * PyTorch's default erf form.
 *
 * Parameters (see arch.c): ln.weight, ln.bias, fc1.weight [h, d], fc1.bias,
 * fc2.weight [d, h], fc2.bias.
 */
#include "nn/unit.h"

enum { LN_W, LN_B, FC1_W, FC1_B, FC2_W, FC2_B };

typedef struct {
    void *mean, *rstd; /* [nT] */
    void *ln;          /* [nT, d] */
    void *pre;         /* [nT, h] fc1 output, GELU input */
    void *act;         /* [nT, h] GELU output */
} mlp_saved;

typedef struct {
    void *dact, *dln;
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
    const int d = a->dim, h = a->mlp_hidden, rows = c->n * pt_arch_tokens(a);
    mlp_saved s;
    saved_layout(a, c->be, c->n, c->saved, &s);
    op->layernorm_fwd(c->be, s.ln, s.mean, s.rstd, x, pt_unit_param(c, c->p, LN_W),
                      pt_unit_param(c, c->p, LN_B), rows, d, pt_arch_ln_eps(a));
    op->linear_fwd(c->be, s.pre, s.ln, pt_unit_param(c, c->p, FC1_W),
                   pt_unit_param(c, c->p, FC1_B), rows, h, d, NULL);
    op->gelu_fwd(c->be, s.act, s.pre, (size_t)rows * h);
    op->linear_fwd(c->be, y, s.act, pt_unit_param(c, c->p, FC2_W),
                   pt_unit_param(c, c->p, FC2_B), rows, d, h, x);
    return 0;
}

static int backward(const pt_unit_call *c, const pt_batch *batch, const void *x, const void *dy,
                    void *dx, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int d = a->dim, h = a->mlp_hidden, rows = c->n * pt_arch_tokens(a);
    mlp_saved s;
    mlp_scratch w;
    saved_layout(a, c->be, c->n, c->saved, &s);
    scratch_layout(a, c->be, c->n, c->scratch, &w);
    op->linear_bwd(c->be, w.dact, pt_unit_param(c, c->g, FC2_W), pt_unit_param(c, c->g, FC2_B), dy,
                   s.act, pt_unit_param(c, c->p, FC2_W), rows, d, h);
    op->gelu_bwd(c->be, w.dact, w.dact, s.pre, s.act, (size_t)rows * h);
    op->linear_bwd(c->be, w.dln, pt_unit_param(c, c->g, FC1_W), pt_unit_param(c, c->g, FC1_B),
                   w.dact, s.ln, pt_unit_param(c, c->p, FC1_W), rows, h, d);
    op->layernorm_bwd(c->be, dx, pt_unit_param(c, c->g, LN_W), pt_unit_param(c, c->g, LN_B), w.dln,
                      x, s.mean, s.rstd, pt_unit_param(c, c->p, LN_W), rows, d, dy);
    return 0;
}

const pt_unit_impl pt_unit_mlp = {saved_bytes, scratch_bytes, forward, backward};
