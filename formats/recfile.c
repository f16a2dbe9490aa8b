/*
 * recfile.c: writer and validating reader of the tagged-record container
 * described in recfile.h.
 *
 * Writer invariants: `pending` is the number of payload bytes still owed by
 * the record begun last (0 between records); `broken` is set once any step
 * failed or the caller broke the protocol, and then only abort or a failing
 * commit can follow, so a file with a wrong structure is never committed.
 *
 * Reader invariants: the CRC is verified before any record is parsed, so the
 * record parser only ever sees bytes a writer produced (or a deliberate
 * forgery, which it still bounds-checks); every record lies inside
 * [header end, trailer start); `by_tag` is the records sorted by tag, used for
 * duplicate detection and binary-search lookup.
 */
#include "formats/formats.h"


#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_BYTES 16   /* magic, version, reserved */
#define TRAILER_BYTES 24  /* marker, count, crc, end tag */
#define TRAILER_MARKER 0xFFFFFFFFu
#define END_TAG "PTRECEND"

/* ------------------------------------------------------------------ writer */

struct pt_recwriter {
    pt_wfile *file;
    uint64_t count;
    uint64_t pending;
    int broken;
    char **tags; /* written so far, for duplicate detection */
    size_t tags_cap;
};

int pt_recwriter_open(pt_recwriter **out, const char *path, const char magic[8],
                      uint32_t version, pt_err *err)
{
    *out = NULL;
    pt_recwriter *w = calloc(1, sizeof *w);
    if (!w)
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory", path);
    int rc = pt_wfile_open(&w->file, path, err);
    if (rc) {
        free(w);
        return rc;
    }
    unsigned char header[HEADER_BYTES];
    memcpy(header, magic, 8);
    pt_put_le32(header + 8, version);
    pt_put_le32(header + 12, 0);
    rc = pt_wfile_write(w->file, header, sizeof header, err);
    if (rc) {
        pt_recwriter_abort(w);
        return rc;
    }
    *out = w;
    return 0;
}

static int remember_tag(pt_recwriter *w, const char *tag, size_t n, pt_err *err)
{
    const char *path = pt_wfile_path(w->file);
    for (uint64_t i = 0; i < w->count; i++)
        if (strcmp(w->tags[i], tag) == 0)
            return pt_fail(err, PT_EINPUT, "'%s': record '%s' is written twice", path, tag);
    if (w->count == w->tags_cap) {
        size_t cap = w->tags_cap ? 2 * w->tags_cap : 16;
        char **bigger = realloc(w->tags, cap * sizeof *bigger);
        if (!bigger)
            return pt_fail(err, PT_ENOMEM, "'%s': out of memory", path);
        w->tags = bigger;
        w->tags_cap = cap;
    }
    char *copy = malloc(n + 1);
    if (!copy)
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory", path);
    memcpy(copy, tag, n + 1);
    w->tags[w->count] = copy;
    return 0;
}

int pt_recwriter_begin(pt_recwriter *w, const char *tag, uint64_t len, pt_err *err)
{
    const char *path = pt_wfile_path(w->file);
    if (w->broken)
        return pt_fail(err, PT_EINTERNAL, "'%s': adding a record after an earlier failure", path);
    if (w->pending) {
        w->broken = 1;
        return pt_fail(err, PT_EINTERNAL,
                       "'%s': record '%s' begun while %llu bytes of the previous one are missing",
                       path, tag, (unsigned long long)w->pending);
    }
    size_t n = strlen(tag);
    if (n == 0 || n > PT_RECFILE_MAX_TAG)
        return pt_fail(err, PT_EINPUT, "'%s': record tag '%.40s' is %zu bytes; it must be 1 to %d",
                       path, tag, n, PT_RECFILE_MAX_TAG);
    int rc = remember_tag(w, tag, n, err);
    if (rc)
        return rc;
    w->count++;
    unsigned char length_field[8];
    pt_put_le32(length_field, (uint32_t)n);
    rc = pt_wfile_write(w->file, length_field, 4, err);
    if (!rc)
        rc = pt_wfile_write(w->file, tag, n, err);
    pt_put_le64(length_field, len);
    if (!rc)
        rc = pt_wfile_write(w->file, length_field, 8, err);
    if (rc) {
        w->broken = 1;
        return rc;
    }
    w->pending = len;
    return 0;
}

