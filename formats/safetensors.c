/*
 * safetensors.c: validating safetensors reader (pread-based) and float32
 * writer, on top of jansson (the header) and fileio.c.
 *
 * Reader invariants: after pt_st_open succeeds every entry has been checked
 * against the file's real size (begin <= end <= data size, end - begin equal
 * to its element count times its dtype size; the non-empty entries tile the
 * data section, no overlap, no gap, no trailing bytes),
 * so reading an entry can only fail if the file changes under us, and then
 * pread reports it. `by_name` holds the entries sorted by name for duplicate
 * detection and binary-search lookup. `metadata` points into `header`, which
 * stays alive until close.
 */
#include "formats/formats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK_BYTES ((size_t)1 << 20) /* conversion buffer; a multiple of every dtype size */

static const struct { const char *name; unsigned size; } dtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
    {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1}, {"U64", 8}, {"U32", 4}, {"U16", 2},
    {"U8", 1}, {"BOOL", 1}};

struct pt_st_file {
    char *path;
    int fd;
    uint64_t data_start, data_size;
    pt_st_entry *entries;
    int count;
    const pt_st_entry **by_name;
    json_t *header;
    const json_t *metadata;
};

/* Bytes per element of a known dtype, 0 for an unknown one. */
static unsigned dtype_size(const char *name)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtypes[i].name, name) == 0)
            return dtypes[i].size;
    return 0;
}

uint64_t pt_st_numel(const pt_st_entry *e)
{
    uint64_t n = 1;
    for (int d = 0; d < e->ndim; d++)
        n *= (uint64_t)e->shape[d];
    return n;
}

/* Bytes of a tensor of this shape: 0 and *bytes, or -1 on overflow. */
static int shape_bytes(int ndim, const int64_t *shape, unsigned size, uint64_t *bytes)
{
    *bytes = 0;
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0)
            return 0;
    uint64_t n = size;
    for (int d = 0; d < ndim; d++) {
        if (n > UINT64_MAX / (uint64_t)shape[d])
            return -1;
        n *= (uint64_t)shape[d];
    }
    *bytes = n;
    return 0;
}

static const char *format_shape(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
    return buf;
}

/* PT_EINPUT "'file': tensor 'name': <formatted>" */
__attribute__((format(printf, 4, 5)))
static int entry_fail(const pt_st_file *f, const char *name, pt_err *err, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return pt_fail(err, PT_EINPUT, "'%s': tensor '%s': %s", f->path, name, what);
}

/* How a JSON value's type reads in a message: "a number", "an array", ... */
static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

/* The n-th element of a JSON array as a non-negative int64. */
static int read_index(const pt_st_file *f, const char *name, const json_t *arr, const char *field,
                      size_t i, int64_t *out, pt_err *err)
{
    const json_t *v = json_array_get(arr, i);
    if (json_is_real(v))
        return entry_fail(f, name, err, "%s[%zu]: %.17g is written as a real number, not an "
                          "integer", field, i, json_real_value(v));
    if (!json_is_integer(v))
        return entry_fail(f, name, err, "%s[%zu]: expected an integer, found %s", field, i,
                          type_name(v));
    *out = (int64_t)json_integer_value(v);
    if (*out < 0)
        return entry_fail(f, name, err, "%s[%zu] is %lld; it must be >= 0", field, i,
                          (long long)*out);
    return 0;
}

/* Fetches field `key` of the entry and checks its JSON type. */
static int entry_field(const pt_st_file *f, const char *name, const json_t *entry,
                       const char *key, json_type type, const json_t **out, pt_err *err)
{
    *out = json_object_get(entry, key);
    if (!*out)
        return entry_fail(f, name, err, "has no \"%s\"", key);
    if (json_typeof(*out) != type)
        return entry_fail(f, name, err, "\"%s\" is %s, not %s", key, type_name(*out),
                          type == JSON_STRING ? "a string" : "an array");
    return 0;
}

