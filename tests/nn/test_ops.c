/*
 * test_ops.c: every op of the CPU float32 backend ("cpu") against the same op
 * on the float64 backend ("cpu64"), on random inputs (fixed seeds, never all
 * zero) and shapes that are not multiples of the kernels' vector or block
 * widths: odd row counts and widths, T = 1, T below, at and above the
 * attention block width (16), head sizes that are not multiples of 8, causal
 * and bidirectional attention, optional outputs left NULL, gradients
 * accumulated onto what they already hold, residual `add` separate and
 * aliased with the output.
 *
 * Both backends get identical inputs: the same host floats, converted by each
 * backend's par_from_f32 / act_from_f32 (exact for the float64 backend). Both
 * results come back through par_to_f32 / act_to_f32 and are compared
 * normwise, max|f32 - f64| / max|f64|, against TOL = 1e-5 for every op.
 * Why that bound holds for correct float32 code: every output here is at most
 * a sum of a few hundred products of O(1) terms (in <= 300, classes <= 300,
 * T <= 70, rows <= 200), so float32 rounding contributes about
 * sqrt(k) * 2^-24 ~ 1e-6 relative to the largest output (the worst-case
 * k * 2^-24 = 2e-5 needs every rounding error to line up, which random data
 * does not do); exp and the normal CDF of the float32 backend are within
 * about 1e-7 and 5e-7 relative (tests/nn/test_cpu_math.c); rounding the float64
 * result to float for the comparison adds at most 2^-24 = 6e-8. A wrong term,
 * index or mask changes an output by O(1) of the largest one and fails by
 * orders of magnitude.
 *
 * The float64 backend is itself checked against finite differences
 * (test_grad.c); this test checks that the float32 build agrees with it. So
 * that a mistake both builds share still shows, outputs that an op must
 * overwrite start as NaN (an element left unwritten, or read before being
 * written, comes out NaN and fails the finiteness check), gradients that an
 * op must accumulate into start at random values of the same size as what is
 * added, copy_rows checks that it leaves the gaps between rows alone, and
 * the cross-entropy's correct count is checked against a count made here.
 *
 * Every check also asserts that both results are finite and that the
 * float64 result is not all zero (a normwise error against zero would say
 * nothing). The worst error per op is printed at the end.
 *
 * Dropout (the op, and attention's dropout on the probabilities) is also
 * checked for what its mask must be (dropout_mask): the keep fraction
 * within binomial bounds for several rates, kept elements scaled by exactly
 * 1 / (1 - p), p = 0 the identity bit for bit, the same bits for an example
 * whatever else shares the call and wherever it sits, and whatever the
 * thread count; new masks for another step, unit, site or example.
 */
#include "nn/backend.h"
#include "nn/unit.h"
#include "tests/common/cunit_main.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

/* ------------------------------------------------------------- backends */

static pt_backend *be[2]; /* 0: "cpu" (float32), 1: "cpu64" (float64) */
static pt_rng rng;

#define EACH for (int k_ = 0; k_ < 2; k_++)
#define BE be[k_]
#define OPS be[k_]->ops
#define D(t) ((t).p[k_]) /* the tensor's memory on backend k_ */
#define D_OF(t, k) ((t).p[k])

static void open_both(uint64_t seed)
{
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_backend_open(&be[0], "cpu", 1, &err), 0);
    CU_ASSERT_EQUAL_FATAL(pt_backend_open_cpu64(&be[1], 1, &err), 0);
    CU_ASSERT_EQUAL_FATAL(pt_backend_real_size(be[0]), sizeof(float));
    CU_ASSERT_EQUAL_FATAL(pt_backend_act_size(be[0]), sizeof(float));
    CU_ASSERT_EQUAL_FATAL(pt_backend_real_size(be[1]), sizeof(double));
    CU_ASSERT_EQUAL_FATAL(pt_backend_act_size(be[1]), sizeof(double));
    pt_rng_seed(&rng, seed, 0);
}

static void close_both(void)
{
    pt_err err = {0};
    for (int k = 0; k < 2; k++) {
        CU_ASSERT_EQUAL(pt_backend_sync(be[k], &err), 0);
        pt_backend_close(be[k]);
        be[k] = NULL;
    }
}

/* --------------------------------------------------------------- tensors */

/* n elements on both backends: parameter elements (par) or activation elements. */
typedef struct tens {
    void *p[2];
    size_t n;
    int par;
} tens;

static size_t elem_bytes(int k, int par)
{
    return par ? pt_backend_real_size(be[k]) : pt_backend_act_size(be[k]);
}

static tens t_new(size_t n, int par)
{
    tens t = {{NULL, NULL}, n, par};
    for (int k = 0; k < 2; k++) {
        t.p[k] = pt_backend_alloc(be[k], n * elem_bytes(k, par));
        CU_ASSERT_FATAL(t.p[k] != NULL);
    }
    return t;
}

static void t_free(tens *t)
{
    for (int k = 0; k < 2; k++)
        pt_backend_free(be[k], t->p[k]);
    memset(t, 0, sizeof *t);
}

/* The same host floats to both backends. */
static void t_set(tens *t, const float *h)
{
    for (int k = 0; k < 2; k++) {
        if (t->par)
            be[k]->ops->par_from_f32(be[k], t->p[k], h, t->n);
        else
            be[k]->ops->act_from_f32(be[k], t->p[k], h, t->n);
    }
}

static float *t_get(const tens *t, int k)
{
    float *h = malloc(t->n * sizeof *h + 1);
    CU_ASSERT_FATAL(h != NULL);
    if (t->par)
        be[k]->ops->par_to_f32(be[k], h, t->p[k], t->n);
    else
        be[k]->ops->act_to_f32(be[k], h, t->p[k], t->n);
    return h;
}

static double urand(double lo, double hi) { return lo + (hi - lo) * pt_rng_uniform(&rng); }

/* Uniform in [lo, hi), never exactly zero. */
static float rand_nonzero(double lo, double hi)
{
    float x = (float)urand(lo, hi);
    return x != 0.0f ? x : (float)(hi > 0 ? hi * 0.5 : lo * 0.5);
}

static void t_fill(tens *t, double lo, double hi)
{
    float *h = malloc(t->n * sizeof *h + 1);
    for (size_t i = 0; i < t->n; i++)
        h[i] = rand_nonzero(lo, hi);
    t_set(t, h);
    free(h);
}

/* For outputs the op must overwrite: any element it does not write stays NaN. */
static void t_fill_nan(tens *t)
{
    float *h = malloc(t->n * sizeof *h + 1);
    for (size_t i = 0; i < t->n; i++)
        h[i] = NAN;
    t_set(t, h);
    free(h);
}

/* int32 data (tokens, targets): raw bytes, the same on both backends. */
static void *ints_new(int k, const int32_t *v, size_t n)
{
    void *p = pt_backend_alloc(be[k], n * sizeof *v);
    CU_ASSERT_FATAL(p != NULL);
    be[k]->ops->upload(be[k], p, v, n * sizeof *v);
    return p;
}

/* Raw bytes (int64 ids), the same on both backends. */
static void *bytes_new(int k, const void *v, size_t bytes)
{
    void *p = pt_backend_alloc(be[k], bytes);
    CU_ASSERT_FATAL(p != NULL);
    be[k]->ops->upload(be[k], p, v, bytes);
    return p;
}

/* ------------------------------------------------------------ comparison */

enum {
    OP_LINEAR_FWD, OP_LINEAR_BWD, OP_LAYERNORM_FWD, OP_LAYERNORM_BWD, OP_GELU_FWD, OP_GELU_BWD,
    OP_ATTENTION_FWD, OP_ATTENTION_BWD, OP_ATTENTION_FIRST_FWD, OP_ATTENTION_FIRST_BWD, OP_PATCHIFY, OP_VIT_ASSEMBLE_FWD, OP_VIT_ASSEMBLE_BWD,
    OP_TOKEN_EMBED_FWD, OP_TOKEN_EMBED_BWD, OP_COPY_ROWS, OP_CROSS_ENTROPY, OP_ADAMW, OP_SUMSQ,
    OP_SCALE, OP_MEAN_POOL_FWD, OP_MEAN_POOL_BWD, OP_DROPOUT, OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
    "linear_fwd", "linear_bwd", "layernorm_fwd", "layernorm_bwd", "gelu_fwd", "gelu_bwd",
    "attention_fwd", "attention_bwd", "attention_first_fwd", "attention_first_bwd", "patchify", "vit_assemble_fwd", "vit_assemble_bwd",
    "token_embed_fwd", "token_embed_bwd", "copy_rows", "cross_entropy", "adamw", "sumsq",
    "scale", "mean_pool_fwd", "mean_pool_bwd", "dropout"};

static struct {
    double worst;
    int checks;
    char where[160];
} stats[OP_COUNT];

/* What a comparison found: the normwise error, max|f64|, and the first
 * element of either result that is NaN or infinite (-1: none). */
typedef struct cmp {
    double err, ref_max;
    long bad_index;
    int bad_side; /* 0: float32, 1: float64 */
} cmp;

static cmp compare_arrays(const float *a32, const float *a64, size_t n)
{
    cmp c = {0, 0, -1, 0};
    for (size_t i = 0; i < n; i++) {
        if (c.bad_index < 0 && (!isfinite(a32[i]) || !isfinite(a64[i]))) {
            c.bad_index = (long)i;
            c.bad_side = isfinite(a32[i]) ? 1 : 0;
        }
        double e = fabs((double)a32[i] - (double)a64[i]);
        if (e > c.err || e != e)
            c.err = e != e ? INFINITY : e;
        if (fabs((double)a64[i]) > c.ref_max)
            c.ref_max = fabs((double)a64[i]);
    }
    c.err = c.ref_max > 0 ? c.err / c.ref_max : c.err;
    return c;
}

static void record(int op, double err, const char *what)
{
    stats[op].checks++;
    if (err >= stats[op].worst) {
        stats[op].worst = err;
        snprintf(stats[op].where, sizeof stats[op].where, "%s", what);
    }
}

