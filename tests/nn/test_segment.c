/*
 * test_segment.c: a segment's memory and its frozen prefix.
 *
 * A segment created with a frozen prefix (pt_segment_spec.frozen) never
 * allocates the frozen units' gradients and AdamW moments, nor their saved
 * activations per slot (their forwards share one work area): the most
 * backend memory it holds at any moment is the memory of the same segment
 * created with nothing frozen, less three times the frozen units'
 * parameters and their saved activations in every slot, plus the largest
 * of those. (A
 * layout is rebuilt at every freeze decision and on resume; creating the
 * segment active and freezing it afterwards held, and on the CPU zero-filled,
 * the whole segment's gradients and moments first, which a plan made for the
 * frozen layout does not count.) And it trains as a segment created active and
 * then frozen: the same gradients, the same parameters after AdamW, bit for
 * bit.
 */
#include "nn/backend.h"
#include "nn/cpu_pool.h"
#include "tests/common/cunit_main.h"

#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------- a backend that counts bytes */

#define MAX_BLOCKS 4096
static struct {
    void *p;
    size_t bytes;
} blocks[MAX_BLOCKS];
static size_t live, peak;
static void *(*cpu_alloc)(pt_backend *, size_t);
static void (*cpu_free)(pt_backend *, void *);
static pt_ops counting_ops;
static const pt_ops *own_ops;

static void *count_alloc(pt_backend *be, size_t bytes)
{
    void *p = cpu_alloc(be, bytes);
    for (int i = 0; p && i < MAX_BLOCKS; i++)
        if (!blocks[i].p) {
            blocks[i].p = p;
            blocks[i].bytes = bytes;
            live += bytes;
            peak = live > peak ? live : peak;
            return p;
        }
    CU_FAIL_FATAL("more backend blocks than the test tracks");
    return p;
}

static void count_free(pt_backend *be, void *p)
{
    for (int i = 0; p && i < MAX_BLOCKS; i++)
        if (blocks[i].p == p) {
            live -= blocks[i].bytes;
            blocks[i].p = NULL;
            break;
        }
    cpu_free(be, p);
}

static pt_backend *open_counting(void)
{
    pt_backend *be = NULL;
    pt_err err;
    CU_ASSERT_FATAL(pt_backend_open(&be, "cpu", 1, &err) == 0);
    own_ops = be->ops;
    counting_ops = *be->ops;
    cpu_alloc = counting_ops.alloc;
    cpu_free = counting_ops.free;
    counting_ops.alloc = count_alloc;
    counting_ops.free = count_free;
    be->ops = &counting_ops;
    return be;
}

static void close_counting(pt_backend *be)
{
    be->ops = own_ops; /* the backend's own ops for its teardown */
    pt_backend_close(be);
}

static pt_arch gpt(void)
{
    pt_arch a;
    memset(&a, 0, sizeof a);
    a.kind = PT_MODEL_GPT;
    a.dim = 64;
    a.layers = 3;
    a.heads = 4;
    a.mlp_hidden = 256;
    a.causal = 1;
    a.vocab = 40;
    a.context = 8;
    a.init_std = 0.02;
    a.seed = 7;
    return a;
}

/* Fashion-MNIST's shape: 28 x 28, patches of 4 (49 + [CLS] = 50 tokens) */
static pt_arch vit_arch(void)
{
    pt_arch a;
    memset(&a, 0, sizeof a);
    a.kind = PT_MODEL_VIT;
    a.dim = 64;
    a.layers = 2;
    a.heads = 4;
    a.mlp_hidden = 256;
    a.channels = 1;
    a.height = a.width = 28;
    a.patch = 4;
    a.classes = 10;
    a.init_std = 0.02;
    a.seed = 3;
    return a;
}

/* Peak backend bytes while creating segment [0, count) of `a` with `frozen`
 * units frozen; the segment is left in *out. */
static size_t create_peak(const pt_arch *a, pt_backend *be, int frozen, pt_segment **out)
{
    pt_err err;
    pt_segment_spec spec = {0, pt_arch_units(a), 4, 2, 0, 0};
    spec.frozen = frozen;
    peak = live;
    const size_t before = live;
    CU_ASSERT_FATAL(pt_segment_create(out, a, be, &spec, &err) == 0);
    return peak - before;
}

