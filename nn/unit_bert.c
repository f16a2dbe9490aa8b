/*
 * unit_bert.c: BERT's units, as Hugging Face's BertModel computes them, with
 * a classifier on top.
 *
 *   embed: x = drop(LN(word[tokens] + pos[t] + type[0]))  (every token has type 0)
 *   attn:  y = LN(x + drop(proj(drop_a(softmax(q k^T / sqrt(hd), mask)) v)))  (post-LN)
 *   mlp:   y = LN(x + drop(fc2(gelu(fc1(x)))))             (post-LN, erf GELU)
 *   head:  logits = fc(drop(mean of y over the real tokens)), softmax cross-entropy
 *
 * drop is inverted dropout with the arch's hidden_dropout, drop_a with its
 * attn_dropout, as BertModel in training mode (and
 * BertForSequenceClassification's dropout before its classifier). They act
 * only in a training call of an active unit (pt_unit_call.dropout); in
 * evaluation and in frozen units every drop is the identity, so a frozen
 * prefix computes the same function in training as in evaluation, which is
 * what the activation cache stores. A mask is a pure function of (seed,
 * step, the example's id, unit, site, element) (nn/dropout.h): nothing is
 * kept between forward and backward but the examples' ids, and backward
 * makes the forward's masks again. With a probability of 0 no dropout op
 * runs at all: the computation is the one without dropout, bit for bit.
 *
 * The padding mask comes from the batch's tokens (pt_arch_token_lengths: an
 * example's tokens from its first [PAD] on are padding), so every unit of
 * every stage finds it without anything extra crossing a stage boundary:
 * attention's queries see only real keys, and the head averages real
 * positions only. Padded positions still carry values through the blocks
 * (they attend to the real tokens) but nothing real depends on them, and
 * they get no gradient from the head.
 *
 * Parameters (see arch.c): embed word.weight [V, d], pos.weight [P, d],
 * type.weight [types, d], ln; attn qkv [3d, d] (q, k, v rows in that order,
 * heads contiguous in each), proj [d, d], ln; mlp fc1 [h, d], fc2 [d, h], ln;
 * head fc [classes, d] with bias.
 */
#include "nn/unit.h"

#include <stdlib.h>

/* Uploads the examples' real-token counts into lens (backend int32 [n]). */
static int upload_lengths(const pt_unit_call *c, const pt_batch *batch, int32_t *lens, pt_err *err)
{
    if (!batch || !batch->tokens)
        return pt_fail(err, PT_EINTERNAL, "a BERT unit needs the batch's tokens (its padding)");
    int32_t *host = malloc((size_t)c->n * sizeof *host + 1);
    if (!host)
        return pt_fail(err, PT_ENOMEM, "out of memory for %d token counts", c->n);
    pt_arch_token_lengths(c->arch, batch->tokens, c->n, host);
    c->be->ops->upload(c->be, lens, host, (size_t)c->n * sizeof *host);
    free(host);
    return 0;
}

/* The dropout sites of each unit (part of the masks' key). */
enum { SITE_EMBED_OUT = 0, SITE_ATTN_PROBS = 0, SITE_ATTN_PROJ = 1, SITE_MLP_OUT = 0,
       SITE_HEAD_POOLED = 0 };

/* Dropout of probability p at a site of this call: 1 with *d filled when it
 * applies (a training call of an active unit, p > 0), else 0. ids: the
 * examples' ids in backend memory (the unit's saved copy). */
static int drop_at(const pt_unit_call *c, const pt_batch *batch, double p, int site,
                   const int64_t *ids, pt_dropout *d)
{
    if (!c->dropout || !(p > 0))
        return 0;
    d->p = p;
    d->key = pt_dropout_key(c->arch->seed, batch->step, c->unit, site);
    d->ids = ids;
    return 1;
}

/* Forward of a call whose dropout applies: the examples' ids into the unit's
 * saved area, where backward finds them. */