int pt_recwriter_write(pt_recwriter *w, const void *data, uint64_t len, pt_err *err)
{
    const char *path = pt_wfile_path(w->file);
    if (w->broken)
        return pt_fail(err, PT_EINTERNAL, "'%s': writing a record after an earlier failure", path);
    if (len > w->pending) {
        w->broken = 1;
        return pt_fail(err, PT_EINTERNAL,
                       "'%s': record '%s': writing %llu bytes but only %llu of its declared length "
                       "remain", path, w->count ? w->tags[w->count - 1] : "?",
                       (unsigned long long)len, (unsigned long long)w->pending);
    }
    const unsigned char *p = data;
    while (len > 0) {
        size_t piece = len > SIZE_MAX ? SIZE_MAX : (size_t)len;
        int rc = pt_wfile_write(w->file, p, piece, err);
        if (rc) {
            w->broken = 1;
            return rc;
        }
        p += piece;
        len -= piece;
        w->pending -= piece;
    }
    return 0;
}

int pt_recwriter_add(pt_recwriter *w, const char *tag, const void *data, uint64_t len,
                     pt_err *err)
{
    int rc = pt_recwriter_begin(w, tag, len, err);
    return rc ? rc : pt_recwriter_write(w, data, len, err);
}

static void recwriter_free(pt_recwriter *w)
{
    for (uint64_t i = 0; i < w->count; i++)
        free(w->tags[i]);
    free(w->tags);
    free(w);
}

int pt_recwriter_commit(pt_recwriter *w, pt_err *err)
{
    const char *path = pt_wfile_path(w->file);
    int rc = 0;
    if (w->broken)
        rc = pt_fail(err, PT_EINTERNAL, "'%s': committing after an earlier failure", path);
    else if (w->pending)
        rc = pt_fail(err, PT_EINTERNAL, "'%s': record '%s' is missing %llu of its bytes", path,
                     w->tags[w->count - 1], (unsigned long long)w->pending);
    if (rc) {
        pt_recwriter_abort(w);
        return rc;
    }
    unsigned char trailer[TRAILER_BYTES];
    pt_put_le32(trailer, TRAILER_MARKER);
    pt_put_le64(trailer + 4, w->count);
    rc = pt_wfile_write(w->file, trailer, 12, err);
    if (!rc) {
        /* the crc covers everything before the crc field, marker and count included */
        pt_put_le32(trailer + 12, pt_wfile_crc(w->file));
        memcpy(trailer + 16, END_TAG, 8);
        rc = pt_wfile_write(w->file, trailer + 12, 12, err);
    }
    if (rc) {
        pt_recwriter_abort(w);
        return rc;
    }
    rc = pt_wfile_commit(w->file, err);
    recwriter_free(w);
    return rc;
}

void pt_recwriter_abort(pt_recwriter *w)
{
    if (!w)
        return;
    pt_wfile_abort(w->file);
    recwriter_free(w);
}

/* ------------------------------------------------------------------ reader */

typedef struct record {
    const char *tag;
    size_t tag_len;
    const unsigned char *data;
    uint64_t len;
} record;

struct pt_recfile {
    char *path;
    void *map;
    size_t size;
    record *records;
    record *by_tag;
    int count;
};

static int compare_tags(const void *a, const void *b)
{
    const record *x = a, *y = b;
    size_t n = x->tag_len < y->tag_len ? x->tag_len : y->tag_len;
    int c = memcmp(x->tag, y->tag, n);
    if (c)
        return c;
    return (x->tag_len > y->tag_len) - (x->tag_len < y->tag_len);
}

/* Copies bytes into out as text, '?' for anything unprintable (tags and magics
 * in error messages come from untrusted files). */
static const char *printable(char *out, size_t cap, const void *bytes, size_t n)
{
    const unsigned char *s = bytes;
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++)
        out[k++] = s[i] >= 0x20 && s[i] < 0x7f ? (char)s[i] : '?';
    out[k] = '\0';
    return out;
}

