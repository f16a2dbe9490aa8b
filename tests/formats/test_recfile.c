/*
 * test_recfile.c: the CRC-checked record container of formats/formats.h.
 *
 * Round trips (several records, an 8 MB one written in pieces, an empty one),
 * then damage: truncation at every length and every single-byte change of a
 * small file must be refused with PT_EINPUT (never a crash: the ASan build runs
 * this too). Structural defects that a CRC would hide are planted in files
 * built byte by byte here with a correct CRC, so each structural check is
 * exercised on its own.
 */
#include "formats/formats.h"
#include "tests/common/test_util.h"
#include "tests/common/cunit_main.h"

static const char MAGIC[8] = {'P', 'T', 'T', 'E', 'S', 'T', '0', '1'};

/* ---------------------------------------------------- hand-built files */

typedef struct bytes {
    unsigned char *p;
    size_t n, cap;
} bytes;

static void put(bytes *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    if (n)
        memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put32(bytes *b, uint32_t v)
{
    unsigned char x[4];
    pt_put_le32(x, v);
    put(b, x, 4);
}

static void put64(bytes *b, uint64_t v)
{
    unsigned char x[8];
    pt_put_le64(x, v);
    put(b, x, 8);
}

static void put_header(bytes *b, uint32_t reserved)
{
    put(b, MAGIC, 8);
    put32(b, 3);
    put32(b, reserved);
}

static void put_record(bytes *b, const char *tag, size_t tag_len, const char *data, uint64_t len)
{
    put32(b, (uint32_t)tag_len);
    put(b, tag, tag_len);
    put64(b, len);
    put(b, data, (size_t)len);
}

/* Appends a trailer with a correct CRC. */
static void put_trailer(bytes *b, uint64_t count)
{
    put32(b, 0xFFFFFFFFu);
    put64(b, count);
    put32(b, pt_crc32(0, b->p, b->n));
    put(b, "PTRECEND", 8);
}

/* Writes b to path, opens it, expects PT_EINPUT with `phrase` in the message. */
static void expect_refused(const char *path, bytes *b, const char *phrase)
{
    CU_ASSERT_FATAL(write_raw(path, b->p, b->n) == 0);
    pt_recfile *f = (pt_recfile *)1;
    uint32_t version = 99;
    pt_err err = {0};
    int rc = pt_recfile_open(&f, path, MAGIC, &version, &err);
    CU_ASSERT(rc == PT_EINPUT);
    CU_ASSERT(f == NULL);
    CU_ASSERT(strstr(err.msg, path) != NULL);
    if (!strstr(err.msg, phrase))
        printf("\n  expected '%s' in: %s\n", phrase, err.msg);
    CU_ASSERT(strstr(err.msg, phrase) != NULL);
    free(b->p);
    *b = (bytes){0};
}

/* ------------------------------------------------------------- fixtures */

/* A small valid file of three records; returns its bytes. */
static unsigned char *write_small_file(const char *path, size_t *n)
{
    pt_err err = {0};
    pt_recwriter *w;
    CU_ASSERT_FATAL(pt_recwriter_open(&w, path, MAGIC, 5, &err) == 0);
    CU_ASSERT_FATAL(pt_recwriter_add(w, "step", "\x2a\0\0\0\0\0\0\0", 8, &err) == 0);
    CU_ASSERT_FATAL(pt_recwriter_add(w, "none", NULL, 0, &err) == 0);
    CU_ASSERT_FATAL(pt_recwriter_add(w, "name", "blocks.0.attn", 13, &err) == 0);
    CU_ASSERT_FATAL(pt_recwriter_commit(w, &err) == 0);
    unsigned char *data = read_raw(path, n);
    CU_ASSERT_FATAL(data != NULL);
    return data;
}

/* ---------------------------------------------------------------- tests */

static void test_round_trip(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "units-0.bin");
    size_t big_n = 8u << 20;
    unsigned char *big = malloc(big_n);
    for (size_t i = 0; i < big_n; i++)
        big[i] = (unsigned char)(i * 7 + (i >> 13));
    const char small[] = "hello\0world";

    pt_err err = {0};
    pt_recwriter *w;
    CU_ASSERT_FATAL(pt_recwriter_open(&w, path, MAGIC, 7, &err) == 0);
    CU_ASSERT(pt_recwriter_add(w, "alpha", small, sizeof small, &err) == 0);
    CU_ASSERT(pt_recwriter_add(w, "empty", NULL, 0, &err) == 0);
    CU_ASSERT(pt_recwriter_begin(w, "big", big_n, &err) == 0);
    size_t pieces[] = {1, 4095, 1u << 20, 3u << 20, 17};
    size_t at = 0;
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        CU_ASSERT(pt_recwriter_write(w, big + at, pieces[i], &err) == 0);
        at += pieces[i];
    }
    CU_ASSERT(pt_recwriter_write(w, big + at, big_n - at, &err) == 0);
    CU_ASSERT(pt_recwriter_add(w, "beta", "\xff\x00\x01", 3, &err) == 0);
    CU_ASSERT(!file_exists(path));
    CU_ASSERT_FATAL(pt_recwriter_commit(w, &err) == 0);
    CU_ASSERT(count_entries(dir) == 1);

    pt_recfile *f;
    uint32_t version = 0;
    CU_ASSERT_FATAL(pt_recfile_open(&f, path, MAGIC, &version, &err) == 0);
    CU_ASSERT(version == 7);
    CU_ASSERT_STRING_EQUAL(pt_recfile_path(f), path);
    CU_ASSERT_FATAL(pt_recfile_count(f) == 4);
    const char *names[] = {"alpha", "empty", "big", "beta"};
    const void *payloads[] = {small, NULL, big, "\xff\x00\x01"};
    uint64_t lens[] = {sizeof small, 0, big_n, 3};
    for (int i = 0; i < 4; i++) {
        const char *tag;
        size_t tag_len;
        const void *data;
        uint64_t len;
        pt_recfile_get(f, i, &tag, &tag_len, &data, &len);
        CU_ASSERT(tag_len == strlen(names[i]) && memcmp(tag, names[i], tag_len) == 0);
        CU_ASSERT(len == lens[i]);
        CU_ASSERT(len == 0 || memcmp(data, payloads[i], (size_t)len) == 0);
        const void *found;
        uint64_t found_len;
        CU_ASSERT(pt_recfile_find(f, names[i], &found, &found_len, &err) == 0);
        CU_ASSERT(found == data && found_len == len);
    }
    const char *tag = "x";
    const void *data = "x";
    uint64_t len = 1;
    pt_recfile_get(f, 4, &tag, NULL, &data, &len);
    CU_ASSERT(tag == NULL && data == NULL && len == 0);
    pt_recfile_get(f, -1, &tag, NULL, NULL, NULL);
    CU_ASSERT(tag == NULL);
    pt_recfile_close(f);
    pt_recfile_close(NULL);
    free(big);
    free(path);
    free_temp_dir(dir);
}

