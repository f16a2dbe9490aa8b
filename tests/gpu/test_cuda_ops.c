/*
 * test_cuda_ops.c (label gpu): every op of the CUDA backend against the CPU
 * float32 backend, in both precisions ("cuda": normwise error <= 1e-4;
 * "cuda-bf16": <= 2e-2), on random inputs and shapes that are not multiples
 * of any tile: vector and scalar paths, misaligned parameter pointers,
 * accumulate and overwrite rules, residual `add` (separate and aliased),
 * optional outputs left NULL, attention causal and not over several head
 * sizes and T below, at and above the 64-row tile (32 rows for fp32 head size
 * 128), with and without a padding mask (per-example lengths from 1 to T,
 * around the tile edges, padded keys and values holding huge values or NaN
 * that no output may see, padded dK/dV exactly 0, a second run bit-identical),
 * mean pooling, LayerNorm at epsilons 1e-12, 1e-5 and 0.5, dropout (the op:
 * fp32 bit for bit against the CPU, the same mask; attention's dropout on the
 * probabilities, made again from the hash inside the flash kernels, against
 * the CPU's stored probabilities times the mask). Also memory, host copies
 * through the staging ring, and the sticky error path.
 *
 * Without a GPU every test prints "skipped: no GPU" and passes.
 */
#include "tests/common/cunit_main.h"
#include "tests/gpu/gpu_test.h"

#define BE(gpu) ((gpu) ? P.gpu : P.cpu)
#define S(t) ((gpu) ? (t).g : (t).c)
#define EACH_BACKEND for (int gpu = 0; gpu < 2; gpu++)
/* The body once per precision, with P open; nothing (and one "skipped") without a GPU. */
#define EACH_PRECISION(P)                                                                          \
    for (int prec_ = 0, skip_ = 0; prec_ < 2 && !skip_; prec_++)                                   \
        for (gpu_pair P, *once_ = &P; once_ && !(skip_ = !pair_open(&P, prec_));                   \
             once_ = NULL, pair_close(&P))

/* ------------------------------------------------------------------ open */

static void open_or_skip(void)
{
    pt_backend *be = NULL;
    pt_err err = {0};
    for (int prec = 0; prec < 2; prec++) {
        int rc = pt_backend_open(&be, gpu_names[prec], 1, &err);
        if (rc) {
            /* no GPU: a clear PT_ENODEV, never a crash or another code
             * (PT_EBACKEND is a GPU that is there and failed) */
            CU_ASSERT_EQUAL(rc, PT_ENODEV);
            CU_ASSERT(strstr(err.msg, "CUDA") != NULL || strstr(err.msg, "cuda") != NULL);
            printf("skipped: no GPU (%s) ", err.msg);
            return;
        }
        CU_ASSERT_STRING_EQUAL(pt_backend_name(be), gpu_names[prec]);
        CU_ASSERT_FALSE(pt_backend_is_host(be));
        CU_ASSERT_EQUAL(pt_backend_sync(be, &err), 0);
        pt_backend_close(be);
    }
}

/* ---------------------------------------------------------------- memory */

static void memory_and_copies(void)
{
    EACH_PRECISION(P)
    {
        pt_backend *g = P.gpu;
        /* alloc gives zeroed memory, like the CPU backend */
        const size_t bytes = 1001;
        unsigned char *d = pt_backend_alloc(g, bytes), *host = malloc(bytes), *back = malloc(bytes);
        CU_ASSERT_FATAL(d && host && back);
        g->ops->download(g, back, d, bytes);
        int nonzero = 0;
        for (size_t i = 0; i < bytes; i++)
            nonzero += back[i] != 0;
        CU_ASSERT_EQUAL(nonzero, 0);
        /* raw bytes round trip, zero of a middle range, device copy */
        for (size_t i = 0; i < bytes; i++)
            host[i] = (unsigned char)(i * 7 + 3);
        g->ops->upload(g, d, host, bytes);
        g->ops->zero(g, d + 100, 50);
        unsigned char *d2 = pt_backend_alloc(g, bytes);
        g->ops->copy(g, d2, d, bytes);
        g->ops->download(g, back, d2, bytes);
        int bad = 0;
        for (size_t i = 0; i < bytes; i++)
            bad += back[i] != (i >= 100 && i < 150 ? 0 : host[i]);
        CU_ASSERT_EQUAL(bad, 0);
        pt_backend_free(g, d);
        pt_backend_free(g, d2);
        free(host);
        free(back);

        /* many host copies of varying sizes through the staging ring (it wraps,
         * and big ones are cut in pieces); the host buffer is reused at once */
        const int copies = gpu_small() ? 12 : 40;
        const size_t most = (size_t)3 << 20; /* floats: 12 MiB, more than a ring piece */
        float *src = malloc(most * sizeof *src), *out = malloc(most * sizeof *out);
        void **bufs = calloc(copies, sizeof *bufs);
        size_t *len = calloc(copies, sizeof *len);
        for (int k = 0; k < copies; k++) {
            len[k] = k % 5 == 4 ? most - (size_t)k : 1 + (size_t)(urand() * 200000);
            bufs[k] = pt_backend_alloc(g, len[k] * pt_backend_act_size(g));
            CU_ASSERT_FATAL(bufs[k] != NULL);
            for (size_t i = 0; i < len[k]; i++)
                src[i] = (float)(k * 1000 + (int)(i % 977)) * 0.5f;
            pt_backend_act_from_host(g, bufs[k], src, len[k]);
            memset(src, 0xff, len[k] * sizeof *src); /* the copy must already be taken */
        }
        for (int k = 0; k < copies; k++) {
            pt_backend_act_to_host(g, out, bufs[k], len[k]);
            int wrong = 0;
            for (size_t i = 0; i < len[k]; i++) {
                float want = (float)(k * 1000 + (int)(i % 977)) * 0.5f;
                wrong += out[i] != (P.bf16 ? round_bf16(want) : want);
            }
            if (wrong)
                printf("\n  copy %d of %zu elements: %d wrong", k, len[k], wrong);
            CU_ASSERT_EQUAL(wrong, 0);
            pt_backend_free(g, bufs[k]);
        }
        free(src);
        free(out);
        free(bufs);
        free(len);
    }
}

/* The first failure is kept and reported by status (without a wait) and
 * sync; later ops do nothing and do not crash. */
