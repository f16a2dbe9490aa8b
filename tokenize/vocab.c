/*
 * vocab.c: reading a WordPiece vocab.txt into a token table and a sorted
 * index: every id in the byte order of its token, searched by bisection.
 * A hash index is faster on average, but an unkeyed hash lets a crafted file
 * put every token in one bucket and make loading and each lookup quadratic
 * in the tokens (hours for a large file); a sorted index costs O(n log n) to
 * build and O(log n) per lookup whatever the file holds. The bisection
 * compares the tokens' first 8 bytes as integers (prefix_key, in an array
 * of their own) and their other bytes only among the tokens that share
 * those: fewer cache misses and branches, which keeps the tokenizer's many
 * lookups (most for pieces that are not there) near a hash table's speed.
 */
#include "tokenize/tokenize_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The index's order: the bytes (unsigned, as memcmp) over the shorter of
 * the two, then the shorter first. <0, 0 or >0. */
static int compare_tokens(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    if (c)
        return c;
    return (an > bn) - (an < bn);
}

static int compare_ids(const pt_vocab *v, int32_t a, int32_t b)
{
    return compare_tokens(v->text + v->off[a], v->len[a], v->text + v->off[b], v->len[b]);
}

/* The first 8 bytes of s (n bytes) as a big-endian integer, zero-padded.
 * Two keys that differ order their strings as compare_tokens does: where
 * the keys first differ, the greater has a byte of its string and the other
 * a smaller one, or none (the string ended there: a prefix of the other,
 * which compare_tokens puts first too). Equal keys leave it to
 * compare_tokens. */
static uint64_t prefix_key(const char *s, size_t n)
{
    uint64_t k = 0;
    for (size_t i = 0; i < 8; i++)
        k = k << 8 | (i < n ? (unsigned char)s[i] : 0u);
    return k;
}

/* The first i in [0, n) with keys[i] >= key (> key if upper), or n. The
 * bisection chooses its half without a branch (a conditional move): which
 * half holds the key is a coin toss that a processor mispredicts half the
 * time, and most of the tokenizer's lookups are for pieces not there. */
static size_t key_bound(const uint64_t *keys, size_t n, uint64_t key, int upper)
{
    if (n == 0)
        return 0;
    const uint64_t *base = keys;
    while (n > 1) {
        size_t half = n / 2;
        base = (upper ? base[half] <= key : base[half] < key) ? base + half : base;
        n -= half;
    }
    return (size_t)(base - keys) + (upper ? *base <= key : *base < key);
}

int32_t pt_vocab_id(const pt_vocab *v, const char *token, size_t n)
{
    if (!v || n > v->max_len)
        return -1;
    const uint64_t key = prefix_key(token, n);
    const size_t count = (size_t)v->count;
    size_t lo = key_bound(v->keys, count, key, 0);
    if (lo == count || v->keys[lo] != key)
        return -1;
    /* the tokens whose first 8 bytes are the token's: [lo, hi), by bytes */
    size_t hi = lo + 1 == count || v->keys[lo + 1] != key
                    ? lo + 1
                    : lo + key_bound(v->keys + lo, count - lo, key, 1);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int32_t id = v->sorted[mid];
        int c = compare_tokens(v->text + v->off[id], v->len[id], token, n);
        if (c == 0)
            return id;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

int32_t pt_vocab_size(const pt_vocab *v) { return v ? v->count : 0; }

int pt_vocab_unended(const pt_vocab *v) { return v && v->unended; }

const char *pt_vocab_token(const pt_vocab *v, int32_t id)
{
    if (!v || id < 0 || id >= v->count)
        return NULL;
    return v->text + v->off[id];
}

pt_vocab_special pt_vocab_specials(const pt_vocab *v) { return v->special; }

void pt_vocab_set_normalize(pt_vocab *v, pt_normalize n)
{
    v->norm = (pt_normalize){n.lowercase != 0, n.strip_accents != 0, n.split_cjk != 0};
}

pt_normalize pt_vocab_normalize(const pt_vocab *v) { return v->norm; }

void pt_vocab_free(pt_vocab *v)
{
    if (!v)
        return;
    free(v->text);
    free(v->off);
    free(v->len);
    free(v->sorted);
    free(v->keys);
    free(v);
}

/* Whether s[0..n) is valid UTF-8 (shortest forms, no surrogates, <= U+10FFFF;
 * a literal U+FFFD is valid); *last gets its last code point. */
static int valid_utf8(const char *s, size_t n, uint32_t *last)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    *last = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = pt_utf8_next(u + i, n - i, &cp);
        if (cp == PT_UTF8_INVALID && !(k == 3 && u[i] == 0xEF))
            return 0;
        *last = cp;
        i += k;
    }
    return 1;
}