static int parse_entry(pt_st_file *f, const char *key, size_t key_len, const json_t *v,
                       pt_st_entry *e, pt_err *err)
{
    if (key_len >= PT_ST_MAX_NAME)
        return pt_fail(err, PT_EINPUT, "'%s': tensor name '%.40s...' is %zu bytes; names must be "
                       "shorter than %d bytes", f->path, key, key_len, PT_ST_MAX_NAME);
    memcpy(e->name, key, key_len + 1);
    const char *name = e->name;
    if (!json_is_object(v))
        return entry_fail(f, name, err, "its entry is %s, not an object", type_name(v));
    const json_t *dtype, *shape, *offsets;
    int rc = entry_field(f, name, v, "dtype", JSON_STRING, &dtype, err);
    if (!rc)
        rc = entry_field(f, name, v, "shape", JSON_ARRAY, &shape, err);
    if (!rc)
        rc = entry_field(f, name, v, "data_offsets", JSON_ARRAY, &offsets, err);
    if (rc)
        return rc;
    const char *dtype_name = json_string_value(dtype);
    size_t dtype_len = json_string_length(dtype);
    unsigned size = dtype_len < sizeof e->dtype && pt_json_cstr(dtype) ? dtype_size(dtype_name) : 0;
    if (!size)
        return entry_fail(f, name, err, "unknown dtype '%.20s'%s", dtype_name,
                          pt_json_cstr(dtype) ? "" : " (then a NUL character)");
    memcpy(e->dtype, dtype_name, dtype_len + 1);
    size_t ndim = json_array_size(shape);
    if (ndim > PT_ST_MAX_NDIM)
        return entry_fail(f, name, err, "\"shape\" has %zu dimensions; at most %d are supported",
                          ndim, PT_ST_MAX_NDIM);
    e->ndim = (int)ndim;
    for (size_t d = 0; d < ndim; d++)
        if ((rc = read_index(f, name, shape, "shape", d, &e->shape[d], err)) != 0)
            return rc;
    if (json_array_size(offsets) != 2)
        return entry_fail(f, name, err, "\"data_offsets\" has %zu elements; it must have 2 "
                          "(begin, end)", json_array_size(offsets));
    int64_t begin, end;
    if ((rc = read_index(f, name, offsets, "data_offsets", 0, &begin, err)) != 0 ||
        (rc = read_index(f, name, offsets, "data_offsets", 1, &end, err)) != 0)
        return rc;
    e->begin = (uint64_t)begin;
    e->end = (uint64_t)end;
    if (e->begin > e->end)
        return entry_fail(f, name, err, "data_offsets [%llu, %llu]: begin is after end",
                          (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > f->data_size)
        return entry_fail(f, name, err, "data_offsets end %llu is past the end of the data "
                          "section (%llu bytes): is the file truncated?",
                          (unsigned long long)e->end, (unsigned long long)f->data_size);
    char shown[256];
    format_shape(shown, sizeof shown, e->ndim, e->shape);
    uint64_t bytes;
    if (shape_bytes(e->ndim, e->shape, size, &bytes) != 0)
        return entry_fail(f, name, err, "shape %s is too large", shown);
    if (e->end - e->begin != bytes)
        return entry_fail(f, name, err, "data_offsets [%llu, %llu] span %llu bytes but shape %s "
                          "of %s needs %llu", (unsigned long long)e->begin,
                          (unsigned long long)e->end, (unsigned long long)(e->end - e->begin),
                          shown, e->dtype, (unsigned long long)bytes);
    return 0;
}

static int check_metadata(const pt_st_file *f, const json_t *meta, pt_err *err)
{
    if (!json_is_object(meta))
        return pt_fail(err, PT_EINPUT, "'%s': \"__metadata__\" is %s, not an object of strings",
                       f->path, type_name(meta));
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)meta, key, v) {
        if (!json_is_string(v))
            return pt_fail(err, PT_EINPUT, "'%s': \"__metadata__\" value of '%.60s' is %s, not a "
                           "string", f->path, key, type_name(v));
    }
    return 0;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp((*(const pt_st_entry *const *)a)->name, (*(const pt_st_entry *const *)b)->name);
}