static void sticky_errors(void)
{
    for (int prec = 0; prec < 2; prec++) {
        pt_backend *g;
        pt_err err = {0};
        int rc = pt_backend_open(&g, gpu_names[prec], 1, &err);
        if (rc == PT_ENODEV) {
            printf("skipped: no GPU ");
            return;
        }
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        CU_ASSERT_EQUAL(g->ops->status(g, &err), 0);
        void *qkv = pt_backend_alloc(g, 4096), *out = pt_backend_alloc(g, 4096);
        g->ops->attention_fwd(g, out, out, qkv, 1, 2, 1, 200, 0, NULL, NULL); /* head size 200: refused */
        CU_ASSERT_EQUAL(g->ops->status(g, &err), PT_EBACKEND);
        CU_ASSERT(strstr(err.msg, "head size 200") != NULL);
        g->ops->gelu_fwd(g, out, NULL, qkv, 16); /* a no-op now */
        pt_err err2 = {0};
        CU_ASSERT_EQUAL(pt_backend_sync(g, &err2), PT_EBACKEND);
        CU_ASSERT_STRING_EQUAL(err2.msg, err.msg);
        pt_backend_free(g, qkv);
        pt_backend_free(g, out);
        pt_backend_close(g);

        /* freeing what the arena did not give is a bug, reported as such */
        CU_ASSERT_EQUAL_FATAL(pt_backend_open(&g, gpu_names[prec], 1, &err), 0);
        void *p = pt_backend_alloc(g, 1000);
        pt_backend_free(g, (char *)p + 256);
        CU_ASSERT_EQUAL(g->ops->status(g, &err), PT_EINTERNAL);
        pt_backend_free(g, p);
        pt_backend_close(g);
    }
}

/* ---------------------------------------------------------------- linear */

/* add_mode: 0 none, 1 a separate tensor, 2 aliased with y. misalign: the
 * weight and bias sit one float past an aligned address. */
static void linear_case(gpu_pair *pp, int rows, int out, int in, int bias, int add_mode, int misalign)
{
    gpu_pair P = *pp;
    tpair x = tp_new(&P, (size_t)rows * in, 0), y = tp_new(&P, (size_t)rows * out, 0);
    tpair w = tp_new_at(&P, (size_t)out * in, 1, misalign), b = tp_new_at(&P, out, 1, misalign);
    tpair add = tp_new(&P, (size_t)rows * out, 0);
    tp_fill(&P, &x, -1, 1);
    tp_fill(&P, &w, -0.5, 0.5);
    tp_fill(&P, &b, -1, 1);
    tp_fill(&P, &add, -2, 2);
    tp_fill(&P, &y, -9, 9); /* overwritten unless it is the add */
    if (add_mode == 2)
        EACH_BACKEND BE(gpu)->ops->copy(BE(gpu), S(y), S(add), (size_t)rows * out * elem_size(BE(gpu), 0));
    EACH_BACKEND BE(gpu)->ops->linear_fwd(BE(gpu), S(y), S(x), S(w), bias ? S(b) : NULL, rows, out, in,
                                          add_mode == 1 ? S(add) : add_mode == 2 ? S(y) : NULL);
    EXPECT_CLOSE(&P, y, P.tol, "linear_fwd %dx%dx%d bias %d add %d misalign %d", rows, out, in, bias, add_mode,
                 misalign);

    /* backward: dx overwritten, dw and db accumulated onto what they hold */
    tpair dy = tp_new(&P, (size_t)rows * out, 0), dx = tp_new(&P, (size_t)rows * in, 0);
    tpair dw = tp_new_at(&P, (size_t)out * in, 1, misalign), db = tp_new_at(&P, out, 1, misalign);
    tp_fill(&P, &dy, -1, 1);
    for (int variant = 0; variant < 3; variant++) {
        tp_fill(&P, &dx, -5, 5);
        tp_fill(&P, &dw, -0.3, 0.3);
        tp_fill(&P, &db, -0.3, 0.3);
        int want_dx = variant != 1, want_dwb = variant != 2;
        EACH_BACKEND BE(gpu)->ops->linear_bwd(BE(gpu), want_dx ? S(dx) : NULL, want_dwb ? S(dw) : NULL,
                                              want_dwb ? S(db) : NULL, S(dy), S(x), S(w), rows, out, in);
        EXPECT_CLOSE(&P, dx, P.tol, "linear_bwd dx %dx%dx%d variant %d", rows, out, in, variant);
        EXPECT_CLOSE(&P, dw, P.tol, "linear_bwd dw %dx%dx%d variant %d", rows, out, in, variant);
        EXPECT_CLOSE(&P, db, P.tol, "linear_bwd db %dx%dx%d variant %d", rows, out, in, variant);
    }
    tpair *all[] = {&x, &y, &w, &b, &add, &dy, &dx, &dw, &db};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++)
        tp_free(&P, all[k]);
}

static void linear_all(void)
{
    EACH_PRECISION(P)
    {
        linear_case(&P, 37, 19, 23, 1, 0, 0);
        linear_case(&P, 37, 19, 23, 0, 1, 1);
        linear_case(&P, 128, 96, 64, 1, 1, 0);
        linear_case(&P, 128, 96, 64, 1, 2, 0);
        linear_case(&P, 130, 192, 64, 1, 0, 1);
        linear_case(&P, 64, 10, 49, 1, 0, 0); /* the ViT patch embedding: in = 49 */
        linear_case(&P, 200, 256, 96, 0, 0, 0);
        linear_case(&P, 1, 3, 5, 1, 1, 0);
        linear_case(&P, 37, 24, 1, 1, 2, 0); /* width 1, add aliased: BERT's type row */
    }
}

/* The same through the plain fallback kernel (what runs when cuBLASLt has no
 * algorithm for a case). */
static void linear_fallback(void)
{
    setenv("PT_CUDA_GEMM", "fallback", 1);
    EACH_PRECISION(P)
    {
        linear_case(&P, 37, 19, 23, 1, 1, 1);
        linear_case(&P, 130, 96, 64, 1, 2, 0);
        linear_case(&P, 37, 24, 1, 1, 2, 0);
    }
    /* more row tiles than the grid's y may hold: 300 rows are 5 tiles of 64,
     * under a limit made 2 (a GPU's 65535 is 4M rows): the backend's
     * (PT_CUDA_GRID_Y, on a GPU too) and the emulation's, which aborts on a
     * launch past it */
    setenv("PT_CUDA_GRID_Y", "2", 1);
    setenv("PT_EMU_GRID_YZ", "2", 1);
    EACH_PRECISION(P)
    {
        linear_case(&P, 300, 40, 24, 1, 1, 1);
        linear_case(&P, 130, 96, 64, 1, 2, 0);
    }
    unsetenv("PT_EMU_GRID_YZ");
    unsetenv("PT_CUDA_GRID_Y");
    unsetenv("PT_CUDA_GEMM");
}

/* ------------------------------------------------------------- layernorm */

/* x uniform in [-2 xs, 3 xs): with xs = 1e-3 the variance (~2e-6) is near
 * enough to the epsilon that any other epsilon shows in y and rstd. */
