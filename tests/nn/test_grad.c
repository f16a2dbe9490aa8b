/*
 * test_grad.c: float64 finite-difference checks of every unit's backward and of
 * the loss, on the cpu64 backend (the same op code as the float32 backend,
 * compiled for double).
 *
 * For a unit with output y, the checked scalar is f = sum(y * r) for a fixed
 * random r (so dy = r); for the head it is the scaled loss itself. Every input
 * element and every parameter element is perturbed by +-h (central
 * differences, h = 1e-5): truncation error is O(h^2 f''') ~ 1e-10 and rounding
 * error O(eps f / h) ~ 1e-11, so |analytic - numeric| <= 1e-7 + 1e-6 |numeric|
 * leaves a wide margin for correct code and none for a wrong term.
 *
 * Dropout (BERT): the masks are functions of (seed, step, example id, unit,
 * site, element), so with the fixture's step and ids fixed every objective
 * evaluation sees the same masks and the function stays smooth; the bert
 * cases run again with dropout on, and the dropout op alone is checked the
 * same way.
 */
#include "nn/backend.h"
#include "nn/nn.h"
#include "tests/common/cunit_main.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N 3 /* examples */
#define H 1e-5

static pt_arch vit_arch(void)
{
    pt_arch a = {.kind = PT_MODEL_VIT, .dim = 8, .layers = 2, .heads = 2, .mlp_hidden = 12,
                 .causal = 0, .channels = 2, .height = 4, .width = 6, .patch = 2, .classes = 5,
                 .init_std = 0.5, .seed = 7};
    return a;
}

static pt_arch gpt_arch(void)
{
    pt_arch a = {.kind = PT_MODEL_GPT, .dim = 8, .layers = 2, .heads = 2, .mlp_hidden = 12,
                 .causal = 1, .vocab = 11, .context = 5, .init_std = 0.5, .seed = 9};
    return a;
}

/* T = 6 positions of a table of 9, two token types, [PAD] = 0, BERT's
 * epsilon; the fixture pads example 1 from position 3 and example 2 from 1
 * (only [CLS] is real), so the mask's every case is differentiated. */
static pt_arch bert_arch(void)
{
    pt_arch a = {.kind = PT_MODEL_BERT, .dim = 8, .layers = 2, .heads = 2, .mlp_hidden = 12,
                 .causal = 0, .vocab = 11, .context = 6, .classes = 4, .positions = 9,
                 .type_vocab = 2, .pad_id = 0, .ln_eps = 1e-12, .init_std = 0.5, .seed = 5};
    return a;
}

/* 1: the bert fixture's example 2 is [PAD] at every position, [CLS]'s
 * included (its length is then 1, as an example of one real token). */
static int all_padding;

typedef struct {
    pt_backend *be;
    pt_segment *seg;
    pt_arch a;
    int first, count;
    double *x, *r, *dx, *y; /* activations as doubles (cpu64 memory is double) */
    float *images;
    int32_t *tokens, *targets;
    int64_t ids[N];
    pt_batch batch;
} fixture;

static void fill(pt_rng *rng, double *v, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++)
        v[i] = scale * (pt_rng_uniform(rng) * 2 - 1);
}

