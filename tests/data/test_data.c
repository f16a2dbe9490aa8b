/*
 * test_data.c: the data module's loaders: IDX images (round trip, every kind
 * of damaged file, the real Fashion-MNIST when it is installed), byte text
 * (splits, example layout, errors) and the synthetic datasets.
 *
 * Files are written with zlib into a fresh mkdtemp directory per test and
 * removed afterwards. Every error test checks the code, that the message names
 * the file and the problem, and that the dataset was left zeroed; the ASan
 * build checks that no error path leaks. The augmentation and sampler tests
 * live in test_batching.c, the text-classification tests in test_textcls.c;
 * all suites are registered here.
 */
#include "data/data.h"
#include "tests/common/cunit_main.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* From test_batching.c. */
void test_augment_active(void);
void test_augment_flip(void);
void test_augment_crop(void);
void test_augment_deterministic(void);
void test_sampler_permutation(void);
void test_sampler_no_shuffle(void);
void test_sampler_slices(void);
void test_sampler_errors(void);
/* From test_textcls.c. */
void test_textcls_tsv(void);
void test_textcls_jsonl(void);
void test_textcls_label_order(void);
void test_textcls_split(void);
void test_textcls_test_file(void);
void test_textcls_hostile(void);
void test_textcls_limits(void);
void test_textcls_kjv(void);

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

/* ------------------------------------------------------------- helpers */

static void make_dir(char *dir, size_t size)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, size, "%s/pt_test_data_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    CU_ASSERT_FATAL(d != NULL);
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            CU_ASSERT(unlink(path) == 0);
        }
    closedir(d);
    CU_ASSERT(rmdir(dir) == 0);
}

/* Writes n bytes to dir/name, gzip'd when gz (2: stored, not compressed,
 * so that a byte of data lies at a known offset), else as they are. */
