/*
 * synthetic.c: small learnable datasets made from a seed, for tests and for
 * trying the trainer without downloading anything.
 *
 * Images: class c has a prototype drawn from stream PROTOTYPE + c; example i
 * draws its label and noise from stream SYNTH_EXAMPLE + i. So every value is a
 * function of (seed, its own index), and a dataset of count n is a prefix of
 * one of count n + 1. The noise (std 0.5) is small next to the distance
 * between two prototypes (std sqrt(2) per pixel), so a model can learn it.
 *
 * Text: an order-1 Markov chain over 8 letters in which each letter is
 * followed by its favourite successor 3 times in 4 (and by a uniformly random
 * letter otherwise): about 1.4 bits per byte instead of 3, a gap a small model
 * closes quickly. The chain is the same for every seed (its table comes from
 * a constant); the seed only picks the walk. So text made with two seeds is
 * two samples of one distribution: a training and a held-out split.
 */
#include "data/data_internal.h"

#include <stdlib.h>
#include <string.h>

#define NOISE_STD 0.5
#define MAX_FLOATS ((uint64_t)1 << 33) /* 32 GiB of floats: a config mistake beyond that */
#define TEXT_LETTERS 8
#define TEXT_FAVOURITE_P 0.75
#define MAX_TEXT_BYTES ((int64_t)1 << 34)
#define TEXT_CHAIN_SEED 0x6d61726b6f76ull /* fixed: every seed walks one chain */

static int check_range(pt_err *err, const char *what, long long v, long long lo, long long hi)
{
    if (v < lo || v > hi)
        return pt_fail(err, PT_EINPUT, "synthetic data: %s is %lld; it must be in [%lld, %lld]",
                       what, v, lo, hi);
    return 0;
}

int pt_synthetic_images(pt_dataset *ds, int64_t count, int channels, int height, int width,
                        int classes, uint64_t seed, pt_err *err)
{
    int rc;
    memset(ds, 0, sizeof *ds);
    if ((rc = check_range(err, "the number of examples", count, 1, PT_DATA_MAX_COUNT)) ||
        (rc = check_range(err, "channels", channels, 1, PT_DATA_MAX_CHANNELS)) ||
        (rc = check_range(err, "height", height, 1, PT_DATA_MAX_SIDE)) ||
        (rc = check_range(err, "width", width, 1, PT_DATA_MAX_SIDE)) ||
        (rc = check_range(err, "the number of classes", classes, 1, PT_DATA_MAX_CLASSES)))
        return rc;
    uint64_t per = (uint64_t)channels * (uint64_t)height * (uint64_t)width;
    uint64_t rows = (uint64_t)(count > classes ? count : classes);
    if (per > MAX_FLOATS / rows)
        return pt_fail(err, PT_EINPUT,
                       "synthetic data: %lld examples (or %d class prototypes) of %dx%dx%d "
                       "floats exceed the limit of %llu floats",
                       (long long)count, classes, channels, height, width,
                       (unsigned long long)MAX_FLOATS);

    float *prototypes = malloc((size_t)((uint64_t)classes * per) * sizeof *prototypes);
    float *images = malloc((size_t)((uint64_t)count * per) * sizeof *images);
    int32_t *labels = malloc((size_t)count * sizeof *labels);
    if (!prototypes || !images || !labels) {
        free(prototypes);
        free(images);
        free(labels);
        return pt_fail(err, PT_ENOMEM, "synthetic data: out of memory for %lld images of %dx%dx%d",
                       (long long)count, channels, height, width);
    }
    pt_rng rng;
    for (int c = 0; c < classes; c++) {
        pt_rng_seed(&rng, seed, PT_STREAM_PROTOTYPE + (uint64_t)c);
        for (uint64_t k = 0; k < per; k++)
            prototypes[(uint64_t)c * per + k] = (float)pt_rng_normal(&rng);
    }
    for (int64_t i = 0; i < count; i++) {
        pt_rng_seed(&rng, seed, PT_STREAM_SYNTH_EXAMPLE + (uint64_t)i);
        int32_t label = (int32_t)pt_rng_below(&rng, (uint64_t)classes);
        const float *proto = prototypes + (uint64_t)label * per;
        float *x = images + (uint64_t)i * per;
        for (uint64_t k = 0; k < per; k++)
            x[k] = proto[k] + (float)(NOISE_STD * pt_rng_normal(&rng));
        labels[i] = label;
    }
    free(prototypes);

    ds->kind = PT_DATA_IMAGES;
    ds->count = count;
    ds->channels = channels;
    ds->height = height;
    ds->width = width;
    ds->classes = classes;
    ds->images = images;
    ds->labels = labels;
    ds->zero_pixel = 0.0f;
    return 0;
}

int pt_synthetic_text(pt_dataset *ds, int64_t nbytes, int context, uint64_t seed, pt_err *err)
{
    int rc;
    memset(ds, 0, sizeof *ds);
    if ((rc = check_range(err, "context", context, 1, PT_DATA_MAX_CONTEXT)) ||
        (rc = check_range(err, "the number of bytes", nbytes, (long long)context + 1,
                          MAX_TEXT_BYTES)))
        return rc;
    uint8_t *bytes = malloc((size_t)nbytes);
    if (!bytes)
        return pt_fail(err, PT_ENOMEM, "synthetic data: out of memory for %lld bytes of text",
                       (long long)nbytes);
    pt_rng rng;
    pt_rng_seed(&rng, TEXT_CHAIN_SEED, PT_STREAM_SYNTH_TEXT);
    int favourite[TEXT_LETTERS];
    for (int s = 0; s < TEXT_LETTERS; s++)
        favourite[s] = (int)pt_rng_below(&rng, TEXT_LETTERS);
    pt_rng_seed(&rng, seed, PT_STREAM_SYNTH_TEXT);
    int state = (int)pt_rng_below(&rng, TEXT_LETTERS);
    for (int64_t i = 0; i < nbytes; i++) {
        bytes[i] = (uint8_t)('a' + state);
        if (pt_rng_uniform(&rng) < TEXT_FAVOURITE_P)
            state = favourite[state];
        else
            state = (int)pt_rng_below(&rng, TEXT_LETTERS);
    }

    ds->kind = PT_DATA_TEXT;
    ds->context = context;
    ds->bytes = bytes;
    ds->nbytes = nbytes;
    ds->count = (nbytes - 1) / context;
    return 0;
}