/* Asserts t agrees between the backends within TOL (finite, reference not all zero). */
__attribute__((format(printf, 3, 4))) static void check(const tens *t, int op, const char *fmt,
                                                        ...)
{
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    float *a32 = t_get(t, 0), *a64 = t_get(t, 1);
    cmp c = compare_arrays(a32, a64, t->n);
    if (c.bad_index >= 0)
        printf("\n  %s: %s[%ld] = %g (float32 %g, float64 %g)", what,
               c.bad_side ? "float64" : "float32", c.bad_index,
               (double)(c.bad_side ? a64 : a32)[c.bad_index], (double)a32[c.bad_index],
               (double)a64[c.bad_index]);
    else if (c.ref_max == 0)
        printf("\n  %s: the float64 result is all zero", what);
    else if (!(c.err <= TOL))
        printf("\n  %s: normwise error %.3g > %.3g", what, c.err, TOL);
    CU_ASSERT(c.bad_index < 0);
    CU_ASSERT(c.ref_max > 0);
    CU_ASSERT(c.err <= TOL);
    record(op, c.err, what);
    free(a32);
    free(a64);
}

/* The same for a scalar result: |v32 - v64| / |v64|. */
__attribute__((format(printf, 4, 5))) static void check_scalar(double v32, double v64, int op,
                                                               const char *fmt, ...)
{
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    double err = fabs(v32 - v64) / fabs(v64);
    if (!isfinite(v32) || !isfinite(v64) || v64 == 0 || !(err <= TOL))
        printf("\n  %s: float32 %.10g float64 %.10g (relative error %.3g)", what, v32, v64, err);
    CU_ASSERT(isfinite(v32) && isfinite(v64));
    CU_ASSERT(v64 != 0);
    CU_ASSERT(err <= TOL);
    record(op, isfinite(err) ? err : INFINITY, what);
}

static void print_worst(int first, int last)
{
    for (int op = first; op <= last; op++)
        printf("\n    %-17s worst %.3g over %d checks (%s)", op_names[op], stats[op].worst,
               stats[op].checks, stats[op].where);
    printf("\n  ");
}

/* -------------------------------------------------------- harness itself */

/* The comparison flags what it must: one element off by 2e-5 of the largest,
 * NaN or infinity on either side, and an all-zero reference. */
static void harness_detects_errors(void)
{
    enum { N = 37 };
    float a[N], b[N];
    for (int i = 0; i < N; i++)
        a[i] = b[i] = (float)(i - 18) * 0.25f; /* max |b| = 4.5 */
    cmp c = compare_arrays(a, b, N);
    CU_ASSERT(c.err == 0 && c.bad_index < 0 && c.ref_max == 4.5);
    a[5] += 4.5f * 2e-5f;
    c = compare_arrays(a, b, N);
    CU_ASSERT(c.err > TOL && c.err < 3e-5);
    a[5] = b[5];
    a[36] = NAN;
    c = compare_arrays(a, b, N);
    CU_ASSERT(c.bad_index == 36 && c.bad_side == 0 && !(c.err <= TOL));
    a[36] = b[36];
    b[0] = -INFINITY;
    c = compare_arrays(a, b, N);
    CU_ASSERT(c.bad_index == 0 && c.bad_side == 1);
    memset(b, 0, sizeof b);
    c = compare_arrays(b, b, N);
    CU_ASSERT(c.ref_max == 0);
}

/* ---------------------------------------------------------------- linear */