static void setup(fixture *f, pt_arch a, int first, int count, int frozen)
{
    pt_err err = {0};
    f->a = a;
    f->first = first;
    f->count = count;
    CU_ASSERT_FATAL(pt_backend_open_cpu64(&f->be, 1, &err) == 0);
    pt_segment_spec spec = {first, count, N, 1, frozen, 0};
    CU_ASSERT_FATAL(pt_segment_create(&f->seg, &a, f->be, &spec, &err) == 0);
    CU_ASSERT_FATAL(pt_segment_init_params(f->seg, &err) == 0);
    pt_rng rng;
    pt_rng_seed(&rng, 1234, (uint64_t)first);
    /* random parameters everywhere: LayerNorm weights away from 1, biases non-zero */
    for (int u = first; u < first + count; u++) {
        size_t n = pt_segment_unit_numel(f->seg, u);
        float *p = malloc(n * sizeof *p);
        for (size_t i = 0; i < n; i++)
            p[i] = (float)(pt_rng_uniform(&rng) * 1.2 - 0.6);
        CU_ASSERT_FATAL(pt_segment_unit_set(f->seg, u, PT_PART_PARAM, p, &err) == 0);
        free(p);
    }
    size_t act = pt_segment_act_elems(f->seg, N);
    f->x = pt_backend_alloc(f->be, act * sizeof(double));
    f->dx = pt_backend_alloc(f->be, act * sizeof(double));
    f->y = pt_backend_alloc(f->be, act * sizeof(double));
    f->r = malloc(act * sizeof(double));
    fill(&rng, f->x, act, 1.0);
    fill(&rng, f->r, act, 1.0);
    int T = pt_arch_tokens(&a);
    f->images = malloc((size_t)N * (pt_arch_input_floats(&a) + 1) * sizeof(float));
    f->tokens = malloc((size_t)N * T * sizeof(int32_t));
    f->targets = malloc((size_t)N * T * sizeof(int32_t));
    for (int i = 0; i < N * pt_arch_input_floats(&a); i++)
        f->images[i] = (float)(pt_rng_uniform(&rng) * 2 - 1);
    for (int i = 0; i < N * T; i++) {
        f->tokens[i] = (int32_t)pt_rng_below(&rng, (uint64_t)(a.kind == PT_MODEL_GPT ? a.vocab : 1));
        if (a.kind == PT_MODEL_BERT) /* real tokens are never [PAD] */
            f->tokens[i] = 1 + (int32_t)pt_rng_below(&rng, (uint64_t)a.vocab - 1);
        f->targets[i] = (int32_t)pt_rng_below(&rng, (uint64_t)pt_arch_out_classes(&a));
    }
    if (a.kind == PT_MODEL_BERT)
        for (int b = 1; b < N; b++)
            for (int t = b == 1 ? 3 : (all_padding ? 0 : 1); t < T; t++)
                f->tokens[(size_t)b * T + t] = a.pad_id;
    /* dropout's identity: ids in no order, a step past 0 */
    const int64_t ids[N] = {40, 7, 1003};
    memcpy(f->ids, ids, sizeof ids);
    f->batch = (pt_batch){N, f->images, f->tokens, f->targets, f->ids, 12};
    pt_segment_set_loss_scale(f->seg, 0.37);
}

static void teardown(fixture *f)
{
    pt_backend_free(f->be, f->x);
    pt_backend_free(f->be, f->dx);
    pt_backend_free(f->be, f->y);
    free(f->r);
    free(f->images);
    free(f->tokens);
    free(f->targets);
    pt_segment_destroy(f->seg);
    pt_backend_close(f->be);
}

static int has_embed(const fixture *f) { return f->first == 0; }
static int has_head(const fixture *f) { return f->first + f->count == pt_arch_units(&f->a); }

/* The checked scalar at the current parameters and input. */
static double objective(fixture *f)
{
    pt_err err = {0};
    pt_stats st = {0};
    int rc = pt_segment_forward(f->seg, 0, &f->batch, has_embed(f) ? NULL : f->x,
                                has_head(f) ? NULL : f->y, 1, &st, &err);
    CU_ASSERT_EQUAL(rc, 0);
    if (has_head(f))
        return st.loss;
    double s = 0;
    size_t act = pt_segment_act_elems(f->seg, N);
    for (size_t i = 0; i < act; i++)
        s += f->y[i] * f->r[i];
    return s;
}

static int close_enough(double analytic, double numeric)
{
    return fabs(analytic - numeric) <= 1e-7 + 1e-6 * fabs(numeric);
}

/* Units [first, first + count), the first `frozen` of them frozen from the
 * start: those are not checked, and with any frozen the input's gradient is
 * not asked for (the first trainable unit then computes none: its own path
 * in the attention, MLP and head units). */