static void write_file(char *path, size_t size, const char *dir, const char *name,
                       const void *data, size_t n, int gz)
{
    snprintf(path, size, "%s/%s", dir, name);
    if (gz) {
        gzFile f = gzopen(path, gz == 2 ? "wb0" : "wb");
        CU_ASSERT_FATAL(f != NULL);
        CU_ASSERT_FATAL(n == 0 || gzwrite(f, data, (unsigned)n) == (int)n);
        CU_ASSERT_FATAL(gzclose(f) == Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        CU_ASSERT_FATAL(f != NULL);
        CU_ASSERT_FATAL(fwrite(data, 1, n, f) == n);
        CU_ASSERT_FATAL(fclose(f) == 0);
    }
}

/* Reads a whole (small) file back, for tests that damage compressed bytes. */
static size_t read_file(const char *path, unsigned char *buf, size_t size)
{
    FILE *f = fopen(path, "rb");
    CU_ASSERT_FATAL(f != NULL);
    size_t n = fread(buf, 1, size, f);
    fclose(f);
    CU_ASSERT_FATAL(n < size);
    return n;
}

static int is_zeroed(const pt_dataset *ds)
{
    return ds->count == 0 && !ds->images && !ds->labels && !ds->bytes && ds->nbytes == 0;
}

/* An IDX file: magic, ndim big-endian dimensions, body. Returns its size. */
static size_t make_idx(unsigned char *out, uint32_t magic, int ndim, const uint32_t *dims,
                       const unsigned char *body, size_t body_len)
{
    size_t n = 0;
    for (int k = 0; k < 1 + ndim; k++) {
        uint32_t v = k == 0 ? magic : dims[k - 1];
        for (int b = 3; b >= 0; b--)
            out[n++] = (unsigned char)(v >> (8 * b));
    }
    memcpy(out + n, body, body_len);
    return n + body_len;
}

/* A valid pair: 3 images of 2x3 with pixels 0, 17, 34, ... and labels 2, 0, 1. */
enum { PAIR_COUNT = 3, PAIR_ROWS = 2, PAIR_COLS = 3, PAIR_CLASSES = 3 };
typedef struct {
    unsigned char img[256], lab[64];
    size_t img_n, lab_n;
} idx_pair;

static void valid_pair(idx_pair *p)
{
    unsigned char pixels[PAIR_COUNT * PAIR_ROWS * PAIR_COLS], labels[] = {2, 0, 1};
    for (size_t i = 0; i < sizeof pixels; i++)
        pixels[i] = (unsigned char)(i * 15 % 256);
    pixels[1] = 255;
    uint32_t idims[] = {PAIR_COUNT, PAIR_ROWS, PAIR_COLS}, ldims[] = {PAIR_COUNT};
    p->img_n = make_idx(p->img, 0x803, 3, idims, pixels, sizeof pixels);
    p->lab_n = make_idx(p->lab, 0x801, 1, ldims, labels, sizeof labels);
}

/* ----------------------------------------------------------- IDX tests */

static void test_idx_round_trip(void)
{
    char dir[256], ipath[512], lpath[512];
    make_dir(dir, sizeof dir);
    idx_pair p;
    valid_pair(&p);
    const double mean = 0.3, std = 0.25;
    for (int gz = 0; gz < 2; gz++) {
        write_file(ipath, sizeof ipath, dir, gz ? "img.gz" : "img", p.img, p.img_n, gz);
        write_file(lpath, sizeof lpath, dir, gz ? "lab.gz" : "lab", p.lab, p.lab_n, gz);
        pt_dataset ds;
        pt_err err = {0};
        int rc = pt_idx_load(&ds, ipath, lpath, PAIR_CLASSES, mean, std, &err);
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        CU_ASSERT_EQUAL(ds.kind, PT_DATA_IMAGES);
        CU_ASSERT_EQUAL(ds.count, PAIR_COUNT);
        CU_ASSERT_EQUAL(ds.channels, 1);
        CU_ASSERT_EQUAL(ds.height, PAIR_ROWS);
        CU_ASSERT_EQUAL(ds.width, PAIR_COLS);
        CU_ASSERT_EQUAL(ds.classes, PAIR_CLASSES);
        const unsigned char *px = p.img + 16;
        for (int i = 0; i < PAIR_COUNT * PAIR_ROWS * PAIR_COLS; i++)
            CU_ASSERT_DOUBLE_EQUAL(ds.images[i], (px[i] / 255.0 - mean) / std, 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(ds.images[1], (1.0 - mean) / std, 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(ds.zero_pixel, -mean / std, 1e-6);
        for (int i = 0; i < PAIR_COUNT; i++)
            CU_ASSERT_EQUAL(ds.labels[i], p.lab[8 + i]);
        /* gather without augmentation copies the example and its label */
        float batch[2 * PAIR_ROWS * PAIR_COLS];
        int32_t targets[2];
        int64_t ids[] = {2, 0};
        pt_dataset_gather(&ds, ids, 2, NULL, 1, 0, batch, NULL, targets);
        CU_ASSERT(memcmp(batch, ds.images + 2 * 6, 6 * sizeof(float)) == 0);
        CU_ASSERT(memcmp(batch + 6, ds.images, 6 * sizeof(float)) == 0);
        CU_ASSERT(targets[0] == 1 && targets[1] == 2);
        pt_dataset_free(&ds);
        CU_ASSERT(is_zeroed(&ds));
        pt_dataset_free(&ds); /* freeing twice is allowed */
    }
    remove_dir(dir);
}

/* One damaged-input case: how it is made and what the loader must say. */
typedef struct {
    const char *name;
    void (*damage)(idx_pair *p);
    int classes;
    int code;
    int blame_labels; /* the message must name the labels file, not the images file */
    const char *word; /* the problem, as the message must name it */
} idx_case;

static void labels_as_images(idx_pair *p)
{
    memcpy(p->img, p->lab, p->lab_n);
    p->img_n = p->lab_n;
}
static void images_as_labels(idx_pair *p)
{
    memcpy(p->lab, p->img, p->img_n);
    p->lab_n = p->img_n;
}
static void garbage_magic(idx_pair *p) { memcpy(p->img, "GARB", 4); }
static void two_dimensions(idx_pair *p) { p->img[3] = 2; }
static void zero_count(idx_pair *p) { p->img[7] = 0; }
static void zero_cols(idx_pair *p) { p->img[15] = 0; }
static void huge_rows(idx_pair *p) { p->img[8] = 0x7f; }
static void truncated_magic(idx_pair *p) { p->img_n = 3; }
static void truncated_header(idx_pair *p) { p->img_n = 10; }
static void truncated_pixels(idx_pair *p) { p->img_n -= 5; }
static void truncated_labels(idx_pair *p) { p->lab_n -= 1; }
static void trailing_pixels(idx_pair *p) { p->img_n += 7; }
static void trailing_labels(idx_pair *p) { p->lab_n += 1; }
static void count_mismatch(idx_pair *p)
{
    p->lab[7] = 2;
    p->lab_n = 8 + 2;
}
static void label_too_big(idx_pair *p) { p->lab[8 + 1] = PAIR_CLASSES; }
static void no_damage(idx_pair *p) { (void)p; }

static const idx_case idx_cases[] = {
    {"labels passed as images", labels_as_images, PAIR_CLASSES, PT_EINPUT, 0, "magic"},
    {"images passed as labels", images_as_labels, PAIR_CLASSES, PT_EINPUT, 1, "magic"},
    {"not an IDX file", garbage_magic, PAIR_CLASSES, PT_EINPUT, 0, "bad magic"},
    {"wrong number of dimensions", two_dimensions, PAIR_CLASSES, PT_EINPUT, 0, "dimensions"},
    {"zero count", zero_count, PAIR_CLASSES, PT_EINPUT, 0, "(count) is zero"},
    {"zero columns", zero_cols, PAIR_CLASSES, PT_EINPUT, 0, "(cols) is zero"},
    {"absurd rows", huge_rows, PAIR_CLASSES, PT_EINPUT, 0, "at most"},
    {"truncated magic", truncated_magic, PAIR_CLASSES, PT_EINPUT, 0, "truncated header"},
    {"truncated header", truncated_header, PAIR_CLASSES, PT_EINPUT, 0, "truncated header"},
    {"truncated pixels", truncated_pixels, PAIR_CLASSES, PT_EINPUT, 0, "bytes of pixels"},
    {"truncated labels", truncated_labels, PAIR_CLASSES, PT_EINPUT, 1, "truncated"},
    {"trailing pixel bytes", trailing_pixels, PAIR_CLASSES, PT_EINPUT, 0, "7 trailing bytes after"},
    {"trailing label bytes", trailing_labels, PAIR_CLASSES, PT_EINPUT, 1, "1 trailing byte after"},
    {"count mismatch", count_mismatch, PAIR_CLASSES, PT_EINPUT, 0, "count mismatch"},
    {"label >= classes", label_too_big, PAIR_CLASSES, PT_EINPUT, 1, "out of range"},
    {"classes = 0", no_damage, 0, PT_EINPUT, 0, "classes"},
    {"classes = 257", no_damage, 257, PT_EINPUT, 0, "classes"},
    {NULL, NULL, 0, 0, 0, NULL},
};

/* Loads (images, labels) expecting failure `code` with a message naming
 * `blame` (a file name) and `word`; the dataset must come back zeroed. */
static void expect_idx_error(const char *what, const char *ipath, const char *lpath, int classes,
                             double mean, double std, int code, const char *blame,
                             const char *word)
{
    pt_dataset ds;
    pt_err err = {0};
    int rc = pt_idx_load(&ds, ipath, lpath, classes, mean, std, &err);
    printf("\n    %-36s -> %s", what, err.msg);
    CU_ASSERT_EQUAL(rc, code);
    CU_ASSERT_EQUAL(err.code, code);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, blame));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, word));
    CU_ASSERT(is_zeroed(&ds));
    pt_dataset_free(&ds);
}