/* Letting go of a record's pages (pt_recfile_release, a checkpoint load
 * does it as it goes) leaves the data readable and the same: whole and
 * partial pages, the whole mapping, ranges reaching past it or outside it. */
static void test_release_keeps_data(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "units-0.bin");
    size_t big_n = (3u << 20) + 12345;
    unsigned char *big = malloc(big_n);
    CU_ASSERT_FATAL(big != NULL);
    for (size_t i = 0; i < big_n; i++)
        big[i] = (unsigned char)(i * 13 + (i >> 11));
    pt_err err = {0};
    pt_recwriter *w;
    CU_ASSERT_FATAL(pt_recwriter_open(&w, path, MAGIC, 1, &err) == 0);
    CU_ASSERT_FATAL(pt_recwriter_add(w, "a", "x", 1, &err) == 0);
    CU_ASSERT_FATAL(pt_recwriter_add(w, "big", big, big_n, &err) == 0);
    CU_ASSERT_FATAL(pt_recwriter_commit(w, &err) == 0);
    pt_recfile *f;
    uint32_t version;
    CU_ASSERT_FATAL(pt_recfile_open(&f, path, MAGIC, &version, &err) == 0);
    const void *data, *a;
    uint64_t len, a_len;
    CU_ASSERT_FATAL(pt_recfile_find(f, "big", &data, &len, &err) == 0);
    CU_ASSERT_FATAL(pt_recfile_find(f, "a", &a, &a_len, &err) == 0);
    const unsigned char *d = data;
    CU_ASSERT(memcmp(d, big, big_n) == 0);
    pt_recfile_release(f, d + 1, 100);              /* inside one page */
    pt_recfile_release(f, d + 4097, (1u << 20) + 3); /* partial pages at both ends */
    CU_ASSERT(memcmp(d, big, big_n) == 0);
    pt_recfile_release(f, data, len);
    CU_ASSERT(memcmp(d, big, big_n) == 0 && memcmp(a, "x", 1) == 0);
    pt_recfile_release(f, d, len + (1u << 30)); /* past the mapping: ignored */
    pt_recfile_release(f, big, 4096);           /* not in it: ignored */
    pt_recfile_release(f, d + len, UINT64_MAX);  /* wraps: ignored */
    CU_ASSERT(memcmp(d, big, big_n) == 0);
    pt_recfile_close(f);
    free(big);
    free(path);
    free_temp_dir(dir);
}