/* Parses the records between the header and the trailer into f->records. */
static int parse_records(pt_recfile *f, uint64_t stored_count, pt_err *err)
{
    const unsigned char *base = f->map;
    size_t end = f->size - TRAILER_BYTES;
    size_t pos = HEADER_BYTES;
    size_t cap = 0;
    char shown[64];
    while (pos < end) {
        size_t index = (size_t)f->count;
        if (end - pos < 4)
            return pt_fail(err, PT_EINPUT, "'%s': record %zu at byte %zu: its tag length runs "
                           "past the end of the records (byte %zu)", f->path, index, pos, end);
        uint32_t tag_len = pt_get_le32(base + pos);
        if (tag_len == 0 || tag_len > PT_RECFILE_MAX_TAG)
            return pt_fail(err, PT_EINPUT, "'%s': record %zu at byte %zu: tag length %u is not "
                           "in 1..%d", f->path, index, pos, tag_len, PT_RECFILE_MAX_TAG);
        if (end - pos - 4 < (size_t)tag_len + 8)
            return pt_fail(err, PT_EINPUT, "'%s': record %zu at byte %zu: its tag and length "
                           "run past the end of the records (byte %zu)", f->path, index, pos, end);
        const char *tag = (const char *)base + pos + 4;
        printable(shown, sizeof shown, tag, tag_len);
        if (memchr(tag, '\0', tag_len))
            return pt_fail(err, PT_EINPUT, "'%s': record %zu ('%s'): the tag contains a NUL byte",
                           f->path, index, shown);
        uint64_t len = pt_get_le64(base + pos + 4 + tag_len);
        size_t data_pos = pos + 4 + tag_len + 8;
        if (len > end - data_pos)
            return pt_fail(err, PT_EINPUT, "'%s': record %zu ('%s'): its payload of %llu bytes at "
                           "byte %zu runs past the end of the records (byte %zu)", f->path, index,
                           shown, (unsigned long long)len, data_pos, end);
        if (index == (size_t)INT32_MAX)
            return pt_fail(err, PT_EINPUT, "'%s': more than %d records", f->path, INT32_MAX);
        if (index == cap) {
            cap = cap ? 2 * cap : 16;
            record *bigger = realloc(f->records, cap * sizeof *bigger);
            if (!bigger)
                return pt_fail(err, PT_ENOMEM, "'%s': out of memory", f->path);
            f->records = bigger;
        }
        f->records[index] = (record){tag, tag_len, base + data_pos, len};
        f->count++;
        pos = data_pos + (size_t)len;
    }
    if ((uint64_t)f->count != stored_count)
        return pt_fail(err, PT_EINPUT, "'%s': the trailer says %llu records but the file holds %d",
                       f->path, (unsigned long long)stored_count, f->count);
    if (f->count == 0)
        return 0;
    f->by_tag = malloc((size_t)f->count * sizeof *f->by_tag);
    if (!f->by_tag)
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory", f->path);
    memcpy(f->by_tag, f->records, (size_t)f->count * sizeof *f->by_tag);
    qsort(f->by_tag, (size_t)f->count, sizeof *f->by_tag, compare_tags);
    for (int i = 1; i < f->count; i++)
        if (compare_tags(&f->by_tag[i - 1], &f->by_tag[i]) == 0)
            return pt_fail(err, PT_EINPUT, "'%s': record '%s' appears more than once", f->path,
                           printable(shown, sizeof shown, f->by_tag[i].tag, f->by_tag[i].tag_len));
    return 0;
}

/* Size, magic, end marker and CRC: everything checked before parsing. */
static int check_envelope(const pt_recfile *f, const char magic[8], uint32_t *version,
                          uint64_t *count, pt_err *err)
{
    const unsigned char *base = f->map;
    char shown[16], wanted[16];
    printable(wanted, sizeof wanted, magic, 8);
    if (memcmp(base, magic, 8) != 0)
        return pt_fail(err, PT_EINPUT, "'%s': not a %s file: it starts with '%s'", f->path, wanted,
                       printable(shown, sizeof shown, base, 8));
    const unsigned char *trailer = base + f->size - TRAILER_BYTES;
    if (pt_get_le32(trailer) != TRAILER_MARKER || memcmp(trailer + 16, END_TAG, 8) != 0)
        return pt_fail(err, PT_EINPUT, "'%s': no end marker: the file is truncated or was not "
                       "completely written", f->path);
    uint32_t stored = pt_get_le32(trailer + 12);
    /* in pieces, each let go of once summed: a checkpoint's unit files are
     * as large as a stage's training state, and would otherwise sit in the
     * resident set beside it while it is loaded */
    uint32_t computed = 0;
    for (size_t at = 0, piece = (size_t)1 << 20; at < f->size - 12; at += piece) {
        size_t n = f->size - 12 - at < piece ? f->size - 12 - at : piece;
        computed = pt_crc32(computed, base + at, n);
        pt_recfile_release(f, base + at, n);
    }
    if (stored != computed)
        return pt_fail(err, PT_EINPUT, "'%s': checksum mismatch (the file is corrupted): stored "
                       "0x%08x, computed 0x%08x", f->path, stored, computed);
    uint32_t reserved = pt_get_le32(base + 12);
    if (reserved != 0)
        return pt_fail(err, PT_EINPUT, "'%s': reserved header field is 0x%08x, not 0 (written by "
                       "a newer pipetrain?)", f->path, reserved);
    *version = pt_get_le32(base + 8);
    *count = pt_get_le64(trailer + 4);
    return 0;
}

