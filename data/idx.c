/*
 * idx.c: loading an image classification dataset from a pair of IDX files
 * (the MNIST / Fashion-MNIST format), gzip'd or plain.
 *
 * IDX: a big-endian 32-bit magic 0x0000TTNN (TT = element type, 0x08 for
 * unsigned bytes; NN = number of dimensions), NN big-endian 32-bit dimension
 * sizes, then the elements in row-major order and nothing else.
 *
 * The file is untrusted: every size is checked before it is used, memory grows
 * with the bytes actually read (so a header claiming terabytes costs nothing
 * until the data is there), and every way the file can disagree with its own
 * header is an error that names the file and the position. On any error the
 * dataset is left zeroed.
 */
#include "data/data_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDX_TYPE_UBYTE 0x08
#define READ_CHUNK ((size_t)1 << 20)        /* bytes decompressed per step */
#define FIRST_CAPACITY ((uint64_t)1 << 20)  /* floats before the first doubling */

/* One open IDX file and what its header says. */
typedef struct idx_file {
    const char *path;
    gzFile gz;
    int ndim;
    uint32_t dims[3];
    uint64_t header_bytes;
} idx_file;

static uint32_t big_endian32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/* Reads and checks the header of f, which must hold unsigned bytes in `ndim`
 * dimensions called dim_names[0..ndim); `kind` ("images" or "labels") names
 * the expected file in messages. */
static int read_header(idx_file *f, int ndim, const char *const *dim_names, const char *kind,
                       pt_err *err)
{
    unsigned char head[4 + 4 * 3];
    size_t got;
    int cut, rc;
    uint32_t want_magic = (uint32_t)IDX_TYPE_UBYTE << 8 | (uint32_t)ndim;
    if ((rc = pt_gz_read(f->gz, f->path, head, 4, &got, &cut, "header", 0, err)))
        return rc;
    if (got < 4 && cut) /* gzip data that stops, in its own header or in the IDX one */
        return pt_fail(err, PT_EINPUT,
                       "%s: truncated gzip stream: it stops after %zu bytes of data, before the "
                       "end of the IDX header's 4-byte magic number (expected 0x%08x, IDX %s)",
                       f->path, got, (unsigned)want_magic, kind);
    if (got < 4)
        return pt_fail(err, PT_EINPUT,
                       "%s: truncated header: the file ends after %zu bytes, before the end of "
                       "its 4-byte magic number (expected 0x%08x, IDX %s)",
                       f->path, got, (unsigned)want_magic, kind);
    uint32_t magic = big_endian32(head);
    if (head[0] != 0 || head[1] != 0 || head[2] != IDX_TYPE_UBYTE)
        return pt_fail(err, PT_EINPUT,
                       "%s: bad magic 0x%08x: not an IDX file of unsigned bytes; expected "
                       "0x%08x (IDX %s)",
                       f->path, (unsigned)magic, (unsigned)want_magic, kind);
    if (head[3] != ndim) {
        const char *hint = head[3] == 1 ? "; is this a labels file?"
                           : head[3] == 3 ? "; is this an images file?"
                                          : "";
        return pt_fail(err, PT_EINPUT,
                       "%s: wrong number of dimensions: magic 0x%08x says %d, expected 0x%08x "
                       "(IDX %s with %d dimension%s)%s",
                       f->path, (unsigned)magic, head[3], (unsigned)want_magic, kind, ndim,
                       ndim == 1 ? "" : "s", hint);
    }
    size_t dim_bytes = 4 * (size_t)ndim;
    if ((rc = pt_gz_read(f->gz, f->path, head + 4, dim_bytes, &got, &cut, "header", 4, err)))
        return rc;
    if (got < dim_bytes)
        return pt_fail(err, PT_EINPUT,
                       "%s: truncated %s: expected %zu bytes (magic and %d dimension sizes) "
                       "but the %s after %zu bytes",
                       f->path, cut ? "gzip stream in the IDX header" : "header", 4 + dim_bytes,
                       ndim, cut ? "data stops" : "file ends", 4 + got);
    f->ndim = ndim;
    f->header_bytes = 4 + dim_bytes;
    for (int d = 0; d < ndim; d++) {
        uint32_t v = big_endian32(head + 4 + 4 * d);
        long long limit = d == 0 ? PT_DATA_MAX_COUNT : PT_DATA_MAX_SIDE;
        if (v == 0)
            return pt_fail(err, PT_EINPUT, "%s: dimension %d (%s) is zero; an IDX %s file needs "
                           "at least one",
                           f->path, d, dim_names[d], kind);
        if ((long long)v > limit)
            return pt_fail(err, PT_EINPUT, "%s: dimension %d (%s) is %u; at most %lld is supported",
                           f->path, d, dim_names[d], (unsigned)v, limit);
        f->dims[d] = v;
    }
    return 0;
}

