/*
 * wordpiece.c: text to ids, the steps listed in tokenize.h.
 *
 * The text is read once, code point by code point. Cleaning (step 2) and
 * the CJK rule (step 3) cut it into "pre-words" at whitespace and around
 * ideographs. With strip_accents, each pre-word is decomposed (NFD) code
 * point by code point, its Mn marks dropped, its runs of remaining combining
 * marks put in canonical order, then lowercased (with lowercase); without
 * it, each code point is lowercased as it comes (with lowercase) and kept
 * as it is otherwise. Then the pre-word is split at punctuation and each
 * part turned into pieces. Decomposing per pre-word gives the same text as
 * decomposing the whole string: pre-words are cut at starters (spaces,
 * ideographs), and canonical reordering never moves anything across a
 * starter (an Mn of class 0 included: dropping it must not join the marks
 * on either side into one run, so the marks before it are ordered when it
 * is dropped).
 *
 * Memory is one code point array as long as the longest pre-word; time is
 * linear in the text (a part of more than 100 code points is [UNK] without
 * being looked up; a shorter one costs at most 100 * 100 lookups).
 */
#include "tokenize/tokenize_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

size_t pt_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t need;
    uint32_t v;
    unsigned lo = 0x80, hi = 0xBF; /* the allowed range of the next byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        v = c & 0x0F;
        if (c == 0xE0)
            lo = 0xA0; /* no overlong forms */
        else if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        v = c & 0x07;
        if (c == 0xF0)
            lo = 0x90; /* no overlong forms */
        else if (c == 0xF4)
            hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        *cp = PT_UTF8_INVALID; /* a continuation byte, C0, C1 or F5..FF: one byte */
        return 1;
    }
    size_t i = 1;
    for (; i <= need; i++) {
        if (i >= n || s[i] < lo || s[i] > hi) {
            *cp = PT_UTF8_INVALID; /* the prefix read so far is the maximal subpart */
            return i;
        }
        v = (v << 6) | (s[i] & 0x3Fu);
        lo = 0x80;
        hi = 0xBF;
    }
    *cp = v;
    return i;
}

/* Google BERT's CJK ranges as Hugging Face's tokenizers has them (with its
 * 2B920 where Google has 2B820). */