static void test_created_frozen_memory(void)
{
    const pt_arch a = gpt();
    const int units = pt_arch_units(&a);
    pt_backend *be = open_counting();
    pt_segment *active = NULL;
    const size_t all = create_peak(&a, be, 0, &active);
    pt_segment_destroy(active);
    for (int frozen = 1; frozen <= units; frozen++) {
        pt_segment *s = NULL;
        const size_t got = create_peak(&a, be, frozen, &s);
        size_t frozen_bytes = 0;
        for (int u = 0; u < frozen; u++)
            frozen_bytes += pt_segment_unit_numel(s, u) * pt_backend_real_size(be);
        /* nor a saved area per slot for a frozen unit: its forward uses one
         * work area that all frozen units share (the largest of theirs) */
        size_t saved_bytes = 0, work = 0;
        for (int u = 0; u < frozen; u++) {
            const size_t b = pt_unit_saved_bytes(&a, be, u, 4);
            saved_bytes += b;
            work = b > work ? b : work;
        }
        /* each of grads, m, v and the work area is one block rounded up to
         * 64 bytes */
        CU_ASSERT(got + 3 * frozen_bytes + 2 * saved_bytes <= all + work + 4 * 64);
        CU_ASSERT_EQUAL(pt_segment_frozen(s), frozen);
        size_t count = 0;
        pt_segment_grads(s, &count);
        size_t want = 0;
        for (int u = frozen; u < units; u++)
            want += pt_segment_unit_numel(s, u);
        CU_ASSERT_EQUAL(count, want);
        CU_ASSERT_PTR_NULL(pt_segment_unit_data(s, frozen - 1, PT_PART_M));
        pt_segment_destroy(s);
    }
    pt_err err;
    pt_segment *s = NULL;
    pt_segment_spec bad = {0, units, 4, 1, 0, 0};
    bad.frozen = units + 1;
    CU_ASSERT(pt_segment_create(&s, &a, be, &bad, &err) != 0);
    CU_ASSERT_PTR_NULL(s);
    close_counting(be);
}

/* One training step (forward, backward, AdamW) of `s` on a fixed batch. */
static void train_step(pt_segment *s, const pt_arch *a)
{
    enum { N = 3 };
    int32_t tokens[N * 8], targets[N * 8];
    for (int i = 0; i < N * a->context; i++) {
        tokens[i] = (i * 7 + 3) % a->vocab;
        targets[i] = (i * 5 + 1) % a->vocab;
    }
    pt_batch b = {N, NULL, tokens, targets, NULL, 0};
    pt_stats st = {0};
    pt_err err;
    pt_segment_set_loss_scale(s, 1.0 / (N * a->context));
    pt_segment_zero_grads(s);
    CU_ASSERT_FATAL(pt_segment_forward(s, 1, &b, NULL, NULL, 1, &st, &err) == 0);
    CU_ASSERT_FATAL(pt_segment_backward(s, 1, &b, NULL, NULL, &err) == 0);
    pt_adamw opt = {1e-2, 0.9, 0.999, 1e-8, 0.1, 1, 1.0};
    CU_ASSERT_FATAL(pt_segment_adamw(s, &opt, &err) == 0);
}

static void test_created_frozen_trains_as_freeze(void)
{
    const pt_arch a = gpt();
    const int units = pt_arch_units(&a);
    pt_backend *be = NULL;
    pt_err err;
    CU_ASSERT_FATAL(pt_backend_open(&be, "cpu", 1, &err) == 0);
    for (int frozen = 0; frozen < units; frozen++) {
        pt_segment *made = NULL, *later = NULL;
        pt_segment_spec spec = {0, units, 4, 2, 0, 0};
        spec.frozen = frozen;
        CU_ASSERT_FATAL(pt_segment_create(&made, &a, be, &spec, &err) == 0);
        spec.frozen = 0;
        CU_ASSERT_FATAL(pt_segment_create(&later, &a, be, &spec, &err) == 0);
        CU_ASSERT_FATAL(pt_segment_freeze(later, frozen, &err) == 0);
        CU_ASSERT_FATAL(pt_segment_init_params(made, &err) == 0);
        CU_ASSERT_FATAL(pt_segment_init_params(later, &err) == 0);
        train_step(made, &a);
        train_step(later, &a);
        for (int u = 0; u < units; u++) {
            const size_t n = pt_segment_unit_numel(made, u);
            float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
            CU_ASSERT_FATAL(x && y);
            for (int part = PT_PART_PARAM; part <= PT_PART_V; part++) {
                if (u < frozen && part != PT_PART_PARAM)
                    continue;
                CU_ASSERT_FATAL(pt_segment_unit_get(made, u, (pt_part)part, x, &err) == 0);
                CU_ASSERT_FATAL(pt_segment_unit_get(later, u, (pt_part)part, y, &err) == 0);
                CU_ASSERT(memcmp(x, y, n * sizeof *x) == 0);
            }
            free(x);
            free(y);
        }
        pt_segment_destroy(made);
        pt_segment_destroy(later);
    }
    pt_backend_close(be);
}