/* Bytes after a gzip file's last member: zlib's gzread stops at the first
 * member followed by what is not another member and drops the rest, so the
 * loader walks the members itself and refuses them (gzip -d calls them
 * trailing garbage); more valid members are data. */
static void test_idx_gzip_trailing_bytes(void)
{
    char dir[256], ipath[512], lpath[512];
    make_dir(dir, sizeof dir);
    idx_pair p;
    valid_pair(&p);
    write_file(lpath, sizeof lpath, dir, "labels.gz", p.lab, p.lab_n, 1);
    static const struct {
        const char *name;
        const unsigned char *bytes;
        size_t n;
    } tails[] = {{"text after the member", (const unsigned char *)"GARBAGE!!", 9},
                 {"zero bytes after the member", (const unsigned char *)"\0\0\0\0\0\0\0\0", 8},
                 {"one byte of a member's magic", (const unsigned char *)"\x1f", 1},
                 {"a member's magic", (const unsigned char *)"\x1f\x8b", 2},
                 {"a member's header alone", (const unsigned char *)"\x1f\x8b\x08\0\0\0\0\0\0\x03", 10}};
    for (size_t i = 0; i < sizeof tails / sizeof *tails; i++) {
        write_file(ipath, sizeof ipath, dir, "images.gz", p.img, p.img_n, 1);
        FILE *f = fopen(ipath, "ab");
        CU_ASSERT_FATAL(f != NULL);
        CU_ASSERT_FATAL(fwrite(tails[i].bytes, 1, tails[i].n, f) == tails[i].n);
        CU_ASSERT_FATAL(fclose(f) == 0);
        expect_idx_error(tails[i].name, ipath, lpath, PAIR_CLASSES, 0.0, 1.0, PT_EINPUT,
                         "images.gz", "trailing bytes after the gzip data");
    }
    /* the images as two members, one after the other: read whole */
    char half[512];
    write_file(ipath, sizeof ipath, dir, "images.gz", p.img, p.img_n / 2, 1);
    write_file(half, sizeof half, dir, "second.gz", p.img + p.img_n / 2, p.img_n - p.img_n / 2, 1);
    unsigned char second[1 << 14];
    size_t second_n = read_file(half, second, sizeof second);
    FILE *f = fopen(ipath, "ab");
    CU_ASSERT_FATAL(f != NULL);
    CU_ASSERT_FATAL(fwrite(second, 1, second_n, f) == second_n);
    CU_ASSERT_FATAL(fclose(f) == 0);
    pt_dataset ds;
    pt_err err = {0};
    CU_ASSERT_EQUAL(pt_idx_load(&ds, ipath, lpath, PAIR_CLASSES, 0.0, 1.0, &err), 0);
    CU_ASSERT_EQUAL(ds.count, PAIR_COUNT);
    pt_dataset_free(&ds);
    remove_dir(dir);
}

