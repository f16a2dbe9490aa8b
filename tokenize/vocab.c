/*
 * vocab.c: reading a WordPiece vocab.txt into a token table and an
 * open-addressing hash index (linear probing, FNV-1a, load at most 1/2).
 */
#include "tokenize/tokenize_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* The slot holding token (s, n), or the empty slot where it would go. */
static size_t find_slot(const pt_vocab *v, const char *s, size_t n)
{
    size_t mask = v->slots - 1;
    size_t i = (size_t)hash_bytes(s, n) & mask;
    for (;;) {
        int32_t id = v->index[i];
        if (id < 0)
            return i;
        if (v->len[id] == n && memcmp(v->text + v->off[id], s, n) == 0)
            return i;
        i = (i + 1) & mask;
    }
}

int32_t pt_vocab_id(const pt_vocab *v, const char *token, size_t n)
{
    if (!v || n > v->max_len)
        return -1;
    return v->index[find_slot(v, token, n)];
}

int32_t pt_vocab_size(const pt_vocab *v) { return v ? v->count : 0; }

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
    free(v->index);
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

static int build_index(pt_vocab *v, const char *path, pt_err *err)
{
    size_t slots = 16;
    while (slots < 2 * (size_t)v->count)
        slots *= 2;
    v->slots = slots;
    v->index = malloc(slots * sizeof *v->index);
    if (!v->index)
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory for the vocabulary index", path);
    for (size_t i = 0; i < slots; i++)
        v->index[i] = -1;
    for (int32_t id = 0; id < v->count; id++) {
        size_t s = find_slot(v, v->text + v->off[id], v->len[id]);
        if (v->index[s] >= 0)
            return pt_fail(err, PT_EINPUT, "'%s':%ld: duplicate token '%s' (first on line %ld)",
                           path, (long)id + 1, v->text + v->off[id], (long)v->index[s] + 1);
        v->index[s] = id;
    }
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
