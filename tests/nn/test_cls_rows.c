/*
 * test_cls_rows.c: ViT's last block computed at the [CLS] rows only (the
 * default, pt_arch.full_last_block 0) against the same block computed at
 * every row (full_last_block 1), which is the block as written.
 *
 * The head reads the last block's output only at [CLS], so a training step
 * must be the same either way, up to rounding: the pruned block computes
 * attention for the [CLS] query alone (attention_first_fwd, its own
 * summation order) and drops rows whose gradient is exactly 0, which
 * regroups LayerNorm's and the biases' sums over rows.
 *  - the count of correct predictions is the same, and the loss agrees to
 *    1e-6 relative in float32 (a few roundings of the [CLS] output, carried
 *    through the MLP, LayerNorm and head: about 1e-7) and 1e-13 in float64;
 *  - every parameter gradient agrees to 1e-12 of the tensor's largest
 *    gradient in float64 and 2e-5 in float32 (a regrouped sum of a few
 *    hundred terms moves by a few ulp of its largest partial sum; a wrong or
 *    missing term moves it by far more, see the mutations in the commit
 *    that added this test);
 *  - and the pruning is live: in a training forward of the active last
 *    block, the rows away from [CLS] are the block's input, bit for bit, and
 *    the [CLS] rows agree with the full block's to 1e-5 of their largest
 *    element; evaluation and a frozen block compute every row, bit for bit
 *    as the full block does (hidden states are an output of evaluation, and
 *    the activation cache keeps a frozen prefix's output).
 *
 * Shapes: token counts 2, 5, 7, 10, 17 and 50, one to three blocks (one: the
 * only block is the last), head sizes 3 to 16, MLP widths 4d and odd ones,
 * 1 and 5 examples; float32 at 1, 2 and 3 threads, float64 at 1.
 */
#include "nn/nn.h"
#include "tests/common/cunit_main.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int dim, heads, mlp, layers, patch, channels, height, width;
} shape;

static const shape shapes[] = {
    {8, 2, 12, 1, 2, 2, 4, 6},     /* T 7, one block */
    {16, 4, 64, 2, 7, 1, 28, 28},  /* T 17, the demo's layout */
    {33, 3, 50, 3, 14, 1, 28, 28}, /* T 5 */
    {64, 4, 256, 2, 4, 1, 28, 28}, /* T 50, the wide model's layout */
    {24, 3, 96, 2, 3, 3, 9, 9},    /* T 10, three channels */
    {40, 5, 161, 2, 28, 1, 28, 28} /* T 2 */
};
enum { SHAPES = sizeof shapes / sizeof shapes[0], MAXN = 5 };

static pt_arch arch_of(const shape *s, int full)
{
    pt_arch a = {.kind = PT_MODEL_VIT, .dim = s->dim, .layers = s->layers, .heads = s->heads,
                 .mlp_hidden = s->mlp, .channels = s->channels, .height = s->height,
                 .width = s->width, .patch = s->patch, .classes = 7, .init_std = 0.3,
                 .seed = 11, .full_last_block = full};
    return a;
}

typedef struct {
    pt_backend *be;
    pt_segment *seg;
} model;

/* Units [first, first + count) with the same random parameters whatever
 * `full` is (LayerNorm weights away from 1, biases away from 0). */
static void open_model(model *m, const shape *s, int full, const char *backend, int threads,
                       int first, int count)
{
    pt_err err = {0};
    pt_arch a = arch_of(s, full);
    CU_ASSERT_FATAL((strcmp(backend, "cpu64") == 0 ? pt_backend_open_cpu64(&m->be, threads, &err)
                                                  : pt_backend_open(&m->be, backend, threads, &err)) == 0);
    pt_segment_spec spec = {first, count, MAXN, 1, 0, 0};
    CU_ASSERT_FATAL(pt_segment_create(&m->seg, &a, m->be, &spec, &err) == 0);
    pt_rng rng;
    pt_rng_seed(&rng, 77, 0);
    for (int u = first; u < first + count; u++) {
        size_t n = pt_segment_unit_numel(m->seg, u);
        float *p = malloc(n * sizeof *p);
        for (size_t i = 0; i < n; i++)
            p[i] = (float)(pt_rng_uniform(&rng) * 1.2 - 0.6);
        CU_ASSERT_FATAL(pt_segment_unit_set(m->seg, u, PT_PART_PARAM, p, &err) == 0);
        free(p);
    }
}