static void test_idx_bad_files(void)
{
    char dir[256], ipath[512], lpath[512];
    make_dir(dir, sizeof dir);
    for (const idx_case *c = idx_cases; c->name; c++)
        for (int gz = 0; gz < 2; gz++) {
            idx_pair p;
            valid_pair(&p);
            c->damage(&p);
            write_file(ipath, sizeof ipath, dir, "images.idx.gz", p.img, p.img_n, gz);
            write_file(lpath, sizeof lpath, dir, "labels.idx.gz", p.lab, p.lab_n, gz);
            char what[64];
            snprintf(what, sizeof what, "%s (%s)", c->name, gz ? "gzip" : "plain");
            expect_idx_error(what, ipath, lpath, c->classes, 0.0, 1.0, c->code,
                             c->blame_labels ? "labels.idx.gz" : "images.idx.gz", c->word);
        }

    idx_pair p;
    valid_pair(&p);
    write_file(ipath, sizeof ipath, dir, "images.idx.gz", p.img, p.img_n, 1);
    write_file(lpath, sizeof lpath, dir, "labels.idx.gz", p.lab, p.lab_n, 1);
    expect_idx_error("bad std", ipath, lpath, PAIR_CLASSES, 0.0, 0.0, PT_EINPUT, "images.idx.gz",
                     "std");
    expect_idx_error("NaN mean", ipath, lpath, PAIR_CLASSES, NAN, 1.0, PT_EINPUT, "images.idx.gz",
                     "mean");

    char missing[512];
    snprintf(missing, sizeof missing, "%s/no-such-file.gz", dir);
    expect_idx_error("missing images file", missing, lpath, PAIR_CLASSES, 0, 1, PT_ESYS,
                     "no-such-file.gz", "No such file");
    expect_idx_error("missing labels file", ipath, missing, PAIR_CLASSES, 0, 1, PT_ESYS,
                     "no-such-file.gz", "No such file");
    /* a directory, a FIFO (which would block) or /dev/zero (which never
     * ends) is refused as bad input before it is read */
    expect_idx_error("a directory", dir, lpath, PAIR_CLASSES, 0, 1, PT_EINPUT, dir,
                     "not a regular file (a directory)");
    expect_idx_error("/dev/zero", "/dev/zero", lpath, PAIR_CLASSES, 0, 1, PT_EINPUT, "/dev/zero",
                     "not a regular file (a character device)");
    char fifo[600];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    CU_ASSERT_FATAL(mkfifo(fifo, 0600) == 0);
    expect_idx_error("a FIFO", ipath, fifo, PAIR_CLASSES, 0, 1, PT_EINPUT, fifo,
                     "not a regular file (a FIFO)");
    unlink(fifo);

    /* A valid gzip header followed by garbage: BFINAL=1, BTYPE=11 is no block type. */
    unsigned char bad_gz[64] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    memset(bad_gz + 10, 0xff, 30);
    write_file(ipath, sizeof ipath, dir, "corrupt.gz", bad_gz, 40, 0);
    expect_idx_error("corrupt gzip stream", ipath, lpath, PAIR_CLASSES, 0, 1, PT_EINPUT,
                     "corrupt.gz", "corrupt gzip");

    /* A good gzip file with damage after its header: cut in the deflate data,
     * cut in the 8-byte trailer, and a flipped CRC. */
    unsigned char packed[4096];
    unsigned char big[16 + 8 * 64 * 64];
    uint32_t dims[] = {8, 64, 64};
    unsigned char pixels[8 * 64 * 64];
    for (size_t i = 0; i < sizeof pixels; i++)
        pixels[i] = (unsigned char)((i * 2654435761u) >> 24); /* hard to compress */
    size_t big_n = make_idx(big, 0x803, 3, dims, pixels, sizeof pixels);
    unsigned char labels8[8 + 8] = {0, 0, 8, 1, 0, 0, 0, 8};
    write_file(lpath, sizeof lpath, dir, "labels8.gz", labels8, sizeof labels8, 1);
    write_file(ipath, sizeof ipath, dir, "whole.gz", big, big_n, 1);
    size_t packed_n = read_file(ipath, packed, sizeof packed);
    write_file(ipath, sizeof ipath, dir, "cut-data.gz", packed, packed_n / 2, 0);
    expect_idx_error("gzip cut in its data", ipath, lpath, 10, 0, 1, PT_EINPUT, "cut-data.gz",
                     "cut short");
    /* cut in the gzip header itself (its 2-byte magic alone, or 5 of its 10
     * bytes), and in the IDX header inside: said as a cut gzip stream, not
     * as an IDX file that ends */
    for (size_t n = 2; n <= 5; n += 3) {
        write_file(ipath, sizeof ipath, dir, "cut-gzip-header.gz", packed, n, 0);
        expect_idx_error("gzip cut in its own header", ipath, lpath, 10, 0, 1, PT_EINPUT,
                         "cut-gzip-header.gz", "truncated gzip stream");
    }
    {
        /* a whole IDX file, stored: its bytes follow the 10-byte gzip header
         * and the 5 of the stored block's, so a cut 10 bytes into the data
         * falls inside the IDX header (magic and dimension sizes) */
        unsigned char whole[16 + 8 * 4 * 4], cut[sizeof whole + 64];
        unsigned char px[8 * 4 * 4] = {0};
        uint32_t d3[] = {8, 4, 4};
        size_t whole_n = make_idx(whole, 0x803, 3, d3, px, sizeof px);
        write_file(ipath, sizeof ipath, dir, "stored.gz", whole, whole_n, 2);
        size_t cut_n = read_file(ipath, cut, sizeof cut);
        CU_ASSERT_FATAL(cut_n > 15 + whole_n && memcmp(cut + 15, whole, whole_n) == 0);
        write_file(ipath, sizeof ipath, dir, "cut-idx-header.gz", cut, 15 + 10, 0);
        expect_idx_error("gzip cut in the IDX header", ipath, lpath, 10, 0, 1, PT_EINPUT,
                         "cut-idx-header.gz",
                         "truncated gzip stream in the IDX header: expected 16 bytes (magic and 3 "
                         "dimension sizes) but the data stops after 10 bytes");
    }
    write_file(ipath, sizeof ipath, dir, "cut-trailer.gz", packed, packed_n - 3, 0);
    expect_idx_error("gzip cut in its trailer", ipath, lpath, 10, 0, 1, PT_EINPUT,
                     "cut-trailer.gz", "truncated gzip");
    packed[packed_n - 8] ^= 1;
    write_file(ipath, sizeof ipath, dir, "bad-crc.gz", packed, packed_n, 0);
    expect_idx_error("gzip with a wrong CRC", ipath, lpath, 10, 0, 1, PT_EINPUT, "bad-crc.gz",
                     "checksum");
    {
        /* the checksum is in the trailer, after the data: said so, not as
         * the position zlib had reached (it inflates ahead: the whole of a
         * small file on the first read, the header's), and without zlib's
         * own name for the file, "<fd:N>" */
        pt_dataset bad;
        pt_err why = {0};
        CU_ASSERT_EQUAL(pt_idx_load(&bad, ipath, lpath, 10, 0, 1, &why), PT_EINPUT);
        CU_ASSERT_PTR_NOT_NULL(strstr(why.msg, "bad-crc.gz: corrupt gzip data: the checksum "
                                               "(CRC-32) in the gzip trailer"));
        CU_ASSERT_PTR_NULL(strstr(why.msg, "<fd:"));
        CU_ASSERT_PTR_NULL(strstr(why.msg, "decompressed bytes"));
        CU_ASSERT_PTR_NULL(strstr(why.msg, "header"));
        /* the length in the trailer (ISIZE), likewise */
        packed[packed_n - 8] ^= 1;
        packed[packed_n - 4] ^= 1;
        write_file(ipath, sizeof ipath, dir, "bad-length.gz", packed, packed_n, 0);
        CU_ASSERT_EQUAL(pt_idx_load(&bad, ipath, lpath, 10, 0, 1, &why), PT_EINPUT);
        printf("\n    %-36s -> %s", "gzip with a wrong length", why.msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(why.msg, "bad-length.gz: corrupt gzip data: the length in "
                                               "the gzip trailer"));
        CU_ASSERT_PTR_NULL(strstr(why.msg, "<fd:"));
        packed[packed_n - 4] ^= 1;
        packed[packed_n - 8] ^= 1;
    }
    packed[packed_n - 8] ^= 1;
    write_file(ipath, sizeof ipath, dir, "good.gz", packed, packed_n, 0);
    pt_dataset ds;
    pt_err err = {0};
    CU_ASSERT_EQUAL(pt_idx_load(&ds, ipath, lpath, 10, 0, 1, &err), 0);
    CU_ASSERT_EQUAL(ds.count, 8);
    pt_dataset_free(&ds);
    printf("\n");
    remove_dir(dir);
}