/* A unit's part read and written in pieces (a checkpoint moves units so):
 * every piece equals that part of the whole, pieces written back make the
 * whole, and a piece not inside the unit is refused. */
static void test_unit_pieces(void)
{
    const pt_arch a = gpt();
    pt_backend *be = NULL;
    pt_err err;
    CU_ASSERT_FATAL(pt_backend_open(&be, "cpu", 1, &err) == 0);
    pt_segment *s = NULL;
    pt_segment_spec spec = {0, pt_arch_units(&a), 4, 2, 0, 0};
    CU_ASSERT_FATAL(pt_segment_create(&s, &a, be, &spec, &err) == 0);
    CU_ASSERT_FATAL(pt_segment_init_params(s, &err) == 0);
    train_step(s, &a);
    for (int u = 0; u < pt_arch_units(&a); u++) {
        const size_t n = pt_segment_unit_numel(s, u);
        float *whole = malloc(n * sizeof *whole), *piece = malloc(n * sizeof *piece);
        CU_ASSERT_FATAL(whole && piece);
        for (int part = PT_PART_PARAM; part <= PT_PART_V; part++) {
            CU_ASSERT_FATAL(pt_segment_unit_get(s, u, (pt_part)part, whole, &err) == 0);
            const size_t step[] = {1, 7, n / 3 + 1, n};
            for (int k = 0; k < 4; k++)
                for (size_t at = 0; at < n; at += step[k]) {
                    size_t m = n - at < step[k] ? n - at : step[k];
                    CU_ASSERT_FATAL(pt_segment_unit_read(s, u, (pt_part)part, at, m, piece, &err) == 0);
                    CU_ASSERT(memcmp(piece, whole + at, m * sizeof *piece) == 0);
                }
            /* written back in pieces of 5, reversed, then read whole */
            for (size_t i = 0; i < n; i++)
                piece[i] = -whole[n - 1 - i];
            for (size_t at = 0; at < n; at += 5)
                CU_ASSERT_FATAL(pt_segment_unit_write(s, u, (pt_part)part, at, n - at < 5 ? n - at : 5,
                                                      piece + at, &err) == 0);
            CU_ASSERT_FATAL(pt_segment_unit_get(s, u, (pt_part)part, whole, &err) == 0);
            CU_ASSERT(memcmp(piece, whole, n * sizeof *piece) == 0);
            CU_ASSERT(pt_segment_unit_read(s, u, (pt_part)part, n, 1, piece, &err) == PT_EINTERNAL);
            CU_ASSERT(pt_segment_unit_read(s, u, (pt_part)part, 1, n, piece, &err) == PT_EINTERNAL);
            CU_ASSERT(pt_segment_unit_write(s, u, (pt_part)part, SIZE_MAX, 2, piece, &err) ==
                      PT_EINTERNAL);
            CU_ASSERT(pt_segment_unit_read(s, u, (pt_part)part, n, 0, piece, &err) == 0);
        }
        free(whole);
        free(piece);
    }
    CU_ASSERT(pt_segment_unit_read(s, pt_arch_units(&a), PT_PART_PARAM, 0, 1, NULL, &err) ==
              PT_EINTERNAL);
    pt_segment_destroy(s);
    pt_backend_close(be);
}

