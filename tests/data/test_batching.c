/*
 * test_batching.c: how examples become batches: augmentation (what a flip and
 * a padded crop do to an image, and that the choice is a pure function of
 * (seed, epoch, id)) and the sampler (every epoch a permutation fixed by
 * (seed, epoch), and every global batch split over D replicas with nothing
 * lost or repeated). The suites are registered in test_data.c.
 */
#include "data/data.h"

#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

void test_augment_active(void);
void test_augment_flip(void);
void test_augment_crop(void);
void test_augment_deterministic(void);
void test_sampler_permutation(void);
void test_sampler_no_shuffle(void);
void test_sampler_slices(void);
void test_sampler_errors(void);

/* ---------------------------------------------------------- augmentation */

/* 64 random (asymmetric) images of 3x5x7; a pad value no pixel is near. */
enum { N = 64, C = 3, H = 5, W = 7, P = C * H * W };
#define PAD_VALUE -7.5f

static void make_images(pt_dataset *ds)
{
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_synthetic_images(ds, N, C, H, W, 4, 11, &err), 0);
    ds->zero_pixel = PAD_VALUE;
}

static void gather_all(const pt_dataset *ds, const pt_augment *aug, uint64_t seed, int64_t epoch,
                       float *out)
{
    int64_t ids[N];
    int32_t labels[N];
    for (int i = 0; i < N; i++)
        ids[i] = i;
    pt_dataset_gather(ds, ids, N, aug, seed, epoch, out, NULL, labels);
    for (int i = 0; i < N; i++) /* augmentation never touches labels */
        CU_ASSERT_EQUAL(labels[i], ds->labels[i]);
}

/* 1 if out is orig cropped at offset (dy, dx) from the padded image (then
 * mirrored when flip), with PAD_VALUE outside. */
static int is_view(const float *out, const float *orig, int flip, int dy, int dx)
{
    for (int c = 0; c < C; c++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int sy = y + dy, sx = (flip ? W - 1 - x : x) + dx;
                int inside = sy >= 0 && sy < H && sx >= 0 && sx < W;
                float want = inside ? orig[(c * H + sy) * W + sx] : PAD_VALUE;
                if (out[(c * H + y) * W + x] != want)
                    return 0;
            }
    return 1;
}

void test_augment_active(void)
{
    CU_ASSERT_FALSE(pt_augment_active(NULL));
    CU_ASSERT_FALSE(pt_augment_active(&(pt_augment){0, 0}));
    CU_ASSERT_TRUE(pt_augment_active(&(pt_augment){1, 0}));
    CU_ASSERT_TRUE(pt_augment_active(&(pt_augment){0, 3}));
    CU_ASSERT_FALSE(pt_augment_active(&(pt_augment){0, -1}));

    pt_dataset images, text;
    pt_err err = {0};
    make_images(&images);
    CU_ASSERT_EQUAL_FATAL(pt_synthetic_text(&text, 100, 8, 1, &err), 0);
    CU_ASSERT_EQUAL(pt_augment_check(NULL, &images, &err), 0);
    CU_ASSERT_EQUAL(pt_augment_check(&(pt_augment){1, H}, &images, &err), 0);
    CU_ASSERT_EQUAL(pt_augment_check(&(pt_augment){0, -1}, &images, &err), PT_EINPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "crop_pad"));
    CU_ASSERT_EQUAL(pt_augment_check(&(pt_augment){0, H + 1}, &images, &err), PT_EINPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "at most 5"));
    CU_ASSERT_EQUAL(pt_augment_check(&(pt_augment){0, 0}, &text, &err), 0);
    CU_ASSERT_EQUAL(pt_augment_check(&(pt_augment){1, 0}, &text, &err), PT_EINPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "text"));
    pt_dataset_free(&images);
    pt_dataset_free(&text);
}