static void test_idx_fashion_mnist(void)
{
    static const int32_t train_first[] = {9, 0, 0, 3, 0, 2, 7, 2};
    static const int32_t test_first[] = {9, 2, 1, 1, 6, 1, 4, 6};
    const char *dir = getenv("PT_FASHION_MNIST_DIR");
    if (!dir)
        dir = FASHION_DIR;
    if (access(dir, R_OK) != 0) {
        printf("skipped: %s is not installed ", dir);
        return;
    }
    for (int split = 0; split < 2; split++) {
        const char *prefix = split == 0 ? "train" : "t10k";
        char ipath[512], lpath[512];
        snprintf(ipath, sizeof ipath, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
        snprintf(lpath, sizeof lpath, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
        pt_dataset ds;
        pt_err err = {0};
        /* The published Fashion-MNIST mean and std of the training pixels. */
        int rc = pt_idx_load(&ds, ipath, lpath, 10, 0.2860, 0.3530, &err);
        if (rc)
            printf("%s\n", err.msg);
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        CU_ASSERT_EQUAL(ds.count, split == 0 ? 60000 : 10000);
        CU_ASSERT(ds.channels == 1 && ds.height == 28 && ds.width == 28 && ds.classes == 10);
        for (int i = 0; i < 8; i++)
            CU_ASSERT_EQUAL(ds.labels[i], split == 0 ? train_first[i] : test_first[i]);
        /* Normalised with its own statistics, the training set has mean ~0, std ~1. */
        double sum = 0, sumsq = 0;
        int64_t n = ds.count * 28 * 28;
        for (int64_t i = 0; i < n; i++) {
            sum += ds.images[i];
            sumsq += (double)ds.images[i] * ds.images[i];
        }
        double m = sum / n, sd = sqrt(sumsq / n - m * m);
        if (split == 0)
            CU_ASSERT(fabs(m) < 0.01 && fabs(sd - 1) < 0.01);
        int per_class[10] = {0};
        for (int64_t i = 0; i < ds.count; i++)
            per_class[ds.labels[i]]++;
        for (int c = 0; c < 10; c++) /* both splits are balanced */
            CU_ASSERT_EQUAL(per_class[c], ds.count / 10);
        pt_dataset_free(&ds);
    }
}

/* ---------------------------------------------------------- text tests */

enum { TEXT_N = 1000 };

static void text_bytes(unsigned char *t)
{
    for (int i = 0; i < TEXT_N; i++)
        t[i] = (unsigned char)((i * 37 + 11) ^ (i >> 8));
}

static void test_text_splits(void)
{
    char dir[256], path[512];
    unsigned char t[TEXT_N];
    text_bytes(t);
    make_dir(dir, sizeof dir);
    for (int gz = 0; gz < 2; gz++) {
        write_file(path, sizeof path, dir, gz ? "text.gz" : "text.txt", t, TEXT_N, gz);
        static const struct {
            double begin, end;
            int context;
            int64_t lo, hi;
        } splits[] = {{0, 0.9, 16, 0, 900},    {0.9, 1, 16, 900, 1000}, {0.25, 0.5, 7, 250, 500},
                      {0, 1, 1, 0, 1000},      {0.3333, 0.6667, 9, 333, 666},
                      {0, 0.017, 16, 0, 17}};
        for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
            pt_dataset ds;
            pt_err err = {0};
            int rc = pt_text_load(&ds, path, splits[k].context, splits[k].begin, splits[k].end,
                                  &err);
            CU_ASSERT_EQUAL_FATAL(rc, 0);
            int64_t n = splits[k].hi - splits[k].lo;
            CU_ASSERT_EQUAL(ds.kind, PT_DATA_TEXT);
            CU_ASSERT_EQUAL(ds.nbytes, n);
            CU_ASSERT_EQUAL(ds.context, splits[k].context);
            CU_ASSERT_EQUAL(ds.count, (n - 1) / splits[k].context);
            CU_ASSERT(memcmp(ds.bytes, t + splits[k].lo, (size_t)n) == 0);
            pt_dataset_free(&ds);
        }
    }
    remove_dir(dir);
}

static void test_text_layout(void)
{
    char dir[256], path[512];
    unsigned char t[TEXT_N];
    text_bytes(t);
    make_dir(dir, sizeof dir);
    write_file(path, sizeof path, dir, "text.txt", t, TEXT_N, 0);
    enum { CTX = 7, LO = 250 };
    pt_dataset ds;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_text_load(&ds, path, CTX, 0.25, 0.5, &err), 0);
    CU_ASSERT_EQUAL(ds.count, 35); /* (250 - 1) / 7 */
    int64_t ids[] = {ds.count - 1, 0, 3};
    int32_t tokens[3 * CTX], targets[3 * CTX];
    pt_dataset_gather(&ds, ids, 3, NULL, 0, 0, NULL, tokens, targets);
    for (int j = 0; j < 3; j++)
        for (int k = 0; k < CTX; k++) {
            int64_t at = LO + ids[j] * CTX + k;
            CU_ASSERT_EQUAL(tokens[j * CTX + k], t[at]);
            CU_ASSERT_EQUAL(targets[j * CTX + k], t[at + 1]);
            if (k + 1 < CTX) /* targets are the tokens shifted by one */
                CU_ASSERT_EQUAL(targets[j * CTX + k], tokens[j * CTX + k + 1]);
        }
    pt_dataset_free(&ds);
    remove_dir(dir);
}