static int save_ids(const pt_unit_call *c, const pt_batch *batch, int64_t *ids, pt_err *err)
{
    if (!batch || !batch->ids)
        return pt_fail(err, PT_EINTERNAL, "a training forward with dropout needs the examples' ids");
    c->be->ops->upload(c->be, ids, batch->ids, (size_t)c->n * sizeof *ids);
    return 0;
}

/* Bytes of the ids' copy when the arch has any dropout (else none is kept). */
static size_t ids_bytes(const pt_arch *a, int n)
{
    return a->hidden_dropout > 0 || a->attn_dropout > 0 ? (size_t)n * sizeof(int64_t) : 0;
}

/* Room for one [rows, d] activation when the arch has hidden dropout. */
static size_t hidden_drop_bytes(const pt_arch *a, const pt_backend *be, size_t rows)
{
    return a->hidden_dropout > 0 ? rows * a->dim * be->act_size : 0;
}

/* ------------------------------------------------------------- embedding */

enum { E_WORD, E_POS, E_TYPE, E_LN_W, E_LN_B };

typedef struct {
    int32_t *tokens;   /* [n, T] */
    void *sum;         /* [nT, d] the LayerNorm's input */
    void *mean, *rstd; /* [nT] */
    int64_t *ids;      /* [n] (dropout) */
} embed_saved;

static size_t embed_layout(const pt_arch *a, const pt_backend *be, int n, void *base, embed_saved *s)
{
    const size_t rows = (size_t)n * a->context;
    pt_carve c = {base, 0};
    s->tokens = pt_carve_take(&c, rows * sizeof(int32_t));
    s->sum = pt_carve_take(&c, rows * a->dim * be->act_size);
    s->mean = pt_carve_take(&c, rows * be->real_size);
    s->rstd = pt_carve_take(&c, rows * be->real_size);
    s->ids = pt_carve_take(&c, ids_bytes(a, n));
    return c.used;
}

static size_t embed_saved_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    embed_saved s;
    return embed_layout(a, be, n, NULL, &s);
}

/* forward: zeros [nT] (act); backward: dsum [nT, d] (act), and with
 * dropout the gradient of the LayerNorm's output [nT, d] */
static size_t embed_scratch_layout(const pt_arch *a, const pt_backend *be, int n, void *base,
                                   void **dsum, void **dln)
{
    const size_t rows = (size_t)n * a->context;
    pt_carve c = {base, 0};
    *dsum = pt_carve_take(&c, rows * a->dim * be->act_size);
    *dln = pt_carve_take(&c, hidden_drop_bytes(a, be, rows));
    return c.used;
}

static size_t embed_scratch_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    void *dsum, *dln;
    return embed_scratch_layout(a, be, n, NULL, &dsum, &dln);
}

static int embed_forward(const pt_unit_call *c, const pt_batch *batch, const void *x, void *y,
                         pt_stats *stats, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int T = a->context, d = a->dim, rows = c->n * T;
    if (!batch || !batch->tokens)
        return pt_fail(err, PT_EINTERNAL, "the BERT embedding needs the batch's tokens");
    embed_saved s;
    embed_layout(a, c->be, c->n, c->saved, &s);
    op->upload(c->be, s.tokens, batch->tokens, (size_t)rows * sizeof(int32_t));
    op->token_embed_fwd(c->be, s.sum, s.tokens, pt_unit_param(c, c->p, E_WORD),
                        pt_unit_param(c, c->p, E_POS), c->n, T, d);
    /* + type[0] on every row: the bias of a linear layer of width 1 over zero
     * inputs (a parameter row added to activations of either precision;
     * copy_rows moves activation elements only). x . w^T is exactly 0, so
     * every row gets sum + type[0] as one addition. */
    void *zeros = c->scratch;
    op->zero(c->be, zeros, (size_t)rows * c->be->act_size);
    op->linear_fwd(c->be, s.sum, zeros, pt_unit_param(c, c->p, E_TYPE),
                   pt_unit_param(c, c->p, E_TYPE), rows, d, 1, s.sum);
    op->layernorm_fwd(c->be, y, s.mean, s.rstd, s.sum, pt_unit_param(c, c->p, E_LN_W),
                      pt_unit_param(c, c->p, E_LN_B), rows, d, pt_arch_ln_eps(a));
    pt_dropout drop;
    if (drop_at(c, batch, a->hidden_dropout, SITE_EMBED_OUT, s.ids, &drop)) {
        int rc = save_ids(c, batch, s.ids, err);
        if (rc)
            return rc;
        op->dropout(c->be, y, y, NULL, c->n, (size_t)T * d, &drop);
    }
    return 0;
}