void test_augment_flip(void)
{
    pt_dataset ds;
    make_images(&ds);
    float *out = malloc(sizeof(float) * N * P);
    CU_ASSERT_FATAL(out != NULL);
    gather_all(&ds, &(pt_augment){.hflip = 1}, 1, 0, out);
    int flipped = 0;
    for (int i = 0; i < N; i++) {
        int same = is_view(out + i * P, ds.images + i * P, 0, 0, 0);
        int mirrored = is_view(out + i * P, ds.images + i * P, 1, 0, 0);
        CU_ASSERT_EQUAL(same + mirrored, 1); /* random images are never symmetric */
        flipped += mirrored;
    }
    /* Binomial(64, 1/2): outside [10, 54] with probability ~1e-8. */
    CU_ASSERT(flipped >= 10 && flipped <= 54);
    free(out);
    pt_dataset_free(&ds);
}

void test_augment_crop(void)
{
    enum { PAD = 2, CANARY = 16 };
    pt_dataset ds;
    make_images(&ds);
    float *out = malloc(sizeof(float) * (N * P + CANARY));
    CU_ASSERT_FATAL(out != NULL);
    for (int both = 0; both < 2; both++) {
        for (int k = 0; k < CANARY; k++)
            out[N * P + k] = 12345.0f;
        gather_all(&ds, &(pt_augment){.hflip = both, .crop_pad = PAD}, 2, 0, out);
        for (int k = 0; k < CANARY; k++) /* same shape: nothing written past n images */
            CU_ASSERT_EQUAL(out[N * P + k], 12345.0f);
        int used[2][2 * PAD + 1][2 * PAD + 1] = {{{0}}};
        int distinct = 0, padded = 0;
        for (int i = 0; i < N; i++) {
            int found = 0;
            for (int f = 0; f <= both && !found; f++)
                for (int dy = -PAD; dy <= PAD && !found; dy++)
                    for (int dx = -PAD; dx <= PAD && !found; dx++)
                        if (is_view(out + i * P, ds.images + i * P, f, dy, dx)) {
                            found = 1;
                            distinct += !used[f][dy + PAD][dx + PAD]++;
                            padded += dy != 0 || dx != 0;
                        }
            CU_ASSERT(found);
        }
        /* 25 (or 50) equally likely choices over 64 draws: most of them appear. */
        CU_ASSERT(distinct >= (both ? 18 : 12));
        CU_ASSERT(padded >= N / 2);
    }
    free(out);
    pt_dataset_free(&ds);
}

void test_augment_deterministic(void)
{
    const pt_augment aug = {.hflip = 1, .crop_pad = 2};
    pt_dataset ds;
    make_images(&ds);
    float *a = malloc(sizeof(float) * N * P), *b = malloc(sizeof(float) * N * P);
    CU_ASSERT_FATAL(a && b);
    gather_all(&ds, &aug, 5, 3, a);
    gather_all(&ds, &aug, 5, 3, b);
    CU_ASSERT(memcmp(a, b, sizeof(float) * N * P) == 0);
    /* Example 5 is the same whatever batch it is gathered in. */
    int64_t ids[] = {9, 5, 2};
    int32_t labels[3];
    pt_dataset_gather(&ds, ids, 3, &aug, 5, 3, b, NULL, labels);
    CU_ASSERT(memcmp(b + P, a + 5 * P, sizeof(float) * P) == 0);
    CU_ASSERT(memcmp(b, a + 9 * P, sizeof(float) * P) == 0);
    pt_dataset_gather(&ds, ids + 1, 1, &aug, 5, 3, b, NULL, labels);
    CU_ASSERT(memcmp(b, a + 5 * P, sizeof(float) * P) == 0);
    /* Another epoch or another seed draws again. */
    gather_all(&ds, &aug, 5, 4, b);
    CU_ASSERT(memcmp(a, b, sizeof(float) * N * P) != 0);
    gather_all(&ds, &aug, 6, 3, b);
    CU_ASSERT(memcmp(a, b, sizeof(float) * N * P) != 0);
    free(a);
    free(b);
    pt_dataset_free(&ds);

    /* Text has no augmentation: gathering with one changes nothing. */
    pt_dataset text;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_synthetic_text(&text, 1000, 8, 1, &err), 0);
    int64_t tids[] = {3, 100};
    int32_t tok[2][16], tgt[2][16];
    pt_dataset_gather(&text, tids, 2, NULL, 5, 3, NULL, tok[0], tgt[0]);
    pt_dataset_gather(&text, tids, 2, &aug, 5, 3, NULL, tok[1], tgt[1]);
    CU_ASSERT(memcmp(tok[0], tok[1], sizeof tok[0]) == 0);
    CU_ASSERT(memcmp(tgt[0], tgt[1], sizeof tgt[0]) == 0);
    pt_dataset_free(&text);
}