/* Unicode's White_Space outside ASCII (ASCII's is refused byte by byte):
 * what Hugging Face's tokenizers trims from the end of a vocabulary line. */
static int non_ascii_space(uint32_t c)
{
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Appends one token; grows the arrays. */
static int push_token(pt_vocab *v, size_t *cap_tokens, size_t *cap_text, const char *s,
                      size_t n)
{
    if ((size_t)v->count == *cap_tokens) {
        size_t c = *cap_tokens ? 2 * *cap_tokens : 1024;
        uint32_t *off = realloc(v->off, c * sizeof *off);
        if (!off)
            return -1;
        v->off = off;
        uint8_t *len = realloc(v->len, c * sizeof *len);
        if (!len)
            return -1;
        v->len = len;
        *cap_tokens = c;
    }
    if (v->text_bytes + n + 1 > *cap_text) {
        size_t c = *cap_text ? 2 * *cap_text : 16384;
        while (c < v->text_bytes + n + 1)
            c *= 2;
        char *t = realloc(v->text, c);
        if (!t)
            return -1;
        v->text = t;
        *cap_text = c;
    }
    memcpy(v->text + v->text_bytes, s, n);
    v->text[v->text_bytes + n] = 0;
    v->off[v->count] = (uint32_t)v->text_bytes;
    v->len[v->count] = (uint8_t)n;
    v->text_bytes += n + 1;
    if (n > v->max_len)
        v->max_len = n;
    v->count++;
    return 0;
}

/* Checks one line's token; 0 or PT_EINPUT. */
static int check_token(const char *path, long line, const char *s, size_t n, pt_err *err)
{
    if (n == 0)
        return pt_fail(err, PT_EINPUT, "'%s':%ld: empty line (every line must hold one token)",
                       path, line);
    if (n > PT_VOCAB_MAX_TOKEN_BYTES)
        return pt_fail(err, PT_EINPUT, "'%s':%ld: token of %zu bytes (at most %d)", path, line, n,
                       PT_VOCAB_MAX_TOKEN_BYTES);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7f)
            return pt_fail(err, PT_EINPUT,
                           "'%s':%ld: token holds a space or control byte 0x%02x at byte %zu "
                           "(no word can contain it)",
                           path, line, c, i + 1);
    }
    uint32_t last;
    if (!valid_utf8(s, n, &last))
        return pt_fail(err, PT_EINPUT, "'%s':%ld: token is not valid UTF-8", path, line);
    if (non_ascii_space(last))
        return pt_fail(err, PT_EINPUT,
                       "'%s':%ld: token ends with U+%04X, a white space, which Hugging Face's "
                       "tokenizers trims from the line (another token there, or a duplicate)",
                       path, line, (unsigned)last);
    return 0;
}

/* Sorts ids[0..n) by their tokens, with tmp[n] as scratch and key[id] each
 * token's prefix_key: a bottom-up merge sort, O(n log n) for any input, and
 * stable, so that equal tokens stay in file order (which build_index's
 * duplicate check relies on). */
static void sort_ids(const pt_vocab *v, const uint64_t *key, int32_t *ids, int32_t *tmp,
                     size_t n)
{
    int32_t *src = ids, *dst = tmp;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = n - lo > width ? lo + width : n;
            size_t hi = n - mid > width ? mid + width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) { /* the right run's first only if strictly smaller */
                const uint64_t a = key[src[i]], b = key[src[j]];
                dst[k++] = b < a || (b == a && compare_ids(v, src[j], src[i]) < 0) ? src[j++]
                                                                                   : src[i++];
            }
            while (i < mid)
                dst[k++] = src[i++];
            while (j < hi)
                dst[k++] = src[j++];
        }
        int32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != ids)
        memcpy(ids, src, n * sizeof *ids);
}