static void layernorm_case(gpu_pair *pp, int rows, int dim, int misalign, double eps, double xs)
{
    gpu_pair P = *pp;
    tpair x = tp_new(&P, (size_t)rows * dim, 0), y = tp_new(&P, (size_t)rows * dim, 0);
    tpair w = tp_new_at(&P, dim, 1, misalign), b = tp_new_at(&P, dim, 1, misalign);
    tpair mean = tp_new(&P, rows, 1), rstd = tp_new(&P, rows, 1);
    tp_fill(&P, &x, -2 * xs, 3 * xs);
    tp_fill(&P, &w, 0.5, 1.5);
    tp_fill(&P, &b, -0.5, 0.5);
    EACH_BACKEND BE(gpu)->ops->layernorm_fwd(BE(gpu), S(y), S(mean), S(rstd), S(x), S(w), S(b), rows, dim, eps);
    EXPECT_CLOSE(&P, y, P.tol, "layernorm_fwd y %dx%d eps %g x scale %g", rows, dim, eps, xs);
    EXPECT_CLOSE(&P, mean, FP32_TOL, "layernorm_fwd mean %dx%d eps %g x scale %g", rows, dim, eps, xs);
    EXPECT_CLOSE(&P, rstd, FP32_TOL, "layernorm_fwd rstd %dx%d eps %g x scale %g", rows, dim, eps, xs);

    tpair dy = tp_new(&P, (size_t)rows * dim, 0), add = tp_new(&P, (size_t)rows * dim, 0);
    tpair dx = tp_new(&P, (size_t)rows * dim, 0);
    tpair dw = tp_new_at(&P, dim, 1, misalign), db = tp_new_at(&P, dim, 1, misalign);
    tp_fill(&P, &dy, -1, 1);
    tp_fill(&P, &add, -1, 1);
    /* variants: dx + add; dx without add; dw/db only; dx only */
    for (int v = 0; v < 4; v++) {
        tp_fill(&P, &dx, -7, 7);
        tp_fill(&P, &dw, -1, 1);
        tp_fill(&P, &db, -1, 1);
        int want_dx = v != 2, want_dwb = v != 3;
        EACH_BACKEND BE(gpu)->ops->layernorm_bwd(BE(gpu), want_dx ? S(dx) : NULL, want_dwb ? S(dw) : NULL,
                                                 want_dwb ? S(db) : NULL, S(dy), S(x), S(mean), S(rstd), S(w),
                                                 rows, dim, v == 0 ? S(add) : NULL);
        EXPECT_CLOSE(&P, dx, P.tol, "layernorm_bwd dx %dx%d eps %g variant %d", rows, dim, eps, v);
        EXPECT_CLOSE(&P, dw, P.tol, "layernorm_bwd dw %dx%d eps %g variant %d", rows, dim, eps, v);
        EXPECT_CLOSE(&P, db, P.tol, "layernorm_bwd db %dx%d eps %g variant %d", rows, dim, eps, v);
    }
    tpair *all[] = {&x, &y, &w, &b, &mean, &rstd, &dy, &add, &dx, &dw, &db};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++)
        tp_free(&P, all[k]);
}

static void layernorm_all(void)
{
    EACH_PRECISION(P)
    {
        layernorm_case(&P, 33, 7, 0, 1e-5, 1);   /* scalar path */
        layernorm_case(&P, 33, 64, 0, 1e-5, 1);  /* 128-bit path */
        layernorm_case(&P, 33, 64, 1, 1e-5, 1);  /* misaligned parameters: scalar path */
        layernorm_case(&P, 300, 200, 0, 1e-5, 1);/* more rows than one block's share */
        layernorm_case(&P, 5, 768, 0, 1e-5, 1);
        layernorm_case(&P, 9, 7000, 0, 1e-5, 1); /* warp slices do not fit in shared memory */
        /* the epsilon is the one passed: BERT's 1e-12, and 0.5 (far from 1e-5) */
        layernorm_case(&P, 33, 64, 0, 1e-12, 1e-3);
        layernorm_case(&P, 33, 7, 0, 1e-12, 1e-3);
        layernorm_case(&P, 17, 384, 0, 1e-12, 1);
        layernorm_case(&P, 33, 64, 0, 0.5, 1);
        layernorm_case(&P, 33, 7, 1, 0.5, 1e-3);
        layernorm_case(&P, 33, 64, 0, 1e-5, 1e-3);
        /* one feature: dx is the residual (or 0) exactly, on both sides,
         * not a fused product's rounding error times rstd (1e6 here) */
        layernorm_case(&P, 5, 1, 0, 1e-12, 1);
    }
}

/* ------------------------------------------------------------------ gelu */

static void gelu_all(void)
{
    EACH_PRECISION(P)
    {
        const size_t sizes[] = {1003, 8, 5, 4096 + 3};
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            const size_t n = sizes[k];
            tpair x = tp_new(&P, n, 0), y = tp_new(&P, n, 0), dy = tp_new(&P, n, 0);
            tp_fill(&P, &x, -5, 5);
            tp_fill(&P, &dy, -1, 1);
            EACH_BACKEND BE(gpu)->ops->gelu_fwd(BE(gpu), S(y), NULL, S(x), n);
            EXPECT_CLOSE(&P, y, P.tol, "gelu_fwd n=%zu", n);
            /* the derivative over the input, as the MLP unit keeps it */
            EACH_BACKEND BE(gpu)->ops->gelu_fwd(BE(gpu), S(y), S(x), S(x), n);
            EXPECT_CLOSE(&P, y, P.tol, "gelu_fwd +dydx n=%zu", n);
            EXPECT_CLOSE(&P, x, P.tol, "gelu_fwd's dydx n=%zu", n);
            /* dx aliases dy, as the MLP unit calls it */
            EACH_BACKEND BE(gpu)->ops->gelu_bwd(BE(gpu), S(dy), S(dy), S(x), n);
            EXPECT_CLOSE(&P, dy, P.tol, "gelu_bwd n=%zu", n);
            tp_free(&P, &x);
            tp_free(&P, &y);
            tp_free(&P, &dy);
        }
    }
}

/* ------------------------------------------------------------- attention */

/* Dropout's example ids (int64) on both backends: mul * b + add for example b. */
typedef struct idpair {
    void *c, *g;
} idpair;

static idpair ids_new(gpu_pair *P, int n, int64_t mul, int64_t add)
{
    int64_t *ids = malloc((size_t)n * sizeof *ids);
    CU_ASSERT_FATAL(ids != NULL);
    for (int b = 0; b < n; b++)
        ids[b] = mul * b + add;
    idpair t = {pt_backend_alloc(P->cpu, (size_t)n * sizeof *ids), pt_backend_alloc(P->gpu, (size_t)n * sizeof *ids)};
    CU_ASSERT_FATAL(t.c && t.g);
    P->cpu->ops->upload(P->cpu, t.c, ids, (size_t)n * sizeof *ids);
    P->gpu->ops->upload(P->gpu, t.g, ids, (size_t)n * sizeof *ids);
    free(ids);
    return t;
}