static int embed_backward(const pt_unit_call *c, const pt_batch *batch, const void *x,
                          const void *dy, void *dx, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int T = a->context, d = a->dim, rows = c->n * T;
    embed_saved s;
    embed_layout(a, c->be, c->n, c->saved, &s);
    void *dsum, *dln;
    embed_scratch_layout(a, c->be, c->n, c->scratch, &dsum, &dln);
    pt_dropout drop;
    if (drop_at(c, batch, a->hidden_dropout, SITE_EMBED_OUT, s.ids, &drop)) {
        op->dropout(c->be, dln, dy, NULL, c->n, (size_t)T * d, &drop);
        dy = dln;
    }
    op->layernorm_bwd(c->be, dsum, pt_unit_param(c, c->g, E_LN_W), pt_unit_param(c, c->g, E_LN_B),
                      dy, s.sum, s.mean, s.rstd, pt_unit_param(c, c->p, E_LN_W), rows, d, NULL);
    op->token_embed_bwd(c->be, pt_unit_param(c, c->g, E_WORD), pt_unit_param(c, c->g, E_POS), dsum,
                        s.tokens, c->n, T, d);
    /* type[0] gets the sum over all rows: the bias gradient of linear_bwd */
    op->linear_bwd(c->be, NULL, NULL, pt_unit_param(c, c->g, E_TYPE), dsum, NULL, NULL, rows, d,
                   1);
    return 0;
}

/* the token type's row, added as a product with one input */
static int embed_linears(const pt_arch *a, int dims[][2])
{
    dims[0][0] = a->dim, dims[0][1] = 1;
    return 1;
}

const pt_unit_impl pt_unit_embed_bert = {embed_saved_bytes, embed_scratch_bytes, embed_forward,
                                         embed_backward, embed_linears};

/* ---------------------------------------------------- post-LN attention */

enum { A_QKV_W, A_QKV_B, A_PROJ_W, A_PROJ_B, A_LN_W, A_LN_B };

typedef struct {
    int32_t *lens;     /* [n] */
    void *qkv;         /* [nT, 3d] */
    void *probs;       /* attention's saved state */
    void *att;         /* [nT, d] */
    void *sum;         /* [nT, d] x + proj(att): the LayerNorm's input */
    void *mean, *rstd; /* [nT] */
    int64_t *ids;      /* [n] (dropout) */
} attn_saved;

typedef struct {
    void *dsum, *datt, *dqkv;
    void *dproj; /* [nT, d] (hidden dropout): the gradient of proj's output */
} attn_scratch;

static size_t attn_layout(const pt_arch *a, const pt_backend *be, int n, void *base, attn_saved *s)
{
    const size_t T = a->context, rows = (size_t)n * T;
    pt_carve c = {base, 0};
    s->lens = pt_carve_take(&c, (size_t)n * sizeof(int32_t));
    s->qkv = pt_carve_take(&c, rows * 3 * a->dim * be->act_size);
    s->probs = pt_carve_take(&c, be->ops->attention_saved_bytes
                                     ? be->ops->attention_saved_bytes(be, n, (int)T, a->heads)
                                     : (size_t)n * a->heads * T * T * be->act_size);
    s->att = pt_carve_take(&c, rows * a->dim * be->act_size);
    s->sum = pt_carve_take(&c, rows * a->dim * be->act_size);
    s->mean = pt_carve_take(&c, rows * be->real_size);
    s->rstd = pt_carve_take(&c, rows * be->real_size);
    s->ids = pt_carve_take(&c, ids_bytes(a, n));
    return c.used;
}