/* What the CPU keeps per thread for the linear layers (nn/cpu_pool.h
 * pt_pool_area: packed weights, a weight gradient's partial sums) after a
 * training step on a fresh thread, against the count the memory planner
 * takes (pt_arch_linear_work at the step's examples): a GPT step runs
 * every linear layer forward and backward on all the micro-batch's tokens,
 * so the two agree exactly; on 1 and 2 threads, on rows enough (2048) that
 * the partial sums reach their cap, and for a width whose MLP weights are
 * packed a part at a time (8 MiB at most). A ViT step's last block runs its
 * keys and values alone over every row (2d x d), whose partial sums can be
 * the largest: widths where they are, and one where they are not. */
enum { WORK_N = 8 };

typedef struct {
    pt_arch a;
    int threads, n;
    unsigned long kept[PT_AREAS];
} work_case;

static void *train_on_thread(void *arg)
{
    work_case *w = arg;
    const pt_arch *a = &w->a;
    pt_backend *be = NULL;
    pt_err err;
    if (pt_backend_open(&be, "cpu", w->threads, &err) != 0)
        return NULL;
    pt_segment *s = NULL;
    const int N = w->n, vit = a->kind == PT_MODEL_VIT;
    pt_segment_spec spec = {0, pt_arch_units(a), N, 1, 0, 0};
    if (pt_segment_create(&s, a, be, &spec, &err) == 0 && pt_segment_init_params(s, &err) == 0) {
        /* GPT: a target per token; ViT: an image and a class per example */
        const size_t inputs = vit ? (size_t)N * pt_arch_input_floats(a) : (size_t)N * a->context;
        const size_t rows = vit ? (size_t)N : (size_t)N * a->context;
        int32_t *tokens = vit ? NULL : malloc(sizeof(int32_t) * inputs);
        float *images = vit ? malloc(sizeof(float) * inputs) : NULL;
        int32_t *targets = malloc(sizeof(int32_t) * rows);
        const int out = pt_arch_out_classes(a);
        for (size_t i = 0; (tokens || images) && targets && i < inputs; i++) {
            if (tokens)
                tokens[i] = (int32_t)((i * 7 + 3) % (size_t)a->vocab);
            else
                images[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
        }
        for (size_t i = 0; targets && i < rows; i++)
            targets[i] = (int32_t)((i * 5 + 1) % (size_t)out);
        pt_batch b = {N, images, tokens, targets, NULL, 0};
        pt_stats st = {0};
        pt_segment_set_loss_scale(s, 1.0 / (double)rows);
        pt_segment_zero_grads(s);
        if ((tokens || images) && targets &&
            pt_segment_forward(s, 0, &b, NULL, NULL, 1, &st, &err) == 0 &&
            pt_segment_backward(s, 0, &b, NULL, NULL, &err) == 0)
            for (int k = 0; k < PT_AREAS; k++)
                w->kept[k] = pt_pool_area_bytes(k);
        else
            fprintf(stderr, "the step failed: %s\n", err.msg);
        free(tokens);
        free(images);
        free(targets);
    }
    pt_segment_destroy(s);
    pt_backend_close(be);
    return NULL;
}

static void test_linear_work_counted(void)
{
    /* width, MLP width, context; the last's MLP weights are packed a part
     * at a time forward (8 MiB) and one panel (8.96 MB) backward, on rows
     * too few for partial sums */
    const int cases[][3] = {{32, 128, 256}, {64, 256, 256}, {48, 4096, 256}, {16, 140000, 8}};
    for (int i = 0; i < 4; i++)
        for (int threads = 1; threads <= 2; threads++) {
            work_case w = {gpt(), threads, WORK_N, {0}};
            w.a.dim = cases[i][0];
            w.a.mlp_hidden = cases[i][1];
            w.a.context = cases[i][2];
            w.a.layers = 1;
            pthread_t t;
            CU_ASSERT_FATAL(pthread_create(&t, NULL, train_on_thread, &w) == 0);
            pthread_join(t, NULL);
            pt_backend *be = NULL;
            pt_err err;
            CU_ASSERT_FATAL(pt_backend_open(&be, "cpu", 1, &err) == 0);
            size_t pack, parts;
            pt_arch_linear_work(&w.a, be, WORK_N, &pack, &parts);
            CU_ASSERT_EQUAL(w.kept[PT_AREA_PACK], pack);
            CU_ASSERT_EQUAL(w.kept[PT_AREA_PARTS], parts);
            if (i < 3) {
                CU_ASSERT(parts > 0);
            } else {
                CU_ASSERT(pack > (8u << 20) && parts == 0);
            }
            CU_ASSERT_EQUAL(pt_arch_linear_work_bytes(&w.a, be, WORK_N), pack + parts);
            /* never less for more examples */
            for (int n = 1; n < 64; n++)
                CU_ASSERT(pt_arch_linear_work_bytes(&w.a, be, n) <=
                          pt_arch_linear_work_bytes(&w.a, be, n + 1));
            pt_backend_close(be);
        }
    /* width, MLP width, examples (50 rows each): 320 at 4d and 256 at 3d,
     * where keys and values take the most partial sums; 256 at 4d, where
     * they do not */
    const int vit_cases[][3] = {{320, 1280, 48}, {256, 768, 48}, {256, 1024, 48}};
    for (int i = 0; i < 3; i++) {
        work_case w = {vit_arch(), 1, vit_cases[i][2], {0}};
        w.a.dim = vit_cases[i][0];
        w.a.mlp_hidden = vit_cases[i][1];
        pthread_t t;
        CU_ASSERT_FATAL(pthread_create(&t, NULL, train_on_thread, &w) == 0);
        pthread_join(t, NULL);
        pt_backend *be = NULL;
        pt_err err;
        CU_ASSERT_FATAL(pt_backend_open(&be, "cpu", 1, &err) == 0);
        size_t pack, parts;
        pt_arch_linear_work(&w.a, be, w.n, &pack, &parts);
        CU_ASSERT_EQUAL(w.kept[PT_AREA_PACK], pack);
        CU_ASSERT_EQUAL(w.kept[PT_AREA_PARTS], parts);
        CU_ASSERT(parts > 0);
        pt_backend_close(be);
    }
}

/* A ViT whose image (channels x height x width values, which the units
 * index as int) passes every range check alone but not in product: refused,
 * where pt_arch_input_floats used to wrap to 0. The largest that fits is
 * taken. */
static void test_arch_refuses_images_past_int(void)
{
    pt_arch a = {.kind = PT_MODEL_VIT, .dim = 8, .layers = 1, .heads = 2, .mlp_hidden = 16,
                 .channels = 64, .height = 1 << 14, .width = 1 << 14, .patch = 1 << 14,
                 .classes = 3, .init_std = 0.02, .seed = 1};
    pt_err err = {0};
    CU_ASSERT_EQUAL(pt_arch_check(&a, &err), PT_EINPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "64 x 16384 x 16384"));
    a.channels = 7; /* 7 * 2^28 < 2^31 */
    CU_ASSERT_EQUAL(pt_arch_check(&a, &err), 0);
    CU_ASSERT_EQUAL(pt_arch_input_floats(&a), 7 << 28);
    a.channels = 8; /* 2^31 */
    CU_ASSERT_EQUAL(pt_arch_check(&a, &err), PT_EINPUT);
}