static int compare_name_to_entry(const void *key, const void *entry)
{
    return strcmp(key, (*(const pt_st_entry *const *)entry)->name);
}

static int compare_begins(const void *a, const void *b)
{
    const pt_st_entry *x = *(const pt_st_entry *const *)a, *y = *(const pt_st_entry *const *)b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

/* Duplicate names and overlapping data ranges, once every entry is parsed. */
static int check_entries_together(pt_st_file *f, pt_err *err)
{
    size_t n = (size_t)f->count;
    f->by_name = malloc((n ? n : 1) * sizeof *f->by_name);
    const pt_st_entry **by_begin = malloc((n ? n : 1) * sizeof *by_begin);
    if (!f->by_name || !by_begin) {
        free(by_begin);
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory", f->path);
    }
    for (size_t i = 0; i < n; i++)
        f->by_name[i] = by_begin[i] = &f->entries[i];
    qsort(f->by_name, n, sizeof *f->by_name, compare_names);
    qsort(by_begin, n, sizeof *by_begin, compare_begins);
    int rc = 0;
    for (size_t i = 1; i < n && !rc; i++)
        if (strcmp(f->by_name[i - 1]->name, f->by_name[i]->name) == 0)
            rc = pt_fail(err, PT_EINPUT, "'%s': tensor name '%s' appears twice", f->path,
                         f->by_name[i]->name);
    /* Sorted by begin, the non-empty ranges must tile the data section: each
     * begins where the one before ends (earlier: an overlap; later: bytes no
     * tensor owns), the first at 0 and the last ending at the section's end,
     * as the format's reference reader demands. Bytes no tensor owns are a
     * damaged or hand-edited file, not a variant to guess about. Empty
     * tensors own no bytes, so where they point does not matter. */
    const pt_st_entry *last = NULL;
    for (size_t i = 0; i < n && !rc; i++) {
        const pt_st_entry *e = by_begin[i];
        if (e->begin == e->end)
            continue;
        const uint64_t at = last ? last->end : 0;
        if (e->begin < at)
            rc = pt_fail(err, PT_EINPUT, "'%s': tensors '%s' and '%s' overlap: bytes [%llu, %llu) "
                         "and [%llu, %llu)", f->path, last->name, e->name,
                         (unsigned long long)last->begin, (unsigned long long)last->end,
                         (unsigned long long)e->begin, (unsigned long long)e->end);
        else if (e->begin > at)
            rc = pt_fail(err, PT_EINPUT, "'%s': bytes [%llu, %llu) of the data section belong "
                         "to no tensor (the next, '%s', begins at %llu)", f->path,
                         (unsigned long long)at, (unsigned long long)e->begin, e->name,
                         (unsigned long long)e->begin);
        last = e;
    }
    const uint64_t covered = last ? last->end : 0;
    if (!rc && covered != f->data_size)
        rc = pt_fail(err, PT_EINPUT, "'%s': the last %llu bytes of the data section (from byte "
                     "%llu%s%s%s) belong to no tensor", f->path,
                     (unsigned long long)(f->data_size - covered), (unsigned long long)covered,
                     last ? ", after tensor '" : "", last ? last->name : "", last ? "'" : "");
    free(by_begin);
    return rc;
}

static int parse_header(pt_st_file *f, const json_t *root, pt_err *err)
{
    if (!json_is_object(root))
        return pt_fail(err, PT_EINPUT, "'%s': the header is %s, not a JSON object", f->path,
                       type_name(root));
    size_t members = json_object_size(root);
    if (members > INT32_MAX)
        return pt_fail(err, PT_EINPUT, "'%s': the header lists %zu tensors", f->path, members);
    /* grown as entries pass their checks: a header of a million members
     * that are no tensors (a few bytes each) is refused for its first, not
     * for the memory a table of a million entries would take */
    size_t cap = members < 64 ? (members ? members : 1) : 64;
    f->entries = calloc(cap, sizeof *f->entries);
    if (!f->entries)
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory", f->path);
    /* jansson keeps members in file order, so tensors are listed as stored */
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)root, key, v) {
        int rc;
        if (strcmp(key, "__metadata__") == 0) {
            if ((rc = check_metadata(f, v, err)) != 0)
                return rc;
            f->metadata = v;
            continue;
        }
        if ((size_t)f->count == cap) {
            const size_t more = cap * 2 < members ? cap * 2 : members;
            pt_st_entry *grown = realloc(f->entries, more * sizeof *f->entries);
            if (!grown)
                return pt_fail(err, PT_ENOMEM, "'%s': out of memory", f->path);
            memset(grown + cap, 0, (more - cap) * sizeof *grown);
            f->entries = grown;
            cap = more;
        }
        if ((rc = parse_entry(f, key, strlen(key), v, &f->entries[f->count], err)) != 0)
            return rc;
        f->count++;
    }
    return check_entries_together(f, err);
}

