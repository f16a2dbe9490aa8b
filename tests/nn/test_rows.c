/*
 * test_rows.c: an example's activations through a frozen prefix (embedding and
 * blocks) do not depend on which other examples share its batch, bit for bit,
 * on the float32 CPU backend. The activation cache relies on this: an entry
 * written while example i sat in one micro-batch is read back in epochs where
 * i sits in another, and cache on must train exactly as cache off.
 *
 * For every configuration below, at 1, 2 and 3 threads (pt_backend_open's
 * threads), the prefix runs over:
 *  - a big batch (BIG examples, in reverse order): the reference;
 *  - the same examples in another big batch, rotated, so each sits at another
 *    position;
 *  - batches of 1 to 9 examples drawn from all over the pool;
 * and each example's [T, d] output must be the same bits in all of them.
 *
 * Configurations: every width of 8 .. 256 in the list below (odd ones, ones
 * just below and above the vector and tile widths of 16 and 32), with a head
 * count dividing it (head sizes from 3 to 127), ViT token counts 2, 5, 17 and
 * 50 (patch 28, 14, 7, 4 on 28 x 28 images) and 10 (patch 3 on 9 x 9, three
 * channels), GPT contexts 2, 7, 16, 17, 33 and 64, MLP widths 4d and some odd
 * ones. Each width gets one token count so the whole test stays a few
 * seconds; together they cover every path of every forward op: the linear
 * kernel's full and partial panels, row blocks and chunks, layernorm and
 * cross-lane sums of every length modulo 16, attention with T below, at
 * and above its 16-wide blocks, GELU's last partial block.
 *
 * BERT as it trains (dropout 0.1 on the hidden states and the attention
 * probabilities, a training forward through active units, padded examples):
 * the same must hold, because each dropout mask is a function of the
 * example's id and the step, never of its position or its batch; this is
 * what makes micro-batches, replicas and pipeline stages see the same masks.
 */
#include "nn/nn.h"
#include "tests/common/cunit_main.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG 40
#define MAX_SMALL 9

typedef struct {
    int dim, heads, mlp; /* mlp 0: 4 * dim */
    int gpt;             /* 0: ViT, 1: GPT, 2: BERT with dropout, in a training forward */
    int tokens;          /* ViT: the patch (on 28 x 28, or 3 on 9 x 9 RGB); GPT, BERT: the context */
} config;

enum { KIND_BERT_TRAIN = 2 };

static const config configs[] = {
    {8, 2, 0, 0, 7},      {9, 3, 0, 1, 17},    {12, 4, 37, 0, 4},   {17, 1, 0, 1, 33},
    {24, 3, 0, 0, 3},     {31, 1, 0, 1, 16},   {32, 4, 0, 0, 7},    {33, 3, 0, 1, 7},
    {40, 5, 0, 0, 14},    {48, 3, 0, 1, 64},   {63, 7, 0, 0, 28},   {64, 4, 0, 0, 7},
    {65, 5, 129, 1, 24},  {96, 3, 0, 0, 3},    {100, 4, 0, 1, 2},   {127, 1, 0, 0, 7},
    {128, 2, 0, 1, 17},   {129, 3, 0, 0, 14},  {160, 5, 0, 1, 16},  {192, 3, 257, 0, 7},
    {255, 5, 0, 1, 7},    {256, 4, 0, 0, 28},
    {16, 2, 0, 2, 9},     {32, 4, 0, 2, 17},   {48, 3, 37, 2, 33},  {64, 4, 0, 2, 16},
};

static pt_arch make_arch(const config *c)
{
    pt_arch a = {.dim = c->dim, .layers = 2, .heads = c->heads,
                 .mlp_hidden = c->mlp ? c->mlp : 4 * c->dim, .init_std = 0.1,
                 .seed = (uint64_t)c->dim};
    if (c->gpt == KIND_BERT_TRAIN) {
        a.kind = PT_MODEL_BERT;
        a.vocab = 50;
        a.context = a.positions = c->tokens;
        a.classes = 3;
        a.type_vocab = 2;
        a.ln_eps = 1e-12;
        a.hidden_dropout = 0.1;
        a.attn_dropout = 0.1;
    } else if (c->gpt) {
        a.kind = PT_MODEL_GPT;
        a.causal = 1;
        a.vocab = 256;
        a.context = c->tokens;
    } else if (c->tokens == 3) {
        a.kind = PT_MODEL_VIT;
        a.channels = 3;
        a.height = a.width = 9;
        a.patch = 3;
        a.classes = 10;
    } else {
        a.kind = PT_MODEL_VIT;
        a.channels = 1;
        a.height = a.width = 28;
        a.patch = c->tokens;
        a.classes = 10;
    }
    return a;
}

/* Runs units [0, 2L] (everything but the head) of arch a on examples
 * idx[0..n) of the pool; out receives [n, T, d] floats. */
