/*
 * fuzz_idx.c: libFuzzer target for the IDX dataset loader (data/idx.c and
 * the gzip reading under it, data/gzio.c): an images file and a labels file.
 *
 * Input: a 4-byte preamble, then the two files' bytes.
 *   byte 0   bit 0: gzip the images file, bit 1: gzip the labels file (the
 *            harness compresses with zlib, so the gzip path is reached with
 *            valid streams; raw gzip bytes in the input reach its error paths)
 *   byte 1   classes - 1 (1..256)
 *   byte 2-3 little-endian length of the images part (cut to what is there);
 *            the labels file is the rest.
 *
 * A dataset that loads must be what its header said: count, 1 channel, the
 * image size, every label below the class count, every pixel the
 * normalisation of a byte.
 */
#include "tests/fuzz/fuzz_util.h"

#include "data/data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct {
    char images[1024], labels[1024];
} ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = fuzz_temp_dir();
    fuzz_join(ctx.images, sizeof ctx.images, dir, "images");
    fuzz_join(ctx.labels, sizeof ctx.labels, dir, "labels");
    return 0;
}

static void put(const char *path, int gzip, const uint8_t *data, size_t n)
{
    if (gzip)
        fuzz_write_gzip(path, data, n);
    else
        fuzz_write(path, data, n);
}

static void check(const pt_dataset *ds, int classes)
{
    const double mean = 0.5, std = 0.25;
    if (ds->kind != PT_DATA_IMAGES || ds->count < 1 || ds->channels != 1 || ds->height < 1 ||
        ds->width < 1 || ds->classes != classes || !ds->images || !ds->labels)
        fuzz_die("a loaded dataset is inconsistent");
    const int64_t pixels = ds->count * ds->height * ds->width;
    for (int64_t i = 0; i < ds->count; i++)
        if (ds->labels[i] < 0 || ds->labels[i] >= classes)
            fuzz_die("label %d of example %lld is not below %d", ds->labels[i], (long long)i,
                     classes);
    for (int64_t i = 0; i < pixels; i++) {
        double byte = (ds->images[i] * std + mean) * 255.0;
        if (!(fabs(byte - nearbyint(byte)) < 1e-3 && byte > -0.5 && byte < 255.5))
            fuzz_die("pixel %lld is %g, not a normalised byte", (long long)i, ds->images[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    const int flags = data[0], classes = data[1] + 1;
    size_t images = (size_t)data[2] | (size_t)data[3] << 8;
    data += 4;
    size -= 4;
    if (images > size)
        images = size;
    put(ctx.images, flags & 1, data, images);
    put(ctx.labels, flags & 2, data + images, size - images);
    pt_dataset ds;
    pt_err err;
    if (pt_idx_load(&ds, ctx.images, ctx.labels, classes, 0.5, 0.25, &err) == 0)
        check(&ds, classes);
    pt_dataset_free(&ds);
    return 0;
}