static size_t attn_scratch_layout(const pt_arch *a, const pt_backend *be, int n, void *base,
                                  attn_scratch *s)
{
    const size_t rows = (size_t)n * a->context;
    pt_carve c = {base, 0};
    s->dsum = pt_carve_take(&c, rows * a->dim * be->act_size);
    s->datt = pt_carve_take(&c, rows * a->dim * be->act_size);
    s->dqkv = pt_carve_take(&c, rows * 3 * a->dim * be->act_size);
    s->dproj = pt_carve_take(&c, hidden_drop_bytes(a, be, rows));
    return c.used;
}

static size_t attn_saved_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    attn_saved s;
    return attn_layout(a, be, n, NULL, &s);
}

static size_t attn_scratch_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    attn_scratch s;
    return attn_scratch_layout(a, be, n, NULL, &s);
}

static int attn_forward(const pt_unit_call *c, const pt_batch *batch, const void *x, void *y,
                        pt_stats *stats, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int T = a->context, d = a->dim, rows = c->n * T;
    attn_saved s;
    attn_layout(a, c->be, c->n, c->saved, &s);
    int rc = upload_lengths(c, batch, s.lens, err);
    if (rc)
        return rc;
    pt_dropout dprobs, dproj;
    const int drop_probs = drop_at(c, batch, a->attn_dropout, SITE_ATTN_PROBS, s.ids, &dprobs);
    const int drop_proj = drop_at(c, batch, a->hidden_dropout, SITE_ATTN_PROJ, s.ids, &dproj);
    if ((drop_probs || drop_proj) && (rc = save_ids(c, batch, s.ids, err)))
        return rc;
    op->linear_fwd(c->be, s.qkv, x, pt_unit_param(c, c->p, A_QKV_W),
                   pt_unit_param(c, c->p, A_QKV_B), rows, 3 * d, d, NULL);
    op->attention_fwd(c->be, s.att, s.probs, s.qkv, c->n, T, a->heads, d / a->heads, 0, s.lens,
                      drop_probs ? &dprobs : NULL);
    /* sum = x + proj(att), or x + drop(proj(att)) */
    op->linear_fwd(c->be, s.sum, s.att, pt_unit_param(c, c->p, A_PROJ_W),
                   pt_unit_param(c, c->p, A_PROJ_B), rows, d, d, drop_proj ? NULL : x);
    if (drop_proj)
        op->dropout(c->be, s.sum, s.sum, x, c->n, (size_t)T * d, &dproj);
    op->layernorm_fwd(c->be, y, s.mean, s.rstd, s.sum, pt_unit_param(c, c->p, A_LN_W),
                      pt_unit_param(c, c->p, A_LN_B), rows, d, pt_arch_ln_eps(a));
    return 0;
}

static int attn_backward(const pt_unit_call *c, const pt_batch *batch, const void *x,
                         const void *dy, void *dx, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int T = a->context, d = a->dim, rows = c->n * T;
    attn_saved s;
    attn_scratch w;
    attn_layout(a, c->be, c->n, c->saved, &s);
    attn_scratch_layout(a, c->be, c->n, c->scratch, &w);
    pt_dropout dprobs, dproj;
    const int drop_probs = drop_at(c, batch, a->attn_dropout, SITE_ATTN_PROBS, s.ids, &dprobs);
    const int drop_proj = drop_at(c, batch, a->hidden_dropout, SITE_ATTN_PROJ, s.ids, &dproj);
    op->layernorm_bwd(c->be, w.dsum, pt_unit_param(c, c->g, A_LN_W), pt_unit_param(c, c->g, A_LN_B),
                      dy, s.sum, s.mean, s.rstd, pt_unit_param(c, c->p, A_LN_W), rows, d, NULL);
    if (drop_proj)
        op->dropout(c->be, w.dproj, w.dsum, NULL, c->n, (size_t)T * d, &dproj);
    op->linear_bwd(c->be, w.datt, pt_unit_param(c, c->g, A_PROJ_W),
                   pt_unit_param(c, c->g, A_PROJ_B), drop_proj ? w.dproj : w.dsum, s.att,
                   pt_unit_param(c, c->p, A_PROJ_W), rows, d, d);
    op->attention_bwd(c->be, w.dqkv, w.datt, s.qkv, s.probs, s.att, c->n, T, a->heads,
                      d / a->heads, 0, s.lens, drop_probs ? &dprobs : NULL);
    op->linear_bwd(c->be, dx, pt_unit_param(c, c->g, A_QKV_W), pt_unit_param(c, c->g, A_QKV_B),
                   w.dqkv, x, pt_unit_param(c, c->p, A_QKV_W), rows, 3 * d, d);
    if (dx) /* the residual path */
        op->copy_rows(c->be, dx, d, w.dsum, d, rows, d, 1);
    return 0;
}