static void test_zero_records(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "empty.bin");
    pt_err err = {0};
    pt_recwriter *w;
    CU_ASSERT_FATAL(pt_recwriter_open(&w, path, MAGIC, 1, &err) == 0);
    CU_ASSERT_FATAL(pt_recwriter_commit(w, &err) == 0);
    pt_recfile *f;
    uint32_t version;
    CU_ASSERT_FATAL(pt_recfile_open(&f, path, MAGIC, &version, &err) == 0);
    CU_ASSERT(pt_recfile_count(f) == 0);
    const void *data;
    uint64_t len;
    CU_ASSERT(pt_recfile_find(f, "x", &data, &len, &err) == PT_EINPUT);
    pt_recfile_close(f);
    free(path);
    free_temp_dir(dir);
}

static void test_wrong_magic_and_missing_tag(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "manifest.bin");
    size_t n;
    free(write_small_file(path, &n));
    pt_err err = {0};
    pt_recfile *f;
    uint32_t version;
    CU_ASSERT(pt_recfile_open(&f, path, "PTOTHER1", &version, &err) == PT_EINPUT);
    CU_ASSERT(f == NULL);
    CU_ASSERT(strstr(err.msg, "not a PTOTHER1 file") != NULL);
    CU_ASSERT(strstr(err.msg, "PTTEST01") != NULL);

    CU_ASSERT_FATAL(pt_recfile_open(&f, path, MAGIC, &version, &err) == 0);
    CU_ASSERT(version == 5);
    const void *data;
    uint64_t len;
    CU_ASSERT(pt_recfile_find(f, "gamma", &data, &len, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "no record 'gamma'") != NULL);
    CU_ASSERT(strstr(err.msg, path) != NULL);
    CU_ASSERT(data == NULL && len == 0);
    /* a prefix of a tag is not a match */
    CU_ASSERT(pt_recfile_find(f, "nam", &data, &len, &err) == PT_EINPUT);
    CU_ASSERT(pt_recfile_find(f, "name", &data, &len, &err) == 0);
    CU_ASSERT(len == 13 && memcmp(data, "blocks.0.attn", 13) == 0);
    pt_recfile_close(f);

    char *missing = join_path(dir, "missing.bin");
    CU_ASSERT(pt_recfile_open(&f, missing, MAGIC, &version, &err) == PT_ESYS);
    CU_ASSERT(pt_recfile_open(&f, dir, MAGIC, &version, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "not a regular file") != NULL);
    free(missing);
    free(path);
    free_temp_dir(dir);
}

static void test_truncation_at_every_length(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "full.bin");
    char *cut = join_path(dir, "cut.bin");
    size_t n;
    unsigned char *full = write_small_file(path, &n);
    int refused = 0;
    for (size_t len = 0; len < n; len++) {
        CU_ASSERT_FATAL(write_raw(cut, full, len) == 0);
        pt_recfile *f = NULL;
        uint32_t version;
        pt_err err = {0};
        int rc = pt_recfile_open(&f, cut, MAGIC, &version, &err);
        refused += rc == PT_EINPUT && f == NULL && err.msg[0] != '\0';
        pt_recfile_close(f);
    }
    CU_ASSERT(refused == (int)n);
    free(full);
    free(cut);
    free(path);
    free_temp_dir(dir);
}