static void check_frozen_range(pt_arch a, int first, int count, int frozen)
{
    fixture f;
    pt_err err = {0};
    setup(&f, a, first, count, frozen);
    size_t act = pt_segment_act_elems(f.seg, N);
    const int want_dx = !has_embed(&f) && frozen == 0;

    pt_segment_zero_grads(f.seg);
    objective(&f);
    CU_ASSERT_FATAL(pt_segment_backward(f.seg, 0, &f.batch, has_head(&f) ? NULL : f.r,
                                        want_dx ? f.dx : NULL, &err) == 0);

    int bad = 0, checked = 0;
    if (want_dx) {
        for (size_t i = 0; i < act; i++) {
            double keep = f.x[i];
            f.x[i] = keep + H;
            double fp = objective(&f);
            f.x[i] = keep - H;
            double fm = objective(&f);
            f.x[i] = keep;
            double num = (fp - fm) / (2 * H);
            checked++;
            if (!close_enough(f.dx[i], num) && bad++ < 5)
                printf("\n  dx[%zu]: analytic %.10g numeric %.10g", i, f.dx[i], num);
        }
    }
    for (int u = first + frozen; u < first + count; u++) {
        pt_unit_info info;
        pt_unit_info_get(&a, u, &info);
        double *p = pt_segment_unit_data(f.seg, u, PT_PART_PARAM);
        const double *grad = pt_segment_unit_data(f.seg, u, PT_PART_GRAD);
        CU_ASSERT_FATAL(p && grad);
        for (size_t i = 0; i < info.numel; i++) {
            double keep = p[i];
            p[i] = keep + H;
            double fp = objective(&f);
            p[i] = keep - H;
            double fm = objective(&f);
            p[i] = keep;
            double num = (fp - fm) / (2 * H);
            checked++;
            if (!close_enough(grad[i], num) && bad++ < 5) {
                int k = 0;
                while (k + 1 < info.n_params && info.params[k + 1].offset <= i)
                    k++;
                printf("\n  %s[%zu]: analytic %.10g numeric %.10g", info.params[k].name,
                       i - info.params[k].offset, grad[i], num);
            }
        }
    }
    printf(" [%d values checked, %d off]", checked, bad);
    CU_ASSERT_EQUAL(bad, 0);
    teardown(&f);
}

static void check_unit_range(pt_arch a, int first, int count)
{
    check_frozen_range(a, first, count, 0);
}

/* unit indices: 0 embed, 1 blocks.0.attn, 2 blocks.0.mlp, ..., last head */
static void vit_embed(void) { check_unit_range(vit_arch(), 0, 1); }
static void vit_attn(void) { check_unit_range(vit_arch(), 1, 1); }
static void vit_mlp(void) { check_unit_range(vit_arch(), 2, 1); }
static void vit_head(void) { check_unit_range(vit_arch(), 5, 1); }
static void vit_whole_model(void) { check_unit_range(vit_arch(), 0, 6); }
static void vit_middle_segment(void) { check_unit_range(vit_arch(), 1, 3); }
static void gpt_embed(void) { check_unit_range(gpt_arch(), 0, 1); }
static void gpt_attn_causal(void) { check_unit_range(gpt_arch(), 1, 1); }
static void gpt_mlp(void) { check_unit_range(gpt_arch(), 2, 1); }
static void gpt_head(void) { check_unit_range(gpt_arch(), 5, 1); }
static void gpt_whole_model(void) { check_unit_range(gpt_arch(), 0, 6); }
static void bert_embed(void) { check_unit_range(bert_arch(), 0, 1); }
static void bert_attn_masked(void) { check_unit_range(bert_arch(), 1, 1); }
static void bert_mlp(void) { check_unit_range(bert_arch(), 2, 1); }
static void bert_head_pooled(void) { check_unit_range(bert_arch(), 5, 1); }
static void bert_whole_model(void) { check_unit_range(bert_arch(), 0, 6); }
static void bert_middle_segment(void) { check_unit_range(bert_arch(), 1, 3); }

/* BERT as it trains: dropout on the hidden states and the attention
 * probabilities (high rates, so the tiny tensors drop plenty) */
static pt_arch bert_drop_arch(void)
{
    pt_arch a = bert_arch();
    a.hidden_dropout = 0.3;
    a.attn_dropout = 0.25;
    return a;
}

static void bert_drop_embed(void) { check_unit_range(bert_drop_arch(), 0, 1); }
static void bert_drop_attn(void) { check_unit_range(bert_drop_arch(), 1, 1); }
static void bert_drop_mlp(void) { check_unit_range(bert_drop_arch(), 2, 1); }
static void bert_drop_head(void) { check_unit_range(bert_drop_arch(), 5, 1); }
static void bert_drop_whole_model(void) { check_unit_range(bert_drop_arch(), 0, 6); }
static void bert_drop_middle_segment(void) { check_unit_range(bert_drop_arch(), 1, 3); }
/* T above the attention block width, head size 16 (a specialised path) */
static pt_arch long_sequence(pt_arch a)
{
    a.dim = 32;
    a.context = 21;
    a.positions = 21;
    return a;
}