/* Reads the pixels of f, normalised through lut, into a new array *out. */
static int read_pixels(idx_file *f, const float lut[256], unsigned char *chunk, float **out,
                       pt_err *err)
{
    uint64_t total = (uint64_t)f->dims[0] * f->dims[1] * f->dims[2];
    uint64_t done = 0, capacity = 0;
    float *pixels = NULL;
    *out = NULL;
    while (done < total) {
        size_t want = total - done < READ_CHUNK ? (size_t)(total - done) : READ_CHUNK;
        size_t got;
        int cut;
        int rc = pt_gz_read(f->gz, f->path, chunk, want, &got, &cut, "pixels", done, err);
        if (rc) {
            free(pixels);
            return rc;
        }
        if (done + got > capacity) {
            /* Doubling keeps the copies linear in the data; the cap at `total`
             * means a truthful file ends with an exact-size array. */
            uint64_t grown = capacity ? capacity * 2 : FIRST_CAPACITY;
            if (grown < done + got)
                grown = done + got;
            if (grown > total)
                grown = total;
            float *p = grown <= SIZE_MAX / sizeof *p ? realloc(pixels, grown * sizeof *p) : NULL;
            if (!p) {
                free(pixels);
                return pt_fail(err, PT_ENOMEM, "%s: out of memory for %llu normalised pixels",
                               f->path, (unsigned long long)grown);
            }
            pixels = p;
            capacity = grown;
        }
        for (size_t i = 0; i < got; i++)
            pixels[done + i] = lut[chunk[i]];
        done += got;
        if (got < want) {
            free(pixels);
            return pt_fail(err, PT_EINPUT,
                           "%s: truncated: header says %u images of %ux%u (%llu bytes) but the "
                           "file ends after %llu bytes of pixels%s",
                           f->path, (unsigned)f->dims[0], (unsigned)f->dims[1],
                           (unsigned)f->dims[2], (unsigned long long)total,
                           (unsigned long long)done,
                           cut ? " (the gzip stream is cut short)" : "");
        }
    }
    *out = pixels;
    return 0;
}

/* Reads the labels of f into a new array *out, each checked < classes. */
static int read_labels(idx_file *f, int classes, unsigned char *chunk, int32_t **out, pt_err *err)
{
    uint64_t count = f->dims[0];
    uint64_t done = 0;
    /* Safe to allocate up front: the caller read count * rows * cols pixel
     * bytes already, so count is backed by data that exists. */
    int32_t *labels = malloc((size_t)count * sizeof *labels);
    *out = NULL;
    if (!labels)
        return pt_fail(err, PT_ENOMEM, "%s: out of memory for %llu labels", f->path,
                       (unsigned long long)count);
    while (done < count) {
        size_t want = count - done < READ_CHUNK ? (size_t)(count - done) : READ_CHUNK;
        size_t got;
        int cut;
        int rc = pt_gz_read(f->gz, f->path, chunk, want, &got, &cut, "labels", done, err);
        if (rc) {
            free(labels);
            return rc;
        }
        for (size_t i = 0; i < got; i++) {
            if (chunk[i] >= classes) {
                free(labels);
                return pt_fail(err, PT_EINPUT,
                               "%s: label %d of example %llu is out of range: expected < %d "
                               "(the number of classes)",
                               f->path, chunk[i], (unsigned long long)(done + i), classes);
            }
            labels[done + i] = chunk[i];
        }
        done += got;
        if (got < want) {
            free(labels);
            return pt_fail(err, PT_EINPUT,
                           "%s: truncated: header says %llu labels but the file ends after %llu "
                           "bytes of labels%s",
                           f->path, (unsigned long long)count, (unsigned long long)done,
                           cut ? " (the gzip stream is cut short)" : "");
        }
    }
    *out = labels;
    return 0;
}