static void expect_text_error(const char *what, const char *path, int context, double begin,
                              double end, int code, const char *word)
{
    pt_dataset ds;
    pt_err err = {0};
    int rc = pt_text_load(&ds, path, context, begin, end, &err);
    printf("\n    %-36s -> %s", what, err.msg);
    CU_ASSERT_EQUAL(rc, code);
    CU_ASSERT_EQUAL(err.code, code);
    const char *slash = strrchr(path, '/');
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, slash ? slash + 1 : path));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, word));
    CU_ASSERT(is_zeroed(&ds));
}

static void test_text_errors(void)
{
    char dir[256], path[512], missing[512], empty[512], cut[512];
    unsigned char t[TEXT_N], packed[2 * TEXT_N];
    text_bytes(t);
    make_dir(dir, sizeof dir);
    write_file(empty, sizeof empty, dir, "empty.txt", t, 0, 0);
    write_file(path, sizeof path, dir, "text.gz", t, TEXT_N, 1);
    size_t packed_n = read_file(path, packed, sizeof packed);
    write_file(cut, sizeof cut, dir, "cut.gz", packed, packed_n - 4, 0);
    write_file(path, sizeof path, dir, "text.txt", t, TEXT_N, 0);
    snprintf(missing, sizeof missing, "%s/missing.txt", dir);
    expect_text_error("missing file", missing, 8, 0, 1, PT_ESYS, "No such file");
    expect_text_error("empty file", empty, 8, 0, 1, PT_EINPUT, "too few");
    expect_text_error("split of 10 bytes", path, 16, 0, 0.01, PT_EINPUT, "too few");
    expect_text_error("split of 16 bytes", path, 16, 0.5, 0.516, PT_EINPUT, "too few");
    expect_text_error("begin < 0", path, 8, -0.1, 0.5, PT_EINPUT, "split");
    expect_text_error("begin = end", path, 8, 0.5, 0.5, PT_EINPUT, "split");
    expect_text_error("begin > end", path, 8, 0.6, 0.5, PT_EINPUT, "split");
    expect_text_error("end > 1", path, 8, 0, 1.5, PT_EINPUT, "split");
    expect_text_error("begin NaN", path, 8, NAN, 1, PT_EINPUT, "split");
    expect_text_error("context 0", path, 0, 0, 1, PT_EINPUT, "context");
    expect_text_error("truncated gzip", cut, 8, 0, 1, PT_EINPUT, "truncated");
    {
        /* gzip's magic, then plain text: zlib's message, without its name
         * for the file ("<fd:N>"), after the path */
        char magic[512];
        unsigned char plain[64] = {0x1f, 0x8b};
        memcpy(plain + 2, "plain text, not a gzip stream", 29);
        write_file(magic, sizeof magic, dir, "magic.txt", plain, 31, 0);
        pt_dataset ds;
        pt_err err = {0};
        CU_ASSERT_EQUAL(pt_text_load(&ds, magic, 8, 0, 1, &err), PT_EINPUT);
        printf("\n    %-36s -> %s", "gzip magic and plain text", err.msg);
        char want[600];
        snprintf(want, sizeof want, "%s: corrupt gzip data (zlib: unknown compression method)",
                 magic);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));
        CU_ASSERT_PTR_NULL(strstr(err.msg, "<fd:"));
        CU_ASSERT(is_zeroed(&ds));
    }
    /* bytes after the gzip data, which gzread drops unread: refused; an
     * incomplete member there is trailing bytes, not a truncated text */
    char tail[512];
    static const struct {
        const char *name, *bytes;
        size_t n;
    } tails[] = {{"text after the gzip data", "GARBAGE GARBAGE", 15},
                 {"a member's magic after the data", "\x1f\x8b", 2},
                 {"a member's header after the data", "\x1f\x8b\x08\0\0\0\0\0\0\x03", 10}};
    for (size_t i = 0; i < sizeof tails / sizeof *tails; i++) {
        unsigned char with[2 * TEXT_N + 16];
        memcpy(with, packed, packed_n);
        memcpy(with + packed_n, tails[i].bytes, tails[i].n);
        write_file(tail, sizeof tail, dir, "tail.gz", with, packed_n + tails[i].n, 0);
        expect_text_error(tails[i].name, tail, 8, 0, 1, PT_EINPUT, "trailing bytes after the gzip data");
    }
    /* two whole members: one text */
    {
        unsigned char two[4 * TEXT_N];
        memcpy(two, packed, packed_n);
        memcpy(two + packed_n, packed, packed_n);
        write_file(tail, sizeof tail, dir, "two.gz", two, 2 * packed_n, 0);
        pt_dataset ds;
        pt_err err = {0};
        CU_ASSERT_EQUAL(pt_text_load(&ds, tail, 8, 0, 1, &err), 0);
        CU_ASSERT_EQUAL(ds.count, (2 * TEXT_N - 1) / 8);
        pt_dataset_free(&ds);
    }
    printf("\n");
    remove_dir(dir);
}

