/*
 * unit_head.c: the head, the last unit of every model: final LayerNorm, a
 * linear map to class or vocabulary logits, softmax cross-entropy.
 *
 * ViT reads only the CLS position (token 0) and predicts one class per
 * example; GPT predicts the next token at every position. The loss of a row is
 * scaled by the call's loss_scale (1 / loss terms in the global batch) so
 * gradients summed over micro-batches and replicas are those of the mean.
 * Forward computes dlogits together with the loss (one pass over the logits);
 * backward starts from them.
 *
 * Parameters (see arch.c): ln.weight, ln.bias, fc.weight [classes, d], and
 * fc.bias [classes] for ViT only (a GPT LM head has no bias).
 */
#include "nn/unit.h"

#include <stdlib.h>

enum { LN_W, LN_B, FC_W, FC_B };

typedef struct {
    void *z;           /* ViT: the CLS rows [n, d]; GPT: unused (the input is x itself) */
    void *mean, *rstd; /* [rows] */
    void *ln;          /* [rows, d] */
    void *logits;      /* [rows, classes] */
    void *dlogits;     /* [rows, classes] */
    int32_t *targets;  /* [rows] */
} head_saved;

/* (size_t: the memory checks ask for sizes no step would run) */
static size_t head_rows(const pt_arch *a, int n)
{
    return a->kind == PT_MODEL_VIT ? (size_t)n : (size_t)n * (size_t)a->context;
}

static size_t saved_layout(const pt_arch *a, const pt_backend *be, int n, void *base,
                           head_saved *s)
{
    const size_t rows = head_rows(a, n), classes = pt_arch_out_classes(a);
    pt_carve c = {base, 0};
    s->z = pt_carve_take(&c, a->kind == PT_MODEL_VIT ? rows * a->dim * be->act_size : 0);
    s->mean = pt_carve_take(&c, rows * be->real_size);
    s->rstd = pt_carve_take(&c, rows * be->real_size);
    s->ln = pt_carve_take(&c, rows * a->dim * be->act_size);
    s->logits = pt_carve_take(&c, rows * classes * be->act_size);
    s->dlogits = pt_carve_take(&c, rows * classes * be->act_size);
    s->targets = pt_carve_take(&c, rows * sizeof(int32_t));
    return c.used;
}

static size_t saved_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    head_saved s;
    return saved_layout(a, be, n, NULL, &s);
}

/* dln [rows, d], and for ViT dz [n, d] */
static size_t scratch_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    pt_carve c = {NULL, 0};
    pt_carve_take(&c, (size_t)head_rows(a, n) * a->dim * be->act_size);
    pt_carve_take(&c, (size_t)n * a->dim * be->act_size);
    return c.used;
}

static int forward(const pt_unit_call *c, const pt_batch *batch, const void *x, void *y,
                   pt_stats *stats, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int rows = (int)head_rows(a, c->n), classes = pt_arch_out_classes(a), d = a->dim;
    const int T = pt_arch_tokens(a);
    head_saved s;
    saved_layout(a, c->be, c->n, c->saved, &s);
    const void *z = x;
    if (a->kind == PT_MODEL_VIT) {
        op->copy_rows(c->be, s.z, d, x, T * d, c->n, d, 0);
        z = s.z;
    }
    op->layernorm_fwd(c->be, s.ln, s.mean, s.rstd, z, pt_unit_param(c, c->p, LN_W),
                      pt_unit_param(c, c->p, LN_B), rows, d, pt_arch_ln_eps(a));
    op->linear_fwd(c->be, s.logits, s.ln, pt_unit_param(c, c->p, FC_W),
                   a->kind == PT_MODEL_VIT ? pt_unit_param(c, c->p, FC_B) : NULL, rows, classes, d,
                   NULL);
    if (!batch || !batch->targets)
        return c->train ? pt_fail(err, PT_EINTERNAL, "training needs the batch's targets") : 0;
    op->upload(c->be, s.targets, batch->targets, (size_t)rows * sizeof(int32_t));
    int64_t correct = 0;
    double sum = op->cross_entropy(c->be, c->train ? s.dlogits : NULL, s.logits, s.targets, rows,
                                   classes, c->loss_scale, &correct);
    if (stats) {
        stats->loss += sum * c->loss_scale;
        stats->correct += correct;
        stats->rows += rows;
    }
    return a->kind == PT_MODEL_VIT
               ? pt_unit_count_confusion(c, s.logits, batch->targets, rows, classes, stats, err)
               : 0;
}

