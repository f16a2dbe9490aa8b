/*
 * arch.c: what a model is made of. Turns a pt_arch into its ordered list of
 * units and, for each unit, its parameters: PyTorch names, shapes, offsets in
 * the unit's blob, weight-decay class and initialisation rule.
 *
 * Unit order: embed, blocks.0.attn, blocks.0.mlp, ..., blocks.{L-1}.mlp, head.
 * The names are the state_dict keys of the reference PyTorch module in
 * tests/reference/model.py, which is how weights round-trip with PyTorch.
 */
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int pt_arch_units(const pt_arch *a) { return 2 * a->layers + 2; }

int pt_arch_tokens(const pt_arch *a)
{
    if (a->kind == PT_MODEL_VIT)
        return 1 + (a->height / a->patch) * (a->width / a->patch);
    return a->context;
}

int pt_arch_out_classes(const pt_arch *a) { return a->kind == PT_MODEL_GPT ? a->vocab : a->classes; }

int pt_arch_input_floats(const pt_arch *a)
{
    return a->kind == PT_MODEL_VIT ? a->channels * a->height * a->width : 0;
}

int64_t pt_arch_rows_per_example(const pt_arch *a) { return a->kind == PT_MODEL_GPT ? a->context : 1; }

double pt_arch_ln_eps(const pt_arch *a) { return a->ln_eps > 0 ? a->ln_eps : 1e-5; }

void pt_arch_token_lengths(const pt_arch *a, const int32_t *tokens, int n, int32_t *lens)
{
    const int T = pt_arch_tokens(a);
    for (int b = 0; b < n; b++) {
        int len = T;
        if (a->kind == PT_MODEL_BERT && tokens)
            for (int t = 1; t < T; t++)
                if (tokens[(size_t)b * T + t] == a->pad_id) {
                    len = t;
                    break;
                }
        lens[b] = len;
    }
}

static int check_range(pt_err *err, const char *what, long long v, long long lo, long long hi)
{
    if (v < lo || v > hi)
        return pt_fail(err, PT_EINPUT, "%s is %lld; it must be in [%lld, %lld]", what, v, lo, hi);
    return 0;
}

int pt_arch_check(const pt_arch *a, pt_err *err)
{
    int rc;
    if (a->kind != PT_MODEL_VIT && a->kind != PT_MODEL_GPT && a->kind != PT_MODEL_BERT)
        return pt_fail(err, PT_EINPUT, "model kind %d is none of vit, gpt, bert", (int)a->kind);
    if (!(a->ln_eps >= 0.0 && a->ln_eps <= 1.0))
        return pt_fail(err, PT_EINPUT, "the LayerNorm epsilon is %g; it must be in [0, 1]",
                       a->ln_eps);
    if (!(a->hidden_dropout >= 0.0 && a->hidden_dropout < 1.0) ||
        !(a->attn_dropout >= 0.0 && a->attn_dropout < 1.0))
        return pt_fail(err, PT_EINPUT,
                       "the dropout probabilities are %g (hidden) and %g (attention); each must "
                       "be in [0, 1)",
                       a->hidden_dropout, a->attn_dropout);
    if (a->kind != PT_MODEL_BERT && (a->hidden_dropout != 0.0 || a->attn_dropout != 0.0))
        return pt_fail(err, PT_EINPUT, "dropout is %g (hidden) and %g (attention), but only bert "
                       "has dropout", a->hidden_dropout, a->attn_dropout);
    if ((rc = check_range(err, "model.dim", a->dim, 1, 1 << 16)) ||
        (rc = check_range(err, "model.layers", a->layers, 1, 1024)) ||
        (rc = check_range(err, "model.heads", a->heads, 1, a->dim)) ||
        (rc = check_range(err, "model.mlp_hidden", a->mlp_hidden, 1, 1 << 18)))
        return rc;
    if (a->dim % a->heads != 0)
        return pt_fail(err, PT_EINPUT, "model.dim (%d) must be a multiple of model.heads (%d)",
                       a->dim, a->heads);
    if (!(a->init_std > 0.0 && a->init_std < 10.0))
        return pt_fail(err, PT_EINPUT, "model.init_std is %g; it must be in (0, 10)", a->init_std);
    if (a->kind == PT_MODEL_VIT) {
        if ((rc = check_range(err, "image channels", a->channels, 1, 64)) ||
            (rc = check_range(err, "image height", a->height, 1, 1 << 14)) ||
            (rc = check_range(err, "image width", a->width, 1, 1 << 14)) ||
            (rc = check_range(err, "model.patch", a->patch, 1, 1 << 14)) ||
            (rc = check_range(err, "number of classes", a->classes, 2, 1 << 20)))
            return rc;
        if (a->height % a->patch || a->width % a->patch)
            return pt_fail(err, PT_EINPUT,
                           "model.patch (%d) must divide the image size %dx%d", a->patch,
                           a->height, a->width);
        /* the units index an example's values (and a patch's) with int */
        if ((int64_t)a->channels * a->height * a->width > INT32_MAX)
            return pt_fail(err, PT_EINPUT,
                           "an image of %d x %d x %d values is more than %d values per example",
                           a->channels, a->height, a->width, INT32_MAX);
    } else {
        if ((rc = check_range(err, "vocabulary size", a->vocab, 2, 1 << 24)) ||
            (rc = check_range(err, "model.context", a->context, 1, 1 << 16)))
            return rc;
    }
    if (a->kind == PT_MODEL_BERT) {
        if (a->causal)
            return pt_fail(err, PT_EINPUT, "a BERT encoder's attention is not causal");
        if ((rc = check_range(err, "number of classes", a->classes, 2, 1 << 20)) ||
            (rc = check_range(err, "model.context", a->context, 2, 1 << 16)) ||
            (rc = check_range(err, "position embeddings", a->positions, a->context, 1 << 20)) ||
            (rc = check_range(err, "token types", a->type_vocab, 1, 1 << 10)) ||
            (rc = check_range(err, "the [PAD] id", a->pad_id, 0, a->vocab - 1)))
            return rc;
    }
    return 0;
}