/* --------------------------------------------------------------- sampler */

enum { COUNT = 103, BATCH = 10 };

static int is_permutation(const int64_t *perm, int64_t n)
{
    char *seen = calloc((size_t)n, 1);
    int ok = seen != NULL;
    for (int64_t i = 0; ok && i < n; i++) {
        ok = perm[i] >= 0 && perm[i] < n && !seen[perm[i]];
        if (ok)
            seen[perm[i]] = 1;
    }
    free(seen);
    return ok;
}

void test_sampler_permutation(void)
{
    pt_sampler s, t;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_sampler_init(&s, COUNT, BATCH, 42, 1, &err), 0);
    CU_ASSERT_EQUAL_FATAL(pt_sampler_init(&t, COUNT, BATCH, 42, 1, &err), 0);
    CU_ASSERT_EQUAL(s.epoch, -1);
    CU_ASSERT_EQUAL(pt_sampler_steps(&s), COUNT / BATCH);

    int64_t epoch0[COUNT], epoch1[COUNT];
    pt_sampler_set_epoch(&s, 0);
    CU_ASSERT_EQUAL(s.epoch, 0);
    CU_ASSERT(is_permutation(s.perm, COUNT));
    memcpy(epoch0, s.perm, sizeof epoch0);
    int fixed = 0;
    for (int i = 0; i < COUNT; i++)
        fixed += epoch0[i] == i;
    CU_ASSERT(fixed < COUNT / 4); /* shuffled, not the file order */

    /* Exactly the documented Fisher-Yates, so other code can rely on it. */
    int64_t ref[COUNT];
    for (int i = 0; i < COUNT; i++)
        ref[i] = i;
    pt_rng rng;
    pt_rng_seed(&rng, 42, (1ull << 32) + 0);
    for (int64_t i = COUNT - 1; i > 0; i--) {
        int64_t j = (int64_t)pt_rng_below(&rng, (uint64_t)i + 1), x = ref[i];
        ref[i] = ref[j];
        ref[j] = x;
    }
    CU_ASSERT(memcmp(ref, epoch0, sizeof ref) == 0);

    pt_sampler_set_epoch(&s, 1);
    CU_ASSERT(is_permutation(s.perm, COUNT));
    memcpy(epoch1, s.perm, sizeof epoch1);
    CU_ASSERT(memcmp(epoch0, epoch1, sizeof epoch0) != 0);
    /* Another sampler, epochs visited in another order: the same orders. */
    pt_sampler_set_epoch(&t, 1);
    CU_ASSERT(memcmp(t.perm, epoch1, sizeof epoch1) == 0);
    pt_sampler_set_epoch(&t, 0);
    CU_ASSERT(memcmp(t.perm, epoch0, sizeof epoch0) == 0);
    pt_sampler_set_epoch(&s, 0);
    CU_ASSERT(memcmp(s.perm, epoch0, sizeof epoch0) == 0);
    pt_sampler_free(&t);
    CU_ASSERT_EQUAL_FATAL(pt_sampler_init(&t, COUNT, BATCH, 43, 1, &err), 0);
    pt_sampler_set_epoch(&t, 0);
    CU_ASSERT(memcmp(t.perm, epoch0, sizeof epoch0) != 0);
    pt_sampler_free(&t);
    pt_sampler_free(&s);
    pt_sampler_free(&s); /* freeing twice is allowed */
}