int pt_unit_count_confusion(const pt_unit_call *c, const void *logits, const int32_t *targets,
                            int rows, int classes, pt_stats *stats, pt_err *err)
{
    if (!stats || !stats->confusion || rows < 1)
        return 0;
    float *z = malloc((size_t)rows * classes * sizeof *z);
    if (!z)
        return pt_fail(err, PT_ENOMEM, "out of memory counting the predictions by class");
    c->be->ops->act_to_f32(c->be, z, logits, (size_t)rows * classes);
    int rc = c->be->ops->status ? c->be->ops->status(c->be, err) : 0;
    for (int r = 0; rc == 0 && r < rows; r++) {
        const float *row = z + (size_t)r * classes;
        int arg = 0; /* the cross-entropy op's rule: the first of the highest */
        for (int k = 1; k < classes; k++)
            if (row[k] > row[arg])
                arg = k;
        if (targets[r] < 0 || targets[r] >= classes)
            rc = pt_fail(err, PT_EINTERNAL, "row %d's target %d of %d classes", r, (int)targets[r],
                         classes);
        else
            stats->confusion[(size_t)targets[r] * classes + arg]++;
    }
    free(z);
    return rc;
}

static int backward(const pt_unit_call *c, const pt_batch *batch, const void *x, const void *dy,
                    void *dx, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int rows = (int)head_rows(a, c->n), classes = pt_arch_out_classes(a), d = a->dim;
    const int T = pt_arch_tokens(a);
    head_saved s;
    saved_layout(a, c->be, c->n, c->saved, &s);
    pt_carve w = {c->scratch, 0};
    void *dln = pt_carve_take(&w, (size_t)rows * d * c->be->act_size);
    void *dz = pt_carve_take(&w, (size_t)c->n * d * c->be->act_size);
    op->linear_bwd(c->be, dln, pt_unit_param(c, c->g, FC_W),
                   a->kind == PT_MODEL_VIT ? pt_unit_param(c, c->g, FC_B) : NULL, s.dlogits, s.ln,
                   pt_unit_param(c, c->p, FC_W), rows, classes, d);
    if (a->kind == PT_MODEL_VIT) {
        op->layernorm_bwd(c->be, dx ? dz : NULL, pt_unit_param(c, c->g, LN_W),
                          pt_unit_param(c, c->g, LN_B), dln, s.z, s.mean, s.rstd,
                          pt_unit_param(c, c->p, LN_W), rows, d, NULL);
        if (dx) {
            op->zero(c->be, dx, PT_ACT(c, (size_t)c->n * T * d));
            op->copy_rows(c->be, dx, T * d, dz, d, c->n, d, 0);
        }
    } else {
        op->layernorm_bwd(c->be, dx, pt_unit_param(c, c->g, LN_W), pt_unit_param(c, c->g, LN_B),
                          dln, x, s.mean, s.rstd, pt_unit_param(c, c->p, LN_W), rows, d, NULL);
    }
    return 0;
}

/* Logits of one row, for sampling and inspection. */
int pt_unit_head_logits(const pt_unit_call *c, int row, float *out, pt_err *err)
{
    const pt_arch *a = c->arch;
    if (a->kind == PT_MODEL_BERT)
        return pt_unit_head_pooled_logits(c, row, out, err);
    const int classes = pt_arch_out_classes(a);
    if (row < 0 || row >= (int)head_rows(a, c->n))
        return pt_fail(err, PT_EINTERNAL, "logits row %d out of range", row);
    head_saved s;
    saved_layout(a, c->be, c->n, c->saved, &s);
    c->be->ops->act_to_f32(c->be, out,
                           (const char *)s.logits + (size_t)row * classes * c->be->act_size,
                           classes);
    return 0;
}

static int linears(const pt_arch *a, int dims[][2])
{
    dims[0][0] = pt_arch_out_classes(a), dims[0][1] = a->dim;
    return 1;
}

const pt_unit_impl pt_unit_head = {saved_bytes, scratch_bytes, forward, backward, linears};