/* Appends a parameter to u and advances its blob size. */
static void add_param(pt_unit_info *u, const char *local, int ndim, const int64_t *shape, int decay,
                      int init, double std)
{
    pt_param_info *p = &u->params[u->n_params++];
    char unit[sizeof u->name];
    memcpy(unit, u->name, sizeof unit);
    snprintf(p->name, sizeof p->name, "%s.%s", unit, local);
    p->ndim = ndim;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        p->numel *= (size_t)shape[i];
    }
    p->offset = u->numel;
    p->decay = decay;
    p->init = init;
    p->init_std = std;
    u->numel += p->numel;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

static void layer_norm_params(pt_unit_info *u, const char *local, int64_t d)
{
    char w[48], b[48];
    snprintf(w, sizeof w, "%s.weight", local);
    snprintf(b, sizeof b, "%s.bias", local);
    add_param(u, w, 1, SHAPE(d), 0, PT_INIT_ONE, 0);
    add_param(u, b, 1, SHAPE(d), 0, PT_INIT_ZERO, 0);
}

static void linear_params(pt_unit_info *u, const char *local, int64_t out, int64_t in, int bias,
                          double std)
{
    char w[48], b[48];
    snprintf(w, sizeof w, "%s.weight", local);
    add_param(u, w, 2, SHAPE(out, in), 1, PT_INIT_NORMAL, std);
    if (bias) {
        snprintf(b, sizeof b, "%s.bias", local);
        add_param(u, b, 1, SHAPE(out), 0, PT_INIT_ZERO, 0);
    }
}

/* BERT's units: the parameters of Hugging Face's BertModel, each under our
 * unit's name (the mapping is in hf/): embed = word, position and token-type
 * tables and the LayerNorm after their sum; attn = the fused q, k, v
 * projection, the output projection and the LayerNorm after the residual
 * add (post-LN); mlp = intermediate (fc1), output (fc2) and its LayerNorm;
 * head = the new classifier on the mean of the real tokens' states. Word
 * embeddings and matrices decay, as every matrix weight does here. */
static void bert_unit_info(const pt_arch *a, int u, pt_unit_info *out)
{
    const int64_t d = a->dim;
    const double std = a->init_std;
    const int last = pt_arch_units(a) - 1;
    if (u == 0) {
        snprintf(out->name, sizeof out->name, "embed");
        out->role = PT_UNIT_EMBED;
        out->block = -1;
        add_param(out, "word.weight", 2, SHAPE(a->vocab, d), 1, PT_INIT_NORMAL, std);
        add_param(out, "pos.weight", 2, SHAPE(a->positions, d), 0, PT_INIT_NORMAL, std);
        add_param(out, "type.weight", 2, SHAPE(a->type_vocab, d), 0, PT_INIT_NORMAL, std);
        layer_norm_params(out, "ln", d);
    } else if (u == last) {
        snprintf(out->name, sizeof out->name, "head");
        out->role = PT_UNIT_HEAD;
        out->block = -1;
        linear_params(out, "fc", a->classes, d, 1, std);
    } else {
        int block = (u - 1) / 2;
        int is_attn = (u - 1) % 2 == 0;
        snprintf(out->name, sizeof out->name, "blocks.%d.%s", block, is_attn ? "attn" : "mlp");
        out->block = block;
        if (is_attn) {
            out->role = PT_UNIT_ATTN;
            linear_params(out, "qkv", 3 * d, d, 1, std);
            linear_params(out, "proj", d, d, 1, std);
        } else {
            out->role = PT_UNIT_MLP;
            linear_params(out, "fc1", a->mlp_hidden, d, 1, std);
            linear_params(out, "fc2", d, a->mlp_hidden, 1, std);
        }
        layer_norm_params(out, "ln", d);
    }
}

