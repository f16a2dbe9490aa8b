/*
 * unit.h (internal to nn/): the interface every unit kind implements. A unit
 * maps one activation [n, T, d] to another (the embedding reads the batch
 * instead, the head writes a loss instead) and keeps in its `saved` area what
 * its backward needs. Units are written against the ops table only.
 */
#ifndef PT_NN_UNIT_H
#define PT_NN_UNIT_H

#include "nn/backend.h"

/* Everything a unit needs for one call. */
typedef struct pt_unit_call {
    pt_backend *be;
    const pt_arch *arch;
    const pt_unit_info *info;
    const void *p;     /* the unit's parameter blob */
    void *g;           /* the unit's gradient blob; NULL when the unit is frozen */
    void *saved;       /* the unit's saved-activation area in this slot */
    void *scratch;     /* segment-wide scratch, valid for the duration of the call */
    int n;             /* examples */
    int train;         /* forward: keep what backward needs (head: compute dlogits) */
    int unit;          /* the unit's index in the model (dropout's masks name it) */
    int dropout;       /* 1: a training call of an active unit, which applies the arch's
                          dropout (BERT); 0: inference form (evaluation, frozen units) */
    double loss_scale; /* head only */
} pt_unit_call;

typedef struct pt_unit_impl {
    size_t (*saved_bytes)(const pt_arch *a, const pt_backend *be, int n);
    size_t (*scratch_bytes)(const pt_arch *a, const pt_backend *be, int n);
    int (*forward)(const pt_unit_call *c, const pt_batch *batch, const void *x, void *y,
                   pt_stats *stats, pt_err *err);
    /* x: the forward input; dx may be NULL (not needed) */
    int (*backward)(const pt_unit_call *c, const pt_batch *batch, const void *x, const void *dy,
                    void *dx, pt_err *err);
    /* The unit's linear layers, as {out, in} of their weights (at most
     * PT_UNIT_LINEARS), into dims; returns how many. For the working memory
     * a backend keeps for them (pt_ops.linear_work_bytes). */
    int (*linears)(const pt_arch *a, int dims[][2]);
} pt_unit_impl;

enum { PT_UNIT_LINEARS = 4 };

extern const pt_unit_impl pt_unit_embed_vit, pt_unit_embed_gpt, pt_unit_attn, pt_unit_mlp,
    pt_unit_head;
/* BERT (unit_bert.c): embeddings with token types and a LayerNorm, post-LN
 * attention and MLP with the padding mask, the mean-pooled classifier. */
extern const pt_unit_impl pt_unit_embed_bert, pt_unit_attn_post, pt_unit_mlp_post,
    pt_unit_head_pooled;

const pt_unit_impl *pt_unit_impl_for(const pt_arch *a, pt_unit_role role);

/* Logits of one row of the head's last forward in c->saved, as host floats. */
int pt_unit_head_logits(const pt_unit_call *c, int row, float *out, pt_err *err);
int pt_unit_head_pooled_logits(const pt_unit_call *c, int row, float *out, pt_err *err);

/* Adds the head's rows (logits [rows, classes] in the backend's activation
 * type, targets on the host) to stats->confusion, when it is there. */
int pt_unit_count_confusion(const pt_unit_call *c, const void *logits, const int32_t *targets,
                            int rows, int classes, pt_stats *stats, pt_err *err);

/* A training call of an active (not frozen) unit: its backward will run, so
 * its forward keeps what that needs beyond the saved activations (GELU's
 * derivative). A frozen unit's training forward is an inference. */
static inline int pt_unit_backward_follows(const pt_unit_call *c) { return c->train && c->g; }

/* A training call of ViT's last block while it is active (not frozen): the
 * head reads its output only at [CLS] (token 0 of each example), so its
 * attention runs for that query alone, and its attention projection and
 * MLP on those n rows (see
 * pt_arch.full_last_block); the other rows of its output are its input,
 * passed on. Its incoming gradient is 0 at every other row (the head's
 * backward writes no other), so its backward needs the branch's gradient at
 * the [CLS] rows only, and passes dy on elsewhere. Evaluation and frozen
 * units compute every row (hidden states are an output of evaluation, and
 * the cache keeps a frozen prefix's output). */
static inline int pt_unit_cls_rows_only(const pt_unit_call *c)
{
    return pt_unit_backward_follows(c) && c->arch->kind == PT_MODEL_VIT &&
           !c->arch->full_last_block && c->info->block == c->arch->layers - 1;
}

/* Carving one area into named buffers. With base == NULL it only measures, so
 * a unit's size and layout come from the same function and cannot disagree. */
typedef struct pt_carve {
    char *base;
    size_t used;
} pt_carve;

static inline void *pt_carve_take(pt_carve *c, size_t bytes)
{
    void *p = c->base ? c->base + c->used : NULL;
    c->used += (bytes + 63) / 64 * 64;
    return p;
}

/* Pointer to parameter i of the unit inside blob (params or grads). */
static inline void *pt_unit_param(const pt_unit_call *c, const void *blob, int i)
{
    if (!blob)
        return NULL;
    return (char *)blob + c->info->params[i].offset * c->be->real_size;
}

#define PT_ACT(c, n) ((size_t)(n) * (c)->be->act_size)
#define PT_PAR(c, n) ((size_t)(n) * (c)->be->real_size)

#endif
