/*
 * textcls.c: text-classification datasets: (text, label) pairs from a .tsv or
 * .jsonl file a user brings, tokenized at load (tokenize/) into [CLS] pieces
 * [SEP] [PAD]..., labels numbered by their names in byte order, and the
 * seed-free split of one file into training and test examples.
 *
 * The files are not trusted: a line is read into a buffer that grows with the
 * bytes read and stops at PT_TEXTCLS_MAX_LINE, so neither a line without a
 * newline nor a file of many lines can take more memory than its own data
 * (tokens: context ids per example); every refusal names the file and line.
 *
 * Invariants: labels[i] < classes for every example; label_names holds
 * `classes` distinct names, strictly increasing under strcmp (bytes as
 * unsigned char), none empty, none holding a control byte.
 */
#include "data/data_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define CHUNK ((size_t)1 << 16)

/* ------------------------------------------------------------ file types */

typedef enum { FORMAT_TSV, FORMAT_JSONL } file_format;

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n > k && strcasecmp(s + n - k, tail) == 0;
}

static int format_of(const char *path, file_format *f, pt_err *err)
{
    if (ends_with(path, ".tsv"))
        *f = FORMAT_TSV;
    else if (ends_with(path, ".jsonl"))
        *f = FORMAT_JSONL;
    else
        return pt_fail(err, PT_EINPUT,
                       "%s: unknown file type; allowed: a name ending in .tsv (lines "
                       "LABEL<TAB>TEXT) or .jsonl (lines {\"text\": ..., \"label\": ...})",
                       path);
    return 0;
}

int pt_textcls_check_path(const char *path, pt_err *err)
{
    file_format f;
    return format_of(path, &f, err);
}

/* What a carriage return inside a line most likely means. */
#define LONE_CR "if this file's lines end in a lone \"\\r\", as old Mac files' do, convert " \
                "them to \"\\n\""

/* ---------------------------------------------------------- line reader */

typedef struct reader {
    FILE *f;
    const char *path;
    char chunk[CHUNK];
    size_t pos, end;
    int eof;
    char *line; /* the current line, NUL-terminated (it may hold NUL bytes too) */
    size_t len, cap;
    int64_t lineno;
    int64_t chunks; /* read so far */
} reader;

static int too_long(const reader *r, pt_err *err)
{
    return pt_fail(err, PT_EINPUT,
                   "%s:%" PRId64 ": the line is longer than %d bytes (1 MiB); allowed: shorter "
                   "lines%s%s",
                   r->path, r->lineno, PT_TEXTCLS_MAX_LINE,
                   r->len && memchr(r->line, '\r', r->len) ? "; " : "",
                   r->len && memchr(r->line, '\r', r->len) ? LONE_CR : "");
}

/* Appends to the line; one byte beyond the limit is kept, for the "\r" of a
 * "\r\n" ending. */
static int line_append(reader *r, const char *s, size_t n, pt_err *err)
{
    if (r->len + n > (size_t)PT_TEXTCLS_MAX_LINE + 1)
        return too_long(r, err);
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 256;
        while (cap < r->len + n + 1)
            cap *= 2;
        char *p = realloc(r->line, cap);
        if (!p)
            return pt_fail(err, PT_ENOMEM, "%s:%" PRId64 ": out of memory", r->path, r->lineno);
        r->line = p;
        r->cap = cap;
    }
    memcpy(r->line + r->len, s, n);
    r->len += n;
    r->line[r->len] = '\0';
    return 0;
}

/* The next line into r->line (r->len bytes, without its "\n" or "\r\n");
 * *got = 0 at the end of the file. A last line without "\n" counts. */