static void ids_free(gpu_pair *P, idpair *t)
{
    pt_backend_free(P->cpu, t->c);
    pt_backend_free(P->gpu, t->g);
}

/* What padded keys and values hold in a masked case (no output may depend on it). */
enum { PAD_RANDOM, PAD_HUGE, PAD_NAN };

/*
 * lens: NULL (no mask) or the n per-example lengths. With a mask, the key and
 * value slots of the padded positions hold `pad` (queries and dout there stay
 * ordinary: padded query rows are computed, and their gradients reach the real
 * keys); besides the comparison with the CPU, the GPU's dK and dV must be
 * exactly 0 at padded keys (dqkv starts as garbage), and a second run must
 * give the same bits.
 */
static void attention_case_drop(gpu_pair *pp, int n, int T, int H, int hd, int causal, const int32_t *lens,
                                int pad, double p)
{
    gpu_pair P = *pp;
    const size_t d = (size_t)H * hd, rows = (size_t)n * T;
    tpair qkv = tp_new(&P, rows * 3 * d, 0), out = tp_new(&P, rows * d, 0);
    tpair dout = tp_new(&P, rows * d, 0), dqkv = tp_new(&P, rows * 3 * d, 0);
    ipair lp = {NULL, NULL};
    if (lens)
        lp = ip_new(&P, lens, (size_t)n);
    const int32_t *lc = lens ? lp.c : NULL, *lg = lens ? lp.g : NULL;
    /* dropout on the probabilities: the examples' ids on both backends */
    idpair ids = ids_new(&P, n, 77, 5);
    const pt_dropout drop_c = {p, pt_dropout_key(9, 3, 1, 0), ids.c}, drop_g = {p, drop_c.key, ids.g};
    const pt_dropout *dc = p > 0 ? &drop_c : NULL, *dg = p > 0 ? &drop_g : NULL;
    char what[160];
    const char *padding = !lens ? "" : pad == PAD_NAN ? " (NaN padding)" : pad == PAD_HUGE ? " (huge padding)" : "";
    snprintf(what, sizeof what, "n=%d T=%d H=%d hd=%d causal=%d%s%s dropout %g", n, T, H, hd, causal,
             lens ? " masked" : "", padding, p);
    /* what each keeps for backward: the CPU its probabilities, the GPU its own */
    void *pc = pt_backend_alloc(P.cpu, (size_t)n * H * T * T * sizeof(float));
    const size_t gbytes = P.gpu->ops->attention_saved_bytes(P.gpu, n, T, H);
    void *pg = pt_backend_alloc(P.gpu, gbytes);
    CU_ASSERT_FATAL(pc && pg);
    /* scores of a few units: softmax neither flat nor one-hot */
    float *hq = malloc(rows * 3 * d * sizeof *hq);
    CU_ASSERT_FATAL(hq != NULL);
    for (size_t e = 0; e < rows * 3 * d; e++) {
        float v = (float)(-2 + 4 * urand());
        hq[e] = v != 0.0f ? v : 0.5f;
    }
    if (lens && pad != PAD_RANDOM)
        for (int b = 0; b < n; b++)
            for (int t = lens[b] < 1 ? 1 : lens[b]; t < T; t++)
                for (size_t e = d; e < 3 * d; e++) /* the key and value slots */
                    hq[((size_t)b * T + t) * 3 * d + e] = pad == PAD_NAN ? NAN : (e % 2 ? 30.0f : -30.0f);
    tp_set(&P, &qkv, hq);
    free(hq);
    tp_fill(&P, &dout, -1, 1);
    tp_fill(&P, &dqkv, -9, 9);
    EACH_BACKEND BE(gpu)->ops->attention_fwd(BE(gpu), S(out), gpu ? pg : pc, S(qkv), n, T, H, hd, causal,
                                             gpu ? lg : lc, gpu ? dg : dc);
    EXPECT_CLOSE(&P, out, P.tol, "attention_fwd %s", what);
    EACH_BACKEND BE(gpu)->ops->attention_bwd(BE(gpu), S(dqkv), S(dout), S(qkv), gpu ? pg : pc, S(out), n, T, H,
                                             hd, causal, gpu ? lg : lc, gpu ? dg : dc);
    EXPECT_CLOSE(&P, dqkv, P.tol, "attention_bwd %s", what);
    if (lens) {
        /* padded keys and values: gradients exactly 0 */
        float *g = tp_get(&P, &dqkv, 1);
        size_t nonzero = 0;
        for (int b = 0; b < n; b++) {
            const int L = lens[b] < 1 ? 1 : lens[b] > T ? T : lens[b];
            for (int t = L; t < T; t++)
                for (size_t e = d; e < 3 * d; e++)
                    nonzero += g[((size_t)b * T + t) * 3 * d + e] != 0.0f;
        }
        if (nonzero)
            printf("\n  [%s] attention_bwd %s: %zu gradients of padded keys or values are not 0",
                   gpu_names[P.bf16], what, nonzero);
        CU_ASSERT_EQUAL(nonzero, 0);
        /* the same call again, into fresh garbage: the same bits */
        const size_t ob = rows * d * pt_backend_act_size(P.gpu), qb = 3 * ob;
        void *out2 = pt_backend_alloc(P.gpu, ob), *dq2 = pt_backend_alloc(P.gpu, qb);
        void *pg2 = pt_backend_alloc(P.gpu, gbytes);
        unsigned char *h1 = malloc(qb), *h2 = malloc(qb);
        CU_ASSERT_FATAL(out2 && dq2 && pg2 && h1 && h2);
        memset(h1, 0x5a, qb);
        P.gpu->ops->upload(P.gpu, out2, h1, ob);
        P.gpu->ops->upload(P.gpu, dq2, h1, qb);
        P.gpu->ops->attention_fwd(P.gpu, out2, pg2, qkv.g, n, T, H, hd, causal, lg, dg);
        P.gpu->ops->attention_bwd(P.gpu, dq2, dout.g, qkv.g, pg2, out2, n, T, H, hd, causal, lg, dg);
        P.gpu->ops->download(P.gpu, h1, out.g, ob);
        P.gpu->ops->download(P.gpu, h2, out2, ob);
        CU_ASSERT(memcmp(h1, h2, ob) == 0);
        P.gpu->ops->download(P.gpu, h1, dqkv.g, qb);
        P.gpu->ops->download(P.gpu, h2, dq2, qb);
        CU_ASSERT(memcmp(h1, h2, qb) == 0);
        free(h1);
        free(h2);
        free(g);
        pt_backend_free(P.gpu, out2);
        pt_backend_free(P.gpu, dq2);
        pt_backend_free(P.gpu, pg2);
        ip_free(&P, &lp);
    }
    pt_backend_free(P.cpu, pc);
    pt_backend_free(P.gpu, pg);
    ids_free(&P, &ids);
    tp_free(&P, &qkv);
    tp_free(&P, &out);
    tp_free(&P, &dout);
    tp_free(&P, &dqkv);
}