static int attn_linears(const pt_arch *a, int dims[][2])
{
    dims[0][0] = 3 * a->dim, dims[0][1] = a->dim;
    dims[1][0] = a->dim, dims[1][1] = a->dim;
    return 2;
}

const pt_unit_impl pt_unit_attn_post = {attn_saved_bytes, attn_scratch_bytes, attn_forward,
                                        attn_backward, attn_linears};

/* ---------------------------------------------------------- post-LN MLP */

enum { M_FC1_W, M_FC1_B, M_FC2_W, M_FC2_B, M_LN_W, M_LN_B };

typedef struct {
    void *pre, *act;   /* [nT, h] fc1's output (in training of an active unit,
                          GELU's derivative there once GELU has run) and GELU's */
    void *sum;         /* [nT, d] x + fc2(act) (or x + drop(fc2(act))) */
    void *mean, *rstd; /* [nT] */
    int64_t *ids;      /* [n] (dropout) */
} mlp_saved;

typedef struct {
    void *dsum, *dact;
    void *dfc2; /* [nT, d] (hidden dropout): the gradient of fc2's output */
} mlp_scratch;

static size_t mlp_layout(const pt_arch *a, const pt_backend *be, int n, void *base, mlp_saved *s)
{
    const size_t rows = (size_t)n * a->context;
    pt_carve c = {base, 0};
    s->pre = pt_carve_take(&c, rows * a->mlp_hidden * be->act_size);
    s->act = pt_carve_take(&c, rows * a->mlp_hidden * be->act_size);
    s->sum = pt_carve_take(&c, rows * a->dim * be->act_size);
    s->mean = pt_carve_take(&c, rows * be->real_size);
    s->rstd = pt_carve_take(&c, rows * be->real_size);
    s->ids = pt_carve_take(&c, ids_bytes(a, n));
    return c.used;
}

static size_t mlp_scratch_layout(const pt_arch *a, const pt_backend *be, int n, void *base,
                                 mlp_scratch *s)
{
    const size_t rows = (size_t)n * a->context;
    pt_carve c = {base, 0};
    s->dsum = pt_carve_take(&c, rows * a->dim * be->act_size);
    s->dact = pt_carve_take(&c, rows * a->mlp_hidden * be->act_size);
    s->dfc2 = pt_carve_take(&c, hidden_drop_bytes(a, be, rows));
    return c.used;
}

static size_t mlp_saved_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    mlp_saved s;
    return mlp_layout(a, be, n, NULL, &s);
}

static size_t mlp_scratch_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    mlp_scratch s;
    return mlp_scratch_layout(a, be, n, NULL, &s);
}

static int mlp_forward(const pt_unit_call *c, const pt_batch *batch, const void *x, void *y,
                       pt_stats *stats, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int d = a->dim, h = a->mlp_hidden, rows = c->n * a->context;
    mlp_saved s;
    mlp_layout(a, c->be, c->n, c->saved, &s);
    pt_dropout drop;
    const int dropping = drop_at(c, batch, a->hidden_dropout, SITE_MLP_OUT, s.ids, &drop);
    int rc;
    if (dropping && (rc = save_ids(c, batch, s.ids, err)))
        return rc;
    op->linear_fwd(c->be, s.pre, x, pt_unit_param(c, c->p, M_FC1_W),
                   pt_unit_param(c, c->p, M_FC1_B), rows, h, d, NULL);
    op->gelu_fwd(c->be, s.act, pt_unit_backward_follows(c) ? s.pre : NULL, s.pre,
                 (size_t)rows * h);
    op->linear_fwd(c->be, s.sum, s.act, pt_unit_param(c, c->p, M_FC2_W),
                   pt_unit_param(c, c->p, M_FC2_B), rows, d, h, dropping ? NULL : x);
    if (dropping)
        op->dropout(c->be, s.sum, s.sum, x, c->n, (size_t)a->context * d, &drop);
    op->layernorm_fwd(c->be, y, s.mean, s.rstd, s.sum, pt_unit_param(c, c->p, M_LN_W),
                      pt_unit_param(c, c->p, M_LN_B), rows, d, pt_arch_ln_eps(a));
    return 0;
}