static void close_model(model *m)
{
    pt_segment_destroy(m->seg);
    pt_backend_close(m->be);
}

typedef struct {
    float images[MAXN * 3 * 28 * 28];
    int32_t targets[MAXN];
    int64_t ids[MAXN];
    pt_batch batch;
} data;

static void make_data(data *d, const shape *s, int n)
{
    pt_rng rng;
    pt_rng_seed(&rng, 5, (uint64_t)n);
    for (int i = 0; i < n * s->channels * s->height * s->width; i++)
        d->images[i] = (float)(pt_rng_uniform(&rng) * 2 - 1);
    for (int b = 0; b < n; b++) {
        d->targets[b] = (int32_t)pt_rng_below(&rng, 7);
        d->ids[b] = b;
    }
    d->batch = (pt_batch){n, d->images, NULL, d->targets, d->ids, 3};
}

/* One training forward and backward of the whole model; returns the loss,
 * the correct count in *correct, and every unit's gradient in g (host). */
static double train_step(model *m, data *d, int64_t *correct, float **g)
{
    pt_err err = {0};
    pt_stats st = {0};
    pt_segment_zero_grads(m->seg);
    pt_segment_set_loss_scale(m->seg, 1.0 / d->batch.n);
    CU_ASSERT_FATAL(pt_segment_forward(m->seg, 0, &d->batch, NULL, NULL, 1, &st, &err) == 0);
    CU_ASSERT_FATAL(pt_segment_backward(m->seg, 0, &d->batch, NULL, NULL, &err) == 0);
    const int units = pt_segment_count(m->seg);
    for (int u = 0; u < units; u++) {
        g[u] = malloc(pt_segment_unit_numel(m->seg, u) * sizeof(float));
        CU_ASSERT_FATAL(pt_segment_unit_get(m->seg, u, PT_PART_GRAD, g[u], &err) == 0);
    }
    *correct = st.correct;
    return st.loss;
}

static int whole_model_agrees(const shape *s, int n, const char *backend, int threads)
{
    pt_arch a = arch_of(s, 0);
    const int units = pt_arch_units(&a);
    const double bound = strcmp(backend, "cpu64") == 0 ? 1e-12 : 2e-5;

    model pruned, full;
    open_model(&pruned, s, 0, backend, threads, 0, units);
    open_model(&full, s, 1, backend, threads, 0, units);
    data d;
    make_data(&d, s, n);
    float *gp[64], *gf[64];
    int64_t cp = 0, cf = 0;
    const double lp = train_step(&pruned, &d, &cp, gp), lf = train_step(&full, &d, &cf, gf);
    int bad = 0;
    const int f64 = strcmp(backend, "cpu64") == 0;
    if (!(fabs(lp - lf) <= (f64 ? 1e-13 : 1e-6) * fabs(lf)) || cp != cf) {
        printf("\n  %s x%d d=%d T=%d n=%d: loss %.17g against %.17g, correct %lld against %lld",
               backend, threads, s->dim, pt_arch_tokens(&a), n, lp, lf, (long long)cp,
               (long long)cf);
        bad++;
    }
    for (int u = 0; u < units; u++) {
        pt_unit_info info;
        pt_unit_info_get(&a, u, &info);
        for (int k = 0; k < info.n_params; k++) {
            const pt_param_info *pi = &info.params[k];
            double big = 0, worst = 0;
            for (size_t i = 0; i < pi->numel; i++)
                big = fmax(big, fabs(gf[u][pi->offset + i]));
            for (size_t i = 0; i < pi->numel; i++)
                worst = fmax(worst, fabs((double)gp[u][pi->offset + i] - gf[u][pi->offset + i]));
            if (!(worst <= bound * big) || !(big > 0)) {
                printf("\n  %s x%d d=%d T=%d n=%d: %s differs by %.3g of its largest %.3g",
                       backend, threads, s->dim, pt_arch_tokens(&a), n, pi->name,
                       big > 0 ? worst / big : worst, big);
                bad++;
            }
        }
        free(gp[u]);
        free(gf[u]);
    }
    close_model(&pruned);
    close_model(&full);
    return bad;
}