static void bert_drop_attn_long_sequence(void) { check_unit_range(long_sequence(bert_drop_arch()), 1, 1); }
/* each rate alone, so neither site's backward hides behind the other's */
static void bert_drop_attn_sites_alone(void)
{
    pt_arch a = bert_arch();
    a.attn_dropout = 0.4;
    check_unit_range(a, 1, 1);
    a = bert_arch();
    a.hidden_dropout = 0.4;
    check_unit_range(a, 1, 1);
}

/* The loss of the whole model in a training forward. */
static double train_loss(pt_arch a, int frozen, int64_t step, const int64_t *ids)
{
    fixture f;
    pt_err err = {0};
    setup(&f, a, 0, pt_arch_units(&a), 0);
    CU_ASSERT_FATAL(pt_segment_freeze(f.seg, frozen, &err) == 0);
    f.batch.step = step;
    if (ids)
        memcpy(f.ids, ids, sizeof f.ids);
    double loss = objective(&f);
    teardown(&f);
    return loss;
}

/* The finite differences above would pass with masks that drop nothing:
 * the loss must move with dropout on, with the step and with the ids, and
 * not at all with dropout at 0 or with every unit frozen (inference form). */
static void bert_drop_is_live(void)
{
    const pt_arch plain_arch = bert_arch();
    const int units = pt_arch_units(&plain_arch);
    const int64_t other[N] = {41, 7, 1003};
    const double plain = train_loss(bert_arch(), 0, 12, NULL);
    const double drop = train_loss(bert_drop_arch(), 0, 12, NULL);
    CU_ASSERT(drop != plain);
    CU_ASSERT(train_loss(bert_drop_arch(), 0, 13, NULL) != drop);  /* another step */
    CU_ASSERT(train_loss(bert_drop_arch(), 0, 12, other) != drop); /* another example 0 */
    CU_ASSERT(train_loss(bert_drop_arch(), 0, 12, NULL) == drop);  /* pure: the same again */
    CU_ASSERT(train_loss(bert_arch(), 0, 13, other) == plain);     /* no dropout: no key */
    /* every unit frozen: inference form, the loss of the model without dropout */
    CU_ASSERT(train_loss(bert_drop_arch(), units, 12, NULL) == plain);
    printf(" [loss %.9f, with dropout %.9f]", plain, drop);
}

/* The dropout op alone: y = add + x * mask / (1 - p), and its backward is
 * itself applied to dy. f = sum(r * y) for a fixed r, so df/dx = dropout(r)
 * and df/dadd = r, checked by finite differences over every element of
 * both, for rates from 0 to 0.9. */
static void dropout_op(void)
{
    pt_backend *be;
    pt_err err = {0};
    CU_ASSERT_FATAL(pt_backend_open_cpu64(&be, 1, &err) == 0);
    enum { NB = 3, PER = 37 };
    const int64_t ids[NB] = {5, 900, 2};
    double x[NB * PER], add[NB * PER], r[NB * PER], y[NB * PER], dx[NB * PER];
    pt_rng rng;
    pt_rng_seed(&rng, 77, 0);
    fill(&rng, x, NB * PER, 1.0);
    fill(&rng, add, NB * PER, 1.0);
    fill(&rng, r, NB * PER, 1.0);
    const double rates[] = {0.0, 0.1, 0.5, 0.9};
    int bad = 0, checked = 0, dropped = 0;
    for (size_t k = 0; k < sizeof rates / sizeof *rates; k++) {
        const pt_dropout drop = {rates[k], pt_dropout_key(3, 4, 5, 1), ids};
        be->ops->dropout(be, dx, r, NULL, NB, PER, &drop);
        for (int which = 0; which < 2; which++) /* x, then add */
            for (int i = 0; i < NB * PER; i++) {
                double *v = which ? add : x, keep = v[i], f2[2];
                for (int s2 = 0; s2 < 2; s2++) {
                    v[i] = keep + (s2 ? -H : H);
                    be->ops->dropout(be, y, x, add, NB, PER, &drop);
                    f2[s2] = 0;
                    for (int j = 0; j < NB * PER; j++)
                        f2[s2] += r[j] * y[j];
                }
                v[i] = keep;
                const double num = (f2[0] - f2[1]) / (2 * H), want = which ? r[i] : dx[i];
                checked++;
                dropped += !which && dx[i] == 0;
                if (!close_enough(want, num) && bad++ < 5)
                    printf("\n  p=%g d%s[%d]: analytic %.10g numeric %.10g", rates[k],
                           which ? "add" : "x", i, want, num);
            }
    }
    printf(" [%d values checked, %d dropped, %d off]", checked, dropped, bad);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(dropped > 0);
    pt_backend_close(be);
}