static void prefix(pt_segment *seg, const pt_arch *a, const float *images,
                   const int32_t *tokens, const int *idx, int n, float *out)
{
    pt_err err = {0};
    int T = pt_arch_tokens(a), in = pt_arch_input_floats(a);
    float *im = malloc((size_t)n * (in ? in : 1) * sizeof *im);
    int32_t *tok = malloc((size_t)n * T * sizeof *tok), *tgt = calloc((size_t)n * T, sizeof *tgt);
    for (int i = 0; i < n; i++) {
        if (in)
            memcpy(im + (size_t)i * in, images + (size_t)idx[i] * in, (size_t)in * sizeof *im);
        memcpy(tok + (size_t)i * T, tokens + (size_t)idx[i] * T, (size_t)T * sizeof *tok);
    }
    /* dropout's identity: the pool index is the example's id */
    int64_t *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++)
        ids[i] = idx[i];
    const int train = a->kind == PT_MODEL_BERT;
    pt_batch b = {n, im, tok, tgt, ids, 7};
    size_t act = pt_segment_act_elems(seg, n);
    pt_backend *be = pt_segment_backend(seg);
    void *y = pt_backend_alloc(be, act * sizeof(float));
    CU_ASSERT_FATAL(y != NULL);
    pt_stats st = {0};
    CU_ASSERT_EQUAL(pt_segment_forward(seg, 0, &b, NULL, y, train, &st, &err), 0);
    free(ids);
    pt_backend_download(be, out, y, act * sizeof(float));
    pt_backend_free(be, y);
    free(im);
    free(tok);
    free(tgt);
}

/* Examples whose output in a batch of n differs from the reference. */
static int compare(const float *got, const int *idx, int n, const float *ref, size_t per,
                   const char *what, const config *c, int T, int threads)
{
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (memcmp(got + i * per, ref + (size_t)(BIG - 1 - idx[i]) * per, per * sizeof *got)) {
            if (!bad)
                printf("\n  %s d=%d heads=%d T=%d, %d threads: %s of %d: example %d differs from "
                       "the batch of %d", c->gpt == KIND_BERT_TRAIN ? "BERT (dropout)" : c->gpt ? "GPT" : "ViT",
                       c->dim, c->heads, T, threads,
                       what, n, idx[i], BIG);
            bad++;
        }
    return bad;
}

static int check_config(const config *c, int threads)
{
    pt_err err = {0};
    pt_arch a = make_arch(c);
    CU_ASSERT_FATAL(pt_arch_check(&a, &err) == 0);
    pt_backend *be;
    CU_ASSERT_FATAL(pt_backend_open(&be, "cpu", threads, &err) == 0);
    pt_segment *seg;
    pt_segment_spec spec = {0, pt_arch_units(&a) - 1, BIG, 1, 0, 0};
    CU_ASSERT_FATAL(pt_segment_create(&seg, &a, be, &spec, &err) == 0);
    CU_ASSERT_FATAL(pt_segment_init_params(seg, &err) == 0);

    int T = pt_arch_tokens(&a), in = pt_arch_input_floats(&a);
    pt_rng rng;
    pt_rng_seed(&rng, 99, (uint64_t)c->dim);
    float *images = malloc((size_t)BIG * (in ? in : 1) * sizeof *images);
    int32_t *tokens = malloc((size_t)BIG * T * sizeof *tokens);
    for (int i = 0; i < BIG * in; i++)
        images[i] = (float)(pt_rng_uniform(&rng) * 2 - 1);
    for (int i = 0; i < BIG * T; i++)
        tokens[i] = (int32_t)pt_rng_below(&rng, (uint64_t)(a.vocab ? a.vocab : 1));
    if (a.kind == PT_MODEL_BERT) /* real tokens never [PAD] (0), then padding from a random length */
        for (int e = 0; e < BIG; e++) {
            const int len = 1 + (int)pt_rng_below(&rng, (uint64_t)T);
            for (int t = 0; t < T; t++)
                tokens[(size_t)e * T + t] = t < len ? 1 + (int32_t)pt_rng_below(&rng, 49) : 0;
        }

    /* the reference: all BIG examples in one batch, in reverse order */
    int order[BIG];
    for (int i = 0; i < BIG; i++)
        order[i] = BIG - 1 - i;
    size_t per = (size_t)T * a.dim;
    float *ref = malloc(BIG * per * sizeof *ref), *got = malloc(BIG * per * sizeof *got);
    prefix(seg, &a, images, tokens, order, BIG, ref);

    int bad = 0;
    for (int i = 0; i < BIG; i++)
        order[i] = (i + 13) % BIG;
    prefix(seg, &a, images, tokens, order, BIG, got);
    bad += compare(got, order, BIG, ref, per, "a rotated batch", c, T, threads);
    for (int n = 1; n <= MAX_SMALL; n++) {
        int idx[MAX_SMALL];
        for (int i = 0; i < n; i++)
            idx[i] = (7 * i + 3 * n + c->dim) % BIG;
        prefix(seg, &a, images, tokens, idx, n, got);
        bad += compare(got, idx, n, ref, per, "a batch", c, T, threads);
    }
    free(ref);
    free(got);
    free(images);
    free(tokens);
    pt_segment_destroy(seg);
    pt_backend_close(be);
    return bad;
}

static void check_threads(int threads)
{
    int bad = 0;
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++)
        bad += check_config(&configs[i], threads);
    CU_ASSERT_EQUAL(bad, 0);
}

static void one_thread(void) { check_threads(1); }
static void two_threads(void) { check_threads(2); }
static void three_threads(void) { check_threads(3); }

static const pt_test tests[] = {{"prefix_rows_independent_1_thread", one_thread},
                                {"prefix_rows_independent_2_threads", two_threads},
                                {"prefix_rows_independent_3_threads", three_threads},
                                {NULL, NULL}};
static const pt_test_suite suites[] = {{"batch composition", tests}, {NULL, NULL}};