static void attention_case_mask(gpu_pair *pp, int n, int T, int H, int hd, int causal, const int32_t *lens,
                                int pad)
{
    attention_case_drop(pp, n, T, H, hd, causal, lens, pad, 0.0);
}

static void attention_case(gpu_pair *pp, int n, int T, int H, int hd, int causal)
{
    attention_case_mask(pp, n, T, H, hd, causal, NULL, PAD_RANDOM);
}

/* n lengths in [1, T]: 1 and T first, then the tile edges that fit (the
 * tiles are 64 rows, 32 for fp32 head size 128), then random ones. */
static void pick_lens(int32_t *lens, int n, int T)
{
    const int edge[] = {1, T, 65, 33, 64, 32, 63, 16, 128, 129};
    int k = 0;
    for (size_t e = 0; e < sizeof edge / sizeof *edge && k < n; e++)
        if (edge[e] <= T && (e < 2 || edge[e] != T))
            lens[k++] = edge[e];
    while (k < n)
        lens[k++] = 1 + (int)(urand() * T);
}

/* Masked attention for n examples with the lengths pick_lens gives. */
static void attention_masked(gpu_pair *P, int n, int T, int H, int hd, int causal, int pad)
{
    int32_t *lens = malloc((size_t)n * sizeof *lens);
    CU_ASSERT_FATAL(lens != NULL);
    pick_lens(lens, n, T);
    attention_case_mask(P, n, T, H, hd, causal, lens, pad);
    free(lens);
}

/* BERT's attention as it trains: the padding mask and dropout at rate p. */
static void attention_dropout(gpu_pair *P, int n, int T, int H, int hd, int causal, double p)
{
    int32_t *lens = malloc((size_t)n * sizeof *lens);
    CU_ASSERT_FATAL(lens != NULL);
    pick_lens(lens, n, T);
    attention_case_drop(P, n, T, H, hd, causal, lens, PAD_HUGE, p);
    attention_case_drop(P, n, T, H, hd, causal, NULL, PAD_RANDOM, p);
    free(lens);
}

static void attention_all(void)
{
    EACH_PRECISION(P)
    {
        if (gpu_small()) {
            const int cases[][4] = {{1, 16, 0, 0}, {17, 16, 0, 0}, {65, 64, 0, 0}, {130, 32, 0, 0},
                                    {65, 24, 0, 0}, {64, 128, 0, 0}, {20, 8, 0, 0}, {7, 4, 0, 0}};
            for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
                for (int causal = 0; causal < 2; causal++)
                    attention_case(&P, 1, cases[k][0], 2, cases[k][1], causal);
            attention_case(&P, 2, 33, 3, 16, 1);
            /* padding masks: T below, at and above the 64-row tile (and the
             * 32-row one of fp32 head size 128), lengths at the tile edges */
            const int masked[][3] = {{20, 16, 4}, {64, 64, 4}, {65, 24, 4}, {130, 32, 5}, {40, 128, 4}, {1, 16, 2}};
            for (size_t k = 0; k < sizeof masked / sizeof *masked; k++)
                for (int causal = 0; causal < 2; causal++)
                    attention_masked(&P, masked[k][2], masked[k][0], 2, masked[k][1], causal, PAD_HUGE);
            attention_masked(&P, 4, 67, 2, 40, 0, PAD_NAN);
            attention_masked(&P, 4, 67, 2, 16, 1, PAD_NAN);
            attention_masked(&P, 4, 50, 1, 32, 0, PAD_RANDOM);
            /* lengths outside [1, T] are clamped, as by the CPU backend */
            const int32_t wild[3] = {0, 99, -4};
            attention_case_mask(&P, 3, 40, 2, 16, 0, wild, PAD_RANDOM);
            /* dropout on the probabilities: below and above a tile, several head sizes */
            attention_dropout(&P, 3, 20, 2, 16, 0, 0.1);
            attention_dropout(&P, 3, 65, 2, 24, 0, 0.5);
            attention_dropout(&P, 2, 40, 2, 128, 0, 0.3);
            attention_dropout(&P, 2, 33, 3, 16, 1, 0.3);
            continue;
        }
        const int Ts[] = {1, 17, 63, 64, 65, 130, 200, 513};
        const int hds[] = {16, 32, 64, 128, 8, 24, 40, 100};
        for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++)
            for (size_t j = 0; j < sizeof hds / sizeof *hds; j++)
                for (int causal = 0; causal < 2; causal++)
                    attention_case(&P, 2, Ts[i], 3, hds[j], causal);
        attention_case(&P, 4, 1024, 12, 64, 1); /* GPT-2 small's shape */
        for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++)
            for (size_t j = 0; j < sizeof hds / sizeof *hds; j++)
                for (int causal = 0; causal < 2; causal++)
                    attention_masked(&P, 6, Ts[i], 2, hds[j], causal, (int)(i + j) % 3 == 0 ? PAD_NAN : PAD_HUGE);
        attention_masked(&P, 16, 128, 12, 64, 0, PAD_HUGE); /* BERT-base's shape */
        attention_masked(&P, 16, 256, 12, 32, 0, PAD_RANDOM); /* all-MiniLM-L6-v2's heads */
        for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++)
            for (size_t j = 0; j < sizeof hds / sizeof *hds; j += 3)
                attention_dropout(&P, 3, Ts[i], 2, hds[j], (int)(i + j) % 2, i % 2 ? 0.1 : 0.5);
        attention_dropout(&P, 16, 128, 12, 32, 0, 0.1); /* all-MiniLM-L6-v2 fine-tuning */
    }
}

/*
 * Scores far from 0 in one direction (a large common part, as attention
 * logits grow in a diverging or long-trained model) with key 0 ahead of the
 * next by 5% of it: the softmax is one-hot, so out must be v_0 at every
 * query (key 0 is seen by every query, causal or padded) and dV all at key
 * 0, on the GPU as on the CPU. The scores, times log2(e) / sqrt(hd), are
 * about 1e4 and 1e7 here. The GPU used to take a row's max from the rounded
 * product s * sl2 and its exponentials from a fused multiply-add of the
 * exact one: the top key weighed 2^e, e the product's rounding error (up to
 * 5e-4 at 1e4, 0.5 at 1e7), so out was v_0 times 2^e (0.03% to 41% off).
 * Only out and the value gradients are compared: dq and dk are sums of
 * roundings of dP - D near 0, times keys of 1e3.
 */
