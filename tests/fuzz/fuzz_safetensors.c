/*
 * fuzz_safetensors.c: libFuzzer target for the safetensors reader
 * (formats/safetensors.c), how weights come in from PyTorch (model.init_from).
 *
 * Input, two modes:
 *  - starting with '{': a JSON header, then optionally a NUL byte and the
 *    data section; the harness writes the 8-byte length prefix, so mutations
 *    explore the header's JSON and its checks, not the length field;
 *  - anything else: the file's bytes as they are.
 *
 * A file that opens is read whole: every tensor of a float dtype through
 * pt_st_read_f32 (which must succeed: the header was checked against the
 * file at open, and the file does not change), with a wrong element count
 * (which must fail), other dtypes (which must fail), lookups by name (each
 * name finds its own tensor) and the metadata.
 */
#include "tests/fuzz/fuzz_util.h"

#include "formats/formats.h"

#include <stdlib.h>
#include <string.h>

/* Tensors are read when they have at most this many elements (the input's
 * size bounds them anyway; this keeps a scalar-heavy file cheap). */
#define MAX_READ ((uint64_t)1 << 20)

static struct {
    char path[1024];
} ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_join(ctx.path, sizeof ctx.path, fuzz_temp_dir(), "weights.safetensors");
    return 0;
}

static int float_dtype(const char *t)
{
    return !strcmp(t, "F32") || !strcmp(t, "F64") || !strcmp(t, "F16") || !strcmp(t, "BF16");
}

static void read_all(const pt_st_file *f)
{
    const int count = pt_st_count(f);
    pt_err err;
    for (int i = 0; i < count; i++) {
        const pt_st_entry *e = pt_st_entry_at(f, i);
        if (!e || pt_st_find(f, e->name) != i)
            fuzz_die("tensor %d is not found by its name", i);
        if (e->ndim < 0 || e->ndim > PT_ST_MAX_NDIM || e->begin > e->end ||
            strlen(e->name) >= PT_ST_MAX_NAME)
            fuzz_die("tensor %d ('%s') has a bad entry", i, e->name);
        const uint64_t numel = pt_st_numel(e);
        if (numel > MAX_READ)
            continue;
        float *out = malloc((size_t)numel * sizeof *out + 1);
        if (!out)
            fuzz_die("out of memory");
        const int rc = pt_st_read_f32(f, i, out, (size_t)numel, &err);
        if (float_dtype(e->dtype) && rc != 0)
            fuzz_die("tensor '%s' (%s) opened but does not read: %s", e->name, e->dtype, err.msg);
        if (!float_dtype(e->dtype) && rc == 0)
            fuzz_die("tensor '%s' of dtype %s was read as float", e->name, e->dtype);
        if (pt_st_read_f32(f, i, out, (size_t)numel + 1, &err) == 0)
            fuzz_die("tensor '%s' was read with the wrong element count", e->name);
        free(out);
    }
    /* "__metadata__" is never a tensor ("" may be: nothing forbids it) */
    if (pt_st_entry_at(f, count) || pt_st_entry_at(f, -1) || pt_st_find(f, "__metadata__") >= 0)
        fuzz_die("an entry out of range exists");
    static const char *const keys[] = {"format", "producer", "model.kind", "", NULL};
    for (int k = 0; keys[k]; k++) {
        const char *v = pt_st_metadata(f, keys[k]);
        if (v && strlen(v) > (size_t)1 << 30)
            fuzz_die("metadata '%s' is implausible", keys[k]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 0 && data[0] == '{') {
        const uint8_t *nul = memchr(data, 0, size);
        const size_t header = nul ? (size_t)(nul - data) : size;
        const size_t rest = nul ? size - header - 1 : 0;
        uint8_t *file = malloc(8 + header + rest + 1);
        if (!file)
            fuzz_die("out of memory");
        pt_put_le64(file, header);
        memcpy(file + 8, data, header);
        if (rest)
            memcpy(file + 8 + header, nul + 1, rest);
        fuzz_write(ctx.path, file, 8 + header + rest);
        free(file);
    } else {
        fuzz_write(ctx.path, data, size);
    }
    pt_st_file *f;
    pt_err err;
    if (pt_st_open(&f, ctx.path, &err) == 0) {
        read_all(f);
        pt_st_close(f);
    }
    return 0;
}