/* add_mode: 0 none, 1 a separate tensor, 2 aliased with y. */
static void linear_case(int rows, int out, int in, int bias, int add_mode)
{
    tens x = t_new((size_t)rows * in, 0), y = t_new((size_t)rows * out, 0);
    tens w = t_new((size_t)out * in, 1), b = t_new(out, 1), add = t_new((size_t)rows * out, 0);
    t_fill(&x, -1, 1);
    t_fill(&w, -0.5, 0.5);
    t_fill(&b, -1, 1);
    t_fill(&add, -2, 2);
    if (add_mode == 2)
        EACH OPS->copy(BE, D(y), D(add), add.n * elem_bytes(k_, 0));
    else
        t_fill_nan(&y);
    EACH OPS->linear_fwd(BE, D(y), D(x), D(w), bias ? D(b) : NULL, rows, out, in,
                         add_mode == 1 ? D(add) : add_mode == 2 ? D(y) : NULL);
    check(&y, OP_LINEAR_FWD, "linear_fwd %dx%dx%d bias %d add %d", rows, out, in, bias, add_mode);

    /* backward: every subset of (dx, dw, db); dx overwritten, dw and db
     * accumulated onto values of the size of what is added */
    tens dy = t_new((size_t)rows * out, 0), dx = t_new((size_t)rows * in, 0);
    tens dw = t_new((size_t)out * in, 1), db = t_new(out, 1);
    t_fill(&dy, -1, 1);
    for (int want = 1; want < 8; want++) {
        const int want_dx = want & 1, want_dw = want & 2, want_db = want & 4;
        t_fill_nan(&dx);
        t_fill(&dw, -2, 2);
        t_fill(&db, -4, 4);
        EACH OPS->linear_bwd(BE, want_dx ? D(dx) : NULL, want_dw ? D(dw) : NULL,
                             want_db ? D(db) : NULL, D(dy), D(x), D(w), rows, out, in);
        if (want_dx)
            check(&dx, OP_LINEAR_BWD, "linear_bwd dx %dx%dx%d want %d", rows, out, in, want);
        if (want_dw)
            check(&dw, OP_LINEAR_BWD, "linear_bwd dw %dx%dx%d want %d", rows, out, in, want);
        if (want_db)
            check(&db, OP_LINEAR_BWD, "linear_bwd db %dx%dx%d want %d", rows, out, in, want);
    }
    tens *all[] = {&x, &y, &w, &b, &add, &dy, &dx, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        t_free(all[i]);
}

static void linear_all(void)
{
    open_both(101);
    const int shapes[][3] = {{37, 19, 23}, {1, 5, 3},    {130, 96, 64}, {65, 37, 37},
                             {8, 256, 300}, {200, 17, 9}, {3, 1, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int bias = 0; bias < 2; bias++)
            for (int add_mode = 0; add_mode < 3; add_mode++)
                linear_case(shapes[s][0], shapes[s][1], shapes[s][2], bias, add_mode);
    print_worst(OP_LINEAR_FWD, OP_LINEAR_BWD);
    close_both();
}

/* ------------------------------------------------------------- layernorm */

static void layernorm_case(int rows, int dim, double eps)
{
    tens x = t_new((size_t)rows * dim, 0), y = t_new((size_t)rows * dim, 0);
    tens w = t_new(dim, 1), b = t_new(dim, 1), mean = t_new(rows, 1), rstd = t_new(rows, 1);
    t_fill(&x, -2, 3);
    t_fill(&w, 0.5, 1.5);
    t_fill(&b, -0.5, 0.5);
    t_fill_nan(&y);
    t_fill_nan(&mean);
    t_fill_nan(&rstd);
    EACH OPS->layernorm_fwd(BE, D(y), D(mean), D(rstd), D(x), D(w), D(b), rows, dim, eps);
    check(&y, OP_LAYERNORM_FWD, "layernorm_fwd y %dx%d eps %g", rows, dim, eps);
    check(&mean, OP_LAYERNORM_FWD, "layernorm_fwd mean %dx%d eps %g", rows, dim, eps);
    check(&rstd, OP_LAYERNORM_FWD, "layernorm_fwd rstd %dx%d eps %g", rows, dim, eps);
    if (dim > 1) { /* eps is the one given: rstd = 1 / sqrt(var + eps) of the first row */
        float *h = malloc((size_t)dim * sizeof *h), *r = t_get(&rstd, 1);
        be[1]->ops->act_to_f32(be[1], h, D_OF(x, 1), (size_t)dim);
        double m = 0, v = 0;
        for (int i = 0; i < dim; i++)
            m += h[i];
        m /= dim;
        for (int i = 0; i < dim; i++)
            v += (h[i] - m) * (h[i] - m);
        double want = 1 / sqrt(v / dim + eps);
        CU_ASSERT(fabs(r[0] - want) <= 1e-6 * want);
        free(h);
        free(r);
    }

    /* variants: 0 dx + separate add, 1 dx + add aliased with dx, 2 dx without
     * add, 3 dx NULL (dw and db only); dw, db accumulated in all */
    tens dy = t_new((size_t)rows * dim, 0), add = t_new((size_t)rows * dim, 0);
    tens dx = t_new((size_t)rows * dim, 0), dw = t_new(dim, 1), db = t_new(dim, 1);
    t_fill(&dy, -1, 1);
    t_fill(&add, -1, 1);
    for (int v = 0; v < 4; v++) {
        if (v == 1)
            EACH OPS->copy(BE, D(dx), D(add), add.n * elem_bytes(k_, 0));
        else
            t_fill_nan(&dx);
        t_fill(&dw, -2, 2);
        t_fill(&db, -2, 2);
        EACH OPS->layernorm_bwd(BE, v == 3 ? NULL : D(dx), D(dw), D(db), D(dy), D(x), D(mean),
                                D(rstd), D(w), rows, dim,
                                v == 0 ? D(add) : v == 1 ? D(dx) : NULL);
        if (v != 3 && dim == 1) { /* exactly the residual (or 0) in both backends */
            for (int k = 0; k < 2; k++) {
                float *got = t_get(&dx, k), *res = t_get(&add, k);
                for (int r = 0; r < rows; r++)
                    CU_ASSERT_EQUAL(got[r], v == 2 ? 0.0f : res[r]);
                free(got);
                free(res);
            }
        } else if (v != 3)
            check(&dx, OP_LAYERNORM_BWD, "layernorm_bwd dx %dx%d variant %d", rows, dim, v);
        check(&dw, OP_LAYERNORM_BWD, "layernorm_bwd dw %dx%d variant %d", rows, dim, v);
        check(&db, OP_LAYERNORM_BWD, "layernorm_bwd db %dx%d variant %d", rows, dim, v);
    }
    tens *all[] = {&x, &y, &w, &b, &mean, &rstd, &dy, &add, &dx, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        t_free(all[i]);
}

static void layernorm_all(void)
{
    open_both(202);
    /* rows above 64 reach more than one chunk of the dw/db reduction; one
     * feature (the output is the bias): dx exactly 0, not rounding noise
     * times rstd (up to 1e6) */
    const int shapes[][2] = {{1, 37}, {7, 5}, {37, 64}, {130, 37}, {65, 300}, {200, 16}, {3, 3},
                             {5, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int e = 0; e < 3; e++) /* ViT and GPT's 1e-5, BERT's 1e-12, a large one */
            layernorm_case(shapes[s][0], shapes[s][1], e == 0 ? 1e-5 : e == 1 ? 1e-12 : 0.5);
    print_worst(OP_LAYERNORM_FWD, OP_LAYERNORM_BWD);
    close_both();
}

/* ------------------------------------------------------------------ gelu */

enum { GELU_WIDE, GELU_NEAR0, GELU_TAIL, GELU_RANGES };
static const char *const gelu_range_names[GELU_RANGES] = {"[-10,10]", "near 0", "[-10,-3]"};

/* x for one range: [-10, 10] with some exact zeros; |x| in [1e-8, 5e-3]
 * (where Phi(x) = 0.5 + x phi(0) nearly, and x = 1e-3 itself, where an
 * earlier backward switched formulas) with some exact zeros; the left tail, where Phi(x) is tiny. */
static float gelu_input(int range, size_t i)
{
    switch (range) {
    case GELU_WIDE:
        return i % 13 == 5 ? 0.0f : rand_nonzero(-10, 10);
    case GELU_NEAR0: {
        if (i % 11 == 3)
            return 0.0f;
        if (i % 11 == 7)
            return i % 2 ? 1e-3f : -1e-3f;
        float m = (float)pow(10.0, urand(-8, log10(5e-3)));
        return urand(0, 1) < 0.5 ? -m : m;
    }
    default:
        return rand_nonzero(-10, -3);
    }
}

static void gelu_case(size_t n, int range)
{
    tens x = t_new(n, 0), y = t_new(n, 0), g = t_new(n, 0), dy = t_new(n, 0), dx = t_new(n, 0);
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = gelu_input(range, i);
    if (n == 1 && h[0] == 0.0f)
        h[0] = 0.5f; /* never all zero */
    t_set(&x, h);
    t_fill(&dy, -1, 1);
    /* without the derivative, then with it in its own buffer */
    t_fill_nan(&y);
    EACH OPS->gelu_fwd(BE, D(y), NULL, D(x), n);
    check(&y, OP_GELU_FWD, "gelu_fwd n=%zu x in %s", n, gelu_range_names[range]);
    t_fill_nan(&y);
    t_fill_nan(&g);
    EACH OPS->gelu_fwd(BE, D(y), D(g), D(x), n);
    check(&y, OP_GELU_FWD, "gelu_fwd +dydx n=%zu x in %s", n, gelu_range_names[range]);
    check(&g, OP_GELU_FWD, "gelu_fwd's dydx n=%zu x in %s", n, gelu_range_names[range]);
    /* a separate dx, then dx aliased with dy (as the MLP unit calls it) */
    t_fill_nan(&dx);
    EACH OPS->gelu_bwd(BE, D(dx), D(dy), D(g), n);
    check(&dx, OP_GELU_BWD, "gelu_bwd n=%zu x in %s", n, gelu_range_names[range]);
    EACH OPS->gelu_bwd(BE, D(dy), D(dy), D(g), n);
    check(&dy, OP_GELU_BWD, "gelu_bwd in place n=%zu x in %s", n, gelu_range_names[range]);
    /* the derivative written over the input (as the MLP unit keeps it): the
     * same bits as in a buffer of its own, on each backend */
    t_fill_nan(&y);
    EACH OPS->gelu_fwd(BE, D(y), D(x), D(x), n);
    for (int k = 0; k < 2; k++) {
        float *in_place = t_get(&x, k), *apart = t_get(&g, k);
        CU_ASSERT(memcmp(in_place, apart, n * sizeof *in_place) == 0);
        free(in_place);
        free(apart);
    }
    check(&y, OP_GELU_FWD, "gelu_fwd, dydx over x, n=%zu x in %s", n, gelu_range_names[range]);
    free(h);
    t_free(&x);
    t_free(&y);
    t_free(&g);
    t_free(&dy);
    t_free(&dx);
}

static void gelu_all(void)
{
    open_both(303);
    const size_t sizes[] = {1, 7, 16, 17, 33, 1003, 40000 + 5};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (int range = 0; range < GELU_RANGES; range++)
            gelu_case(sizes[s], range);
    /* exactly 0: y = 0, dx = dy / 2 */
    tens x = t_new(5, 0), y = t_new(5, 0), dy = t_new(5, 0), g = t_new(5, 0);
    const float zeros[5] = {0.0f, -0.0f, 0.0f, 0.0f, -0.0f};
    t_set(&x, zeros);
    t_fill(&dy, -1, 1);
    EACH OPS->gelu_fwd(BE, D(y), D(g), D(x), 5);
    float *y32 = t_get(&y, 0), *dy_in = t_get(&dy, 0);
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(y32[i], 0.0f);
    EACH OPS->gelu_bwd(BE, D(dy), D(dy), D(g), 5);
    check(&dy, OP_GELU_BWD, "gelu_bwd at x = 0");
    float *dx32 = t_get(&dy, 0);
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(dx32[i], 0.5f * dy_in[i]);
    free(y32);
    free(dy_in);
    free(dx32);
    t_free(&x);
    t_free(&y);
    t_free(&dy);
    t_free(&g);
    print_worst(OP_GELU_FWD, OP_GELU_BWD);
    close_both();
}

/* ------------------------------------------------------------- attention */

/* Example b alone over its first L tokens, without a mask, on the float64
 * backend: what the masked op must give on b's first L rows. */
static void attention_alone_matches(const tens *qkv, const tens *out, int b, int L, int T, int H,
                                    int hd, int causal, const pt_dropout *drop)
{
    const size_t d = (size_t)H * hd;
    pt_backend *b64 = be[1];
    double *sub = pt_backend_alloc(b64, (size_t)L * 3 * d * sizeof *sub);
    double *o = pt_backend_alloc(b64, (size_t)L * d * sizeof *o);
    double *p = pt_backend_alloc(b64, (size_t)H * L * L * sizeof *p);
    CU_ASSERT_FATAL(sub && o && p);
    const double *all = D_OF(*qkv, 1), *masked = D_OF(*out, 1);
    memcpy(sub, all + (size_t)b * T * 3 * d, (size_t)L * 3 * d * sizeof *sub);
    /* with dropout, the example alone keeps its id (its mask), but its element
     * indices are those of an L-token call: only the unmasked T = L case can
     * be compared, which the caller arranges */
    pt_dropout alone;
    if (drop) {
        alone = *drop;
        alone.ids = drop->ids + b;
    }
    b64->ops->attention_fwd(b64, o, p, sub, 1, L, H, hd, causal, NULL, drop ? &alone : NULL);
    double worst = 0, ref = 0;
    for (size_t i = 0; i < (size_t)L * d; i++) {
        worst = fmax(worst, fabs(o[i] - masked[(size_t)b * T * d + i]));
        ref = fmax(ref, fabs(o[i]));
    }
    CU_ASSERT(ref > 0 && worst <= 1e-12 * ref);
    if (!(worst <= 1e-12 * ref))
        printf("\n  masked attention example %d (L %d of T %d): %g from it alone", b, L, T,
               worst / ref);
    pt_backend_free(b64, sub);
    pt_backend_free(b64, o);
    pt_backend_free(b64, p);
}

/* dropout: 0 none, else dropout on the probabilities at rate 0.3 */
static void attention_case(int n, int T, int H, int hd, int causal, int masked, int dropout)
{
    const size_t d = (size_t)H * hd, rows = (size_t)n * T;
    int32_t lens_h[8];
    int64_t ids_h[8];
    CU_ASSERT_FATAL(n <= 8);
    for (int b = 0; b < n; b++) { /* the first example unpadded, then random lengths */
        lens_h[b] = b == 0 ? T : 1 + (int)pt_rng_below(&rng, (uint64_t)T);
        ids_h[b] = 1000 - 7 * b;
    }
    void *lens[2] = {NULL, NULL}, *ids[2] = {NULL, NULL};
    pt_dropout drop[2];
    for (int k = 0; k < 2 && dropout; k++) {
        ids[k] = bytes_new(k, ids_h, (size_t)n * sizeof *ids_h);
        drop[k] = (pt_dropout){0.3, pt_dropout_key(11, 2, 3, 0), ids[k]};
    }
    if (masked)
        for (int k = 0; k < 2; k++)
            lens[k] = ints_new(k, lens_h, (size_t)n);
    tens qkv = t_new(rows * 3 * d, 0), out = t_new(rows * d, 0);
    tens probs = t_new((size_t)n * H * T * T, 0); /* both keep the probabilities */
    tens dout = t_new(rows * d, 0), dqkv = t_new(rows * 3 * d, 0);
    CU_ASSERT_FATAL(be[0]->ops->attention_saved_bytes == NULL &&
                    be[1]->ops->attention_saved_bytes == NULL);
    t_fill(&qkv, -2, 2); /* scores of a few units: the softmax neither flat nor one-hot */
    t_fill(&dout, -1, 1);
    t_fill_nan(&out);
    t_fill_nan(&probs);
    t_fill_nan(&dqkv);
    EACH OPS->attention_fwd(BE, D(out), D(probs), D(qkv), n, T, H, hd, causal, lens[k_],
                            dropout ? &drop[k_] : NULL);
    check(&out, OP_ATTENTION_FWD,
          "attention_fwd out n=%d T=%d H=%d hd=%d causal=%d masked=%d dropout=%d", n, T, H, hd,
          causal, masked, dropout);
    check(&probs, OP_ATTENTION_FWD,
          "attention_fwd probs n=%d T=%d H=%d hd=%d causal=%d masked=%d dropout=%d", n, T, H, hd,
          causal, masked, dropout);
    EACH OPS->attention_bwd(BE, D(dqkv), D(dout), D(qkv), D(probs), D(out), n, T, H, hd, causal,
                            lens[k_], dropout ? &drop[k_] : NULL);
    check(&dqkv, OP_ATTENTION_BWD,
          "attention_bwd n=%d T=%d H=%d hd=%d causal=%d masked=%d dropout=%d", n, T, H, hd,
          causal, masked, dropout);
    if (dropout && !masked) /* each example alone gives its rows of the batch's result: its mask is its own */
        for (int b = 0; b < n; b++)
            attention_alone_matches(&qkv, &out, b, T, T, H, hd, causal, &drop[1]);
    if (masked && !dropout) {
        const double *g = D_OF(dqkv, 1);
        for (int b = 0; b < n; b++) {
            attention_alone_matches(&qkv, &out, b, lens_h[b], T, H, hd, causal, NULL);
            int nonzero = 0; /* padded keys and values get no gradient */
            for (int t = lens_h[b]; t < T; t++)
                for (size_t c = d; c < 3 * d; c++)
                    nonzero += g[((size_t)b * T + t) * 3 * d + c] != 0;
            CU_ASSERT_EQUAL(nonzero, 0);
        }
    }
    for (int k = 0; k < 2; k++) {
        pt_backend_free(be[k], lens[k]);
        pt_backend_free(be[k], ids[k]);
    }
    t_free(&qkv);
    t_free(&out);
    t_free(&probs);
    t_free(&dout);
    t_free(&dqkv);
}

/* Normwise max|a - b| / max|b| over n doubles. */
static double rel_diff(const double *a, const double *b, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs(a[i] - b[i]));
        m = fmax(m, fabs(b[i]));
    }
    return m > 0 ? e / m : e;
}

/* The first query alone (ViT's [CLS] in its last block): float32 against
 * float64, and on float64 against position 0 of the whole op (forward), and
 * the whole op's backward with the output's gradient at position 0 only,
 * to 1e-12 (float64 rounding in another order). The op takes position 0's
 * query and every position's keys and values apart (q0, kv), cut here from
 * the whole op's qkv; its gradients are compared with the whole op's at
 * the same places, and the whole op's query gradient away from position 0
 * must be 0. Outputs start as NaN, so every element must be written. */
static void attention_first_case(int n, int T, int H, int hd)
{
    const size_t d = (size_t)H * hd, rows = (size_t)n * T;
    tens qkv = t_new(rows * 3 * d, 0), out0 = t_new((size_t)n * d, 0);
    tens q0 = t_new((size_t)n * d, 0), kv = t_new(rows * 2 * d, 0);
    tens probs0 = t_new((size_t)n * H * T, 0), dout0 = t_new((size_t)n * d, 0);
    tens dq0 = t_new((size_t)n * d, 0), dkv = t_new(rows * 2 * d, 0), out = t_new(rows * d, 0);
    tens probs = t_new((size_t)n * H * T * T, 0), dout = t_new(rows * d, 0);
    tens dfull = t_new(rows * 3 * d, 0);
    float *h = malloc(rows * 3 * d * sizeof *h), *hq = malloc((size_t)n * d * sizeof *hq);
    float *hkv = malloc(rows * 2 * d * sizeof *hkv);
    for (size_t i = 0; i < rows * 3 * d; i++)
        h[i] = rand_nonzero(-2, 2);
    for (size_t r = 0; r < rows; r++) {
        if (r % (size_t)T == 0)
            memcpy(hq + r / (size_t)T * d, h + r * 3 * d, d * sizeof *h);
        memcpy(hkv + r * 2 * d, h + r * 3 * d + d, 2 * d * sizeof *h);
    }
    t_set(&qkv, h);
    t_set(&q0, hq);
    t_set(&kv, hkv);
    free(h);
    free(hq);
    free(hkv);
    t_fill(&dout0, -1, 1);
    t_fill_nan(&out0);
    t_fill_nan(&probs0);
    t_fill_nan(&dq0);
    t_fill_nan(&dkv);
    EACH OPS->attention_first_fwd(BE, D(out0), D(probs0), D(q0), D(kv), n, T, H, hd);
    check(&out0, OP_ATTENTION_FIRST_FWD, "attention_first_fwd n=%d T=%d H=%d hd=%d", n, T, H, hd);
    EACH OPS->attention_first_bwd(BE, D(dq0), D(dkv), D(dout0), D(q0), D(kv), D(probs0), n, T, H,
                                  hd);
    if (T > 1)
        check(&dq0, OP_ATTENTION_FIRST_BWD, "attention_first_bwd dq0 n=%d T=%d H=%d hd=%d", n, T,
              H, hd);
    else /* one key: the softmax is 1 whatever the query, whose gradient is 0 */
        for (int k = 0; k < 2; k++) {
            float *g0 = t_get(&dq0, k);
            for (size_t i = 0; i < dq0.n; i++)
                CU_ASSERT(g0[i] == 0.0f);
            free(g0);
        }
    check(&dkv, OP_ATTENTION_FIRST_BWD, "attention_first_bwd dkv n=%d T=%d H=%d hd=%d", n, T, H,
          hd);
    /* the whole op on float64, its output's gradient dout0 at position 0 */
    pt_backend *b64 = be[1];
    b64->ops->attention_fwd(b64, D_OF(out, 1), D_OF(probs, 1), D_OF(qkv, 1), n, T, H, hd, 0, NULL,
                            NULL);
    double *dfull_in = D_OF(dout, 1);
    memset(dfull_in, 0, rows * d * sizeof(double));
    for (int b = 0; b < n; b++)
        memcpy(dfull_in + (size_t)b * T * d, (double *)D_OF(dout0, 1) + (size_t)b * d,
               d * sizeof(double));
    b64->ops->attention_bwd(b64, D_OF(dfull, 1), dfull_in, D_OF(qkv, 1), D_OF(probs, 1),
                            D_OF(out, 1), n, T, H, hd, 0, NULL, NULL);
    double *o0 = malloc((size_t)n * d * sizeof *o0);
    for (int b = 0; b < n; b++)
        memcpy(o0 + (size_t)b * d, (double *)D_OF(out, 1) + (size_t)b * T * d, d * sizeof *o0);
    /* the first-query op's gradients in the whole op's layout, dq 0 away
     * from position 0 */
    double *g = calloc(rows * 3 * d, sizeof *g);
    const double *g_q0 = D_OF(dq0, 1), *g_kv = D_OF(dkv, 1);
    for (size_t r = 0; r < rows; r++) {
        if (r % (size_t)T == 0)
            memcpy(g + r * 3 * d, g_q0 + r / (size_t)T * d, d * sizeof *g);
        memcpy(g + r * 3 * d + d, g_kv + r * 2 * d, 2 * d * sizeof *g);
    }
    const double ef = rel_diff(D_OF(out0, 1), o0, (size_t)n * d);
    const double eb = rel_diff(g, D_OF(dfull, 1), rows * 3 * d);
    if (!(ef <= 1e-12) || !(eb <= 1e-12))
        printf("\n  attention_first n=%d T=%d H=%d hd=%d against the whole op: forward %.3g, "
               "backward %.3g",
               n, T, H, hd, ef, eb);
    CU_ASSERT(ef <= 1e-12);
    CU_ASSERT(eb <= 1e-12);
    free(o0);
    free(g);
    t_free(&qkv);
    t_free(&q0);
    t_free(&kv);
    t_free(&out0);
    t_free(&probs0);
    t_free(&dout0);
    t_free(&dq0);
    t_free(&dkv);
    t_free(&out);
    t_free(&probs);
    t_free(&dout);
    t_free(&dfull);
}

static void attention_all(void)
{
    open_both(404);
    /* T below, at and above the block width 16; head sizes with a compiled
     * special case (16, 32, 64) and without, below and above one vector */
    const int Ts[] = {1, 7, 16, 17, 33, 70};
    const int hds[] = {3, 16, 24, 32, 37, 64};
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++)
        for (size_t j = 0; j < sizeof hds / sizeof *hds; j++)
            for (int causal = 0; causal < 2; causal++)
                for (int masked = 0; masked < 2; masked++)
                    for (int dropout = 0; dropout < 2; dropout++)
                        attention_case(masked ? 4 : 2, Ts[i], 3, hds[j], causal, masked, dropout);
    attention_case(1, 5, 1, 8, 1, 0, 0);
    attention_case(1, 5, 1, 8, 0, 1, 0);
    attention_case(1, 5, 1, 8, 0, 1, 1);
    const int first_T[] = {1, 2, 5, 17, 50, 70}, first_hd[] = {3, 16, 17, 32, 37, 64};
    for (size_t i = 0; i < sizeof first_T / sizeof *first_T; i++)
        for (size_t j = 0; j < sizeof first_hd / sizeof *first_hd; j++)
            attention_first_case(1 + (int)(i + j) % 3, first_T[i], 1 + (int)j % 4, first_hd[j]);
    print_worst(OP_ATTENTION_FWD, OP_ATTENTION_FIRST_BWD);
    close_both();
}

/* Scores far below 0 (about -1e31 here, from queries and keys of 1e15):
 * softmax is shift-invariant, so the outputs must be those of the same
 * scores less their max, which torch gives: key 0's score is the highest
 * by about 1e29, its probability 1 and every other key's 0 (exp of far
 * below float's range), so every output row is v_0, its gradient goes to
 * v_0 alone, and q and k get none (P (1 - P) = 0; float32's exp stops
 * at e^-87 = 1.6e-38, which leaves them about 1e-22 with keys of 1e15,
 * hence the bound 1e-20 below, where a wrong weight gives 1e15). Causal and with a
 * padding mask too (key 0 is seen by every query), at T below and above
 * the block width. The masked scores used to be marked by -1e30, which is
 * above these real ones: the outputs were NaN, and causal attention gave
 * the weight to the later keys it must not see. Both backends. */
static void attention_far_scores(void)
{
    open_both(405);
    const int Ts[] = {5, 20}, H = 2, hd = 4;
    int bad = 0, checked = 0;
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++)
        for (int mode = 0; mode < 3; mode++) { /* 0 plain, 1 causal, 2 padding mask */
            const int T = Ts[ti], n = 2, causal = mode == 1;
            const size_t d = (size_t)H * hd, rows = (size_t)n * T;
            const int32_t lens_h[2] = {T, 2};
            void *lens[2] = {NULL, NULL};
            for (int k = 0; k < 2 && mode == 2; k++)
                lens[k] = ints_new(k, lens_h, (size_t)n);
            tens qkv = t_new(rows * 3 * d, 0), out = t_new(rows * d, 0);
            tens probs = t_new((size_t)n * H * T * T, 0);
            tens dout = t_new(rows * d, 0), dqkv = t_new(rows * 3 * d, 0);
            float *h = malloc(rows * 3 * d * sizeof *h);
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < d; c++) {
                    const int t = (int)(r % (size_t)T);
                    h[(r * 3 + 0) * d + c] = 1e15f * (1.0f + 0.125f * (float)(c % 3));
                    h[(r * 3 + 1) * d + c] = -1e15f * (1.0f + 0.01f * (float)t);
                    h[(r * 3 + 2) * d + c] = (float)(r + 1) + 0.5f * (float)c;
                }
            t_set(&qkv, h);
            t_fill(&dout, -1, 1);
            t_fill_nan(&out);
            t_fill_nan(&probs);
            t_fill_nan(&dqkv);
            EACH OPS->attention_fwd(BE, D(out), D(probs), D(qkv), n, T, H, hd, causal, lens[k_],
                                    NULL);
            EACH OPS->attention_bwd(BE, D(dqkv), D(dout), D(qkv), D(probs), D(out), n, T, H, hd,
                                    causal, lens[k_], NULL);
            float *go = t_get(&dout, 1);
            for (int k = 0; k < 2; k++) {
                float *o = t_get(&out, k), *g = t_get(&dqkv, k);
                for (int b = 0; b < n; b++)
                    for (int t = 0; t < T; t++)
                        for (size_t c = 0; c < d; c++) {
                            const size_t r = (size_t)b * T + t;
                            /* out: v_0 of example b */
                            const float want = h[(((size_t)b * T) * 3 + 2) * d + c];
                            /* dv: the column sum of dout at key 0, else 0; dq, dk: 0 */
                            float dv = 0;
                            for (int i = 0; t == 0 && i < T; i++)
                                dv += go[((size_t)b * T + i) * d + c];
                            const float got_o = o[r * d + c], got_q = g[(r * 3 + 0) * d + c],
                                        got_k = g[(r * 3 + 1) * d + c], got_v = g[(r * 3 + 2) * d + c];
                            checked++;
                            if (!(fabsf(got_o - want) <= 1e-6f * fabsf(want) && fabsf(got_q) <= 1e-20f &&
                                  fabsf(got_k) <= 1e-20f && fabsf(got_v - dv) <= 1e-5f) &&
                                bad++ < 5)
                                printf("\n  %s T=%d mode %d b=%d t=%d c=%zu: out %g (want %g), dq %g, dk %g, "
                                       "dv %g (want %g)",
                                       k ? "cpu64" : "cpu", T, mode, b, t, c, got_o, want, got_q, got_k,
                                       got_v, dv);
                        }
                free(o);
                free(g);
            }
            free(go);
            free(h);
            for (int k = 0; k < 2; k++)
                pt_backend_free(be[k], lens[k]);
            t_free(&qkv);
            t_free(&out);
            t_free(&probs);
            t_free(&dout);
            t_free(&dqkv);
        }
    printf(" [%d values checked, %d off]", checked, bad);
    CU_ASSERT_EQUAL(bad, 0);
    close_both();
}