/* A memory limit on data.text: a file of exactly the limit loads, one byte
 * more is refused, and a gzip file is judged by what it unpacks to (a small
 * file of zeros can unpack to gigabytes), with a message that says so. */
static void test_text_memory_limit(void)
{
    char dir[256], path[512];
    make_dir(dir, sizeof dir);
    enum { LIMIT = 3 << 20 };
    unsigned char *bytes = malloc(LIMIT + 1);
    CU_ASSERT_FATAL(bytes != NULL);
    for (size_t i = 0; i <= LIMIT; i++)
        bytes[i] = (unsigned char)('a' + i % 26);
    pt_dataset ds;
    pt_err err = {0};
    /* 3 MiB, and 2 MiB, which the read's doubling buffer reaches exactly */
    for (size_t limit = LIMIT; limit >= (2u << 20); limit -= 1u << 20) {
        pt_data_set_memory_limit((int64_t)limit);
        write_file(path, sizeof path, dir, "at-limit.txt", bytes, limit, 0);
        CU_ASSERT_EQUAL(pt_text_load(&ds, path, 8, 0, 1, &err), 0);
        CU_ASSERT_EQUAL(ds.nbytes, (int64_t)limit);
        pt_dataset_free(&ds);
        write_file(path, sizeof path, dir, "past-limit.txt", bytes, limit + 1, 0);
        expect_text_error("a byte past the limit", path, 8, 0, 1, PT_EINPUT, PT_DATA_TOO_BIG);
    }
    /* a plain file past the limit by its size is refused by it, at once,
     * not read up to the limit first (a sparse 64 GiB file took 35 s and
     * 12 GB of memory to refuse on a 24 GiB machine) */
    pt_data_set_memory_limit(LIMIT);
    snprintf(path, sizeof path, "%s/sparse.txt", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_FATAL(ftruncate(fd, (off_t)1 << 36) == 0);
    close(fd);
    expect_text_error("a sparse 64 GiB file", path, 8, 0, 1, PT_EINPUT, "holds 68719476736 bytes");
    unlink(path);
    memset(bytes, 0, LIMIT + 1);
    write_file(path, sizeof path, dir, "zeros.gz", bytes, LIMIT + 1, 1);
    expect_text_error("gzip unpacking past the limit", path, 8, 0, 1, PT_EINPUT,
                      "once unpacked (it is gzip data)");
    pt_data_set_memory_limit(0);
    CU_ASSERT_EQUAL(pt_text_load(&ds, path, 8, 0, 1, &err), 0); /* no limit: it loads */
    pt_dataset_free(&ds);
    free(bytes);
    printf("\n");
    remove_dir(dir);
}

/* ----------------------------------------------------- synthetic tests */

static void test_synthetic_images(void)
{
    enum { N = 200, C = 2, H = 4, W = 6, K = 5, P = C * H * W };
    pt_dataset a, b, c, prefix;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_synthetic_images(&a, N, C, H, W, K, 7, &err), 0);
    CU_ASSERT_EQUAL_FATAL(pt_synthetic_images(&b, N, C, H, W, K, 7, &err), 0);
    CU_ASSERT_EQUAL_FATAL(pt_synthetic_images(&c, N, C, H, W, K, 8, &err), 0);
    CU_ASSERT_EQUAL_FATAL(pt_synthetic_images(&prefix, N / 2, C, H, W, K, 7, &err), 0);
    CU_ASSERT(a.kind == PT_DATA_IMAGES && a.count == N && a.channels == C && a.height == H &&
              a.width == W && a.classes == K);
    CU_ASSERT(memcmp(a.images, b.images, sizeof(float) * N * P) == 0);
    CU_ASSERT(memcmp(a.labels, b.labels, sizeof(int32_t) * N) == 0);
    CU_ASSERT(memcmp(a.images, c.images, sizeof(float) * N * P) != 0);
    CU_ASSERT(memcmp(a.labels, c.labels, sizeof(int32_t) * N) != 0);
    CU_ASSERT(memcmp(a.images, prefix.images, sizeof(float) * N / 2 * P) == 0);
    int seen[K] = {0};
    for (int i = 0; i < N; i++) {
        CU_ASSERT(a.labels[i] >= 0 && a.labels[i] < K);
        if (a.labels[i] >= 0 && a.labels[i] < K)
            seen[a.labels[i]]++;
    }
    for (int k = 0; k < K; k++)
        CU_ASSERT(seen[k] > 0);
    /* Learnable: the nearest class mean already classifies almost everything. */
    double means[K][P] = {{0}};
    for (int i = 0; i < N; i++)
        for (int p = 0; p < P; p++)
            means[a.labels[i]][p] += a.images[i * P + p] / seen[a.labels[i]];
    int correct = 0;
    for (int i = 0; i < N; i++) {
        int best = -1;
        double best_d = INFINITY;
        for (int k = 0; k < K; k++) {
            double d = 0;
            for (int p = 0; p < P; p++)
                d += (a.images[i * P + p] - means[k][p]) * (a.images[i * P + p] - means[k][p]);
            if (d < best_d) {
                best_d = d;
                best = k;
            }
        }
        correct += best == a.labels[i];
    }
    CU_ASSERT(correct >= N * 95 / 100);
    pt_dataset_free(&a);
    pt_dataset_free(&b);
    pt_dataset_free(&c);
    pt_dataset_free(&prefix);
    CU_ASSERT_EQUAL(pt_synthetic_images(&a, N, 0, H, W, K, 7, &err), PT_EINPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "channels"));
    CU_ASSERT_EQUAL(pt_synthetic_images(&a, 0, C, H, W, K, 7, &err), PT_EINPUT);
    CU_ASSERT_EQUAL(pt_synthetic_images(&a, PT_DATA_MAX_COUNT, 64, 4096, 4096, K, 7, &err),
                    PT_EINPUT);
    CU_ASSERT(is_zeroed(&a));
}