static void attention_offset_scores(void)
{
    EACH_PRECISION(P)
    {
        const float mags[] = {40.0f, 1300.0f};
        const int Ts[] = {20, 70}, H = 2, hd = 16, n = 2;
        for (size_t mi = 0; mi < sizeof mags / sizeof *mags; mi++)
            for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++)
                for (int mode = 0; mode < 3; mode++) { /* plain, causal, padded */
                    const int T = Ts[ti], causal = mode == 1;
                    const size_t d = (size_t)H * hd, rows = (size_t)n * T;
                    const int32_t lens[2] = {T, T / 2};
                    tpair qkv = tp_new(&P, rows * 3 * d, 0), out = tp_new(&P, rows * d, 0);
                    tpair dout = tp_new(&P, rows * d, 0), dqkv = tp_new(&P, rows * 3 * d, 0);
                    ipair lp = {NULL, NULL};
                    if (mode == 2)
                        lp = ip_new(&P, lens, (size_t)n);
                    void *pc = pt_backend_alloc(P.cpu, (size_t)n * H * T * T * sizeof(float));
                    void *pg = pt_backend_alloc(P.gpu, P.gpu->ops->attention_saved_bytes(P.gpu, n, T, H));
                    CU_ASSERT_FATAL(pc && pg);
                    float *hq = malloc(rows * 3 * d * sizeof *hq);
                    CU_ASSERT_FATAL(hq != NULL);
                    for (size_t r = 0; r < rows; r++)
                        for (size_t c = 0; c < d; c++) {
                            const int t = (int)(r % (size_t)T);
                            hq[(r * 3 + 0) * d + c] = mags[mi] * (1.0f + 0.001f * (float)t);
                            hq[(r * 3 + 1) * d + c] = -mags[mi] * (1.0f + 0.05f * (float)t);
                            hq[(r * 3 + 2) * d + c] = (float)(1 + (r + c) % 7);
                        }
                    tp_set(&P, &qkv, hq);
                    free(hq);
                    tp_fill(&P, &dout, -1, 1);
                    tp_fill(&P, &dqkv, -9, 9);
                    char what[120];
                    snprintf(what, sizeof what, "scores of %g: T=%d mode %d", (double)mags[mi], T, mode);
                    EACH_BACKEND BE(gpu)->ops->attention_fwd(BE(gpu), S(out), gpu ? pg : pc, S(qkv), n, T, H, hd,
                                                             causal, mode == 2 ? S(lp) : NULL, NULL);
                    EXPECT_CLOSE(&P, out, P.tol, "attention_fwd %s", what);
                    EACH_BACKEND BE(gpu)->ops->attention_bwd(BE(gpu), S(dqkv), S(dout), S(qkv), gpu ? pg : pc,
                                                             S(out), n, T, H, hd, causal,
                                                             mode == 2 ? S(lp) : NULL, NULL);
                    float *gc = tp_get(&P, &dqkv, 0), *gg = tp_get(&P, &dqkv, 1);
                    double num = 0, den = 0;
                    for (size_t r = 0; r < rows; r++)
                        for (size_t c = 2 * d; c < 3 * d; c++) { /* the value slots */
                            const double e = fabs((double)gg[r * 3 * d + c] - (double)gc[r * 3 * d + c]);
                            num = e > num || e != e ? (e != e ? INFINITY : e) : num;
                            den = fmax(den, fabs((double)gc[r * 3 * d + c]));
                        }
                    free(gc);
                    free(gg);
                    if (!(num <= P.tol * den))
                        printf("\n  [%s] attention_bwd dV %s: normwise error %.3g > %.3g", gpu_names[P.bf16], what,
                               num / den, P.tol);
                    CU_ASSERT(num <= P.tol * den);
                    pt_backend_free(P.cpu, pc);
                    pt_backend_free(P.gpu, pg);
                    if (mode == 2)
                        ip_free(&P, &lp);
                    tp_free(&P, &qkv);
                    tp_free(&P, &out);
                    tp_free(&P, &dout);
                    tp_free(&P, &dqkv);
                }
    }
}

/* --------------------------------------------------------------- dropout */

/* The op against the CPU's: the same mask (the same hash), so fp32 agrees bit
 * for bit (one multiply, or one fused multiply-add with add, on both); bf16
 * within its tolerance. add_mode: 0 none, 1 separate, 2 aliased with y;
 * in_place: y is x (the units' backward form). */
static void dropout_case(gpu_pair *pp, int n, size_t per, double p, int add_mode, int in_place)
{
    gpu_pair P = *pp;
    idpair ids = ids_new(&P, n, 1000003, 11);
    const pt_dropout dc = {p, pt_dropout_key(4, 5, 6, 1), ids.c}, dg = {p, dc.key, ids.g};
    const size_t total = (size_t)n * per;
    tpair x = tp_new(&P, total, 0), y = tp_new(&P, total, 0), add = tp_new(&P, total, 0);
    tp_fill(&P, &x, -2, 2);
    tp_fill(&P, &add, -2, 2);
    tp_fill(&P, &y, -9, 9);
    if (add_mode == 2)
        EACH_BACKEND BE(gpu)->ops->copy(BE(gpu), S(y), S(add), total * elem_size(BE(gpu), 0));
    else if (in_place)
        EACH_BACKEND BE(gpu)->ops->copy(BE(gpu), S(y), S(x), total * elem_size(BE(gpu), 0));
    EACH_BACKEND BE(gpu)->ops->dropout(BE(gpu), S(y), in_place ? S(y) : S(x),
                                       add_mode == 1 ? S(add) : add_mode == 2 ? S(y) : NULL, n, per,
                                       gpu ? &dg : &dc);
    EXPECT_CLOSE(&P, y, P.bf16 ? P.tol : 0.0, "dropout n=%d per=%zu p=%g add %d in place %d", n, per, p,
                 add_mode, in_place);
    if (!P.bf16) { /* the same bits, and the same elements dropped */
        float *yc = tp_get(&P, &y, 0), *yg = tp_get(&P, &y, 1);
        CU_ASSERT(memcmp(yc, yg, total * sizeof *yc) == 0);
        free(yc);
        free(yg);
    }
    tp_free(&P, &x);
    tp_free(&P, &y);
    tp_free(&P, &add);
    ids_free(&P, &ids);
}

static void dropout_all(void)
{
    EACH_PRECISION(P)
    {
        const double rates[] = {0.0, 0.1, 0.5};
        for (size_t r = 0; r < sizeof rates / sizeof *rates; r++)
            for (int add_mode = 0; add_mode < 3; add_mode++) {
                dropout_case(&P, 3, 1001, rates[r], add_mode, 0);
                dropout_case(&P, 2, gpu_small() ? 5000 : 300007, rates[r], add_mode, 0);
            }
        dropout_case(&P, 4, 384, 0.1, 0, 1);
        dropout_case(&P, 4, 384, 0.1, 1, 1);
    }
}