/* The first query alone (ViT's [CLS] in its last block, cpu_attention_first.c)
 * at the far scores above: key 0's score is the highest by about 1e29, so out0
 * is v_0 of each example on both backends, at T = 1 too. A softmax whose
 * running max starts at 0 instead of -inf takes exp of about -1e30 for every
 * key there: all weights underflow to 0 and out0 is 0 / 0. */
static void attention_first_far_scores(void)
{
    open_both(406);
    const int Ts[] = {1, 5, 20}, n = 2, H = 2, hd = 4;
    const size_t d = (size_t)H * hd;
    int bad = 0, checked = 0;
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
        const int T = Ts[ti];
        const size_t rows = (size_t)n * T;
        tens q0 = t_new((size_t)n * d, 0), kv = t_new(rows * 2 * d, 0);
        tens out0 = t_new((size_t)n * d, 0), probs0 = t_new((size_t)n * H * T, 0);
        float *hq = malloc((size_t)n * d * sizeof *hq), *hkv = malloc(rows * 2 * d * sizeof *hkv);
        for (size_t i = 0; i < (size_t)n * d; i++)
            hq[i] = 1e15f * (1.0f + 0.125f * (float)(i % d % 3));
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < d; c++) {
                hkv[r * 2 * d + c] = -1e15f * (1.0f + 0.01f * (float)(r % (size_t)T));
                hkv[r * 2 * d + d + c] = (float)(r + 1) + 0.5f * (float)c;
            }
        t_set(&q0, hq);
        t_set(&kv, hkv);
        t_fill_nan(&out0);
        t_fill_nan(&probs0);
        EACH OPS->attention_first_fwd(BE, D(out0), D(probs0), D(q0), D(kv), n, T, H, hd);
        for (int k = 0; k < 2; k++) {
            float *o = t_get(&out0, k);
            for (int b = 0; b < n; b++)
                for (size_t c = 0; c < d; c++) {
                    const float want = hkv[(size_t)b * T * 2 * d + d + c]; /* v_0 */
                    checked++;
                    if (!(fabsf(o[b * d + c] - want) <= 1e-6f * fabsf(want)) && bad++ < 5)
                        printf("\n  %s T=%d b=%d c=%zu: out0 %g (want %g)", k ? "cpu64" : "cpu",
                               T, b, c, o[b * d + c], want);
                }
            free(o);
        }
        free(hq);
        free(hkv);
        t_free(&q0);
        t_free(&kv);
        t_free(&out0);
        t_free(&probs0);
    }
    printf(" [%d values checked, %d off]", checked, bad);
    CU_ASSERT_EQUAL(bad, 0);
    close_both();
}