/* Opens the file, checks the header length field and parses the header JSON
 * into f->header; *size gets the file size. */
static int read_header(pt_st_file *f, uint64_t *size, uint64_t *header_len, pt_err *err)
{
    const char *path = f->path;
    struct stat st;
    unsigned char length_field[8];
    f->fd = pt_open_input(path, 0, err); /* a FIFO is refused, not waited on */
    if (f->fd < 0)
        return err->code;
    if (fstat(f->fd, &st) != 0)
        return pt_fail(err, PT_ESYS, "'%s': cannot stat: %s", path, strerror(errno));
    *size = (uint64_t)st.st_size;
    if (*size < 8)
        return pt_fail(err, PT_EINPUT, "'%s': %llu bytes is too short for a safetensors file (the "
                       "header length alone is 8 bytes)", path, (unsigned long long)*size);
    int rc = pt_pread_all(f->fd, length_field, 8, 0, path, err);
    if (rc)
        return rc;
    uint64_t n = *header_len = pt_get_le64(length_field);
    if (n > PT_ST_MAX_HEADER)
        return pt_fail(err, PT_EINPUT, "'%s': header length %llu is larger than the limit of %llu "
                       "bytes (is this a safetensors file?)", path, (unsigned long long)n,
                       (unsigned long long)PT_ST_MAX_HEADER);
    if (n > *size - 8)
        return pt_fail(err, PT_EINPUT, "'%s': header length %llu runs past the end of the file "
                       "(%llu bytes): is the file truncated?", path, (unsigned long long)n,
                       (unsigned long long)*size);
    char *header = malloc(n ? (size_t)n : 1);
    if (!header)
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory for a %llu-byte header", path,
                       (unsigned long long)n);
    rc = pt_pread_all(f->fd, header, (size_t)n, 8, path, err);
    if (!rc)
        rc = pt_json_load_foreign(&f->header, header, (size_t)n, 0, err);
    if (rc)
        pt_err_prefix(err, "'%s': header (%llu bytes, from byte 8)", path, (unsigned long long)n);
    free(header);
    return rc;
}