static void whole_model(void)
{
    int bad = 0, cases = 0;
    static const int counts[] = {1, MAXN};
    for (int si = 0; si < SHAPES; si++)
        for (int ni = 0; ni < 2; ni++) {
            for (int threads = 1; threads <= 3; threads++, cases++)
                bad += whole_model_agrees(&shapes[si], counts[ni], "cpu", threads);
            bad += whole_model_agrees(&shapes[si], counts[ni], "cpu64", 1);
            cases++;
        }
    printf(" [%d cases]", cases);
    CU_ASSERT_EQUAL(bad, 0);
}

/* The last block alone (units 2L - 1 and 2L) on a random input: what leaves
 * it in a training forward, in evaluation and frozen, pruned against full. */
static int last_block_rows(const shape *s, int threads)
{
    pt_arch a = arch_of(s, 0);
    const int first = 2 * a.layers - 1, T = pt_arch_tokens(&a), d = a.dim;
    pt_err err = {0};
    model pruned, full;
    open_model(&pruned, s, 0, "cpu", threads, first, 2);
    open_model(&full, s, 1, "cpu", threads, first, 2);
    data dat;
    make_data(&dat, s, MAXN);
    const size_t act = (size_t)MAXN * T * d;
    float *x = pt_backend_alloc(pruned.be, act * sizeof(float));
    float *xf = pt_backend_alloc(full.be, act * sizeof(float));
    float *yp = pt_backend_alloc(pruned.be, act * sizeof(float));
    float *yf = pt_backend_alloc(full.be, act * sizeof(float));
    pt_rng rng;
    pt_rng_seed(&rng, 9, 0);
    for (size_t i = 0; i < act; i++)
        x[i] = xf[i] = (float)(pt_rng_uniform(&rng) * 2 - 1);
    int bad = 0;
    /* 0: training, active; 1: evaluation; 2: training, the block frozen */
    for (int mode = 0; mode < 3; mode++) {
        if (mode == 2) {
            CU_ASSERT_FATAL(pt_segment_freeze(pruned.seg, 2, &err) == 0);
            CU_ASSERT_FATAL(pt_segment_freeze(full.seg, 2, &err) == 0);
        }
        const int train = mode != 1;
        CU_ASSERT_FATAL(pt_segment_forward(pruned.seg, 0, &dat.batch, x, yp, train, NULL, &err) == 0);
        CU_ASSERT_FATAL(pt_segment_forward(full.seg, 0, &dat.batch, xf, yf, train, NULL, &err) == 0);
        int cls_off = 0, rest_off = 0, rest_changed = 0;
        double big = 0;
        for (size_t i = 0; i < act; i++)
            big = fmax(big, fabs(yf[i]));
        for (int b = 0; b < MAXN; b++)
            for (int t = 0; t < T; t++) {
                const size_t at = ((size_t)b * T + t) * d;
                const int same = memcmp(yp + at, yf + at, d * sizeof(float)) == 0;
                double off = 0;
                for (int i = 0; i < d; i++)
                    off = fmax(off, fabs((double)yp[at + i] - yf[at + i]));
                if (t == 0)
                    cls_off += mode == 0 ? !(off <= 1e-5 * big) : !same;
                else if (mode == 0)
                    rest_off += memcmp(yp + at, x + at, d * sizeof(float)) != 0;
                else
                    rest_off += !same;
                rest_changed += t > 0 && memcmp(yf + at, x + at, d * sizeof(float)) != 0;
            }
        /* the full block changes every row, so a pruned row is told apart */
        if (cls_off || rest_off || rest_changed != MAXN * (T - 1)) {
            printf("\n  x%d d=%d T=%d mode %d: %d [CLS] rows differ, %d other rows differ, "
                   "%d of %d rows changed by the full block",
                   threads, d, T, mode, cls_off, rest_off, rest_changed, MAXN * (T - 1));
            bad++;
        }
    }
    pt_backend_free(pruned.be, x);
    pt_backend_free(full.be, xf);
    pt_backend_free(pruned.be, yp);
    pt_backend_free(full.be, yf);
    close_model(&pruned);
    close_model(&full);
    return bad;
}

static void last_block(void)
{
    int bad = 0;
    for (int si = 0; si < SHAPES; si++)
        for (int threads = 1; threads <= 3; threads += 2)
            bad += last_block_rows(&shapes[si], threads);
    CU_ASSERT_EQUAL(bad, 0);
}

static const pt_test tests[] = {{"training_step_matches_full_block", whole_model},
                                {"last_block_rows_train_eval_frozen", last_block},
                                {NULL, NULL}};
static const pt_test_suite suites[] = {{"ViT's last block at [CLS] only", tests}, {NULL, NULL}};