/* ------------------------------------------------------------- mean pool */

/* misalign: x and y (dx and dy) one element past an aligned address. */
static void mean_pool_case(gpu_pair *pp, int n, int T, int d, int misalign)
{
    gpu_pair P = *pp;
    int32_t *lens = malloc((size_t)n * sizeof *lens);
    CU_ASSERT_FATAL(lens != NULL);
    pick_lens(lens, n, T);
    ipair lp = ip_new(&P, lens, (size_t)n);
    tpair x = tp_new_at(&P, (size_t)n * T * d, 0, misalign), y = tp_new_at(&P, (size_t)n * d, 0, misalign);
    tp_fill(&P, &x, -2, 2);
    tp_fill(&P, &y, -9, 9); /* overwritten */
    EACH_BACKEND BE(gpu)->ops->mean_pool_fwd(BE(gpu), S(y), S(x), S(lp), n, T, d);
    EXPECT_CLOSE(&P, y, P.tol, "mean_pool_fwd n=%d T=%d d=%d misalign %d", n, T, d, misalign);
    /* backward: y is now dy, x is dx (garbage first: every element is written) */
    tp_fill(&P, &y, -1, 1);
    tp_fill(&P, &x, -9, 9);
    EACH_BACKEND BE(gpu)->ops->mean_pool_bwd(BE(gpu), S(x), S(y), S(lp), n, T, d);
    EXPECT_CLOSE(&P, x, P.tol, "mean_pool_bwd n=%d T=%d d=%d misalign %d", n, T, d, misalign);
    float *g = tp_get(&P, &x, 1);
    size_t nonzero = 0;
    for (int b = 0; b < n; b++)
        for (size_t e = (size_t)lens[b] * d; e < (size_t)T * d; e++)
            nonzero += g[(size_t)b * T * d + e] != 0.0f;
    CU_ASSERT_EQUAL(nonzero, 0);
    free(g);
    free(lens);
    tp_free(&P, &x);
    tp_free(&P, &y);
    ip_free(&P, &lp);
}

static void mean_pool_all(void)
{
    EACH_PRECISION(P)
    {
        mean_pool_case(&P, 6, 70, 24, 0);  /* 128-bit path */
        mean_pool_case(&P, 6, 70, 24, 1);  /* misaligned: scalar path */
        mean_pool_case(&P, 5, 9, 20, 0);   /* width not a multiple of 8 */
        mean_pool_case(&P, 3, 1, 8, 0);    /* T = 1 */
        mean_pool_case(&P, 40, 130, 384, 0);
        mean_pool_case(&P, 2, 3, 1, 0);
    }
}

/* ------------------------------------------------------------ embeddings */

static void patchify_all(void)
{
    EACH_PRECISION(P)
    {
        const int n = 3, C = 2, H = 14, W = 21, p = 7;
        tpair img = tp_new(&P, (size_t)n * C * H * W, 0), pat = tp_new(&P, (size_t)n * C * H * W, 0);
        tp_fill(&P, &img, -1, 1);
        EACH_BACKEND BE(gpu)->ops->patchify(BE(gpu), S(pat), S(img), n, C, H, W, p);
        EXPECT_CLOSE(&P, pat, 0.0, "patchify"); /* a permutation: exact */
        tp_free(&P, &img);
        tp_free(&P, &pat);
    }
}

static void vit_assemble_all(void)
{
    EACH_PRECISION(P)
    {
        const int n = 3, T = 7, d = 24;
        tpair proj = tp_new(&P, (size_t)n * (T - 1) * d, 0), x = tp_new(&P, (size_t)n * T * d, 0);
        tpair cls = tp_new(&P, d, 1), pos = tp_new(&P, (size_t)T * d, 1);
        tp_fill(&P, &proj, -1, 1);
        tp_fill(&P, &cls, -1, 1);
        tp_fill(&P, &pos, -1, 1);
        EACH_BACKEND BE(gpu)->ops->vit_assemble_fwd(BE(gpu), S(x), S(proj), S(cls), S(pos), n, T, d);
        EXPECT_CLOSE(&P, x, P.tol, "vit_assemble_fwd");
        tpair dx = tp_new(&P, (size_t)n * T * d, 0);
        tp_fill(&P, &dx, -1, 1);
        for (int with_proj = 0; with_proj < 2; with_proj++) {
            tp_fill(&P, &cls, -1, 1); /* now dcls and dpos: accumulated onto */
            tp_fill(&P, &pos, -1, 1);
            tp_fill(&P, &proj, -5, 5);
            EACH_BACKEND BE(gpu)->ops->vit_assemble_bwd(BE(gpu), with_proj ? S(proj) : NULL, S(cls), S(pos), S(dx),
                                                        n, T, d);
            if (with_proj)
                EXPECT_CLOSE(&P, proj, 0.0, "vit_assemble_bwd dproj");
            EXPECT_CLOSE(&P, cls, P.tol, "vit_assemble_bwd dcls");
            EXPECT_CLOSE(&P, pos, P.tol, "vit_assemble_bwd dpos");
        }
        tpair *all[] = {&proj, &x, &cls, &pos, &dx};
        for (size_t k = 0; k < sizeof all / sizeof *all; k++)
            tp_free(&P, all[k]);
    }
}

static void token_embed_case(gpu_pair *pp, int n, int T, int d, int V)
{
    gpu_pair P = *pp;
    int32_t *tok = malloc((size_t)n * T * sizeof *tok);
    for (int i = 0; i < n * T; i++)
        tok[i] = (int32_t)(urand() * V);
    ipair tokens = ip_new(&P, tok, (size_t)n * T);
    tpair wte = tp_new(&P, (size_t)V * d, 1), wpe = tp_new(&P, (size_t)T * d, 1);
    tpair x = tp_new(&P, (size_t)n * T * d, 0);
    tp_fill(&P, &wte, -1, 1);
    tp_fill(&P, &wpe, -1, 1);
    EACH_BACKEND BE(gpu)->ops->token_embed_fwd(BE(gpu), S(x), S(tokens), S(wte), S(wpe), n, T, d);
    EXPECT_CLOSE(&P, x, P.tol, "token_embed_fwd n=%d T=%d d=%d V=%d", n, T, d, V);
    tp_fill(&P, &x, -1, 1); /* now dx */
    tp_fill(&P, &wte, -1, 1);
    tp_fill(&P, &wpe, -1, 1);
    EACH_BACKEND BE(gpu)->ops->token_embed_bwd(BE(gpu), S(wte), S(wpe), S(x), S(tokens), n, T, d);
    EXPECT_CLOSE(&P, wte, P.tol, "token_embed_bwd dwte n=%d T=%d d=%d V=%d", n, T, d, V);
    EXPECT_CLOSE(&P, wpe, P.tol, "token_embed_bwd dwpe n=%d T=%d d=%d V=%d", n, T, d, V);
    tp_free(&P, &wte);
    tp_free(&P, &wpe);
    tp_free(&P, &x);
    ip_free(&P, &tokens);
    free(tok);
}