int pt_st_open(pt_st_file **out, const char *path, pt_err *err)
{
    *out = NULL;
    pt_st_file *f = calloc(1, sizeof *f);
    if (f)
        f->path = strdup(path);
    if (!f || !f->path) {
        free(f);
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory", path);
    }
    uint64_t size = 0, header_len = 0;
    int rc = read_header(f, &size, &header_len, err);
    if (!rc) {
        f->data_start = 8 + header_len;
        f->data_size = size - f->data_start;
        rc = parse_header(f, f->header, err);
    }
    if (rc) {
        pt_st_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

int pt_st_count(const pt_st_file *f) { return f->count; }

const pt_st_entry *pt_st_entry_at(const pt_st_file *f, int i)
{
    return i >= 0 && i < f->count ? &f->entries[i] : NULL;
}

int pt_st_find(const pt_st_file *f, const char *name)
{
    const pt_st_entry *const *hit =
        f->count ? bsearch(name, f->by_name, (size_t)f->count, sizeof *f->by_name,
                           compare_name_to_entry) : NULL;
    return hit ? (int)(*hit - f->entries) : -1;
}

static float float_from_bits(uint32_t bits)
{
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

static float float_from_f16(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16, exponent = h >> 10 & 0x1f, mantissa = h & 0x3ff;
    if (exponent == 0) { /* zero or subnormal: mantissa * 2^-24, exact in float */
        float v = (float)mantissa * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exponent == 31) /* infinity or NaN, payload kept */
        return float_from_bits(sign | 0x7f800000u | mantissa << 13);
    return float_from_bits(sign | (exponent + 112) << 23 | mantissa << 13);
}

static void convert(const char *dtype, const unsigned char *in, float *out, size_t count)
{
    if (strcmp(dtype, "F32") == 0) {
        for (size_t i = 0; i < count; i++)
            out[i] = float_from_bits(pt_get_le32(in + 4 * i));
    } else if (strcmp(dtype, "F64") == 0) {
        for (size_t i = 0; i < count; i++) {
            uint64_t bits = pt_get_le64(in + 8 * i);
            double d;
            memcpy(&d, &bits, sizeof d);
            out[i] = (float)d; /* IEEE rounding; beyond float's range gives infinity */
        }
    } else if (strcmp(dtype, "F16") == 0) {
        for (size_t i = 0; i < count; i++)
            out[i] = float_from_f16((uint32_t)in[2 * i] | (uint32_t)in[2 * i + 1] << 8);
    } else { /* BF16: the top half of a float */
        for (size_t i = 0; i < count; i++)
            out[i] = float_from_bits((uint32_t)in[2 * i] << 16 | (uint32_t)in[2 * i + 1] << 24);
    }
}

int pt_st_read_f32(const pt_st_file *f, int i, float *out, size_t n, pt_err *err)
{
    const pt_st_entry *e = pt_st_entry_at(f, i);
    if (!e)
        return pt_fail(err, PT_EINTERNAL, "'%s': tensor index %d is not in [0, %d)", f->path, i,
                       f->count);
    char shown[256];
    uint64_t numel = pt_st_numel(e);
    format_shape(shown, sizeof shown, e->ndim, e->shape);
    if ((uint64_t)n != numel)
        return entry_fail(f, e->name, err, "expected %zu elements, but the file stores shape %s "
                          "(%llu elements)", n, shown, (unsigned long long)numel);
    const char *t = e->dtype;
    if (strcmp(t, "F32") && strcmp(t, "F64") && strcmp(t, "F16") && strcmp(t, "BF16"))
        return entry_fail(f, e->name, err, "dtype %s cannot be read as float (only F32, F64, F16 "
                          "and BF16 can)", t);
    unsigned size = dtype_size(t);
    uint64_t total = e->end - e->begin;
    unsigned char *chunk = malloc(total < CHUNK_BYTES ? (size_t)total + 1 : CHUNK_BYTES);
    if (!chunk)
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory", f->path);
    int rc = 0;
    for (uint64_t done = 0; done < total && !rc;) {
        size_t piece = total - done < CHUNK_BYTES ? (size_t)(total - done) : CHUNK_BYTES;
        rc = pt_pread_all(f->fd, chunk, piece, f->data_start + e->begin + done, f->path, err);
        if (rc)
            pt_err_prefix(err, "reading tensor '%s'", e->name);
        else
            convert(t, chunk, out + done / size, piece / size);
        done += piece;
    }
    free(chunk);
    return rc;
}

const char *pt_st_metadata(const pt_st_file *f, const char *key)
{
    return f->metadata ? pt_json_cstr(json_object_get(f->metadata, key)) : NULL;
}

void pt_st_close(pt_st_file *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    json_decref(f->header);
    free(f->entries);
    free(f->by_name);
    free(f->path);
    free(f);
}

/* ------------------------------------------------------------------ writer */

/* Checks one tensor argument; *bytes gets its data size. */
static int check_tensor(const char *path, const pt_st_tensor *t, int i, uint64_t *bytes,
                        pt_err *err)
{
    if (!t->name)
        return pt_fail(err, PT_EINPUT, "'%s': tensor %d has no name", path, i);
    if (t->ndim < 0 || t->ndim > PT_ST_MAX_NDIM || (t->ndim > 0 && !t->shape))
        return pt_fail(err, PT_EINPUT, "'%s': tensor '%s': ndim %d is not in [0, %d] or its shape "
                       "is missing", path, t->name, t->ndim, PT_ST_MAX_NDIM);
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 0)
            return pt_fail(err, PT_EINPUT, "'%s': tensor '%s': shape[%d] is %lld", path, t->name,
                           d, (long long)t->shape[d]);
    if (shape_bytes(t->ndim, t->shape, 4, bytes) != 0 || *bytes > SIZE_MAX)
        return pt_fail(err, PT_EINPUT, "'%s': tensor '%s' is too large", path, t->name);
    if (*bytes && !t->data)
        return pt_fail(err, PT_EINPUT, "'%s': tensor '%s' has no data", path, t->name);
    return 0;
}

/* The "__metadata__" object; jansson refuses strings that are not UTF-8. */
static int put_metadata(json_t *header, const char *path, const char *const *meta, pt_err *err)
{
    json_t *m = json_object();
    if (!m || json_object_set_new(header, "__metadata__", m))
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory building the header", path);
    for (size_t k = 0; meta[k]; k += 2)
        if (!meta[k + 1] || json_object_set_new(m, meta[k], json_string(meta[k + 1])))
            return pt_fail(err, PT_EINPUT, "'%s': metadata key '%.40s' has no value or is not "
                           "valid UTF-8", path, meta[k]);
    return 0;
}

/* One tensor's header entry. */
static int put_entry(json_t *header, const char *path, const pt_st_tensor *t, uint64_t offset,
                     uint64_t bytes, pt_err *err)
{
    if (json_object_get(header, t->name) && strcmp(t->name, "__metadata__") != 0)
        return pt_fail(err, PT_EINPUT, "'%s': tensor name '%s' is used twice", path, t->name);
    if (strlen(t->name) >= PT_ST_MAX_NAME || strcmp(t->name, "__metadata__") == 0)
        return pt_fail(err, PT_EINPUT, "'%s': tensor name '%.40s' is not usable: names must be "
                       "unique, valid UTF-8, shorter than %d bytes and not \"__metadata__\"", path,
                       t->name, PT_ST_MAX_NAME);
    json_t *shape = json_array();
    for (int d = 0; shape && d < t->ndim; d++)
        if (json_array_append_new(shape, json_integer(t->shape[d]))) {
            json_decref(shape);
            shape = NULL;
        }
    json_t *entry = shape ? json_pack("{s:s, s:o, s:[I, I]}", "dtype", "F32", "shape", shape,
                                      "data_offsets", (json_int_t)offset,
                                      (json_int_t)(offset + bytes))
                          : NULL;
    if (!entry)
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory building the header", path);
    if (json_object_set_new(header, t->name, entry)) /* fails for a name that is not UTF-8 */
        return pt_fail(err, PT_EINPUT, "'%s': tensor name '%.40s' is not usable: names must be "
                       "unique, valid UTF-8, shorter than %d bytes and not \"__metadata__\"", path,
                       t->name, PT_ST_MAX_NAME);
    return 0;
}

/* The header JSON, padded with spaces to a multiple of 8 bytes (malloc'd). */
static int build_header(const char *path, const pt_st_tensor *t, int n, const char *const *meta,
                        char **out, size_t *len, pt_err *err)
{
    *out = NULL;
    json_t *header = json_object();
    if (!header)
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory building the header", path);
    int rc = meta && meta[0] ? put_metadata(header, path, meta, err) : 0;
    uint64_t offset = 0;
    for (int i = 0; i < n && !rc; i++) {
        uint64_t bytes = 0;
        if ((rc = check_tensor(path, &t[i], i, &bytes, err)) == 0)
            rc = put_entry(header, path, &t[i], offset, bytes, err);
        offset += bytes;
    }
    size_t need = rc ? 0 : json_dumpb(header, NULL, 0, JSON_COMPACT | JSON_PRESERVE_ORDER);
    char *text = need ? malloc(need + 8) : NULL;
    if (!rc && !text)
        rc = pt_fail(err, PT_ENOMEM, "'%s': out of memory building the header", path);
    if (!rc) {
        size_t got = json_dumpb(header, text, need, JSON_COMPACT | JSON_PRESERVE_ORDER);
        while (got % 8)
            text[got++] = ' ';
        *out = text;
        *len = got;
    }
    json_decref(header);
    return rc;
}

int pt_st_write(const char *path, const pt_st_tensor *t, int n, const char *const *meta,
                pt_err *err)
{
    pt_wfile *file;
    const int rc = pt_st_write_staged(path, t, n, meta, &file, err);
    return rc ? rc : pt_wfile_commit(file, err);
}

int pt_st_write_staged(const char *path, const pt_st_tensor *t, int n, const char *const *meta,
                       pt_wfile **staged, pt_err *err)
{
    *staged = NULL;
    if (n < 0 || (n > 0 && !t))
        return pt_fail(err, PT_EINPUT, "'%s': %d tensors to write", path, n);
    char *header = NULL;
    size_t header_len = 0;
    int rc = build_header(path, t, n, meta, &header, &header_len, err);
    pt_wfile *file = NULL;
    unsigned char *chunk = NULL;
    if (!rc)
        rc = pt_wfile_open(&file, path, err);
    if (!rc && !(chunk = malloc(CHUNK_BYTES)))
        rc = pt_fail(err, PT_ENOMEM, "'%s': out of memory", path);
    if (!rc) {
        unsigned char length_field[8];
        pt_put_le64(length_field, header_len);
        rc = pt_wfile_write(file, length_field, 8, err);
    }
    if (!rc)
        rc = pt_wfile_write(file, header, header_len, err);
    for (int i = 0; i < n && !rc; i++) {
        uint64_t bytes = 0;
        shape_bytes(t[i].ndim, t[i].shape, 4, &bytes); /* checked by build_header */
        size_t count = (size_t)(bytes / 4);
        for (size_t done = 0; done < count && !rc;) {
            size_t piece = count - done < CHUNK_BYTES / 4 ? count - done : CHUNK_BYTES / 4;
            for (size_t k = 0; k < piece; k++) {
                uint32_t bits;
                memcpy(&bits, &t[i].data[done + k], sizeof bits);
                pt_put_le32(chunk + 4 * k, bits);
            }
            rc = pt_wfile_write(file, chunk, 4 * piece, err);
            done += piece;
        }
    }
    free(chunk);
    free(header);
    if (!rc)
        rc = pt_wfile_sync(file, err);
    if (rc) {
        pt_wfile_abort(file);
        return rc;
    }
    *staged = file;
    return 0;
}

void pt_st_shape_text(int ndim, const int64_t *shape, char *out, size_t n)
{
    size_t len = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (len < n)
        snprintf(out + len, n - len, "]");
}