static void test_every_single_byte_change(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "full.bin");
    char *bad = join_path(dir, "bad.bin");
    size_t n;
    unsigned char *full = write_small_file(path, &n);
    const unsigned char flips[] = {0x01, 0x80, 0xFF};
    int refused = 0, tried = 0, by_crc = 0;
    for (size_t pos = 0; pos < n; pos++) {
        for (size_t k = 0; k < sizeof flips; k++) {
            full[pos] ^= flips[k];
            CU_ASSERT_FATAL(write_raw(bad, full, n) == 0);
            full[pos] ^= flips[k];
            pt_recfile *f = NULL;
            uint32_t version;
            pt_err err = {0};
            int rc = pt_recfile_open(&f, bad, MAGIC, &version, &err);
            tried++;
            refused += rc == PT_EINPUT && f == NULL;
            by_crc += strstr(err.msg, "checksum mismatch") != NULL;
            pt_recfile_close(f);
        }
    }
    CU_ASSERT(refused == tried);
    CU_ASSERT(by_crc > 0);
    free(full);
    free(bad);
    free(path);
    free_temp_dir(dir);
}

static void test_structural_defects_behind_a_valid_crc(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "forged.bin");
    bytes b = {0};

    /* sanity: the builder makes files the reader accepts */
    put_header(&b, 0);
    put_record(&b, "a", 1, "xy", 2);
    put_trailer(&b, 1);
    CU_ASSERT_FATAL(write_raw(path, b.p, b.n) == 0);
    pt_recfile *f;
    uint32_t version;
    pt_err err = {0};
    CU_ASSERT(pt_recfile_open(&f, path, MAGIC, &version, &err) == 0);
    pt_recfile_close(f);
    free(b.p);
    b = (bytes){0};

    put_header(&b, 0);
    put_record(&b, "", 0, "xy", 2);
    put_trailer(&b, 1);
    expect_refused(path, &b, "tag length 0 is not in 1..255");

    char long_tag[256];
    memset(long_tag, 't', sizeof long_tag);
    put_header(&b, 0);
    put_record(&b, long_tag, 256, "xy", 2);
    put_trailer(&b, 1);
    expect_refused(path, &b, "tag length 256");

    put_header(&b, 0);
    put_record(&b, "a", 1, "xy", 2);
    b.n -= 2; /* the payload length says 2 but the trailer follows at once */
    put_trailer(&b, 1);
    expect_refused(path, &b, "runs past the end of the records");

    put_header(&b, 0);
    put32(&b, 200); /* a tag length whose tag would run into the trailer */
    put(&b, "abc", 3);
    put_trailer(&b, 1);
    expect_refused(path, &b, "its tag and length run past");

    put_header(&b, 0);
    put_record(&b, "a", 1, "xy", 2);
    put(&b, "zz", 2); /* stray bytes too short for a tag length */
    put_trailer(&b, 1);
    expect_refused(path, &b, "its tag length runs past");

    put_header(&b, 0);
    put_record(&b, "a", 1, "xy", 2);
    put_record(&b, "b", 1, "xy", 2);
    put_trailer(&b, 3);
    expect_refused(path, &b, "the trailer says 3 records but the file holds 2");

    put_header(&b, 0);
    put_record(&b, "dup", 3, "xy", 2);
    put_record(&b, "other", 5, "", 0);
    put_record(&b, "dup", 3, "zz", 2);
    put_trailer(&b, 3);
    expect_refused(path, &b, "record 'dup' appears more than once");

    put_header(&b, 0);
    put_record(&b, "a\0b", 3, "xy", 2);
    put_trailer(&b, 1);
    expect_refused(path, &b, "contains a NUL byte");

    put_header(&b, 1);
    put_trailer(&b, 0);
    expect_refused(path, &b, "reserved header field");

    put_header(&b, 0);
    put32(&b, 1); /* a payload length that would wrap an offset */
    put(&b, "a", 1);
    put64(&b, UINT64_MAX);
    put(&b, "xy", 2);
    put_trailer(&b, 1);
    expect_refused(path, &b, "runs past the end of the records");

    put_header(&b, 0);
    put_trailer(&b, 0);
    b.p[b.n - 1] = 'X';
    expect_refused(path, &b, "no end marker");

    put_header(&b, 0);
    put_trailer(&b, 0);
    b.p[b.n - 10] ^= 1; /* the stored crc itself */
    expect_refused(path, &b, "checksum mismatch (the file is corrupted): stored 0x");

    free(path);
    free_temp_dir(dir);
}