/* A micro-batch whose rows (examples x tokens, which the ops index as int)
 * pass INT_MAX: refused before anything is allocated (one of 32,768 GPT
 * sequences of 65,536 tokens reached the ops' int row counts); the largest
 * that fits is made. */
static void test_segment_refuses_rows_past_int(void)
{
    pt_arch a = {.kind = PT_MODEL_GPT, .dim = 2, .layers = 1, .heads = 1, .mlp_hidden = 2,
                 .causal = 1, .vocab = 256, .context = 1 << 16, .init_std = 0.02, .seed = 1};
    pt_backend *be = open_counting();
    pt_err err = {0};
    pt_segment *s = NULL;
    pt_segment_spec spec = {0, pt_arch_units(&a), 1 << 15, 1, 0, 0}; /* 2^31 rows */
    CU_ASSERT_EQUAL(pt_segment_create(&s, &a, be, &spec, &err), PT_EINPUT);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "2147483648 rows"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "pipeline.microbatches"));
    close_counting(be);
}

/* A prefix slot (pt_segment_spec.prefix_slot: the last slot runs the frozen
 * units' forwards only, as stage 0's prefix source does) holds their
 * outputs and no saved activations, and gives the frozen prefix's output
 * bit for bit as a training slot does; a forward there that an active unit
 * or a backward would need is refused. */