static void token_embed_all(void)
{
    EACH_PRECISION(P)
    {
        token_embed_case(&P, 3, 9, 24, 11);
        token_embed_case(&P, 3, 9, 20, 11); /* scalar path */
        token_embed_case(&P, 8, 64, 40, 3); /* long runs of one token */
        token_embed_case(&P, 2, 5, 8, 1000); /* most tokens unseen */
    }
}

static void copy_rows_all(void)
{
    EACH_PRECISION(P)
    {
        const int rows = 5, cols = 13, ss = 17, ds = 20;
        tpair src = tp_new(&P, (size_t)rows * ss, 0), dst = tp_new(&P, (size_t)rows * ds, 0);
        tp_fill(&P, &src, -1, 1);
        for (int acc = 0; acc < 2; acc++) {
            tp_fill(&P, &dst, -1, 1);
            EACH_BACKEND BE(gpu)->ops->copy_rows(BE(gpu), S(dst), ds, S(src), ss, rows, cols, acc);
            EXPECT_CLOSE(&P, dst, acc ? P.tol : 0.0, "copy_rows accumulate %d", acc);
        }
        tp_free(&P, &src);
        tp_free(&P, &dst);
    }
}

/* --------------------------------------------------------- cross-entropy */

static void cross_entropy_all(void)
{
    EACH_PRECISION(P)
    {
        const int shapes[][2] = {{37, 10}, {37, 300}, {200, 256}, {3, 2}};
        for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
            const int rows = shapes[k][0], classes = shapes[k][1];
            int32_t *tg = malloc((size_t)rows * sizeof *tg);
            for (int r = 0; r < rows; r++)
                tg[r] = (int32_t)(urand() * classes);
            ipair targets = ip_new(&P, tg, rows);
            tpair z = tp_new(&P, (size_t)rows * classes, 0), dz = tp_new(&P, (size_t)rows * classes, 0);
            tp_fill(&P, &z, -3, 3);
            for (int with_grad = 0; with_grad < 2; with_grad++) {
                double loss[2];
                int64_t correct[2] = {5, 5}; /* added to */
                EACH_BACKEND loss[gpu] = BE(gpu)->ops->cross_entropy(BE(gpu), with_grad ? S(dz) : NULL, S(z),
                                                                     S(targets), rows, classes, 0.37,
                                                                     &correct[gpu]);
                double rel = fabs(loss[1] - loss[0]) / fabs(loss[0]);
                if (rel > 1e-5)
                    printf("\n  [%s] cross_entropy %dx%d: loss %.9g vs %.9g", gpu_names[P.bf16], rows, classes,
                           loss[1], loss[0]);
                CU_ASSERT(rel <= 1e-5);
                CU_ASSERT_EQUAL(correct[1], correct[0]);
                CU_ASSERT(correct[0] >= 5);
                if (with_grad)
                    EXPECT_CLOSE(&P, dz, P.tol, "cross_entropy dlogits %dx%d", rows, classes);
            }
            tp_free(&P, &z);
            tp_free(&P, &dz);
            ip_free(&P, &targets);
            free(tg);
        }
    }
}

/* --------------------------------------------------------- optimizer ops */

static void adamw_sumsq_scale(void)
{
    EACH_PRECISION(P)
    {
        for (int misalign = 0; misalign < 2; misalign++) {
            const size_t n = 1001;
            tpair p = tp_new_at(&P, n, 1, misalign), g = tp_new_at(&P, n, 1, misalign);
            tpair m = tp_new_at(&P, n, 1, misalign), v = tp_new_at(&P, n, 1, misalign);
            tp_fill(&P, &p, -1, 1);
            tp_fill(&P, &g, -0.1, 0.1);
            tp_fill(&P, &m, -0.01, 0.01);
            tp_fill(&P, &v, 1e-6, 1e-3);
            for (int step = 3; step < 5; step++) {
                pt_adamw_args a = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
                                   .bias_corr1 = 1 - pow(0.9, step), .bias_corr2 = 1 - pow(0.95, step),
                                   .grad_scale = 0.7};
                EACH_BACKEND BE(gpu)->ops->adamw(BE(gpu), S(p), S(g), S(m), S(v), n, &a);
            }
            EXPECT_CLOSE(&P, p, 1e-5, "adamw p misalign %d", misalign);
            EXPECT_CLOSE(&P, m, 1e-5, "adamw m misalign %d", misalign);
            EXPECT_CLOSE(&P, v, 1e-5, "adamw v misalign %d", misalign);
            EACH_BACKEND BE(gpu)->ops->scale(BE(gpu), S(g), n, 0.3);
            EXPECT_CLOSE(&P, g, 1e-6, "scale");
            tp_free(&P, &p);
            tp_free(&P, &g);
            tp_free(&P, &m);
            tp_free(&P, &v);
        }
        const size_t sizes[] = {1, 1000, 100003, 3000017};
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            tpair x = tp_new_at(&P, sizes[k], 1, k % 2);
            tp_fill(&P, &x, -2, 2);
            double s[2];
            EACH_BACKEND s[gpu] = BE(gpu)->ops->sumsq(BE(gpu), S(x), sizes[k]);
            CU_ASSERT(fabs(s[1] - s[0]) <= 1e-9 * s[0]);
            tp_free(&P, &x);
        }
    }
}

static const pt_test tests[] = {
    {"open_or_skip", open_or_skip},
    {"memory_and_copies", memory_and_copies},
    {"sticky_errors", sticky_errors},
    {"linear", linear_all},
    {"linear_fallback", linear_fallback},
    {"layernorm", layernorm_all},
    {"gelu", gelu_all},
    {"attention", attention_all},
    {"attention_offset_scores", attention_offset_scores},
    {"mean_pool", mean_pool_all},
    {"dropout", dropout_all},
    {"patchify", patchify_all},
    {"vit_assemble", vit_assemble_all},
    {"token_embed", token_embed_all},
    {"copy_rows", copy_rows_all},
    {"cross_entropy", cross_entropy_all},
    {"adamw_sumsq_scale", adamw_sumsq_scale},
    {NULL, NULL}};

static const pt_test_suite suites[] = {{"cuda_ops", tests}, {NULL, NULL}};