static int build_index(pt_vocab *v, const char *path, pt_err *err)
{
    size_t n = (size_t)v->count;
    int32_t *tmp = malloc(n * sizeof *tmp);
    uint64_t *by_id = malloc(n * sizeof *by_id);
    v->sorted = malloc(n * sizeof *v->sorted);
    v->keys = malloc(n * sizeof *v->keys);
    if (!tmp || !by_id || !v->sorted || !v->keys) {
        free(tmp);
        free(by_id);
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory for the vocabulary index", path);
    }
    for (size_t i = 0; i < n; i++) {
        v->sorted[i] = (int32_t)i;
        by_id[i] = prefix_key(v->text + v->off[i], v->len[i]);
    }
    sort_ids(v, by_id, v->sorted, tmp, n);
    for (size_t i = 0; i < n; i++)
        v->keys[i] = by_id[v->sorted[i]];
    free(tmp);
    free(by_id);
    /* Equal tokens are now neighbours, in file order. The duplicate named is
     * the one a reader of the file meets first: the earliest line that
     * repeats a token (the second of its run, the smallest later id of any
     * equal pair), with the line its token first stood on. */
    int32_t first = -1, later = -1;
    for (size_t i = 1; i < n; i++) {
        int32_t a = v->sorted[i - 1], b = v->sorted[i];
        if ((later < 0 || b < later) && v->keys[i - 1] == v->keys[i] &&
            compare_ids(v, a, b) == 0) {
            first = a;
            later = b;
        }
    }
    if (later >= 0)
        return pt_fail(err, PT_EINPUT, "'%s':%ld: duplicate token '%s' (first on line %ld)",
                       path, (long)later + 1, v->text + v->off[later], (long)first + 1);
    return 0;
}

int pt_vocab_load(pt_vocab **out, const char *path, pt_err *err)
{
    *out = NULL;
    int fd = pt_open_input(path, 0, err);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return fd < 0 ? err->code : pt_fail(err, PT_ENOMEM, "'%s': out of memory", path);
    }
    pt_vocab *v = calloc(1, sizeof *v);
    if (!v) {
        fclose(f);
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory", path);
    }
    v->norm = (pt_normalize){1, 1, 1};
    size_t cap_tokens = 0, cap_text = 0;
    long lineno = 0;
    int rc = 0;
    for (;;) {
        /* one line into a buffer of a token's longest form and "\r"; the
         * bytes of a longer line are counted, not kept, and past
         * LINE_COUNTED not even read (a corrupt file may hold a line of
         * gigabytes) */
        enum { LINE_COUNTED = 1 << 20 };
        char line[PT_VOCAB_MAX_TOKEN_BYTES + 2];
        size_t len = 0;
        int c, last = EOF;
        errno = 0;
        while ((c = getc(f)) != EOF && c != '\n') {
            if (len < sizeof line)
                line[len] = (char)c;
            last = c;
            if (++len > LINE_COUNTED)
                break;
        }
        if (ferror(f)) {
            rc = pt_fail(err, PT_ESYS, "'%s': cannot read after line %ld: %s", path, lineno,
                         strerror(errno ? errno : EIO));
            break;
        }
        if (c == EOF && len == 0)
            break;
        v->unended = c == EOF;
        lineno++;
        if (len > LINE_COUNTED) {
            rc = pt_fail(err, PT_EINPUT, "'%s':%ld: token of more than %d bytes (at most %d)",
                         path, lineno, LINE_COUNTED, PT_VOCAB_MAX_TOKEN_BYTES);
            break;
        }
        size_t n = len; /* check_token refuses n > sizeof line before reading line */
        if (last == '\r')
            n--;
        if (lineno > PT_VOCAB_MAX_TOKENS) {
            rc = pt_fail(err, PT_EINPUT, "'%s':%ld: more than %d tokens", path, lineno,
                         PT_VOCAB_MAX_TOKENS);
            break;
        }
        if ((rc = check_token(path, lineno, line, n, err)))
            break;
        if (push_token(v, &cap_tokens, &cap_text, line, n)) {
            rc = pt_fail(err, PT_ENOMEM, "'%s':%ld: out of memory", path, lineno);
            break;
        }
    }
    fclose(f);
    if (!rc && v->count == 0)
        rc = pt_fail(err, PT_EINPUT, "'%s': empty vocabulary (no lines)", path);
    if (!rc)
        rc = build_index(v, path, err);
    if (!rc) {
        static const char *names[4] = {"[CLS]", "[SEP]", "[UNK]", "[PAD]"};
        int32_t ids[4];
        for (int i = 0; i < 4 && !rc; i++) {
            ids[i] = pt_vocab_id(v, names[i], strlen(names[i]));
            if (ids[i] < 0)
                rc = pt_fail(err, PT_EINPUT, "'%s': no %s token (a BERT vocabulary needs "
                             "[CLS], [SEP], [UNK] and [PAD])%s", path, names[i],
                             v->len[0] >= 3 && memcmp(v->text + v->off[0], "\xef\xbb\xbf", 3) == 0
                                 ? "; line 1 starts with a UTF-8 byte order mark, which is part "
                                   "of its token (as Hugging Face reads the file)"
                                 : "");
        }
        if (!rc)
            v->special = (pt_vocab_special){ids[0], ids[1], ids[2], ids[3]};
    }
    if (rc) {
        pt_vocab_free(v);
        return rc;
    }
    *out = v;
    return 0;
}