/* A key with a NaN element: every query that sees it gets a NaN output (its
 * softmax is NaN, as by definition and in PyTorch, and as the first-query
 * op gives); the others, and every query of an example whose padding masks
 * that key, stay finite. Its score was taken for a masked one: weight 0, a
 * finite output and no gradient, hiding the NaN. T = 5, key 2, one head of
 * 4 and two of 3; plain, causal and padded to 2 tokens; both backends. */
static void attention_nan_score(void)
{
    open_both(406);
    int bad = 0, checked = 0;
    for (int hi = 0; hi < 2; hi++)
        for (int mode = 0; mode < 3; mode++) {
            const int T = 5, n = 1, H = hi ? 2 : 1, hd = hi ? 3 : 4, causal = mode == 1;
            const size_t d = (size_t)H * hd, rows = (size_t)n * T;
            const int32_t lens_h[1] = {2};
            void *lens[2] = {NULL, NULL};
            for (int k = 0; k < 2 && mode == 2; k++)
                lens[k] = ints_new(k, lens_h, (size_t)n);
            tens qkv = t_new(rows * 3 * d, 0), out = t_new(rows * d, 0);
            tens probs = t_new((size_t)n * H * T * T, 0);
            float *h = malloc(rows * 3 * d * sizeof *h);
            for (size_t i = 0; i < rows * 3 * d; i++)
                h[i] = rand_nonzero(-1, 1);
            h[(2 * 3 + 1) * d + 1] = NAN; /* key 2, element 1: head 0 */
            t_set(&qkv, h);
            t_fill_nan(&out);
            t_fill_nan(&probs);
            EACH OPS->attention_fwd(BE, D(out), D(probs), D(qkv), n, T, H, hd, causal, lens[k_],
                                    NULL);
            for (int k = 0; k < 2; k++) {
                float *o = t_get(&out, k);
                for (int t = 0; t < (mode == 2 ? 2 : T); t++)
                    for (size_t c = 0; c < d; c++) {
                        /* head 0's columns see key 2 unless it is masked */
                        const int sees = c < (size_t)hd && mode != 2 && !(causal && t < 2);
                        checked++;
                        if (isnan(o[t * d + c]) != sees && bad++ < 5)
                            printf("\n  %s H=%d mode %d query %d column %zu: %g, want %s",
                                   k ? "cpu64" : "cpu", H, mode, t, c, o[t * d + c],
                                   sees ? "NaN" : "a number");
                    }
                free(o);
            }
            free(h);
            for (int k = 0; k < 2; k++)
                pt_backend_free(be[k], lens[k]);
            t_free(&qkv);
            t_free(&out);
            t_free(&probs);
        }
    printf(" [%d values checked, %d off]", checked, bad);
    CU_ASSERT_EQUAL(bad, 0);
    close_both();
}

/* --------------------------------------------------------------- dropout */

/* add_mode: 0 none, 1 a separate tensor, 2 aliased with y; in place: y is x. */
static void dropout_case(int n, size_t per, double p, int add_mode, int in_place)
{
    int64_t ids_h[8];
    CU_ASSERT_FATAL(n <= 8);
    for (int b = 0; b < n; b++)
        ids_h[b] = 3 * b * b + 17;
    void *ids[2];
    pt_dropout drop[2];
    for (int k = 0; k < 2; k++) {
        ids[k] = bytes_new(k, ids_h, (size_t)n * sizeof *ids_h);
        drop[k] = (pt_dropout){p, pt_dropout_key(5, 6, 7, 1), ids[k]};
    }
    tens x = t_new((size_t)n * per, 0), y = t_new((size_t)n * per, 0), add = t_new((size_t)n * per, 0);
    t_fill(&x, -2, 2);
    t_fill(&add, -2, 2);
    if (add_mode == 2)
        EACH OPS->copy(BE, D(y), D(add), add.n * elem_bytes(k_, 0));
    else if (in_place)
        EACH OPS->copy(BE, D(y), D(x), x.n * elem_bytes(k_, 0));
    else
        t_fill_nan(&y);
    EACH OPS->dropout(BE, D(y), in_place ? D(y) : D(x), add_mode == 1 ? D(add) : add_mode == 2 ? D(y) : NULL,
                      n, per, &drop[k_]);
    check(&y, OP_DROPOUT, "dropout n=%d per=%zu p=%g add %d in place %d", n, per, p, add_mode,
          in_place);
    t_free(&x);
    t_free(&y);
    t_free(&add);
    for (int k = 0; k < 2; k++)
        pt_backend_free(be[k], ids[k]);
}

static void dropout_all(void)
{
    open_both(909);
    const double rates[] = {0.0, 0.1, 0.5, 0.9};
    for (size_t r = 0; r < sizeof rates / sizeof *rates; r++)
        for (int add_mode = 0; add_mode < 3; add_mode++) {
            dropout_case(3, 37, rates[r], add_mode, 0);
            dropout_case(5, 20000, rates[r], add_mode, 0); /* several chunks per example */
            dropout_case(1, 1, rates[r] < 0.5 ? rates[r] : 0.0, add_mode, 0);
        }
    dropout_case(4, 999, 0.3, 0, 1);
    dropout_case(4, 999, 0.3, 1, 1);
    print_worst(OP_DROPOUT, OP_DROPOUT);
    close_both();
}

/* What the mask is, on the float32 backend (the float64 one is the same
 * source): exactly x / (1 - p) or 0 per element, kept with probability
 * 1 - p, the same bits for an example wherever it sits and with any thread
 * count, and another mask for anything else in the key. */