static int check_arguments(const char *images_path, int classes, double mean, double std,
                           pt_err *err)
{
    if (classes < 1 || classes > 256)
        return pt_fail(err, PT_EINPUT,
                       "%s: the number of classes is %d; IDX labels are bytes, so it must be in "
                       "[1, 256]",
                       images_path, classes);
    if (!isfinite(mean) || !isfinite(std) || !(std > 0))
        return pt_fail(err, PT_EINPUT,
                       "%s: normalisation mean %g, std %g: the mean must be finite and the std "
                       "finite and > 0",
                       images_path, mean, std);
    return 0;
}

static const char *const image_dims[] = {"count", "rows", "cols"};

int pt_idx_image_size(const char *images_path, int64_t *count, int *rows, int *cols, pt_err *err)
{
    idx_file f = {.path = images_path};
    int rc = pt_gz_open(&f.gz, images_path, err);
    if (!rc && !(rc = read_header(&f, 3, image_dims, "images", err))) {
        *count = (int64_t)f.dims[0];
        *rows = (int)f.dims[1];
        *cols = (int)f.dims[2];
    }
    if (f.gz)
        gzclose(f.gz);
    return rc;
}

int pt_idx_load(pt_dataset *ds, const char *images_path, const char *labels_path, int classes,
                double mean, double std, pt_err *err)
{
    static const char *const label_dims[] = {"count"};
    idx_file images = {.path = images_path}, labels = {.path = labels_path};
    unsigned char *chunk = NULL;
    float *pixels = NULL;
    int32_t *label_values = NULL;
    int rc;
    memset(ds, 0, sizeof *ds);

    if ((rc = check_arguments(images_path, classes, mean, std, err)) ||
        (rc = pt_gz_open(&images.gz, images_path, err)) ||
        (rc = pt_gz_open(&labels.gz, labels_path, err)) ||
        (rc = read_header(&images, 3, image_dims, "images", err)) ||
        (rc = read_header(&labels, 1, label_dims, "labels", err)))
        goto done;
    if (images.dims[0] != labels.dims[0]) {
        rc = pt_fail(err, PT_EINPUT, "%s: count mismatch: header says %u images but %s says %u "
                     "labels; the two files must describe the same examples",
                     images_path, (unsigned)images.dims[0], labels_path, (unsigned)labels.dims[0]);
        goto done;
    }
    if (!(chunk = malloc(READ_CHUNK))) {
        rc = pt_fail(err, PT_ENOMEM, "%s: out of memory for a read buffer", images_path);
        goto done;
    }
    /* One table lookup per pixel, and every loader of the same file gets
     * bit-identical floats. */
    float lut[256];
    for (int p = 0; p < 256; p++)
        lut[p] = (float)((p / 255.0 - mean) / std);
    uint64_t pixel_bytes = (uint64_t)images.dims[0] * images.dims[1] * images.dims[2];
    char images_what[64], labels_what[64];
    snprintf(images_what, sizeof images_what, "%u images", (unsigned)images.dims[0]);
    snprintf(labels_what, sizeof labels_what, "%u labels", (unsigned)labels.dims[0]);
    if ((rc = read_pixels(&images, lut, chunk, &pixels, err)) ||
        (rc = pt_gz_expect_end(images.gz, images_path, images.header_bytes + pixel_bytes,
                               images_what, err)) ||
        (rc = read_labels(&labels, classes, chunk, &label_values, err)) ||
        (rc = pt_gz_expect_end(labels.gz, labels_path, labels.header_bytes + labels.dims[0],
                               labels_what, err)))
        goto done;

    ds->kind = PT_DATA_IMAGES;
    ds->count = images.dims[0];
    ds->channels = 1;
    ds->height = (int)images.dims[1];
    ds->width = (int)images.dims[2];
    ds->classes = classes;
    ds->images = pixels;
    ds->labels = label_values;
    ds->zero_pixel = lut[0];
    pixels = NULL;
    label_values = NULL;

done:
    free(pixels);
    free(label_values);
    free(chunk);
    if (images.gz)
        gzclose(images.gz);
    if (labels.gz)
        gzclose(labels.gz);
    return rc;
}

const char *pt_fashion_mnist_class(int k)
{
    static const char *const names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                          "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
    return k >= 0 && k < 10 ? names[k] : NULL;
}
