/*
 * fuzz_recfile.c: libFuzzer target for the record file reader
 * (formats/recfile.c), under every checkpoint file.
 *
 * The input is written to one file (the same path every time) and opened
 * with the magic it starts with when that is a checkpoint magic, "PTUNITS1"
 * otherwise. The whole-file CRC would stop nearly every mutation before the
 * record parser, so an input whose stored CRC is wrong is opened a second
 * time with the right CRC patched in: the first open checks the envelope,
 * the second the records.
 *
 * Invariants checked on a file that opens: every record's tag is 1..255
 * bytes without NUL and its payload lies inside the mapping (every byte is
 * read); pt_recfile_find finds each record by its tag (tags are unique) and
 * refuses a tag that is not there; out-of-range indices give NULL.
 */
#include "tests/fuzz/fuzz_util.h"

#include "formats/formats.h"

#include <stdlib.h>
#include <string.h>

static struct {
    char path[1024];
} ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_join(ctx.path, sizeof ctx.path, fuzz_temp_dir(), "records");
    return 0;
}

static void walk(const pt_recfile *f)
{
    const int count = pt_recfile_count(f);
    if (count < 0)
        fuzz_die("negative record count %d", count);
    for (int i = 0; i < count; i++) {
        const char *tag;
        size_t tag_len;
        const void *data;
        uint64_t len;
        pt_recfile_get(f, i, &tag, &tag_len, &data, &len);
        if (!tag || tag_len < 1 || tag_len > PT_RECFILE_MAX_TAG || memchr(tag, '\0', tag_len) ||
            (len && !data))
            fuzz_die("record %d: tag of %zu bytes, payload %p of %llu bytes", i, tag_len, data,
                     (unsigned long long)len);
        (void)pt_crc32(0, data, (size_t)len); /* reads every byte: one past the mapping faults */
        char *name = fuzz_strndup((const uint8_t *)tag, tag_len);
        const void *found;
        uint64_t found_len;
        pt_err err;
        if (pt_recfile_find(f, name, &found, &found_len, &err) != 0 || found != data ||
            found_len != len)
            fuzz_die("record %d ('%s') is not found by its tag", i, name);
        free(name);
    }
    const void *data;
    uint64_t len;
    pt_err err;
    if (pt_recfile_find(f, "", &data, &len, &err) == 0 || data || len)
        fuzz_die("an empty tag was found");
    const char *tag;
    pt_recfile_get(f, count, &tag, NULL, &data, &len);
    if (tag || data || len)
        fuzz_die("record %d of %d exists", count, count);
}

static void open_and_walk(const uint8_t *data, size_t size)
{
    fuzz_write(ctx.path, data, size);
    const char *magic = size >= 8 && memcmp(data, "PTCKMAN1", 8) == 0 ? "PTCKMAN1" : "PTUNITS1";
    pt_recfile *f;
    uint32_t version;
    pt_err err;
    if (pt_recfile_open(&f, ctx.path, magic, &version, &err) == 0) {
        walk(f);
        pt_recfile_close(f);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    open_and_walk(data, size);
    /* header 16 + trailer 24 bytes; the CRC is the trailer's u32 at size - 12 */
    if (size < 40)
        return 0;
    const uint32_t crc = pt_crc32(0, data, size - 12);
    if (pt_get_le32(data + size - 12) == crc)
        return 0;
    uint8_t *fixed = malloc(size);
    if (!fixed)
        fuzz_die("out of memory");
    memcpy(fixed, data, size);
    pt_put_le32(fixed + size - 12, crc);
    open_and_walk(fixed, size);
    free(fixed);
    return 0;
}