static int next_line(reader *r, int *got, pt_err *err)
{
    int started = 0, rc;
    r->len = 0;
    r->lineno++;
    for (;;) {
        if (r->pos == r->end) {
            if (r->eof)
                break;
            r->pos = 0;
            r->end = fread(r->chunk, 1, CHUNK, r->f);
            if (r->end < CHUNK) {
                if (ferror(r->f))
                    return pt_fail(err, PT_ESYS, "%s:%" PRId64 ": read failed: %s", r->path,
                                   r->lineno, strerror(errno ? errno : EIO));
                r->eof = 1;
            }
            /* gzip's magic number: compressed, which this reader is not for
             * (it would be refused as text, for some byte in it) */
            if (r->chunks++ == 0 && r->end >= 2 && (unsigned char)r->chunk[0] == 0x1f &&
                (unsigned char)r->chunk[1] == 0x8b)
                return pt_fail(err, PT_EINPUT, "%s: a gzip-compressed file (it starts with gzip's "
                               "magic number); text classification data is read as plain text: "
                               "decompress it (gunzip) and give the .tsv or .jsonl", r->path);
            /* UTF-16's byte order mark (UTF-32's starts the same way): a text
             * that would be refused for its first byte, and named as such */
            if (r->chunks == 1 && r->end >= 2 &&
                (((unsigned char)r->chunk[0] == 0xff && (unsigned char)r->chunk[1] == 0xfe) ||
                 ((unsigned char)r->chunk[0] == 0xfe && (unsigned char)r->chunk[1] == 0xff)))
                return pt_fail(err, PT_EINPUT, "%s: a UTF-16 or UTF-32 file (it starts with their "
                               "byte order mark); text classification data is read as UTF-8: "
                               "convert it (iconv -t UTF-8)", r->path);
            continue;
        }
        started = 1;
        const char *at = r->chunk + r->pos;
        const char *nl = memchr(at, '\n', r->end - r->pos);
        size_t n = nl ? (size_t)(nl - at) : r->end - r->pos;
        if ((rc = line_append(r, at, n, err)))
            return rc;
        r->pos += n + (nl != NULL);
        if (nl)
            break;
    }
    if (!started) {
        *got = 0;
        return 0;
    }
    if (r->len && r->line[r->len - 1] == '\r')
        r->line[--r->len] = '\0';
    if (r->len > PT_TEXTCLS_MAX_LINE)
        return too_long(r, err);
    *got = 1;
    return 0;
}

/* Nothing but ASCII whitespace (or nothing at all); a JSON text may also
 * hold newlines. */
static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\v' && s[i] != '\f' &&
            s[i] != '\n')
            return 0;
    return 1;
}

/* ------------------------------------------------------------ one line */

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 if ill-formed
 * (overlong forms, surrogates and code points above U+10FFFF included). */
static size_t utf8_length(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t k = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (k == 0 || s[0] > 0xf4 || k > n)
        return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) ||
        (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))
        return 0;
    return k;
}

/* Whether text gives at least one WordPiece piece (only [CLS] [SEP] from
 * pt_tokenize can also mean a context of 2, with no room for one): a text
 * of nothing but what the tokenizer drops is as empty as a blank one. */
static int has_word(const pt_vocab *vocab, const char *text, size_t n)
{
    int32_t ids[3];
    int count = 0;
    return pt_tokenize(vocab, text, n, ids, 3, &count, NULL) == 0 && count == 3;
}

/* The code point of the valid UTF-8 sequence s[0..k). */
static uint32_t utf8_decode(const unsigned char *s, size_t k)
{
    if (k == 1)
        return s[0];
    uint32_t c = s[0] & (0x7f >> k);
    for (size_t i = 1; i < k; i++)
        c = c << 6 | (s[i] & 0x3f);
    return c;
}

/* A label name: 1 to PT_TEXTCLS_MAX_LABEL bytes of UTF-8, no control byte,
 * no invisible or non-ASCII space character, no space at either end (data.h). */