/* The attention op alone in the modes no unit combines: causal with a
 * padding mask, with and without dropout on the probabilities (lengths 1,
 * 3 and T; T 5 and 19, below and above the block width). f = sum(r * out)
 * for a fixed r, every element of qkv perturbed. */
static void attention_op_causal_masked(void)
{
    pt_backend *be;
    pt_err err = {0};
    CU_ASSERT_FATAL(pt_backend_open_cpu64(&be, 1, &err) == 0);
    enum { NB = 3, NH = 2, HD = 3, TMAX = 19 };
    const int Ts[] = {5, TMAX};
    const int64_t ids[NB] = {9, 4, 61};
    int bad = 0, checked = 0;
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++)
        for (int dropped = 0; dropped < 2; dropped++) {
            const int T = Ts[ti];
            const int32_t lens[NB] = {T, 1, 3};
            const size_t nq = (size_t)NB * T * 3 * NH * HD, no = (size_t)NB * T * NH * HD;
            double *qkv = malloc(nq * sizeof *qkv), *dqkv = malloc(nq * sizeof *dqkv);
            double *out = malloc(no * sizeof *out), *r = malloc(no * sizeof *r);
            double *probs = malloc((size_t)NB * NH * T * T * sizeof *probs);
            pt_rng rng;
            pt_rng_seed(&rng, 31, (uint64_t)T);
            fill(&rng, qkv, nq, 1.5);
            fill(&rng, r, no, 1.0);
            const pt_dropout drop = {0.3, pt_dropout_key(2, 3, 1, 0), ids};
            const pt_dropout *dp = dropped ? &drop : NULL;
            be->ops->attention_fwd(be, out, probs, qkv, NB, T, NH, HD, 1, lens, dp);
            be->ops->attention_bwd(be, dqkv, r, qkv, probs, out, NB, T, NH, HD, 1, lens, dp);
            for (size_t i = 0; i < nq; i++) {
                const double keep = qkv[i];
                double f2[2];
                for (int s2 = 0; s2 < 2; s2++) {
                    qkv[i] = keep + (s2 ? -H : H);
                    be->ops->attention_fwd(be, out, probs, qkv, NB, T, NH, HD, 1, lens, dp);
                    f2[s2] = 0;
                    for (size_t j = 0; j < no; j++)
                        f2[s2] += r[j] * out[j];
                }
                qkv[i] = keep;
                const double num = (f2[0] - f2[1]) / (2 * H);
                checked++;
                if (!close_enough(dqkv[i], num) && bad++ < 5)
                    printf("\n  T=%d dropout=%d dqkv[%zu]: analytic %.10g numeric %.10g", T, dropped,
                           i, dqkv[i], num);
            }
            free(qkv);
            free(dqkv);
            free(out);
            free(r);
            free(probs);
        }
    printf(" [%d values checked, %d off]", checked, bad);
    CU_ASSERT_EQUAL(bad, 0);
    pt_backend_close(be);
}

static void bert_attn_long_sequence(void) { check_unit_range(long_sequence(bert_arch()), 1, 1); }

/* T > the attention block width (16) and a head size of 16: the kernels' padded
 * and specialised paths, which the small models above do not reach */
static void attn_long_sequence(void)
{
    pt_arch a = gpt_arch();
    a.dim = 32;
    a.context = 21;
    check_unit_range(a, 1, 1);
    a.causal = 0;
    check_unit_range(a, 1, 1);
}

/* ViT's last block computed at every row in training too (the reference
 * that the [CLS]-rows-only default is compared against in test_cls_rows) */
static void vit_full_last_block(void)
{
    pt_arch a = vit_arch();
    a.full_last_block = 1;
    check_unit_range(a, 0, 6);
    check_unit_range(a, 3, 2);
}

/* The last block's units alone, at the [CLS] rows only (the default), as a
 * pipeline cut before the head or between them leaves them: the other rows
 * are passed on, and their gradient with them */
static void vit_last_block_alone(void)
{
    check_unit_range(vit_arch(), 3, 1);
    check_unit_range(vit_arch(), 4, 1);
    check_unit_range(vit_arch(), 3, 2);
}

