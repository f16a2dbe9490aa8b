/*
 * augment.c: random flips and padded crops of images.
 *
 * The random choices for example `id` in epoch `e` come from a generator
 * seeded with (key(seed, e), id), where key(seed, e) is the first draw of
 * stream AUGMENT + e. They depend on nothing else: not on which batch, micro-
 * batch, replica or rank the example lands in, nor on how many examples were
 * augmented before it. That is what lets a run with D replicas see the same
 * inputs as the serial run.
 *
 * Invariant: an augmented image has the shape of the original, and every
 * output pixel is either a pixel of the original (same channel) or zero_pixel.
 */
#include "data/data_internal.h"

int pt_augment_active(const pt_augment *aug) { return aug && (aug->hflip || aug->crop_pad > 0); }

int pt_augment_check(const pt_augment *aug, const pt_dataset *ds, pt_err *err)
{
    if (!aug)
        return 0;
    if (aug->crop_pad < 0)
        return pt_fail(err, PT_EINPUT, "augmentation crop_pad is %d; it must be >= 0 (0 = off)",
                       aug->crop_pad);
    if (ds->kind != PT_DATA_IMAGES) {
        if (pt_augment_active(aug))
            return pt_fail(err, PT_EINPUT,
                           "augmentation (hflip %d, crop_pad %d) applies to images only, and this "
                           "is a text dataset: turn it off",
                           aug->hflip, aug->crop_pad);
        return 0;
    }
    int side = ds->height < ds->width ? ds->height : ds->width;
    if (aug->crop_pad > side)
        return pt_fail(err, PT_EINPUT,
                       "augmentation crop_pad is %d; for %dx%d images it must be at most %d",
                       aug->crop_pad, ds->height, ds->width, side);
    return 0;
}

void pt_augment_image(const pt_dataset *ds, const pt_augment *aug, uint64_t seed, int64_t epoch,
                      int64_t id, const float *src, float *dst)
{
    pt_rng rng;
    pt_rng_seed(&rng, seed, PT_STREAM_AUGMENT + (uint64_t)epoch);
    uint64_t epoch_key = pt_rng_next(&rng);
    pt_rng_seed(&rng, epoch_key, (uint64_t)id);

    /* The flip coin is drawn even when flips are off, so turning flips on or
     * off does not move the crop offsets. */
    int flip = (int)(pt_rng_next(&rng) >> 63) && aug->hflip;
    int64_t pad = aug->crop_pad > 0 ? aug->crop_pad : 0;
    int64_t dy = 0, dx = 0;
    if (pad > 0) {
        uint64_t offsets = 2 * (uint64_t)pad + 1;
        dy = (int64_t)pt_rng_below(&rng, offsets) - pad;
        dx = (int64_t)pt_rng_below(&rng, offsets) - pad;
    }

    /* Output (y, x) is pixel (y + dy, x' + dx) of the original, where x' is x
     * or its mirror: a crop of the padded image, then a flip. */
    int64_t h = ds->height, w = ds->width;
    for (int c = 0; c < ds->channels; c++) {
        const float *plane = src + (int64_t)c * h * w;
        float *out = dst + (int64_t)c * h * w;
        for (int64_t y = 0; y < h; y++) {
            int64_t sy = y + dy;
            for (int64_t x = 0; x < w; x++) {
                int64_t sx = (flip ? w - 1 - x : x) + dx;
                int inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
                out[y * w + x] = inside ? plane[sy * w + sx] : ds->zero_pixel;
            }
        }
    }
}