void test_sampler_no_shuffle(void)
{
    pt_sampler s;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_sampler_init(&s, COUNT, BATCH, 42, 0, &err), 0);
    for (int64_t e = 0; e < 3; e++) {
        pt_sampler_set_epoch(&s, e * 5);
        int in_order = 1;
        for (int i = 0; i < COUNT; i++)
            in_order &= s.perm[i] == i;
        CU_ASSERT(in_order);
    }
    pt_sampler_free(&s);
}

void test_sampler_slices(void)
{
    static const int replicas[] = {1, 2, 3, 4, 7, 10, 16, 33};
    pt_sampler s;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_sampler_init(&s, COUNT, BATCH, 9, 1, &err), 0);
    pt_sampler_set_epoch(&s, 2);
    int64_t steps = pt_sampler_steps(&s);
    CU_ASSERT_EQUAL(steps, 10); /* 103 / 10: the last 3 examples are dropped */
    for (size_t k = 0; k < sizeof replicas / sizeof replicas[0]; k++) {
        int d = replicas[k];
        int seen[COUNT] = {0};
        for (int64_t step = 0; step < steps; step++) {
            int64_t joined[BATCH];
            int total = 0;
            for (int r = 0; r < d; r++) {
                const int64_t *ids;
                int n;
                pt_sampler_slice(&s, step, r, d, &ids, &n);
                CU_ASSERT_EQUAL(n, BATCH / d + (r < BATCH % d));
                for (int j = 0; j < n && total < BATCH; j++)
                    joined[total++] = ids[j];
            }
            CU_ASSERT_EQUAL(total, BATCH);
            /* In replica order, the slices are exactly the global batch. */
            CU_ASSERT(memcmp(joined, s.perm + step * BATCH, sizeof(int64_t) * (size_t)total) == 0);
            for (int j = 0; j < total; j++)
                seen[joined[j]]++;
        }
        int once = 0, never = 0;
        for (int i = 0; i < COUNT; i++) {
            CU_ASSERT(seen[i] <= 1);
            once += seen[i] == 1;
            never += seen[i] == 0;
        }
        CU_ASSERT_EQUAL(once, steps * BATCH);
        CU_ASSERT_EQUAL(never, COUNT - steps * BATCH);
    }
    /* Out-of-range requests give an empty slice rather than a wild pointer. */
    const int64_t *ids = s.perm;
    int n = -1;
    pt_sampler_slice(&s, steps, 0, 1, &ids, &n);
    CU_ASSERT(ids == NULL && n == 0);
    pt_sampler_slice(&s, 0, 2, 2, &ids, &n);
    CU_ASSERT(ids == NULL && n == 0);
    pt_sampler_slice(&s, 0, 0, 0, &ids, &n);
    CU_ASSERT(ids == NULL && n == 0);
    pt_sampler_free(&s);

    /* batch == count: one step, all of it. */
    CU_ASSERT_EQUAL_FATAL(pt_sampler_init(&s, 5, 5, 1, 1, &err), 0);
    pt_sampler_set_epoch(&s, 0);
    CU_ASSERT_EQUAL(pt_sampler_steps(&s), 1);
    pt_sampler_slice(&s, 0, 0, 1, &ids, &n);
    CU_ASSERT(n == 5 && ids == s.perm);
    pt_sampler_free(&s);
}

void test_sampler_errors(void)
{
    static const struct {
        int64_t count, batch;
        const char *words[2];
    } cases[] = {
        {103, 0, {"0", "103"}},      {103, -4, {"-4", "103"}},   {103, 104, {"104", "103"}},
        {0, 1, {"batch is 1", "0 examples"}}, {-5, 1, {"batch is 1", "-5"}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pt_sampler s;
        pt_err err = {0};
        int rc = pt_sampler_init(&s, cases[k].count, cases[k].batch, 1, 1, &err);
        CU_ASSERT_EQUAL(rc, PT_EINPUT);
        CU_ASSERT_EQUAL(err.code, PT_EINPUT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, cases[k].words[0]));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, cases[k].words[1]));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "batch"));
        CU_ASSERT(s.perm == NULL);
        pt_sampler_free(&s);
    }
}