static void dropout_mask(void)
{
    pt_backend *b1, *b2;
    pt_err err = {0};
    CU_ASSERT_FATAL(pt_backend_open(&b1, "cpu", 1, &err) == 0);
    CU_ASSERT_FATAL(pt_backend_open(&b2, "cpu", 2, &err) == 0);
    enum { NB = 8, PER = 1 << 17 }; /* 2^20 elements */
    const size_t total = (size_t)NB * PER;
    float *x = malloc(total * sizeof *x), *y = malloc(total * sizeof *y);
    float *y2 = malloc(total * sizeof *y2), *add = malloc(total * sizeof *add);
    int64_t ids[NB], rev[NB];
    CU_ASSERT_FATAL(x && y && y2 && add);
    pt_rng_seed(&rng, 31, 0);
    for (size_t i = 0; i < total; i++) {
        x[i] = rand_nonzero(-2, 2);
        add[i] = rand_nonzero(-2, 2);
    }
    for (int b = 0; b < NB; b++) {
        ids[b] = 100 + 13 * b;
        rev[NB - 1 - b] = ids[b];
    }
    const uint64_t key = pt_dropout_key(1, 42, 3, 1);
    const double rates[] = {0.01, 0.1, 0.25, 0.5, 0.9, 0.999};
    for (size_t r = 0; r < sizeof rates / sizeof *rates; r++) {
        const double p = rates[r];
        const pt_dropout drop = {p, key, ids};
        b1->ops->dropout(b1, y, x, NULL, NB, PER, &drop);
        const float scale = (float)(1.0 / (1.0 - p));
        size_t kept = 0, wrong = 0;
        for (size_t i = 0; i < total; i++) {
            kept += y[i] != 0;
            wrong += y[i] != 0 && y[i] != x[i] * scale;
        }
        /* binomial: mean total (1 - p), standard deviation sqrt(total p (1 - p)); 6 of them */
        const double mean = (double)total * (1 - p), sd = sqrt((double)total * p * (1 - p));
        printf("\n    p = %-6g kept %.6f (expected %.6f, %+.2f sd)", p, (double)kept / (double)total,
               1 - p, ((double)kept - mean) / sd);
        CU_ASSERT(fabs((double)kept - mean) <= 6 * sd);
        CU_ASSERT_EQUAL(wrong, 0);
        /* every example on its own near the rate too */
        for (int b = 0; b < NB; b++) {
            size_t kb = 0;
            for (size_t e = 0; e < PER; e++)
                kb += y[(size_t)b * PER + e] != 0;
            const double mb = (double)PER * (1 - p), sb = sqrt((double)PER * p * (1 - p));
            CU_ASSERT(fabs((double)kb - mb) <= 6 * sb);
        }
        /* two threads: the same bits */
        b2->ops->dropout(b2, y2, x, NULL, NB, PER, &drop);
        CU_ASSERT(memcmp(y, y2, total * sizeof *y) == 0);
        /* the examples in reverse order (ids with them): each example's bits unchanged */
        float *xr = malloc(total * sizeof *xr);
        for (int b = 0; b < NB; b++)
            memcpy(xr + (size_t)(NB - 1 - b) * PER, x + (size_t)b * PER, PER * sizeof *x);
        const pt_dropout dr = {p, key, rev};
        b1->ops->dropout(b1, y2, xr, NULL, NB, PER, &dr);
        int moved = 0;
        for (int b = 0; b < NB; b++)
            moved += memcmp(y2 + (size_t)(NB - 1 - b) * PER, y + (size_t)b * PER, PER * sizeof *y) != 0;
        CU_ASSERT_EQUAL(moved, 0);
        /* one example alone: its bits again */
        const pt_dropout one = {p, key, ids + 5};
        b1->ops->dropout(b1, y2, x + (size_t)5 * PER, NULL, 1, PER, &one);
        CU_ASSERT(memcmp(y2, y + (size_t)5 * PER, PER * sizeof *y) == 0);
        free(xr);
        /* another step, unit, site or id: another mask, agreeing with this one on
         * about p^2 + (1-p)^2 of the elements, as independent masks do */
        const uint64_t keys[] = {pt_dropout_key(1, 43, 3, 1), pt_dropout_key(1, 42, 4, 1),
                                 pt_dropout_key(1, 42, 3, 0), pt_dropout_key(2, 42, 3, 1), key};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
            int64_t shifted[NB];
            for (int b = 0; b < NB; b++)
                shifted[b] = ids[b] + (keys[k] == key); /* the last: the same key, other ids */
            const pt_dropout other = {p, keys[k], shifted};
            b1->ops->dropout(b1, y2, x, NULL, NB, PER, &other);
            size_t same = 0;
            for (size_t i = 0; i < total; i++)
                same += (y2[i] != 0) == (y[i] != 0);
            const double q = p * p + (1 - p) * (1 - p), sq = sqrt((double)total * q * (1 - q));
            CU_ASSERT(fabs((double)same - (double)total * q) <= 6 * sq + 1);
            CU_ASSERT(same < total);
        }
    }
    /* p = 0: the identity, bit for bit, with and without add */
    const pt_dropout none = {0.0, key, ids};
    b1->ops->dropout(b1, y, x, NULL, NB, PER, &none);
    CU_ASSERT(memcmp(y, x, total * sizeof *y) == 0);
    b1->ops->dropout(b1, y, x, add, NB, PER, &none);
    size_t off = 0;
    for (size_t i = 0; i < total; i++)
        off += y[i] != add[i] + x[i];
    CU_ASSERT_EQUAL(off, 0);
    /* the threshold: floor(p 2^32), never past the 32-bit range */
    CU_ASSERT_EQUAL(pt_dropout_threshold(0.0), 0u);
    CU_ASSERT_EQUAL(pt_dropout_threshold(0.5), 0x80000000u);
    CU_ASSERT_EQUAL(pt_dropout_threshold(0.9999999999999999), 0xffffffffu);
    printf("\n  ");
    free(x);
    free(y);
    free(y2);
    free(add);
    pt_backend_close(b1);
    pt_backend_close(b2);
}

/* ------------------------------------------------------------- mean pool */

static void mean_pool_case(int n, int T, int d)
{
    int32_t lens_h[8];
    CU_ASSERT_FATAL(n <= 8);
    for (int b = 0; b < n; b++)
        lens_h[b] = b == 0 ? T : 1 + (int)pt_rng_below(&rng, (uint64_t)T);
    void *lens[2] = {ints_new(0, lens_h, (size_t)n), ints_new(1, lens_h, (size_t)n)};
    tens x = t_new((size_t)n * T * d, 0), y = t_new((size_t)n * d, 0);
    tens dy = t_new((size_t)n * d, 0), dx = t_new((size_t)n * T * d, 0);
    t_fill(&x, -2, 2);
    t_fill(&dy, -1, 1);
    t_fill_nan(&y);
    t_fill_nan(&dx);
    EACH OPS->mean_pool_fwd(BE, D(y), D(x), lens[k_], n, T, d);
    check(&y, OP_MEAN_POOL_FWD, "mean_pool_fwd n=%d T=%d d=%d", n, T, d);
    EACH OPS->mean_pool_bwd(BE, D(dx), D(dy), lens[k_], n, T, d);
    check(&dx, OP_MEAN_POOL_BWD, "mean_pool_bwd n=%d T=%d d=%d", n, T, d);
    /* the meaning, on the float64 backend: the mean of the real rows; the
     * gradient spread over them and 0 on the padding */
    const double *x64 = D_OF(x, 1), *y64 = D_OF(y, 1), *dx64 = D_OF(dx, 1), *dy64 = D_OF(dy, 1);
    for (int b = 0; b < n; b++)
        for (int c = 0; c < d; c++) {
            double m = 0;
            for (int t = 0; t < lens_h[b]; t++)
                m += x64[((size_t)b * T + t) * d + c];
            m /= lens_h[b];
            CU_ASSERT(fabs(y64[(size_t)b * d + c] - m) <= 1e-12);
            for (int t = 0; t < T; t++) {
                double want = t < lens_h[b] ? dy64[(size_t)b * d + c] / lens_h[b] : 0.0;
                CU_ASSERT(fabs(dx64[((size_t)b * T + t) * d + c] - want) <= 1e-15);
            }
        }
    t_free(&x);
    t_free(&y);
    t_free(&dy);
    t_free(&dx);
    for (int k = 0; k < 2; k++)
        pt_backend_free(be[k], lens[k]);
}