static int is_cjk(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static int is_punct(uint32_t c)
{
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
        (c >= 123 && c <= 126))
        return 1;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

int pt_unicode_combining(uint32_t c)
{
    if (c > 0x10ffff)
        return 0;
    const utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

static void printable(const char *s, size_t n, char *out, size_t cap, int backslash)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t at = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = pt_utf8_next(u + i, n - i, &cp);
        const int literal_fffd = cp == PT_UTF8_INVALID && k == 3 && u[i] == 0xEF;
        /* C0 and C1 controls (a terminal acts on them: ESC, CSI) and the
         * bidirectional embeddings and isolates, which reorder what follows */
        const int control = (cp < 0x20 && cp != '\n' && cp != '\t') || (cp >= 0x7F && cp <= 0x9F) ||
                            (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
        const int escape = (cp == PT_UTF8_INVALID && !literal_fffd) || control;
        const int doubled = backslash && cp == '\\';
        const size_t need = escape ? 4 * k : k + (size_t)doubled;
        if (at + need + 1 > cap)
            break;
        if (doubled)
            out[at++] = '\\';
        for (size_t j = 0; j < k; j++) {
            if (escape) {
                snprintf(out + at, 5, "\\x%02x", u[i + j]);
                at += 4;
            } else {
                out[at++] = (char)u[i + j];
            }
        }
        i += k;
    }
    out[at] = '\0';
}

void pt_utf8_printable(const char *s, size_t n, char *out, size_t cap)
{
    printable(s, n, out, cap, 0);
}

void pt_utf8_printable_bytes(const char *s, size_t n, char *out, size_t cap)
{
    printable(s, n, out, cap, 1);
}

int pt_unicode_is_nfc(const char *s, size_t n)
{
    utf8proc_uint8_t *nfc = utf8proc_NFC((const utf8proc_uint8_t *)s);
    if (!nfc)
        return -1;
    const int same = strlen((const char *)nfc) == n && memcmp(nfc, s, n) == 0;
    free(nfc);
    return same;
}

int pt_unicode_reserved_ignorable(uint32_t c)
{
    /* Unicode's Default_Ignorable_Code_Point ranges, reserved code points
     * included (U+2065, U+FFF0-FFF8, most of U+E0000-E0FFF): renderers draw
     * them as nothing, while utf8proc calls the unassigned ones Cn and not
     * ignorable */
    static const uint32_t ignorable[][2] = {
        {0x00AD, 0x00AD},   {0x034F, 0x034F},   {0x061C, 0x061C},   {0x115F, 0x1160},
        {0x17B4, 0x17B5},   {0x180B, 0x180F},   {0x200B, 0x200F},   {0x202A, 0x202E},
        {0x2060, 0x206F},   {0x3164, 0x3164},   {0xFE00, 0xFE0F},   {0xFEFF, 0xFEFF},
        {0xFFA0, 0xFFA0},   {0xFFF0, 0xFFF8},   {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A},
        {0xE0000, 0xE0FFF}};
    for (size_t i = 0; i < sizeof ignorable / sizeof *ignorable; i++)
        if (c >= ignorable[i][0] && c <= ignorable[i][1])
            return 1;
    return 0;
}

int pt_unicode_invisible(uint32_t c)
{
    if (c == 0x20)
        return 0;
    if (c == 0x2800)
        return 1;
    if (c > 0x10ffff)
        return 1;
    const utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_ZS ||
           k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP ||
           utf8proc_get_property((utf8proc_int32_t)c)->ignorable;
}

typedef struct {
    const pt_vocab *v;
    pt_normalize norm;
    int32_t *out; /* pieces go here */
    int cap;      /* at most this many */
    int n;        /* written so far */
    int full;     /* a piece did not fit: the rest of the text cannot matter */
    uint32_t *cps; /* the current pre-word, decomposed, Mn dropped */
    uint8_t *ccc;  /* [len] canonical combining class of each */
    size_t len, room;
    size_t fixed;  /* cps[0 .. fixed) is in canonical order already (see append) */
    uint32_t *tmp; /* room code points: scratch of the reordering */
    uint8_t *tmp_ccc;
} tok_state;

static void emit(tok_state *st, int32_t id)
{
    if (st->n < st->cap)
        st->out[st->n++] = id;
    else
        st->full = 1;
}

/* WordPiece of one part: code points w[0..k), no whitespace nor punctuation. */
static void wordpiece(tok_state *st, const uint32_t *w, size_t k)
{
    if (k == 0)
        return;
    int32_t unk = st->v->special.unk;
    if (k > PT_WORDPIECE_MAX_WORD_CHARS) {
        emit(st, unk);
        return;
    }
    /* 2 bytes of room for "##", 4 bytes per code point */
    char buf[2 + 4 * PT_WORDPIECE_MAX_WORD_CHARS];
    size_t off[PT_WORDPIECE_MAX_WORD_CHARS + 1];
    char *base = buf + 2;
    size_t b = 0;
    for (size_t i = 0; i < k; i++) {
        off[i] = b;
        b += (size_t)utf8proc_encode_char((utf8proc_int32_t)w[i], (utf8proc_uint8_t *)base + b);
    }
    off[k] = b;
    int32_t pieces[PT_WORDPIECE_MAX_WORD_CHARS];
    int np = 0;
    size_t start = 0;
    while (start < k) {
        int32_t id = -1;
        size_t end = k;
        if (start > 0) {
            /* the bytes before `start` are done with: the prefix goes there */
            buf[off[start]] = '#'; /* base[off[start] - 2], without an index below 0 */
            buf[off[start] + 1] = '#';
        }
        for (; end > start; end--) {
            const char *s = start ? base + off[start] - 2 : base;
            size_t n = off[end] - off[start] + (start ? 2 : 0);
            if ((id = pt_vocab_id(st->v, s, n)) >= 0)
                break;
        }
        if (id < 0) {
            emit(st, unk);
            return;
        }
        pieces[np++] = id;
        start = end;
    }
    for (int i = 0; i < np; i++)
        emit(st, pieces[i]);
}

/* Puts each run of non-starters (ccc > 0) of cps[from .. len) in canonical
 * order: a stable sort by combining class, as a counting sort so a long run
 * stays linear. A run never reaches back before `from`. */
static void reorder(tok_state *st, size_t from)
{
    size_t i = from;
    while (i < st->len) {
        if (st->ccc[i] == 0) {
            i++;
            continue;
        }
        size_t j = i + 1, sorted = 1;
        for (; j < st->len && st->ccc[j] != 0; j++)
            if (st->ccc[j] < st->ccc[j - 1])
                sorted = 0;
        if (!sorted) {
            size_t count[257] = {0};
            for (size_t t = i; t < j; t++)
                count[st->ccc[t] + 1]++;
            for (int c = 1; c < 257; c++)
                count[c] += count[c - 1];
            for (size_t t = i; t < j; t++) {
                size_t at = count[st->ccc[t]]++;
                st->tmp[at] = st->cps[t];
                st->tmp_ccc[at] = st->ccc[t];
            }
            memcpy(st->cps + i, st->tmp, (j - i) * sizeof *st->cps);
            memcpy(st->ccc + i, st->tmp_ccc, j - i);
        }
        i = j;
    }
}

/* The pre-word collected so far: reorder, lowercase (what append has not
 * done), split at punctuation, WordPiece each part. */
static void flush(tok_state *st)
{
    if (st->len == 0)
        return;
    reorder(st, st->fixed);
    const int lower = st->norm.strip_accents && st->norm.lowercase;
    size_t a = 0;
    for (size_t i = 0; i < st->len; i++) {
        uint32_t c = st->cps[i];
        if (lower)
            st->cps[i] = c = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
        if (is_punct(c)) {
            wordpiece(st, st->cps + a, i - a);
            wordpiece(st, st->cps + i, 1);
            a = i + 1;
        }
    }
    wordpiece(st, st->cps + a, st->len - a);
    st->len = st->fixed = 0;
}

/* Appends code point c to the pre-word: with strip_accents, its canonical
 * decomposition less the Mn marks; without, c itself, lowercased (with
 * lowercase) as Rust's char::to_lowercase does. Returns 0 or -1 (out of
 * memory). */
static int append(tok_state *st, uint32_t c)
{
    utf8proc_int32_t d[8];
    utf8proc_ssize_t k;
    if (st->norm.strip_accents) {
        int bound = 0;
        k = utf8proc_decompose_char((utf8proc_int32_t)c, d, 8, UTF8PROC_DECOMPOSE, &bound);
        if (k < 0 || k > 8) {
            d[0] = (utf8proc_int32_t)c; /* cannot happen for a valid code point */
            k = 1;
        }
    } else if (st->norm.lowercase && c == 0x130) {
        d[0] = 'i'; /* the one lowercase of more than one code point */
        d[1] = 0x307;
        k = 2;
    } else {
        d[0] = st->norm.lowercase ? utf8proc_tolower((utf8proc_int32_t)c) : (utf8proc_int32_t)c;
        k = 1;
    }
    if (st->len + (size_t)k > st->room) {
        size_t r = st->room ? 2 * st->room : 256;
        while (r < st->len + (size_t)k)
            r *= 2;
        uint32_t *cps = realloc(st->cps, r * sizeof *cps);
        if (!cps)
            return -1;
        st->cps = cps;
        uint8_t *ccc = realloc(st->ccc, r);
        if (!ccc)
            return -1;
        st->ccc = ccc;
        uint32_t *tmp = realloc(st->tmp, r * sizeof *tmp);
        if (!tmp)
            return -1;
        st->tmp = tmp;
        uint8_t *tmp_ccc = realloc(st->tmp_ccc, r);
        if (!tmp_ccc)
            return -1;
        st->tmp_ccc = tmp_ccc;
        st->room = r;
    }
    for (utf8proc_ssize_t i = 0; i < k; i++) {
        const utf8proc_property_t *p = utf8proc_get_property(d[i]);
        if (!st->norm.strip_accents) { /* no decomposition: nothing to reorder */
            st->cps[st->len] = (uint32_t)d[i];
            st->ccc[st->len] = 0;
            st->len++;
            continue;
        }
        if (p->category == UTF8PROC_CATEGORY_MN) {
            /* dropped, as Hugging Face strips Mn after its NFD; but an Mn of
             * class 0 is a starter there, which the reordering does not
             * cross: the marks before it are put in order now, and those
             * after it start a run of their own */
            if (p->combining_class == 0) {
                reorder(st, st->fixed);
                st->fixed = st->len;
            }
            continue;
        }
        st->cps[st->len] = (uint32_t)d[i];
        st->ccc[st->len] = (uint8_t)p->combining_class;
        st->len++;
    }
    return 0;
}

int pt_tokenize(const pt_vocab *v, const char *text, size_t n, int32_t *ids, int max_ids,
                int *count, pt_err *err)
{
    *count = 0;
    if (!v || !ids)
        return pt_fail(err, PT_EINPUT, "tokenize: no vocabulary or no output array");
    if (max_ids < 2)
        return pt_fail(err, PT_EINPUT, "tokenize: max_ids %d leaves no room for [CLS] and [SEP]",
                       max_ids);
    if (!text && n > 0)
        return pt_fail(err, PT_EINPUT, "tokenize: NULL text of %zu bytes", n);
    tok_state st = {.v = v, .norm = v->norm, .out = ids + 1, .cap = max_ids - 2};
    const unsigned char *s = (const unsigned char *)text;
    int rc = 0;
    size_t i = 0;
    while (i < n && !st.full) {
        uint32_t c;
        i += pt_utf8_next(s + i, n - i, &c);
        if (c == 0 || c == 0xFFFD)
            continue;
        if (c == '\t' || c == '\n' || c == '\r') {
            flush(&st);
            continue;
        }
        utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
        if (k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CO)
            continue;
        if (k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP) {
            flush(&st);
            continue;
        }
        int cjk = st.norm.split_cjk && is_cjk(c);
        if (cjk)
            flush(&st);
        if (append(&st, c)) {
            rc = pt_fail(err, PT_ENOMEM, "tokenize: out of memory for a word of %zu code points",
                         st.len);
            break;
        }
        if (cjk)
            flush(&st);
    }
    if (!rc && !st.full)
        flush(&st);
    free(st.cps);
    free(st.ccc);
    free(st.tmp);
    free(st.tmp_ccc);
    if (rc)
        return rc;
    pt_vocab_special sp = v->special;
    ids[0] = sp.cls;
    ids[1 + st.n] = sp.sep;
    *count = st.n + 2;
    for (int j = *count; j < max_ids; j++)
        ids[j] = sp.pad;
    return 0;
}