static int mlp_backward(const pt_unit_call *c, const pt_batch *batch, const void *x,
                        const void *dy, void *dx, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int d = a->dim, h = a->mlp_hidden, rows = c->n * a->context;
    mlp_saved s;
    mlp_scratch w;
    mlp_layout(a, c->be, c->n, c->saved, &s);
    mlp_scratch_layout(a, c->be, c->n, c->scratch, &w);
    pt_dropout drop;
    const int dropping = drop_at(c, batch, a->hidden_dropout, SITE_MLP_OUT, s.ids, &drop);
    op->layernorm_bwd(c->be, w.dsum, pt_unit_param(c, c->g, M_LN_W), pt_unit_param(c, c->g, M_LN_B),
                      dy, s.sum, s.mean, s.rstd, pt_unit_param(c, c->p, M_LN_W), rows, d, NULL);
    if (dropping)
        op->dropout(c->be, w.dfc2, w.dsum, NULL, c->n, (size_t)a->context * d, &drop);
    /* dact = (dfc2 fc2.w) * GELU'(pre), in one pass where the backend can */
    pt_linear_bwd_mul(c->be, w.dact, pt_unit_param(c, c->g, M_FC2_W),
                      pt_unit_param(c, c->g, M_FC2_B), dropping ? w.dfc2 : w.dsum, s.act,
                      pt_unit_param(c, c->p, M_FC2_W), rows, d, h, s.pre);
    op->linear_bwd(c->be, dx, pt_unit_param(c, c->g, M_FC1_W), pt_unit_param(c, c->g, M_FC1_B),
                   w.dact, x, pt_unit_param(c, c->p, M_FC1_W), rows, h, d);
    if (dx)
        op->copy_rows(c->be, dx, d, w.dsum, d, rows, d, 1);
    return 0;
}

static int mlp_linears(const pt_arch *a, int dims[][2])
{
    dims[0][0] = a->mlp_hidden, dims[0][1] = a->dim;
    dims[1][0] = a->dim, dims[1][1] = a->mlp_hidden;
    return 2;
}

const pt_unit_impl pt_unit_mlp_post = {mlp_saved_bytes, mlp_scratch_bytes, mlp_forward,
                                       mlp_backward, mlp_linears};

/* --------------------------------------------------------- pooled head */

enum { H_FC_W, H_FC_B };

typedef struct {
    int32_t *lens;    /* [n] */
    void *pooled;     /* [n, d] */
    void *logits;     /* [n, classes] */
    void *dlogits;    /* [n, classes] */
    int32_t *targets; /* [n] */
    void *dropped;    /* [n, d] (hidden dropout): the classifier's input, drop(pooled) */
    int64_t *ids;     /* [n] (dropout) */
} head_saved;

static size_t head_layout(const pt_arch *a, const pt_backend *be, int n, void *base, head_saved *s)
{
    pt_carve c = {base, 0};
    s->lens = pt_carve_take(&c, (size_t)n * sizeof(int32_t));
    s->pooled = pt_carve_take(&c, (size_t)n * a->dim * be->act_size);
    s->logits = pt_carve_take(&c, (size_t)n * a->classes * be->act_size);
    s->dlogits = pt_carve_take(&c, (size_t)n * a->classes * be->act_size);
    s->targets = pt_carve_take(&c, (size_t)n * sizeof(int32_t));
    s->dropped = pt_carve_take(&c, hidden_drop_bytes(a, be, (size_t)n));
    s->ids = pt_carve_take(&c, ids_bytes(a, n));
    return c.used;
}