static void mean_pool_all(void)
{
    open_both(707);
    const int shapes[][3] = {{1, 1, 5}, {3, 7, 13}, {5, 17, 64}, {8, 33, 37}, {2, 70, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        mean_pool_case(shapes[s][0], shapes[s][1], shapes[s][2]);
    print_worst(OP_MEAN_POOL_FWD, OP_MEAN_POOL_BWD);
    close_both();
}

/* ------------------------------------------------------------ embeddings */

static void patchify_case(int n, int C, int H, int W, int p)
{
    tens img = t_new((size_t)n * C * H * W, 0), pat = t_new((size_t)n * C * H * W, 0);
    t_fill(&img, -1, 1);
    t_fill_nan(&pat);
    EACH OPS->patchify(BE, D(pat), D(img), n, C, H, W, p);
    check(&pat, OP_PATCHIFY, "patchify n=%d C=%d H=%d W=%d p=%d", n, C, H, W, p);
    t_free(&img);
    t_free(&pat);
}

static void vit_assemble_case(int n, int T, int d)
{
    tens proj = t_new((size_t)n * (T - 1) * d, 0), x = t_new((size_t)n * T * d, 0);
    tens cls = t_new(d, 1), pos = t_new((size_t)T * d, 1);
    t_fill(&proj, -1, 1);
    t_fill(&cls, -1, 1);
    t_fill(&pos, -1, 1);
    t_fill_nan(&x);
    EACH OPS->vit_assemble_fwd(BE, D(x), D(proj), D(cls), D(pos), n, T, d);
    check(&x, OP_VIT_ASSEMBLE_FWD, "vit_assemble_fwd n=%d T=%d d=%d", n, T, d);
    tens dx = t_new((size_t)n * T * d, 0);
    t_fill(&dx, -1, 1);
    for (int with_proj = 0; with_proj < 2; with_proj++) {
        t_fill(&cls, -2, 2); /* now dcls and dpos: accumulated onto */
        t_fill(&pos, -2, 2);
        t_fill_nan(&proj);
        EACH OPS->vit_assemble_bwd(BE, with_proj ? D(proj) : NULL, D(cls), D(pos), D(dx), n, T,
                                   d);
        if (with_proj && T > 1)
            check(&proj, OP_VIT_ASSEMBLE_BWD, "vit_assemble_bwd dproj n=%d T=%d d=%d", n, T, d);
        check(&cls, OP_VIT_ASSEMBLE_BWD, "vit_assemble_bwd dcls n=%d T=%d d=%d proj %d", n, T, d,
              with_proj);
        check(&pos, OP_VIT_ASSEMBLE_BWD, "vit_assemble_bwd dpos n=%d T=%d d=%d proj %d", n, T, d,
              with_proj);
    }
    t_free(&proj);
    t_free(&x);
    t_free(&cls);
    t_free(&pos);
    t_free(&dx);
}

static void token_embed_case(int n, int T, int d, int V)
{
    int32_t *tok = malloc((size_t)n * T * sizeof *tok);
    for (int i = 0; i < n * T; i++)
        tok[i] = (int32_t)pt_rng_below(&rng, (uint64_t)V);
    void *tokens[2];
    for (int k = 0; k < 2; k++)
        tokens[k] = ints_new(k, tok, (size_t)n * T);
    tens wte = t_new((size_t)V * d, 1), wpe = t_new((size_t)T * d, 1);
    tens x = t_new((size_t)n * T * d, 0);
    t_fill(&wte, -1, 1);
    t_fill(&wpe, -1, 1);
    t_fill_nan(&x);
    EACH OPS->token_embed_fwd(BE, D(x), tokens[k_], D(wte), D(wpe), n, T, d);
    check(&x, OP_TOKEN_EMBED_FWD, "token_embed_fwd n=%d T=%d d=%d V=%d", n, T, d, V);
    t_fill(&x, -1, 1); /* now dx */
    t_fill(&wte, -2, 2);
    t_fill(&wpe, -2, 2);
    EACH OPS->token_embed_bwd(BE, D(wte), D(wpe), D(x), tokens[k_], n, T, d);
    check(&wte, OP_TOKEN_EMBED_BWD, "token_embed_bwd dwte n=%d T=%d d=%d V=%d", n, T, d, V);
    check(&wpe, OP_TOKEN_EMBED_BWD, "token_embed_bwd dwpe n=%d T=%d d=%d V=%d", n, T, d, V);
    t_free(&wte);
    t_free(&wpe);
    t_free(&x);
    for (int k = 0; k < 2; k++)
        pt_backend_free(be[k], tokens[k]);
    free(tok);
}

static void embeddings_all(void)
{
    open_both(505);
    patchify_case(3, 2, 14, 21, 7);
    patchify_case(2, 3, 8, 8, 4);
    patchify_case(1, 1, 5, 3, 1);
    vit_assemble_case(3, 7, 24);
    vit_assemble_case(2, 5, 37);
    vit_assemble_case(2, 1, 5); /* the class token alone */
    token_embed_case(3, 9, 37, 11);
    token_embed_case(8, 64, 40, 3); /* long runs of repeated tokens */
    token_embed_case(2, 5, 8, 1000); /* most rows of wte unseen */
    token_embed_case(1, 1, 5, 2);
    print_worst(OP_PATCHIFY, OP_TOKEN_EMBED_BWD);
    close_both();
}

/* ------------------------------------------------------------- copy_rows */

static void copy_rows_case(int rows, int cols, int ss, int ds)
{
    /* ss = 0: one source row added to (or copied into) every row (BERT's token type) */
    tens src = t_new((size_t)(ss ? rows * ss : cols), 0), dst = t_new((size_t)rows * ds, 0);
    t_fill(&src, -1, 1);
    float *before = malloc(dst.n * sizeof *before);
    for (int acc = 0; acc < 2; acc++) {
        for (size_t i = 0; i < dst.n; i++)
            before[i] = rand_nonzero(-1, 1);
        t_set(&dst, before);
        EACH OPS->copy_rows(BE, D(dst), ds, D(src), ss, rows, cols, acc);
        check(&dst, OP_COPY_ROWS, "copy_rows %dx%d strides %d/%d accumulate %d", rows, cols, ss,
              ds, acc);
        /* the columns past cols are left as they were */
        float *after = t_get(&dst, 0);
        int touched = 0;
        for (int r = 0; r < rows; r++)
            for (int c = cols; c < ds; c++)
                touched += after[(size_t)r * ds + c] != before[(size_t)r * ds + c];
        CU_ASSERT_EQUAL(touched, 0);
        free(after);
    }
    free(before);
    t_free(&src);
    t_free(&dst);
}

static void copy_rows_all(void)
{
    open_both(606);
    copy_rows_case(5, 13, 17, 20);
    copy_rows_case(70, 37, 40, 37);
    copy_rows_case(1, 1, 3, 2);
    copy_rows_case(9, 24, 24, 24 * 3);
    copy_rows_case(70, 37, 0, 40);
    print_worst(OP_COPY_ROWS, OP_COPY_ROWS);
    close_both();
}

/* --------------------------------------------------------- cross-entropy */

static void cross_entropy_case(int rows, int classes)
{
    const size_t n = (size_t)rows * classes;
    float *z = malloc(n * sizeof *z);
    int32_t *tg = malloc((size_t)rows * sizeof *tg);
    for (size_t i = 0; i < n; i++)
        z[i] = rand_nonzero(-3, 3);
    /* about half the rows get their argmax as target, so the count is neither 0 nor rows */
    int64_t want_correct = 0;
    for (int r = 0; r < rows; r++) {
        const float *zr = z + (size_t)r * classes;
        int arg = 0;
        for (int c = 1; c < classes; c++)
            if (zr[c] > zr[arg])
                arg = c;
        tg[r] = urand(0, 1) < 0.5 ? arg : (int32_t)pt_rng_below(&rng, (uint64_t)classes);
        want_correct += tg[r] == arg;
    }
    void *targets[2];
    for (int k = 0; k < 2; k++)
        targets[k] = ints_new(k, tg, rows);
    tens logits = t_new(n, 0), dlogits = t_new(n, 0);
    t_set(&logits, z);
    for (int with_grad = 0; with_grad < 2; with_grad++) {
        double loss[2];
        int64_t correct[2] = {5, 5}; /* added to */
        t_fill_nan(&dlogits);
        EACH loss[k_] = OPS->cross_entropy(BE, with_grad ? D(dlogits) : NULL, D(logits),
                                           targets[k_], rows, classes, 0.37, &correct[k_]);
        check_scalar(loss[0], loss[1], OP_CROSS_ENTROPY, "cross_entropy loss %dx%d grad %d", rows,
                     classes, with_grad);
        CU_ASSERT_EQUAL(correct[0], 5 + want_correct);
        CU_ASSERT_EQUAL(correct[1], 5 + want_correct);
        if (with_grad)
            check(&dlogits, OP_CROSS_ENTROPY, "cross_entropy dlogits %dx%d", rows, classes);
    }
    t_free(&logits);
    t_free(&dlogits);
    for (int k = 0; k < 2; k++)
        pt_backend_free(be[k], targets[k]);
    free(z);
    free(tg);
}

static void cross_entropy_all(void)
{
    open_both(707);
    const int shapes[][2] = {{37, 10}, {37, 300}, {200, 256}, {3, 2}, {1, 5}, {65, 17}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        cross_entropy_case(shapes[s][0], shapes[s][1]);
    print_worst(OP_CROSS_ENTROPY, OP_CROSS_ENTROPY);
    close_both();
}

/* Tied logits (a classifier whose head is still all zeros gives every class
 * the same logit): the prediction is the first of the highest, both for the
 * cross-entropy's count (both backends) and for the head's confusion matrix
 * (nn/nn.h, pt_stats: the two sums of hits agree). Random logits never tie,
 * so cross_entropy_case cannot tell first from last. */
static void cross_entropy_ties(void)
{
    open_both(709);
    enum { ROWS = 4, CLASSES = 5 };
    /* all equal; maxima at 1 and 3; at 0 and 4; all equal and negative */
    const float z[ROWS][CLASSES] = {
        {0, 0, 0, 0, 0}, {-1, 2, 0, 2, 1}, {3, 1, 1, 1, 3}, {-2, -2, -2, -2, -2}};
    const int32_t tg[ROWS] = {0, 1, 0, 0}; /* each row's first maximum */
    void *targets[2];
    for (int k = 0; k < 2; k++)
        targets[k] = ints_new(k, tg, ROWS);
    tens logits = t_new((size_t)ROWS * CLASSES, 0);
    t_set(&logits, &z[0][0]);
    int64_t correct[2] = {0, 0};
    EACH OPS->cross_entropy(BE, NULL, D(logits), targets[k_], ROWS, CLASSES, 1.0, &correct[k_]);
    CU_ASSERT_EQUAL(correct[0], ROWS);
    CU_ASSERT_EQUAL(correct[1], ROWS);
    int64_t confusion[CLASSES * CLASSES] = {0};
    pt_stats st = {.confusion = confusion};
    const pt_unit_call call = {.be = be[0]};
    pt_err err = {0};
    CU_ASSERT_EQUAL(pt_unit_count_confusion(&call, D_OF(logits, 0), tg, ROWS, CLASSES, &st, &err), 0);
    int64_t diagonal = 0;
    for (int c = 0; c < CLASSES; c++)
        diagonal += confusion[c * CLASSES + c];
    CU_ASSERT_EQUAL(diagonal, ROWS);
    t_free(&logits);
    for (int k = 0; k < 2; k++)
        pt_backend_free(be[k], targets[k]);
    close_both();
}

/* --------------------------------------------------------- optimizer ops */

/* lr 0.3: the update is as large as p itself, so an error in it is not
 * diluted by the part of p it leaves alone */
static void adamw_case(size_t n, double lr, double weight_decay)
{
    tens p = t_new(n, 1), g = t_new(n, 1), m = t_new(n, 1), v = t_new(n, 1);
    t_fill(&p, -1, 1);
    t_fill(&m, -0.01, 0.01);
    t_fill(&v, 1e-6, 1e-3);
    for (int step = 3; step < 6; step++) {
        t_fill(&g, -0.1, 0.1);
        pt_adamw_args a = {.lr = lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                           .weight_decay = weight_decay, .bias_corr1 = 1 - pow(0.9, step),
                           .bias_corr2 = 1 - pow(0.95, step), .grad_scale = 0.7};
        EACH OPS->adamw(BE, D(p), D(g), D(m), D(v), n, &a);
    }
    check(&p, OP_ADAMW, "adamw p n=%zu lr %g decay %g", n, lr, weight_decay);
    check(&m, OP_ADAMW, "adamw m n=%zu lr %g decay %g", n, lr, weight_decay);
    check(&v, OP_ADAMW, "adamw v n=%zu lr %g decay %g", n, lr, weight_decay);
    t_free(&p);
    t_free(&g);
    t_free(&m);
    t_free(&v);
}

static void optimizer_all(void)
{
    open_both(808);
    adamw_case(1001, 1e-2, 0.1);
    adamw_case(1001, 0.3, 0.1);
    adamw_case(37, 0.3, 0.0);
    adamw_case(1, 1e-2, 0.1);
    const size_t sizes[] = {1, 37, 1001, 100003};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        tens x = t_new(sizes[s], 1);
        t_fill(&x, -2, 2);
        double sq[2];
        EACH sq[k_] = OPS->sumsq(BE, D(x), x.n);
        check_scalar(sq[0], sq[1], OP_SUMSQ, "sumsq n=%zu", x.n);
        const double f[] = {0.3, -1.7};
        for (int i = 0; i < 2; i++) {
            EACH OPS->scale(BE, D(x), x.n, f[i]);
            check(&x, OP_SCALE, "scale n=%zu by %g", x.n, f[i]);
        }
        t_free(&x);
    }
    /* the clipping coefficient (nn/optim.c): train.grad_clip 0 is "off", so 1
     * whatever the norm; else max_norm / norm when the norm is above it */
    CU_ASSERT_EQUAL(pt_clip_coef(123.0, 0.0), 1.0);
    CU_ASSERT_EQUAL(pt_clip_coef(0.5, 1.0), 1.0);
    CU_ASSERT(fabs(pt_clip_coef(4.0, 1.0) - 0.25) < 1e-6);
    print_worst(OP_ADAMW, OP_SCALE);
    close_both();
}

/* ---------------------------------------------------------------- summary */

static void summary(void)
{
    int missing = 0;
    for (int op = 0; op < OP_COUNT; op++)
        missing += stats[op].checks == 0;
    if (missing == 0) {
        printf("\n  worst normwise error per op (tolerance %g):", TOL);
        print_worst(0, OP_COUNT - 1);
    } else {
        printf("(some tests were left out) ");
    }
}

/* copy and zero split into tasks of 64 KiB on a pool of threads: every byte
 * moved or cleared, none past the end, for sizes around the pieces'
 * boundaries and far from them. */
static void copy_zero(void)
{
    for (int threads = 1; threads <= 3; threads += 2) {
        pt_backend *b = NULL;
        pt_err err = {0};
        CU_ASSERT_EQUAL_FATAL(pt_backend_open(&b, "cpu", threads, &err), 0);
        const size_t piece = 65536, sizes[] = {0, 1, 63, piece - 1, piece, piece + 1,
                                               3 * piece + 13, 40 * piece + 7};
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            const size_t n = sizes[s];
            unsigned char *src = malloc(n + 64), *dst = malloc(n + 64);
            CU_ASSERT_FATAL(src && dst);
            for (size_t i = 0; i < n + 64; i++) {
                src[i] = (unsigned char)(i * 131 + s);
                dst[i] = 0xA5;
            }
            b->ops->copy(b, dst, src, n);
            CU_ASSERT(memcmp(dst, src, n) == 0);
            int tail = 1;
            for (size_t i = n; i < n + 64; i++)
                tail &= dst[i] == 0xA5;
            CU_ASSERT(tail);
            b->ops->zero(b, dst, n);
            int zeros = 1;
            for (size_t i = 0; i < n; i++)
                zeros &= dst[i] == 0;
            CU_ASSERT(zeros);
            tail = 1;
            for (size_t i = n; i < n + 64; i++)
                tail &= dst[i] == 0xA5;
            CU_ASSERT(tail);
            free(src);
            free(dst);
        }
        CU_ASSERT_EQUAL(pt_backend_sync(b, &err), 0);
        pt_backend_close(b);
    }
}

/* Backend names: a bad one is refused as input; a GPU backend where there is
 * no GPU, or no CUDA in the build, is PT_ENODEV (what `run.device: auto`
 * falls back on without a word, and `cuda` refuses as a setting). */
static void backend_names(void)
{
    const char *bad[] = {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "cuda-bf16:", "cudax",
                         "cpu:0", "cpu64"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        pt_err err = {0};
        pt_backend *b = NULL;
        CU_ASSERT_EQUAL(pt_backend_open(&b, bad[i], 1, &err), PT_EINPUT);
        CU_ASSERT_PTR_NULL(b);
        CU_ASSERT(strstr(err.msg, bad[i]) != NULL);
    }
    const char *gpu[] = {"cuda", "cuda:0", "cuda:3", "cuda-bf16", "cuda-bf16:1"};
    for (size_t i = 0; i < sizeof gpu / sizeof *gpu; i++) {
        pt_err err = {0};
        pt_backend *b = NULL;
        int rc = pt_backend_open(&b, gpu[i], 1, &err);
        CU_ASSERT(rc == 0 || rc == PT_ENODEV);
        if (rc)
            CU_ASSERT_PTR_NULL(b);
        if (rc == 0)
            pt_backend_close(b);
    }
}

/* The CPU backends' allocations, small and past the 2 MiB from which they
 * sit on a huge page boundary (nn/cpu_ops.c, cpu_alloc): zeroed, aligned,
 * every byte writable, freed by the backend's free. */
static void alloc_sizes(void)
{
    const char *names[] = {"cpu", "cpu64"};
    const size_t mib = (size_t)1 << 20;
    const size_t sizes[] = {0, 1, 63, 64, 4096 + 5, 2 * mib - 1, 2 * mib, 2 * mib + 5, 5 * mib + 3};
    for (int b = 0; b < 2; b++) {
        pt_err err = {0};
        pt_backend *bk = NULL;
        CU_ASSERT_EQUAL_FATAL(b ? pt_backend_open_cpu64(&bk, 1, &err) : pt_backend_open(&bk, names[b], 1, &err), 0);
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            unsigned char *p = pt_backend_alloc(bk, sizes[i]);
            CU_ASSERT_PTR_NOT_NULL_FATAL(p);
            CU_ASSERT_EQUAL((uintptr_t)p % 64, 0);
            if (sizes[i] >= 2 * mib)
                CU_ASSERT_EQUAL((uintptr_t)p % (2 * mib), 0);
            size_t nonzero = 0;
            for (size_t k = 0; k < sizes[i]; k++)
                nonzero += p[k] != 0;
            CU_ASSERT_EQUAL(nonzero, 0);
            memset(p, 0xab, sizes[i]);
            pt_backend_free(bk, p);
        }
        pt_backend_close(bk);
    }
}