static void test_synthetic_text(void)
{
    enum { N = 20000, CTX = 32 };
    pt_dataset a, b, c;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_synthetic_text(&a, N, CTX, 3, &err), 0);
    CU_ASSERT_EQUAL_FATAL(pt_synthetic_text(&b, N, CTX, 3, &err), 0);
    CU_ASSERT_EQUAL_FATAL(pt_synthetic_text(&c, N, CTX, 4, &err), 0);
    CU_ASSERT(a.kind == PT_DATA_TEXT && a.nbytes == N && a.context == CTX);
    CU_ASSERT_EQUAL(a.count, (N - 1) / CTX);
    CU_ASSERT(memcmp(a.bytes, b.bytes, N) == 0);
    CU_ASSERT(memcmp(a.bytes, c.bytes, N) != 0);
    /* A few byte values, and the next byte is predictable from the current
     * one: conditional entropy well below log2(distinct values). */
    int64_t (*pair)[256] = calloc(256, sizeof *pair), (*pair_c)[256] = calloc(256, sizeof *pair_c);
    int64_t first[256] = {0};
    CU_ASSERT_FATAL(pair && pair_c);
    int distinct = 0;
    for (int64_t i = 0; i + 1 < N; i++) {
        pair[a.bytes[i]][a.bytes[i + 1]]++;
        first[a.bytes[i]]++;
    }
    double h = 0;
    for (int x = 0; x < 256; x++) {
        distinct += first[x] > 0;
        for (int y = 0; y < 256; y++)
            if (pair[x][y])
                h -= (double)pair[x][y] / (N - 1) * log2((double)pair[x][y] / first[x]);
    }
    CU_ASSERT(distinct >= 2 && distinct <= 16);
    CU_ASSERT(h < log2(distinct) - 1.0);
    /* Another seed walks the same chain: each byte has the same most likely
     * successor, so text from seed 4 is a held-out sample for seed 3. */
    for (int64_t i = 0; i + 1 < N; i++)
        pair_c[c.bytes[i]][c.bytes[i + 1]]++;
    for (int x = 0; x < 256; x++) {
        if (!first[x])
            continue;
        int best_a = 0, best_c = 0;
        for (int y = 1; y < 256; y++) {
            best_a = pair[x][y] > pair[x][best_a] ? y : best_a;
            best_c = pair_c[x][y] > pair_c[x][best_c] ? y : best_c;
        }
        CU_ASSERT_EQUAL(best_a, best_c);
    }
    free(pair);
    free(pair_c);
    pt_dataset_free(&a);
    pt_dataset_free(&b);
    pt_dataset_free(&c);
    CU_ASSERT_EQUAL(pt_synthetic_text(&a, CTX, CTX, 3, &err), PT_EINPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "bytes"));
    CU_ASSERT_EQUAL(pt_synthetic_text(&a, N, 0, 3, &err), PT_EINPUT);
    CU_ASSERT(is_zeroed(&a));
}

static const pt_test idx_tests[] = {
    {"idx_round_trip", test_idx_round_trip},
    {"idx_bad_files", test_idx_bad_files},
    {"idx_gzip_trailing_bytes", test_idx_gzip_trailing_bytes},
    {"idx_fashion_mnist", test_idx_fashion_mnist},
    {NULL, NULL},
};
static const pt_test text_tests[] = {
    {"text_splits", test_text_splits},
    {"text_layout", test_text_layout},
    {"text_errors", test_text_errors},
    {"text_memory_limit", test_text_memory_limit},
    {NULL, NULL},
};
static const pt_test textcls_tests[] = {
    {"textcls_tsv", test_textcls_tsv},
    {"textcls_jsonl", test_textcls_jsonl},
    {"textcls_label_order", test_textcls_label_order},
    {"textcls_split", test_textcls_split},
    {"textcls_test_file", test_textcls_test_file},
    {"textcls_hostile", test_textcls_hostile},
    {"textcls_limits", test_textcls_limits},
    {"textcls_kjv", test_textcls_kjv},
    {NULL, NULL},
};
static const pt_test synthetic_tests[] = {
    {"synthetic_images", test_synthetic_images},
    {"synthetic_text", test_synthetic_text},
    {NULL, NULL},
};
static const pt_test augment_tests[] = {
    {"augment_active", test_augment_active},
    {"augment_flip", test_augment_flip},
    {"augment_crop", test_augment_crop},
    {"augment_deterministic", test_augment_deterministic},
    {NULL, NULL},
};
static const pt_test sampler_tests[] = {
    {"sampler_permutation", test_sampler_permutation},
    {"sampler_no_shuffle", test_sampler_no_shuffle},
    {"sampler_slices", test_sampler_slices},
    {"sampler_errors", test_sampler_errors},
    {NULL, NULL},
};
static const pt_test_suite suites[] = {
    {"idx", idx_tests},         {"text", text_tests},       {"textcls", textcls_tests},
    {"synthetic", synthetic_tests}, {"augment", augment_tests}, {"sampler", sampler_tests},
    {NULL, NULL},
};