int pt_textcls_check_label(const char *at, int64_t lineno, const char *s, size_t n, int stored,
                           pt_err *err)
{
    if (n == 0)
        return pt_fail(err, PT_EINPUT, "%s:%" PRId64 ": empty label", at, lineno);
    if (n > PT_TEXTCLS_MAX_LABEL)
        return pt_fail(err, PT_EINPUT,
                       "%s:%" PRId64 ": a label of %zu bytes; allowed: at most %d bytes", at,
                       lineno, n, PT_TEXTCLS_MAX_LABEL);
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return pt_fail(err, PT_EINPUT,
                           "%s:%" PRId64 ": the label holds control byte 0x%02x at byte %zu; "
                           "allowed: printable text",
                           at, lineno, c, i + 1);
        size_t k = utf8_length((const unsigned char *)s + i, n - i);
        if (!k)
            return pt_fail(err, PT_EINPUT,
                           "%s:%" PRId64 ": the label is not valid UTF-8 (byte %zu)", at,
                           lineno, i + 1);
        const uint32_t cp = utf8_decode((const unsigned char *)s + i, k);
        if (cp >= 0x80 && (pt_unicode_invisible(cp) || (!stored && pt_unicode_reserved_ignorable(cp))))
            return pt_fail(err, PT_EINPUT,
                           "%s:%" PRId64 ": the label holds U+%04X at byte %zu, a character that "
                           "prints as nothing or as a space (a label that looks like another "
                           "would be another class); allowed: printable text, ASCII spaces inside",
                           at, lineno, (unsigned)cp, i + 1);
        i += k;
    }
    const size_t k0 = utf8_length((const unsigned char *)s, n);
    if (pt_unicode_combining(utf8_decode((const unsigned char *)s, k0)))
        return pt_fail(err, PT_EINPUT,
                       "%s:%" PRId64 ": the label starts with U+%04X, a combining mark (it prints "
                       "on the character before it); allowed: a label that starts with a letter, "
                       "digit or symbol", at, lineno,
                       (unsigned)utf8_decode((const unsigned char *)s, k0));
    const int nfc = pt_unicode_is_nfc(s, n);
    if (nfc < 0)
        return pt_fail(err, PT_ENOMEM, "%s:%" PRId64 ": out of memory", at, lineno);
    if (!nfc)
        return pt_fail(err, PT_EINPUT,
                       "%s:%" PRId64 ": the label '%.*s' is not in Unicode normalization form C "
                       "(an accent written as a separate combining mark, say): it would be "
                       "another class than the same label in NFC, which prints alike; allowed: "
                       "labels in NFC", at, lineno, (int)n, s);
    if (s[0] == ' ' || s[n - 1] == ' ')
        return pt_fail(err, PT_EINPUT,
                       "%s:%" PRId64 ": the label '%.*s' starts or ends with a space", at,
                       lineno, (int)n, s);
    /* reports name a class past the labels (model.classes above their
     * count) "(class K, no label)": no label may read as one */
    static const char head[] = "(class ", tail[] = ", no label)";
    if (!stored && n >= sizeof head + sizeof tail - 2 && memcmp(s, head, sizeof head - 1) == 0 &&
        memcmp(s + n - (sizeof tail - 1), tail, sizeof tail - 1) == 0)
        return pt_fail(err, PT_EINPUT,
                       "%s:%" PRId64 ": the label '%.*s' has the form reports give a class "
                       "without a label; allowed: another name", at, lineno, (int)n, s);
    return 0;
}

/* A TSV line: LABEL<TAB>TEXT, split at the first tab (which becomes the
 * label's terminating NUL); a second tab is tsv_one_text's to refuse, after
 * tsv_header has had its look at the line. */
static int parse_tsv(reader *r, const char **label, size_t *label_n, const char **text,
                     size_t *text_n, pt_err *err)
{
    const char *cr = memchr(r->line, '\r', r->len);
    if (cr)
        return pt_fail(err, PT_EINPUT, "%s:%" PRId64 ": a carriage return (byte 0x0d) at byte %zu "
                       "inside the line; lines end in \"\\n\" or \"\\r\\n\" and a TSV field cannot "
                       "hold one (%s)", r->path, r->lineno, (size_t)(cr - r->line) + 1, LONE_CR);
    char *tab = memchr(r->line, '\t', r->len);
    if (!tab)
        return pt_fail(err, PT_EINPUT,
                       "%s:%" PRId64 ": no tab; a line is LABEL<TAB>TEXT", r->path, r->lineno);
    *tab = '\0';
    *label = r->line;
    *label_n = (size_t)(tab - r->line);
    *text = tab + 1;
    *text_n = r->len - *label_n - 1;
    return 0;
}