/* One token per example: a softmax over one key */
static void gpt_context_one(void)
{
    pt_arch a = gpt_arch();
    a.context = 1;
    check_unit_range(a, 0, 6);
}

/* An example made only of padding, [CLS]'s place included: length 1 (the
 * [PAD] at position 0 is its one real token), with and without dropout */
static void bert_all_padding(void)
{
    all_padding = 1;
    check_unit_range(bert_arch(), 0, 6);
    check_unit_range(bert_drop_arch(), 0, 6);
    all_padding = 0;
}

static void vit_attn_causal(void)
{
    pt_arch a = vit_arch();
    a.causal = 1;
    check_unit_range(a, 1, 1);
}

/* A frozen prefix of every length before the trainable units, as a run
 * that freezes (and a stage after a frozen one's cut) has it: whole models
 * and a segment that starts past the embedding */
static void frozen_prefixes(pt_arch a)
{
    const int units = pt_arch_units(&a);
    for (int frozen = 1; frozen < units; frozen++)
        check_frozen_range(a, 0, units, frozen);
    for (int frozen = 1; frozen < 3; frozen++)
        check_frozen_range(a, 1, 3, frozen);
}

static void vit_frozen_prefix(void) { frozen_prefixes(vit_arch()); }
static void gpt_frozen_prefix(void) { frozen_prefixes(gpt_arch()); }
static void bert_frozen_prefix(void) { frozen_prefixes(bert_arch()); }
static void bert_dropout_frozen_prefix(void) { frozen_prefixes(bert_drop_arch()); }
static void vit_full_last_block_frozen_prefix(void)
{
    pt_arch a = vit_arch();
    a.full_last_block = 1;
    frozen_prefixes(a);
}

static const pt_test unit_tests[] = {
    {"vit_embed", vit_embed},   {"vit_attn", vit_attn},
    {"vit_attn_causal", vit_attn_causal}, {"vit_mlp", vit_mlp},
    {"vit_head_loss", vit_head},     {"gpt_embed", gpt_embed},
    {"gpt_attn_causal", gpt_attn_causal}, {"gpt_mlp", gpt_mlp},
    {"gpt_head_loss", gpt_head},     {"attn_long_sequence", attn_long_sequence},
    {"bert_embed", bert_embed},       {"bert_attn_masked", bert_attn_masked},
    {"bert_mlp", bert_mlp},           {"bert_head_pooled_loss", bert_head_pooled},
    {"bert_attn_long_sequence", bert_attn_long_sequence},
    {"dropout_op", dropout_op},
    {"bert_dropout_embed", bert_drop_embed}, {"bert_dropout_attn", bert_drop_attn},
    {"bert_dropout_attn_sites_alone", bert_drop_attn_sites_alone},
    {"bert_dropout_mlp", bert_drop_mlp},     {"bert_dropout_head_loss", bert_drop_head},
    {"bert_dropout_attn_long_sequence", bert_drop_attn_long_sequence},
    {"bert_dropout_is_live", bert_drop_is_live},
    {"vit_last_block_alone", vit_last_block_alone},
    {"attention_op_causal_masked", attention_op_causal_masked},
    {NULL, NULL}};
static const pt_test model_tests[] = {{"vit_whole_model", vit_whole_model},
                                      {"vit_middle_segment", vit_middle_segment},
                                      {"gpt_whole_model", gpt_whole_model},
                                      {"bert_whole_model", bert_whole_model},
                                      {"bert_middle_segment", bert_middle_segment},
                                      {"bert_dropout_whole_model", bert_drop_whole_model},
                                      {"bert_dropout_middle_segment", bert_drop_middle_segment},
                                      {"vit_full_last_block", vit_full_last_block},
                                      {"gpt_context_one", gpt_context_one},
                                      {"bert_all_padding", bert_all_padding},
                                      {"vit_frozen_prefix", vit_frozen_prefix},
                                      {"vit_full_last_block_frozen_prefix",
                                       vit_full_last_block_frozen_prefix},
                                      {"gpt_frozen_prefix", gpt_frozen_prefix},
                                      {"bert_frozen_prefix", bert_frozen_prefix},
                                      {"bert_dropout_frozen_prefix", bert_dropout_frozen_prefix},
                                      {NULL, NULL}};
static const pt_test_suite suites[] = {{"finite differences, one unit", unit_tests},
                                       {"finite differences, unit runs", model_tests},
                                       {NULL, NULL}};