static void test_prefix_slot(void)
{
    const pt_arch a = gpt();
    const int units = pt_arch_units(&a), frozen = 4, N = 3;
    pt_backend *be = open_counting();
    pt_segment_spec spec = {0, units, N, 2, frozen, 0};
    pt_segment *plain = NULL, *pre = NULL;
    pt_err err;
    size_t before = live;
    CU_ASSERT_FATAL(pt_segment_create(&plain, &a, be, &spec, &err) == 0);
    const size_t plain_bytes = live - before;
    spec.prefix_slot = 1;
    before = live;
    CU_ASSERT_FATAL(pt_segment_create(&pre, &a, be, &spec, &err) == 0);
    const size_t pre_bytes = live - before;
    /* the slot's saved activations of the active units, and the outputs of
     * all units but the frozen ones', are not held */
    size_t active_saved = 0;
    for (int u = frozen; u < units; u++)
        active_saved += pt_unit_saved_bytes(&a, be, u, N);
    const size_t row = pt_segment_act_elems(pre, N) * pt_backend_act_size(be);
    CU_ASSERT(pre_bytes + active_saved + (size_t)(units - frozen) * row <= plain_bytes + 2 * 64);
    CU_ASSERT(pre_bytes + active_saved <= plain_bytes);
    CU_ASSERT_FATAL(pt_segment_init_params(plain, &err) == 0);
    CU_ASSERT_FATAL(pt_segment_init_params(pre, &err) == 0);
    int32_t tokens[N * 8], targets[N * 8];
    for (int i = 0; i < N * a.context; i++) {
        tokens[i] = (i * 7 + 3) % a.vocab;
        targets[i] = (i * 5 + 1) % a.vocab;
    }
    pt_batch b = {N, NULL, tokens, targets, NULL, 0};
    const size_t n = pt_segment_act_elems(pre, N);
    float *y0 = malloc(n * sizeof *y0), *y1 = malloc(n * sizeof *y1);
    void *out = pt_backend_alloc(be, n * pt_backend_act_size(be));
    CU_ASSERT_FATAL(y0 && y1 && out);
    CU_ASSERT_FATAL(pt_segment_forward_range(plain, 0, 0, frozen, &b, NULL, out, 0, NULL, &err) == 0);
    pt_backend_download(be, y0, out, n * sizeof *y0);
    CU_ASSERT_FATAL(pt_segment_forward_range(pre, 1, 0, frozen, &b, NULL, out, 0, NULL, &err) == 0);
    pt_backend_download(be, y1, out, n * sizeof *y1);
    CU_ASSERT(memcmp(y0, y1, n * sizeof *y0) == 0);
    CU_ASSERT_EQUAL(pt_segment_forward_range(pre, 1, 0, frozen + 1, &b, NULL, out, 0, NULL, &err),
                    PT_EINTERNAL);
    CU_ASSERT_EQUAL(pt_segment_forward_range(pre, 1, 0, units, &b, NULL, NULL, 1, NULL, &err),
                    PT_EINTERNAL);
    CU_ASSERT_EQUAL(pt_segment_backward(pre, 1, &b, NULL, NULL, &err), PT_EINTERNAL);
    /* the other slot trains as ever */
    pt_stats st = {0};
    CU_ASSERT(pt_segment_forward(pre, 0, &b, NULL, NULL, 1, &st, &err) == 0);
    CU_ASSERT(pt_segment_backward(pre, 0, &b, NULL, NULL, &err) == 0);
    pt_backend_free(be, out);
    free(y0);
    free(y1);
    pt_segment_destroy(plain);
    pt_segment_destroy(pre);
    close_counting(be);
}

static const pt_test segment_tests[] = {
    {"prefix_slot", test_prefix_slot},
    {"segment_refuses_rows_past_int", test_segment_refuses_rows_past_int},
    {"created_frozen_memory", test_created_frozen_memory},
    {"created_frozen_trains_as_freeze", test_created_frozen_trains_as_freeze},
    {"arch_refuses_images_past_int", test_arch_refuses_images_past_int},
    {"unit_pieces", test_unit_pieces},
    {"linear_work_counted", test_linear_work_counted},
    {NULL, NULL},
};

static const pt_test_suite suites[] = {
    {"segment", segment_tests},
    {NULL, NULL},
};