static const char *json_kind(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

/* A JSONL line: an object with a string "text" and a "label" that is a
 * string or an integer (named by its decimal digits). Other keys are
 * ignored. *json holds what label and text point into (or the integer's
 * digits, in digits). */
static int parse_jsonl(reader *r, json_t **json, char *digits, size_t digits_n,
                       const char **label, size_t *label_n, const char **text, size_t *text_n,
                       pt_err *err)
{
    json_error_t e;
    /* JSON_ALLOW_NUL: "\u0000" is valid JSON (Python's json.dumps writes a NUL
     * so); texts carry their length, and the tokenizer drops NUL as it does
     * in a TSV text; a label holding one is refused by check_label */
    json_t *j = json_loadb(r->line, r->len,
                           JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
    if (!j)
        return pt_fail(err, PT_EINPUT, "%s:%" PRId64 ": bad JSON at column %d: %s%s%s", r->path,
                       r->lineno, e.column, e.text, memchr(r->line, '\r', r->len) ? "; " : "",
                       memchr(r->line, '\r', r->len) ? LONE_CR : "");
    *json = j;
    if (!json_is_object(j))
        return pt_fail(err, PT_EINPUT,
                       "%s:%" PRId64 ": %s, not an object {\"text\": ..., \"label\": ...}",
                       r->path, r->lineno, json_kind(j));
    const json_t *t = json_object_get(j, "text"), *l = json_object_get(j, "label");
    if (!t || !l)
        return pt_fail(err, PT_EINPUT, "%s:%" PRId64 ": no \"%s\" key", r->path, r->lineno,
                       t ? "label" : "text");
    if (!json_is_string(t))
        return pt_fail(err, PT_EINPUT, "%s:%" PRId64 ": \"text\" is %s; allowed: a string",
                       r->path, r->lineno, json_kind(t));
    *text = json_string_value(t);
    *text_n = json_string_length(t);
    if (json_is_string(l)) {
        *label = json_string_value(l);
        *label_n = json_string_length(l);
    } else if (json_is_integer(l)) {
        snprintf(digits, digits_n, "%" JSON_INTEGER_FORMAT, json_integer_value(l));
        *label = digits;
        *label_n = strlen(digits);
    } else {
        return pt_fail(err, PT_EINPUT,
                       "%s:%" PRId64 ": \"label\" is %s; allowed: a string or an integer",
                       r->path, r->lineno, json_kind(l));
    }
    return 0;
}

/* --------------------------------------------------------- label names */

/* Names in order of first appearance, and their order under strcmp. */
typedef struct label_set {
    char **names;
    int32_t *sorted; /* indices into names, by name */
    int count;
} label_set;

static void label_set_free(label_set *s)
{
    for (int i = 0; i < s->count; i++)
        free(s->names[i]);
    free(s->names);
    free(s->sorted);
    memset(s, 0, sizeof *s);
}

/* Position in sorted of name, or -(insertion point) - 1. */
static int find_name(char *const *names, const int32_t *sorted, int count, const char *name)
{
    int lo = 0, hi = count;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(names[sorted ? sorted[mid] : mid], name);
        if (c == 0)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -lo - 1;
}

/* The index of name in s (in order of first appearance), adding it. */
static int intern(label_set *s, const reader *r, const char *name, size_t n, int32_t *out,
                  pt_err *err)
{
    int at = find_name(s->names, s->sorted, s->count, name);
    if (at >= 0) {
        *out = s->sorted[at];
        return 0;
    }
    if (s->count == PT_TEXTCLS_MAX_CLASSES)
        return pt_fail(err, PT_EINPUT,
                       "%s:%" PRId64 ": label '%s' would be class %d; allowed: at most %d "
                       "distinct labels",
                       r->path, r->lineno, name, s->count + 1, PT_TEXTCLS_MAX_CLASSES);
    if (s->count % 64 == 0) {
        char **names = realloc(s->names, (size_t)(s->count + 64) * sizeof *names);
        if (names)
            s->names = names;
        int32_t *sorted = names ? realloc(s->sorted, (size_t)(s->count + 64) * sizeof *sorted)
                                : NULL;
        if (sorted)
            s->sorted = sorted;
        if (!names || !sorted)
            return pt_fail(err, PT_ENOMEM, "%s:%" PRId64 ": out of memory", r->path, r->lineno);
    }
    char *copy = malloc(n + 1);
    if (!copy)
        return pt_fail(err, PT_ENOMEM, "%s:%" PRId64 ": out of memory", r->path, r->lineno);
    memcpy(copy, name, n + 1);
    const int pos = -at - 1;
    memmove(s->sorted + pos + 1, s->sorted + pos, (size_t)(s->count - pos) * sizeof *s->sorted);
    s->sorted[pos] = s->count;
    s->names[s->count] = copy;
    *out = s->count++;
    return 0;
}

/* name is an integer as Python's str(int) writes one: an optional '-',
 * then digits without a leading zero ("0" alone; no "-0"), of any length. */
static int integer_name(const char *name)
{
    const char *d = name + (*name == '-');
    size_t n = strspn(d, "0123456789");
    return n > 0 && !d[n] && (d[0] != '0' || (n == 1 && d == name));
}

/* a < b as integers (both integer_name), compared as text: sign, then
 * length, then the digits, so that no length is too long. */
static int integer_below(const char *a, const char *b)
{
    const int na = *a == '-', nb = *b == '-';
    if (na != nb)
        return na;
    size_t la = strlen(a), lb = strlen(b);
    int c = la != lb ? (la < lb ? -1 : 1) : strcmp(a, b);
    return na ? c > 0 : c < 0;
}

int pt_textcls_out_of_value_order(const pt_dataset *ds, int *k, int *instead)
{
    const int n = ds->kind == PT_DATA_TEXTCLS && ds->label_names ? ds->classes : 0;
    char *const *name = ds->label_names;
    for (int i = 0; i < n; i++)
        if (!integer_name(name[i]))
            return 0;
    /* the first class whose label is not the smallest of it and the
     * classes after it (each class before it is): the labels are distinct,
     * so that class is out of order by value; suffix minima find it in one
     * pass */
    int *least = malloc((size_t)(n > 0 ? n : 1) * sizeof *least);
    if (!least)
        return 0;
    for (int i = n - 1; i >= 0; i--)
        least[i] = i == n - 1 || integer_below(name[i], name[least[i + 1]]) ? i : least[i + 1];
    int found = 0;
    for (int i = 0; i < n && !found; i++)
        if (least[i] != i) {
            *k = i;
            *instead = least[i];
            found = 1;
        }
    free(least);
    return found;
}

/* ------------------------------------------------------------- loading */

static void free_names(char **names, int count)
{
    if (!names)
        return;
    for (int i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

/* A copy of names[0..count); NULL when out of memory. */
static char **copy_names(char *const *names, int count)
{
    char **out = calloc((size_t)count, sizeof *out);
    for (int i = 0; out && i < count; i++)
        if (!(out[i] = strdup(names[i]))) {
            free_names(out, i);
            return NULL;
        }
    return out;
}

/* Room for one more example in ds (tokens and labels): doubling. */
static int grow(pt_dataset *ds, int64_t *cap, const reader *r, pt_err *err)
{
    if (ds->count < *cap)
        return 0;
    if (ds->count >= PT_DATA_MAX_COUNT)
        return pt_fail(err, PT_EINPUT,
                       "%s:%" PRId64 ": more than %lld examples; allowed: at most %lld", r->path,
                       r->lineno, PT_DATA_MAX_COUNT, PT_DATA_MAX_COUNT);
    int64_t more = *cap ? *cap * 2 : 16;
    if (more > PT_DATA_MAX_COUNT)
        more = PT_DATA_MAX_COUNT;
    /* every example keeps model.context tokens, however short its line */
    const int64_t limit = pt_data_memory_limit();
    const double per = (double)ds->context * sizeof(int32_t) + sizeof(int32_t);
    if (limit > 0 && (double)(ds->count + 1) * per > (double)limit)
        return pt_fail(err, PT_EINPUT,
                       "%s:%" PRId64 ": more than %" PRId64 " examples, which at %d tokens each "
                       "(model.context) take more than the %lld bytes " PT_DATA_TOO_BIG
                       " (half the memory of a rank); allowed: fewer examples, or a shorter "
                       "context", r->path, r->lineno, ds->count, ds->context, (long long)limit);
    if (limit > 0 && (double)more * per > (double)limit)
        more = (int64_t)((double)limit / per) > ds->count ? (int64_t)((double)limit / per)
                                                           : ds->count + 1;
    int32_t *tokens = realloc(ds->tokens, (size_t)more * (size_t)ds->context * sizeof *tokens);
    if (tokens)
        ds->tokens = tokens;
    int32_t *labels = tokens ? realloc(ds->labels, (size_t)more * sizeof *labels) : NULL;
    if (labels)
        ds->labels = labels;
    if (!tokens || !labels)
        return pt_fail(err, PT_ENOMEM,
                       "%s:%" PRId64 ": out of memory after %" PRId64 " examples of %d tokens",
                       r->path, r->lineno, ds->count, ds->context);
    *cap = more;
    return 0;
}

/* s (*n bytes) without its surrounding ASCII spaces and tabs. */
static const char *trimmed(const char *s, size_t *n)
{
    while (*n && (*s == ' ' || *s == '\t'))
        s++, (*n)--;
    while (*n && (s[*n - 1] == ' ' || s[*n - 1] == '\t'))
        (*n)--;
    return s;
}

/* Whether s (n bytes, surrounding spaces and tabs ignored) is `word`, in any
 * case. */
static int is_word(const char *s, size_t n, const char *word)
{
    s = trimmed(s, &n);
    return n == strlen(word) && strncasecmp(s, word, n) == 0;
}

/* Column names a header line uses (pandas, GLUE, Kaggle and most exports
 * write one): for the label column and for the text column. */
static const char *const label_words[] = {"label", "labels", "gold_label", "class", "category",
                                          "target", "tag", "sentiment", "topic", "intent"};
static const char *const text_words[] = {"text", "sentence", "sentence1", "review", "content",
                                         "document", "verse", "body", "comment", "question",
                                         "utterance", "tweet"};

static int is_one_of(const char *s, size_t n, const char *const *words, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (is_word(s, n, words[i]))
            return 1;
    return 0;
}

/* A first line naming a label column and a text column ("label<TAB>text",
 * "sentence<TAB>label", ...) is a column header, which would otherwise train
 * as an example of a class named "label", or (a file in the other order)
 * make every sentence a class of its own. Only the second field is
 * compared: a header with more columns ("label<TAB>text<TAB>id") is one too,
 * and is named as one rather than as a line with too many fields. */
static int tsv_header(const reader *r, const char *label, size_t label_n, const char *text,
                      size_t text_n, pt_err *err)
{
    const char *tab = memchr(text, '\t', text_n);
    if (tab)
        text_n = (size_t)(tab - text);
    const size_t nl = sizeof label_words / sizeof *label_words;
    const size_t nt = sizeof text_words / sizeof *text_words;
    const int in_order = is_one_of(label, label_n, label_words, nl) &&
                         is_one_of(text, text_n, text_words, nt);
    const int swapped = is_one_of(label, label_n, text_words, nt) &&
                        is_one_of(text, text_n, label_words, nl);
    if (!in_order && !swapped)
        return 0;
    label = trimmed(label, &label_n); /* words of the lists, in some case: nothing to escape */
    text = trimmed(text, &text_n);
    if (swapped)
        return pt_fail(err, PT_EINPUT,
                       "%s:%" PRId64 ": a column header ('%.*s<TAB>%.*s') saying the lines are "
                       "TEXT<TAB>LABEL; a .tsv file here has no header and every line is "
                       "LABEL<TAB>TEXT: remove the line and swap the columns (awk -F'\\t' "
                       "-v OFS='\\t' '{print $2, $1}'), or write JSON lines",
                       r->path, r->lineno, (int)label_n, label, (int)text_n, text);
    return pt_fail(err, PT_EINPUT,
                   "%s:%" PRId64 ": a column header ('%.*s<TAB>%.*s'); a .tsv file here has "
                   "none, every line is LABEL<TAB>TEXT: remove the line",
                   r->path, r->lineno, (int)label_n, label, (int)text_n, text);
}

/* The text of a TSV line (after its label's tab) holds no tab: a TSV field
 * cannot hold one, so a second tab starts a third column (an id, a source,
 * the label again), which would otherwise be tokenized as part of the text. */
static int tsv_one_text(const reader *r, const char *text, size_t text_n, pt_err *err)
{
    const char *tab = memchr(text, '\t', text_n);
    if (!tab)
        return 0;
    int fields = 2;
    for (size_t i = 0; i < text_n; i++)
        fields += text[i] == '\t';
    return pt_fail(err, PT_EINPUT,
                   "%s:%" PRId64 ": %d tab-separated fields (a second tab at byte %zu); a line is "
                   "LABEL<TAB>TEXT, and a text cannot hold a tab: drop the other columns, or "
                   "write the text's tabs as spaces",
                   r->path, r->lineno, fields, (size_t)(tab - r->line) + 1);
}

/* Every example of r's file into ds. With `names` (classes of them, sorted),
 * labels must be among them; else they are collected into set. */
static int read_examples(reader *r, file_format format, const pt_vocab *vocab, pt_dataset *ds,
                         char *const *names, int classes, label_set *set, pt_err *err)
{
    int64_t cap = 0;
    int first = 1; /* no line but blank ones read yet */
    for (;;) {
        int got = 0, rc;
        if ((rc = next_line(r, &got, err)))
            return rc;
        if (!got)
            return 0;
        char *start = r->line;
        size_t n = r->len;
        if (r->lineno == 1 && n >= 3 && memcmp(start, "\xef\xbb\xbf", 3) == 0) {
            /* a UTF-8 byte order mark */
            memmove(start, start + 3, n - 2);
            r->len = n -= 3;
        }
        if (is_blank(start, n))
            continue;
        const char *label = NULL, *text = NULL;
        size_t label_n = 0, text_n = 0;
        json_t *json = NULL;
        char digits[32];
        rc = format == FORMAT_TSV
                 ? parse_tsv(r, &label, &label_n, &text, &text_n, err)
                 : parse_jsonl(r, &json, digits, sizeof digits, &label, &label_n, &text, &text_n,
                               err);
        if (!rc && format == FORMAT_TSV && first)
            rc = tsv_header(r, label, label_n, text, text_n, err);
        if (!rc && format == FORMAT_TSV)
            rc = tsv_one_text(r, text, text_n, err);
        first = 0;
        if (!rc)
            rc = pt_textcls_check_label(r->path, r->lineno, label, label_n, 0, err);
        if (!rc && is_blank(text, text_n))
            rc = pt_fail(err, PT_EINPUT, "%s:%" PRId64 ": empty text (label '%s')", r->path,
                         r->lineno, label);
        if (!rc)
            rc = grow(ds, &cap, r, err);
        int32_t id = 0;
        if (!rc && names) {
            int at = find_name(names, NULL, classes, label);
            if (at >= 0)
                id = at;
            else if (classes == 1)
                rc = pt_fail(err, PT_EINPUT,
                             "%s:%" PRId64 ": label '%s' is not the training file's one label '%s'",
                             r->path, r->lineno, label, names[0]);
            else
                rc = pt_fail(err, PT_EINPUT,
                             "%s:%" PRId64 ": label '%s' is not among the %d labels of the "
                             "training file (from '%s' to '%s')",
                             r->path, r->lineno, label, classes, names[0], names[classes - 1]);
        } else if (!rc) {
            rc = intern(set, r, label, label_n, &id, err);
        }
        if (!rc) {
            int count;
            rc = pt_tokenize(vocab, text, text_n, ds->tokens + (size_t)ds->count * ds->context,
                             ds->context, &count, err);
            if (rc)
                pt_err_prefix(err, "%s:%" PRId64, r->path, r->lineno);
            else if (count == 2 && !has_word(vocab, text, text_n))
                rc = pt_fail(err, PT_EINPUT,
                             "%s:%" PRId64 ": empty text (label '%s'): every character in it is "
                             "one the tokenizer drops (control, invalid UTF-8, zero-width or "
                             "format characters)", r->path, r->lineno, label);
        }
        if (!rc && json) {
            int64_t *seen = json_is_integer(json_object_get(json, "label"))
                                ? &ds->int_label_line : &ds->string_label_line;
            if (!*seen)
                *seen = r->lineno;
        }
        json_decref(json);
        if (rc)
            return rc;
        ds->labels[ds->count++] = id;
    }
}

int pt_textcls_load(pt_dataset *ds, const char *path, const pt_vocab *vocab, int context,
                    const pt_dataset *classes_from, pt_err *err)
{
    memset(ds, 0, sizeof *ds);
    file_format format;
    int rc;
    if ((rc = format_of(path, &format, err)))
        return rc;
    if (context < 2 || context > PT_DATA_MAX_CONTEXT)
        return pt_fail(err, PT_EINPUT,
                       "%s: context is %d; it must be in [2, %d] ([CLS] and [SEP] at least)",
                       path, context, PT_DATA_MAX_CONTEXT);
    if (!vocab)
        return pt_fail(err, PT_EINPUT, "%s: no vocabulary to tokenize with", path);
    if (classes_from && (classes_from->kind != PT_DATA_TEXTCLS || classes_from->classes < 1 ||
                         !classes_from->label_names))
        return pt_fail(err, PT_EINPUT,
                       "%s: the labels must come from a loaded text-classification dataset",
                       path);
    reader *r = calloc(1, sizeof *r);
    if (!r)
        return pt_fail(err, PT_ENOMEM, "%s: out of memory", path);
    r->path = path;
    int fd = pt_open_input(path, 0, err);
    if (fd < 0 || !(r->f = fdopen(fd, "rb"))) {
        rc = fd < 0 ? err->code : pt_fail(err, PT_ENOMEM, "%s: out of memory", path);
        if (fd >= 0)
            close(fd);
        free(r);
        return rc;
    }
    label_set set = {0};
    ds->kind = PT_DATA_TEXTCLS;
    ds->context = context;
    if (classes_from)
        rc = read_examples(r, format, vocab, ds, classes_from->label_names,
                           classes_from->classes, NULL, err);
    else
        rc = read_examples(r, format, vocab, ds, NULL, 0, &set, err);
    fclose(r->f);
    free(r->line);
    free(r);
    if (!rc && ds->count == 0)
        rc = pt_fail(err, PT_EINPUT, "%s: no examples: the file is empty or all blank lines",
                     path);
    if (!rc && classes_from) {
        ds->classes = classes_from->classes;
        if (!(ds->label_names = copy_names(classes_from->label_names, ds->classes)))
            rc = pt_fail(err, PT_ENOMEM, "%s: out of memory", path);
    } else if (!rc) {
        /* numbered by name: first-appearance index -> position in byte order */
        int32_t *rank = malloc((size_t)set.count * sizeof *rank);
        char **names = malloc((size_t)set.count * sizeof *names);
        if (rank && names) {
            for (int k = 0; k < set.count; k++) {
                rank[set.sorted[k]] = k;
                names[k] = set.names[set.sorted[k]];
            }
            for (int64_t i = 0; i < ds->count; i++)
                ds->labels[i] = rank[ds->labels[i]];
            free(set.names);
            set.names = NULL;
            ds->label_names = names;
            ds->classes = set.count;
            set.count = 0;
        } else {
            free(names);
            rc = pt_fail(err, PT_ENOMEM, "%s: out of memory", path);
        }
        free(rank);
    }
    label_set_free(&set);
    if (rc) {
        pt_dataset_free(ds);
        return rc;
    }
    /* give back what the doubling left over */
    int32_t *tokens = realloc(ds->tokens, (size_t)ds->count * (size_t)context * sizeof *tokens);
    if (tokens)
        ds->tokens = tokens;
    int32_t *labels = realloc(ds->labels, (size_t)ds->count * sizeof *labels);
    if (labels)
        ds->labels = labels;
    return 0;
}

/* -------------------------------------------------------------- splits */

int pt_textcls_split(pt_dataset *all, double fraction, pt_dataset *test, pt_err *err)
{
    memset(test, 0, sizeof *test);
    if (all->kind != PT_DATA_TEXTCLS)
        return pt_fail(err, PT_EINPUT, "only a text-classification dataset is split this way");
    /* written so that NaN fails too */
    if (!(fraction > 0.0 && fraction < 1.0))
        return pt_fail(err, PT_EINPUT, "a test fraction of %g; it must be > 0 and < 1",
                       fraction);
    const int64_t count = all->count;
    const int64_t n_test = (int64_t)floor(fraction * (double)count + 0.5);
    if (n_test < 1 || n_test > count - 1)
        return pt_fail(err, PT_EINPUT,
                       "a test fraction of %g of %" PRId64 " example%s leaves %" PRId64
                       " for testing and %" PRId64 " for training; both need at least one",
                       fraction, count, count == 1 ? "" : "s", n_test, count - n_test);
    const size_t T = (size_t)all->context;
    int64_t *perm = malloc((size_t)count * sizeof *perm);
    uint8_t *in_test = calloc((size_t)count, 1);
    test->tokens = malloc((size_t)n_test * T * sizeof *test->tokens);
    test->labels = malloc((size_t)n_test * sizeof *test->labels);
    test->label_names = copy_names(all->label_names, all->classes);
    if (!perm || !in_test || !test->tokens || !test->labels || !test->label_names) {
        free(perm);
        free(in_test);
        free(test->tokens);
        free(test->labels);
        free_names(test->label_names, all->classes);
        memset(test, 0, sizeof *test);
        return pt_fail(err, PT_ENOMEM, "out of memory splitting %" PRId64 " examples", count);
    }
    /* the sampler's shuffle, on a stream of its own and no seed: the split
     * is the same whatever run.seed */
    pt_rng rng;
    pt_rng_seed(&rng, 0, PT_STREAM_TEXTCLS_SPLIT);
    for (int64_t i = 0; i < count; i++)
        perm[i] = i;
    for (int64_t i = count - 1; i > 0; i--) {
        int64_t j = (int64_t)pt_rng_below(&rng, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    /* the test split in shuffled order, so that its first examples (what
     * train.eval_examples evaluates) are a uniform sample of it */
    for (int64_t i = 0; i < n_test; i++) {
        in_test[perm[i]] = 1;
        memcpy(test->tokens + (size_t)i * T, all->tokens + (size_t)perm[i] * T, T * sizeof *test->tokens);
        test->labels[i] = all->labels[perm[i]];
    }
    free(perm);
    /* the training examples keep file order, moved down in place */
    int64_t kept = 0;
    for (int64_t i = 0; i < count; i++) {
        const int32_t *src = all->tokens + (size_t)i * T;
        if (!in_test[i]) {
            if (kept != i)
                memmove(all->tokens + (size_t)kept * T, src, T * sizeof *src);
            all->labels[kept++] = all->labels[i];
        }
    }
    free(in_test);
    test->kind = PT_DATA_TEXTCLS;
    test->count = n_test;
    test->context = all->context;
    test->classes = all->classes;
    all->count = kept;
    int32_t *tokens = realloc(all->tokens, (size_t)kept * T * sizeof *tokens);
    if (tokens)
        all->tokens = tokens;
    int32_t *labels = realloc(all->labels, (size_t)kept * sizeof *labels);
    if (labels)
        all->labels = labels;
    return 0;
}