/* ------------------------------------------------------------ the RNG */

/* pt_rng's draws have the distributions their names promise (the test
 * inputs above come from them, and so do initialisation and data order):
 * uniform in [0, 1) with each sixteenth equally likely, normal of mean 0
 * and variance 1, below(n) each value equally likely; every figure within
 * 6 standard errors over 2^20 draws (a uniform on [0, 0.5), a bound that
 * left its last value out, or a variance of 2 fail by hundreds). */
static void rng_distributions(void)
{
    enum { N = 1 << 20, BINS = 16, BELOW = 7 };
    pt_rng g;
    pt_rng_seed(&g, 2024, 3);
    long bins[BINS] = {0}, below[BELOW] = {0};
    double lo = 1, hi = 0, sum = 0, sumsq = 0, nsum = 0, nsumsq = 0;
    for (int i = 0; i < N; i++) {
        const double u = pt_rng_uniform(&g);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        sum += u;
        sumsq += u * u;
        bins[(int)(u * BINS) < BINS ? (int)(u * BINS) : BINS - 1]++;
        const double z = pt_rng_normal(&g);
        nsum += z;
        nsumsq += z * z;
        below[pt_rng_below(&g, BELOW)]++;
    }
    CU_ASSERT(lo >= 0 && lo < 1e-4 && hi < 1 && hi > 1 - 1e-4);
    const double mean = sum / N, var = sumsq / N - mean * mean;
    CU_ASSERT(fabs(mean - 0.5) < 6 * sqrt(1.0 / 12 / N));
    CU_ASSERT(fabs(var - 1.0 / 12) < 6 * sqrt(1.0 / 180 / N)); /* var of (u - 1/2)^2: 1/180 */
    int off = 0;
    for (int b = 0; b < BINS; b++) {
        const double p = 1.0 / BINS, sd = sqrt(N * p * (1 - p));
        off += fabs((double)bins[b] - N * p) > 6 * sd;
    }
    for (int v = 0; v < BELOW; v++) {
        const double p = 1.0 / BELOW, sd = sqrt(N * p * (1 - p));
        off += fabs((double)below[v] - N * p) > 6 * sd;
    }
    CU_ASSERT_EQUAL(off, 0);
    const double nmean = nsum / N, nvar = nsumsq / N - nmean * nmean;
    CU_ASSERT(fabs(nmean) < 6 * sqrt(1.0 / N));
    CU_ASSERT(fabs(nvar - 1) < 6 * sqrt(2.0 / N));
    printf(" [uniform mean %.5f var %.5f; normal mean %.5f var %.5f]", mean, var, nmean, nvar);
}

static const pt_test tests[] = {{"harness_detects_errors", harness_detects_errors},
                                {"backend_names", backend_names},
                                {"alloc_sizes", alloc_sizes},
                                {"copy_zero", copy_zero},
                                {"linear", linear_all},
                                {"layernorm", layernorm_all},
                                {"gelu", gelu_all},
                                {"attention", attention_all},
                                {"attention_far_scores", attention_far_scores},
                                {"attention_first_far_scores", attention_first_far_scores},
                                {"attention_nan_score", attention_nan_score},
                                {"embeddings", embeddings_all},
                                {"copy_rows", copy_rows_all},
                                {"mean_pool", mean_pool_all},
                                {"dropout", dropout_all},
                                {"dropout_mask", dropout_mask},
                                {"cross_entropy", cross_entropy_all},
                                {"cross_entropy_ties", cross_entropy_ties},
                                {"optimizer", optimizer_all},
                                {"rng_distributions", rng_distributions},
                                {"summary", summary},
                                {NULL, NULL}};

static const pt_test_suite suites[] = {{"cpu float32 ops against float64", tests}, {NULL, NULL}};