void pt_unit_info_get(const pt_arch *a, int u, pt_unit_info *out)
{
    memset(out, 0, sizeof *out);
    const int64_t d = a->dim, T = pt_arch_tokens(a);
    const double std = a->init_std;
    /* Projections that write into the residual stream are scaled down so the
     * stream's variance does not grow with depth (as in GPT-2). */
    const double std_resid = a->init_std / sqrt(2.0 * a->layers);
    const int last = pt_arch_units(a) - 1;

    if (a->kind == PT_MODEL_BERT) {
        bert_unit_info(a, u, out);
        return;
    }
    if (u == 0) {
        snprintf(out->name, sizeof out->name, "embed");
        out->role = PT_UNIT_EMBED;
        out->block = -1;
        if (a->kind == PT_MODEL_VIT) {
            linear_params(out, "patch", d, (int64_t)a->channels * a->patch * a->patch, 1, std);
            add_param(out, "cls", 3, SHAPE(1, 1, d), 0, PT_INIT_NORMAL, std);
            add_param(out, "pos", 3, SHAPE(1, T, d), 0, PT_INIT_NORMAL, std);
        } else {
            add_param(out, "tok.weight", 2, SHAPE(a->vocab, d), 1, PT_INIT_NORMAL, std);
            add_param(out, "pos.weight", 2, SHAPE(T, d), 0, PT_INIT_NORMAL, std);
        }
    } else if (u == last) {
        snprintf(out->name, sizeof out->name, "head");
        out->role = PT_UNIT_HEAD;
        out->block = -1;
        layer_norm_params(out, "ln", d);
        linear_params(out, "fc", pt_arch_out_classes(a), d, a->kind == PT_MODEL_VIT, std);
    } else {
        int block = (u - 1) / 2;
        int is_attn = (u - 1) % 2 == 0;
        snprintf(out->name, sizeof out->name, "blocks.%d.%s", block, is_attn ? "attn" : "mlp");
        out->block = block;
        layer_norm_params(out, "ln", d);
        if (is_attn) {
            out->role = PT_UNIT_ATTN;
            linear_params(out, "qkv", 3 * d, d, 1, std);
            linear_params(out, "proj", d, d, 1, std_resid);
        } else {
            out->role = PT_UNIT_MLP;
            linear_params(out, "fc1", a->mlp_hidden, d, 1, std);
            linear_params(out, "fc2", d, a->mlp_hidden, 1, std_resid);
        }
    }
}

int pt_unit_find(const pt_arch *a, const char *name)
{
    int n = pt_arch_units(a);
    for (int u = 0; u < n; u++) {
        pt_unit_info info;
        pt_unit_info_get(a, u, &info);
        if (strcmp(info.name, name) == 0)
            return u;
    }
    return -1;
}

double pt_arch_unit_flops(const pt_arch *a, int u)
{
    const double d = a->dim, T = pt_arch_tokens(a), h = a->mlp_hidden;
    pt_unit_info info;
    pt_unit_info_get(a, u, &info);
    switch (info.role) {
    case PT_UNIT_EMBED:
        if (a->kind == PT_MODEL_BERT)
            return 10.0 * T * d; /* three lookups, their sum and a LayerNorm */
        if (a->kind == PT_MODEL_VIT)
            return 2.0 * (T - 1) * ((double)a->channels * a->patch * a->patch) * d;
        return T * d;
    case PT_UNIT_ATTN: {
        double pairs = a->causal ? T * (T + 1) / 2 : T * T;
        return 2.0 * T * d * 3 * d + 2.0 * T * d * d + 4.0 * pairs * d;
    }
    case PT_UNIT_MLP:
        return 4.0 * T * d * h;
    case PT_UNIT_HEAD: {
        if (a->kind == PT_MODEL_BERT)
            return T * d + 2.0 * d * a->classes;
        double rows = a->kind == PT_MODEL_VIT ? 1 : T;
        return 2.0 * rows * d * pt_arch_out_classes(a);
    }
    }
    return 0;
}
