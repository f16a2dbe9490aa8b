/*
 * test_rows.c: an example's activations through a frozen prefix (embedding and
 * blocks) do not depend on which other examples share its batch, bit for bit,
 * on the float32 CPU backend. The activation cache relies on this: an entry
 * written while example i sat in one micro-batch is read back in epochs where
 * i sits in another, and cache on must train exactly as cache off.
 *
 * The demo ViT's shapes (d = 64, 17 tokens, MLP 256, 7x7 patches) and a GPT's
 * run with batches of 1 to 9 examples against one batch of 40 holding the same
 * examples at other positions. Small batches are the risk: a matrix
 * multiply that picks its kernel by the number of rows (as OpenBLAS does)
 * rounds a row differently in a small batch.
 */
#include "nn/nn.h"
#include "tests/common/cunit_main.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG 40

static pt_arch demo_vit(void)
{
    pt_arch a = {.kind = PT_MODEL_VIT, .dim = 64, .layers = 2, .heads = 4, .mlp_hidden = 256,
                 .causal = 0, .channels = 1, .height = 28, .width = 28, .patch = 7, .classes = 10,
                 .init_std = 0.02, .seed = 3};
    return a;
}

static pt_arch small_gpt(void)
{
    pt_arch a = {.kind = PT_MODEL_GPT, .dim = 48, .layers = 2, .heads = 3, .mlp_hidden = 192,
                 .causal = 1, .vocab = 256, .context = 24, .init_std = 0.02, .seed = 4};
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
    pt_batch b = {n, im, tok, tgt};
    size_t act = pt_segment_act_elems(seg, n);
    pt_backend *be = pt_segment_backend(seg);
    void *y = pt_backend_alloc(be, act * sizeof(float));
    CU_ASSERT_FATAL(y != NULL);
    pt_stats st = {0};
    CU_ASSERT_EQUAL(pt_segment_forward(seg, 0, &b, NULL, y, 0, &st, &err), 0);
    pt_backend_download(be, out, y, act * sizeof(float));
    pt_backend_free(be, y);
    free(im);
    free(tok);
    free(tgt);
}

static void check_arch(pt_arch a, int threads)
{
    pt_err err = {0};
    pt_backend *be;
    CU_ASSERT_FATAL(pt_backend_open(&be, "cpu", threads, &err) == 0);
    pt_segment *seg;
    pt_segment_spec spec = {0, pt_arch_units(&a) - 1, BIG, 1};
    CU_ASSERT_FATAL(pt_segment_create(&seg, &a, be, &spec, &err) == 0);
    CU_ASSERT_FATAL(pt_segment_init_params(seg, &err) == 0);

    int T = pt_arch_tokens(&a), in = pt_arch_input_floats(&a);
    pt_rng rng;
    pt_rng_seed(&rng, 99, 1);
    float *images = malloc((size_t)BIG * (in ? in : 1) * sizeof *images);
    int32_t *tokens = malloc((size_t)BIG * T * sizeof *tokens);
    for (int i = 0; i < BIG * in; i++)
        images[i] = (float)(pt_rng_uniform(&rng) * 2 - 1);
    for (int i = 0; i < BIG * T; i++)
        tokens[i] = (int32_t)pt_rng_below(&rng, (uint64_t)(a.vocab ? a.vocab : 1));

    /* the reference: all BIG examples in one batch, in reverse order */
    int all[BIG];
    for (int i = 0; i < BIG; i++)
        all[i] = BIG - 1 - i;
    size_t per = (size_t)T * a.dim;
    float *ref = malloc(BIG * per * sizeof *ref), *got = malloc(BIG * per * sizeof *got);
    prefix(seg, &a, images, tokens, all, BIG, ref);

    int mismatched = 0;
    for (int n = 1; n <= 9; n++) {
        int idx[9];
        for (int i = 0; i < n; i++)
            idx[i] = (7 * i + 3 * n) % BIG;
        prefix(seg, &a, images, tokens, idx, n, got);
        for (int i = 0; i < n; i++)
            if (memcmp(got + i * per, ref + (size_t)(BIG - 1 - idx[i]) * per, per * sizeof *got)) {
                mismatched++;
                printf("\n  batch of %d: example %d differs from the batch of %d", n, idx[i], BIG);
            }
    }
    CU_ASSERT_EQUAL(mismatched, 0);
    free(ref);
    free(got);
    free(images);
    free(tokens);
    pt_segment_destroy(seg);
    pt_backend_close(be);
}

static void vit_one_thread(void) { check_arch(demo_vit(), 1); }
static void vit_two_threads(void) { check_arch(demo_vit(), 2); }
static void gpt_one_thread(void) { check_arch(small_gpt(), 1); }
static void gpt_two_threads(void) { check_arch(small_gpt(), 2); }

static const pt_test tests[] = {{"vit_prefix_rows_independent_1_thread", vit_one_thread},
                                {"vit_prefix_rows_independent_2_threads", vit_two_threads},
                                {"gpt_prefix_rows_independent_1_thread", gpt_one_thread},
                                {"gpt_prefix_rows_independent_2_threads", gpt_two_threads},
                                {NULL, NULL}};
static const pt_test_suite suites[] = {{"batch composition", tests}, {NULL, NULL}};