int pt_recfile_open(pt_recfile **out, const char *path, const char magic[8], uint32_t *version,
                    pt_err *err)
{
    *out = NULL;
    *version = 0;
    pt_recfile *f = calloc(1, sizeof *f);
    if (f)
        f->path = strdup(path);
    if (!f || !f->path) {
        free(f);
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory", path);
    }
    int fd = pt_open_input(path, 0, err); /* a FIFO is refused, not waited on */
    if (fd < 0) {
        pt_recfile_close(f);
        return err->code;
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = pt_fail(err, PT_ESYS, "'%s': cannot stat: %s", path, strerror(errno));
    else if ((uint64_t)st.st_size < HEADER_BYTES + TRAILER_BYTES)
        rc = pt_fail(err, PT_EINPUT, "'%s': %llu bytes is too short for a record file (at least "
                     "%d): the file is truncated", path, (unsigned long long)st.st_size,
                     HEADER_BYTES + TRAILER_BYTES);
    else if ((uint64_t)st.st_size > SIZE_MAX)
        rc = pt_fail(err, PT_EINPUT, "'%s' is too large to map", path);
    if (!rc) {
        f->size = (size_t)st.st_size;
        f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) {
            f->map = NULL;
            rc = pt_fail(err, PT_ESYS, "'%s': cannot map: %s", path, strerror(errno));
        }
    }
    close(fd); /* the mapping stays valid without the descriptor */
    uint64_t count = 0;
    if (!rc)
        rc = check_envelope(f, magic, version, &count, err);
    if (!rc)
        rc = parse_records(f, count, err);
    if (rc) {
        pt_recfile_close(f);
        *version = 0;
        return rc;
    }
    /* parsing read the records' headers; the records are read again as
     * they are used */
    pt_recfile_release(f, f->map, f->size);
    *out = f;
    return 0;
}

void pt_recfile_release(const pt_recfile *f, const void *data, uint64_t len)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t base = (uintptr_t)f->map, end = base + f->size;
    uintptr_t from = (uintptr_t)data, to = from + len;
    if (!f->map || from < base || to > end || to < from || page == 0)
        return;
    from = (from + page - 1) / page * page; /* whole pages of the range only */
    to = to == end ? to : to / page * page;
    if (from < to)
        (void)madvise((void *)from, to - from, MADV_DONTNEED); /* advice: failure is harmless */
}

int pt_recfile_count(const pt_recfile *f) { return f->count; }

void pt_recfile_get(const pt_recfile *f, int i, const char **tag, size_t *tag_len,
                    const void **data, uint64_t *len)
{
    int ok = i >= 0 && i < f->count;
    if (tag)
        *tag = ok ? f->records[i].tag : NULL;
    if (tag_len)
        *tag_len = ok ? f->records[i].tag_len : 0;
    if (data)
        *data = ok ? f->records[i].data : NULL;
    if (len)
        *len = ok ? f->records[i].len : 0;
}

int pt_recfile_find(const pt_recfile *f, const char *tag, const void **data, uint64_t *len,
                    pt_err *err)
{
    record key = {tag, strlen(tag), NULL, 0};
    const record *hit = f->count ? bsearch(&key, f->by_tag, (size_t)f->count, sizeof key,
                                           compare_tags) : NULL;
    if (!hit) {
        *data = NULL;
        *len = 0;
        return pt_fail(err, PT_EINPUT, "'%s': no record '%s' in the file", f->path, tag);
    }
    *data = hit->data;
    *len = hit->len;
    return 0;
}

const char *pt_recfile_path(const pt_recfile *f) { return f->path; }

void pt_recfile_close(pt_recfile *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->size);
    free(f->records);
    free(f->by_tag);
    free(f->path);
    free(f);
}