static void test_writer_misuse(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "w.bin");
    pt_err err = {0};
    pt_recwriter *w;

    CU_ASSERT_FATAL(pt_recwriter_open(&w, path, MAGIC, 1, &err) == 0);
    CU_ASSERT(pt_recwriter_add(w, "a", "1", 1, &err) == 0);
    CU_ASSERT(pt_recwriter_add(w, "a", "2", 1, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "'a' is written twice") != NULL);
    CU_ASSERT(pt_recwriter_add(w, "", "2", 1, &err) == PT_EINPUT);
    char long_tag[300];
    memset(long_tag, 'x', 256);
    long_tag[256] = '\0';
    CU_ASSERT(pt_recwriter_add(w, long_tag, "2", 1, &err) == PT_EINPUT);
    long_tag[255] = '\0';
    CU_ASSERT(pt_recwriter_add(w, long_tag, "2", 1, &err) == 0); /* 255 is allowed */
    /* refused arguments do not break the writer */
    CU_ASSERT_FATAL(pt_recwriter_commit(w, &err) == 0);
    pt_recfile *f;
    uint32_t version;
    CU_ASSERT_FATAL(pt_recfile_open(&f, path, MAGIC, &version, &err) == 0);
    CU_ASSERT(pt_recfile_count(f) == 2);
    pt_recfile_close(f);
    unlink(path);

    CU_ASSERT_FATAL(pt_recwriter_open(&w, path, MAGIC, 1, &err) == 0);
    CU_ASSERT(pt_recwriter_begin(w, "big", 10, &err) == 0);
    CU_ASSERT(pt_recwriter_write(w, "12345", 5, &err) == 0);
    CU_ASSERT(pt_recwriter_write(w, "1234567", 7, &err) == PT_EINTERNAL);
    CU_ASSERT(strstr(err.msg, "only 5") != NULL);
    CU_ASSERT(pt_recwriter_commit(w, &err) == PT_EINTERNAL);
    CU_ASSERT(count_entries(dir) == 0);

    CU_ASSERT_FATAL(pt_recwriter_open(&w, path, MAGIC, 1, &err) == 0);
    CU_ASSERT(pt_recwriter_begin(w, "big", 10, &err) == 0);
    CU_ASSERT(pt_recwriter_write(w, "12345", 5, &err) == 0);
    CU_ASSERT(pt_recwriter_commit(w, &err) == PT_EINTERNAL);
    CU_ASSERT(strstr(err.msg, "missing 5") != NULL);
    CU_ASSERT(count_entries(dir) == 0);

    CU_ASSERT_FATAL(pt_recwriter_open(&w, path, MAGIC, 1, &err) == 0);
    CU_ASSERT(pt_recwriter_begin(w, "big", 10, &err) == 0);
    CU_ASSERT(pt_recwriter_begin(w, "next", 1, &err) == PT_EINTERNAL);
    pt_recwriter_abort(w);
    pt_recwriter_abort(NULL);
    CU_ASSERT(count_entries(dir) == 0);
    free(path);
    free_temp_dir(dir);
}

static const pt_test recfile_tests[] = {
    {"round_trip", test_round_trip},
    {"release_keeps_data", test_release_keeps_data},
    {"zero_records", test_zero_records},
    {"wrong_magic_and_missing_tag", test_wrong_magic_and_missing_tag},
    {"truncation_at_every_length", test_truncation_at_every_length},
    {"every_single_byte_change", test_every_single_byte_change},
    {"structural_defects_behind_a_valid_crc", test_structural_defects_behind_a_valid_crc},
    {"writer_misuse", test_writer_misuse},
    {NULL, NULL}};

static const pt_test_suite suites[] = {{"recfile", recfile_tests}, {NULL, NULL}};
