/*
 * unit_embed.c: the two embedding units, the first unit of every model.
 *
 * ViT: images [n, C, H, W] are cut into p x p patches, each patch goes through
 * one linear layer (the same map as a stride-p Conv2d), a learned CLS token is
 * put in front and learned positions are added. Parameters: patch.weight
 * [d, C*p*p], patch.bias [d], cls [1, 1, d], pos [1, T, d].
 *
 * GPT: x[b, t] = tok[tokens[b, t]] + pos[t]. Parameters: tok.weight [V, d],
 * pos.weight [T, d].
 */
#include "nn/unit.h"

/* ------------------------------------------------------------------- ViT */

enum { PATCH_W, PATCH_B, CLS, POS };

static int vit_patches(const pt_arch *a) { return (a->height / a->patch) * (a->width / a->patch); }
static int vit_patch_len(const pt_arch *a) { return a->channels * a->patch * a->patch; }

static size_t vit_saved_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    pt_carve c = {NULL, 0};
    pt_carve_take(&c, (size_t)n * vit_patches(a) * vit_patch_len(a) * be->act_size);
    return c.used;
}

/* images [n, C*H*W] while patchifying, then the projections [n, P, d] */
static size_t vit_scratch_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    size_t images = (size_t)n * pt_arch_input_floats(a) * be->act_size;
    size_t proj = (size_t)n * vit_patches(a) * a->dim * be->act_size;
    pt_carve c = {NULL, 0};
    pt_carve_take(&c, images);
    pt_carve_take(&c, proj);
    return c.used;
}

static int vit_forward(const pt_unit_call *c, const pt_batch *batch, const void *x, void *y,
                       pt_stats *stats, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int P = vit_patches(a), plen = vit_patch_len(a), T = pt_arch_tokens(a);
    if (!batch || !batch->images)
        return pt_fail(err, PT_EINTERNAL, "the ViT embedding needs the batch's images");
    pt_carve w = {c->scratch, 0};
    void *images = pt_carve_take(&w, (size_t)c->n * pt_arch_input_floats(a) * c->be->act_size);
    void *proj = pt_carve_take(&w, (size_t)c->n * P * a->dim * c->be->act_size);
    void *patches = c->saved;
    op->act_from_f32(c->be, images, batch->images, (size_t)c->n * pt_arch_input_floats(a));
    op->patchify(c->be, patches, images, c->n, a->channels, a->height, a->width, a->patch);
    op->linear_fwd(c->be, proj, patches, pt_unit_param(c, c->p, PATCH_W),
                   pt_unit_param(c, c->p, PATCH_B), c->n * P, a->dim, plen, NULL);
    op->vit_assemble_fwd(c->be, y, proj, pt_unit_param(c, c->p, CLS), pt_unit_param(c, c->p, POS),
                         c->n, T, a->dim);
    return 0;
}

static int vit_backward(const pt_unit_call *c, const pt_batch *batch, const void *x, const void *dy,
                        void *dx, pt_err *err)
{
    const pt_arch *a = c->arch;
    const pt_ops *op = c->be->ops;
    const int P = vit_patches(a), plen = vit_patch_len(a), T = pt_arch_tokens(a);
    void *dproj = c->scratch;
    op->vit_assemble_bwd(c->be, dproj, pt_unit_param(c, c->g, CLS), pt_unit_param(c, c->g, POS), dy,
                         c->n, T, a->dim);
    op->linear_bwd(c->be, NULL, pt_unit_param(c, c->g, PATCH_W), pt_unit_param(c, c->g, PATCH_B),
                   dproj, c->saved, pt_unit_param(c, c->p, PATCH_W), c->n * P, a->dim, plen);
    return 0;
}

/* the patches' projection */
static int vit_linears(const pt_arch *a, int dims[][2])
{
    dims[0][0] = a->dim, dims[0][1] = vit_patch_len(a);
    return 1;
}

const pt_unit_impl pt_unit_embed_vit = {vit_saved_bytes, vit_scratch_bytes, vit_forward,
                                        vit_backward, vit_linears};

/* ------------------------------------------------------------------- GPT */

enum { TOK, WPE };

static size_t gpt_saved_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    pt_carve c = {NULL, 0};
    pt_carve_take(&c, (size_t)n * a->context * sizeof(int32_t));
    return c.used;
}

static size_t gpt_scratch_bytes(const pt_arch *a, const pt_backend *be, int n) { return 0; }

static int gpt_forward(const pt_unit_call *c, const pt_batch *batch, const void *x, void *y,
                       pt_stats *stats, pt_err *err)
{
    const pt_arch *a = c->arch;
    if (!batch || !batch->tokens)
        return pt_fail(err, PT_EINTERNAL, "the GPT embedding needs the batch's tokens");
    int32_t *tokens = c->saved;
    c->be->ops->upload(c->be, tokens, batch->tokens, (size_t)c->n * a->context * sizeof(int32_t));
    c->be->ops->token_embed_fwd(c->be, y, tokens, pt_unit_param(c, c->p, TOK),
                                pt_unit_param(c, c->p, WPE), c->n, a->context, a->dim);
    return 0;
}

static int gpt_backward(const pt_unit_call *c, const pt_batch *batch, const void *x, const void *dy,
                        void *dx, pt_err *err)
{
    const pt_arch *a = c->arch;
    c->be->ops->token_embed_bwd(c->be, pt_unit_param(c, c->g, TOK), pt_unit_param(c, c->g, WPE), dy,
                                c->saved, c->n, a->context, a->dim);
    return 0;
}

/* lookups only */
static int gpt_linears(const pt_arch *a, int dims[][2])
{
    (void)a, (void)dims;
    return 0;
}

const pt_unit_impl pt_unit_embed_gpt = {gpt_saved_bytes, gpt_scratch_bytes, gpt_forward,
                                        gpt_backward, gpt_linears};