static size_t head_saved_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    head_saved s;
    return head_layout(a, be, n, NULL, &s);
}

/* dpooled [n, d] */
static size_t head_scratch_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    pt_carve c = {NULL, 0};
    pt_carve_take(&c, (size_t)n * a->dim * be->act_size);
    return c.used;
}

static int head_forward(const pt_unit_call *c, const pt_batch *batch, const void *x, void *y,
                        pt_stats *stats, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int d = a->dim, classes = a->classes;
    head_saved s;
    head_layout(a, c->be, c->n, c->saved, &s);
    int rc = upload_lengths(c, batch, s.lens, err);
    if (rc)
        return rc;
    op->mean_pool_fwd(c->be, s.pooled, x, s.lens, c->n, a->context, d);
    pt_dropout drop;
    const int dropping = drop_at(c, batch, a->hidden_dropout, SITE_HEAD_POOLED, s.ids, &drop);
    if (dropping) {
        if ((rc = save_ids(c, batch, s.ids, err)))
            return rc;
        op->dropout(c->be, s.dropped, s.pooled, NULL, c->n, (size_t)d, &drop);
    }
    op->linear_fwd(c->be, s.logits, dropping ? s.dropped : s.pooled, pt_unit_param(c, c->p, H_FC_W),
                   pt_unit_param(c, c->p, H_FC_B), c->n, classes, d, NULL);
    if (!batch->targets)
        return c->train ? pt_fail(err, PT_EINTERNAL, "training needs the batch's targets") : 0;
    op->upload(c->be, s.targets, batch->targets, (size_t)c->n * sizeof(int32_t));
    int64_t correct = 0;
    double sum = op->cross_entropy(c->be, c->train ? s.dlogits : NULL, s.logits, s.targets, c->n,
                                   classes, c->loss_scale, &correct);
    if (stats) {
        stats->loss += sum * c->loss_scale;
        stats->correct += correct;
        stats->rows += c->n;
    }
    return pt_unit_count_confusion(c, s.logits, batch->targets, c->n, classes, stats, err);
}

static int head_backward(const pt_unit_call *c, const pt_batch *batch, const void *x,
                         const void *dy, void *dx, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    head_saved s;
    head_layout(a, c->be, c->n, c->saved, &s);
    void *dpooled = c->scratch;
    pt_dropout drop;
    const int dropping = drop_at(c, batch, a->hidden_dropout, SITE_HEAD_POOLED, s.ids, &drop);
    op->linear_bwd(c->be, dx ? dpooled : NULL, pt_unit_param(c, c->g, H_FC_W),
                   pt_unit_param(c, c->g, H_FC_B), s.dlogits, dropping ? s.dropped : s.pooled,
                   pt_unit_param(c, c->p, H_FC_W), c->n, a->classes, a->dim);
    if (dx && dropping)
        op->dropout(c->be, dpooled, dpooled, NULL, c->n, (size_t)a->dim, &drop);
    if (dx)
        op->mean_pool_bwd(c->be, dx, dpooled, s.lens, c->n, a->context, a->dim);
    return 0;
}

int pt_unit_head_pooled_logits(const pt_unit_call *c, int row, float *out, pt_err *err)
{
    const pt_arch *a = c->arch;
    if (row < 0 || row >= c->n)
        return pt_fail(err, PT_EINTERNAL, "logits row %d out of range", row);
    head_saved s;
    head_layout(a, c->be, c->n, c->saved, &s);
    c->be->ops->act_to_f32(c->be, out,
                           (const char *)s.logits + (size_t)row * a->classes * c->be->act_size,
                           a->classes);
    return 0;
}

/* the classifier on the pooled vector */
static int head_linears(const pt_arch *a, int dims[][2])
{
    dims[0][0] = a->classes, dims[0][1] = a->dim;
    return 1;
}

const pt_unit_impl pt_unit_head_pooled = {head_saved_bytes, head_scratch_bytes, head_forward,
                                          head_backward, head_linears};
