/*
 * text.c: byte-level text datasets. A token is a byte (vocabulary 256); a
 * split is a contiguous range of the file given as fractions, so train and
 * validation splits of one file never overlap when their ranges do not.
 *
 * Invariant: example i of a loaded split reads bytes [i*context,
 * i*context + context] of ds->bytes, all inside [0, nbytes), because
 * count = (nbytes - 1) / context.
 */
#include "data/data_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FIRST_CAPACITY ((size_t)1 << 20)

/* Reads all of gz into a new array (*out, *len); memory follows the data. */
static int read_all(gzFile gz, const char *path, uint8_t **out, int64_t *len, pt_err *err)
{
    uint8_t *buf = NULL;
    size_t used = 0, capacity = 0;
    *out = NULL;
    *len = 0;
    /* a plain file already past the limit is refused at once, not after
     * reading up to the limit (half a rank's memory: minutes and gigabytes
     * for a refusal); gzip data is judged by what it unpacks to, below */
    const int64_t cap = pt_data_memory_limit();
    struct stat st;
    if (cap > 0 && gzdirect(gz) && stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > cap)
        return pt_fail(err, PT_EINPUT,
                       "%s holds %lld bytes of text, more than the %lld bytes " PT_DATA_TOO_BIG
                       " (half the memory of a rank)",
                       path, (long long)st.st_size, (long long)cap);
    for (;;) {
        if (used == capacity) {
            size_t grown = capacity ? capacity * 2 : FIRST_CAPACITY;
            const int64_t limit = pt_data_memory_limit();
            if (limit > 0 && used > (size_t)limit) {
                free(buf);
                return pt_fail(err, PT_EINPUT,
                               "%s holds at least %zu bytes of text%s, more than the %lld bytes "
                               PT_DATA_TOO_BIG " (half the memory of a rank)",
                               path, used, gzdirect(gz) ? "" : " once unpacked (it is gzip data)",
                               (long long)limit);
            }
            /* one byte past the limit at most: a file of exactly the limit
             * fits, and one byte more is found without reading on */
            if (limit > 0 && grown > (size_t)limit + 1)
                grown = (size_t)limit + 1;
            uint8_t *p = grown > capacity && grown <= (size_t)INT64_MAX ? realloc(buf, grown) : NULL;
            if (!p) {
                free(buf);
                return pt_fail(err, PT_ENOMEM, "%s: out of memory after reading %zu bytes", path,
                               used);
            }
            buf = p;
            capacity = grown;
        }
        size_t got;
        int cut;
        int rc = pt_gz_read(gz, path, buf + used, capacity - used, &got, &cut, "text", used, err);
        /* at the end: what follows the gzip data, which gzread drops */
        if (!rc && (cut || used + got < capacity))
            rc = pt_gz_check_members(gz, path, &cut, err);
        if (!rc && cut)
            rc = pt_fail(err, PT_EINPUT,
                         "%s: truncated gzip stream: it stops after %zu bytes of text, before "
                         "its end-of-stream trailer",
                         path, used + got);
        if (rc) {
            free(buf);
            return rc;
        }
        used += got;
        if (used < capacity)
            break; /* a short read is the end of the data */
    }
    *out = buf;
    *len = (int64_t)used;
    return 0;
}

int pt_text_load(pt_dataset *ds, const char *path, int context, double begin, double end,
                 pt_err *err)
{
    memset(ds, 0, sizeof *ds);
    if (context < 1 || context > PT_DATA_MAX_CONTEXT)
        return pt_fail(err, PT_EINPUT, "%s: context is %d; it must be in [1, %d]", path, context,
                       PT_DATA_MAX_CONTEXT);
    /* Written so that NaN fails too. */
    if (!(begin >= 0.0 && begin < end && end <= 1.0))
        return pt_fail(err, PT_EINPUT,
                       "%s: split [%g, %g) is not a range of the file: it needs 0 <= begin < "
                       "end <= 1",
                       path, begin, end);
    gzFile gz;
    int rc = pt_gz_open(&gz, path, err);
    if (rc)
        return rc;
    uint8_t *text;
    int64_t n;
    rc = read_all(gz, path, &text, &n, err);
    gzclose(gz);
    if (rc)
        return rc;

    int64_t lo = (int64_t)floor(begin * (double)n);
    int64_t hi = (int64_t)floor(end * (double)n);
    if (hi > n)
        hi = n;
    if (lo > hi)
        lo = hi;
    int64_t split = hi - lo;
    if (split < (int64_t)context + 1) {
        free(text);
        return pt_fail(err, PT_EINPUT,
                       "%s: split [%g, %g) is bytes [%lld, %lld) of %lld: %lld bytes, too few "
                       "for one example of context %d (it needs %lld bytes)",
                       path, begin, end, (long long)lo, (long long)hi, (long long)n,
                       (long long)split, context, (long long)context + 1);
    }
    memmove(text, text + lo, (size_t)split);
    uint8_t *shrunk = realloc(text, (size_t)split);
    if (shrunk) /* keeping the bigger block is harmless if shrinking fails */
        text = shrunk;

    ds->kind = PT_DATA_TEXT;
    ds->context = context;
    ds->bytes = text;
    ds->nbytes = split;
    ds->count = (split - 1) / context;
    return 0;
}
