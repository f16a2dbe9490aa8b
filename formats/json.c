/*
 * json.c: recursive-descent JSON parser (RFC 8259) with hard limits.
 *
 * Representation: every value lives in doc->values and is referred to by
 * index while parsing (the array moves as it grows), by pointer afterwards.
 * Strings and number texts are stored NUL-terminated in doc->text; a
 * container's children are one contiguous run of doc->kids (array: element
 * indices; object: key index, value index pairs). Children are collected on a
 * parse-time stack and copied to kids when their container closes, which is
 * what keeps each run contiguous even though containers nest.
 *
 * Invariants: the recursion depth never exceeds PT_JSON_MAX_DEPTH; no byte at
 * or beyond text + n is ever read; every error names the offset it happened at.
 */
#include "formats/formats.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct pt_json_value {
    const pt_json *doc;
    pt_json_type type;
    size_t off; /* string, number: into doc->text; array, object: into doc->kids */
    size_t len; /* string: bytes; number: characters; array, object: children; bool: 0/1 */
};

struct pt_json {
    pt_json_value *values;
    size_t nvalues, values_cap;
    size_t *kids;
    size_t nkids, kids_cap;
    char *text;
    size_t ntext, text_cap;
    size_t root;
};

typedef struct parser {
    pt_json *doc;
    const unsigned char *s;
    size_t n, pos;
    int depth;
    size_t *stack; /* children of the containers being parsed */
    size_t nstack, stack_cap;
    pt_err *err;
} parser;

/* Returns items grown to hold `need` (> 0) elements (doubling), or NULL (items is
 * then untouched and still owned by the caller). */
static void *grow(void *items, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return items;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 2 / size)
            return NULL;
        c *= 2;
    }
    void *bigger = realloc(items, c * size);
    if (bigger)
        *cap = c;
    return bigger;
}

static int out_of_memory(parser *p)
{
    return pt_fail(p->err, PT_ENOMEM, "offset %zu: out of memory parsing JSON", p->pos);
}

static int fail_at(parser *p, size_t pos, const char *expected)
{
    if (pos >= p->n)
        return pt_fail(p->err, PT_EINPUT, "offset %zu: expected %s, found the end of the text",
                       pos, expected);
    unsigned char c = p->s[pos];
    if (c >= 0x20 && c < 0x7f)
        return pt_fail(p->err, PT_EINPUT, "offset %zu: expected %s, found '%c'", pos, expected, c);
    return pt_fail(p->err, PT_EINPUT, "offset %zu: expected %s, found byte 0x%02x", pos, expected,
                   c);
}

static void skip_space(parser *p)
{
    while (p->pos < p->n) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

/* Consumes c if it is the next character. */
static int accept(parser *p, char c)
{
    if (p->pos < p->n && p->s[p->pos] == c) {
        p->pos++;
        return 1;
    }
    return 0;
}

static int is_digit(const parser *p, size_t pos)
{
    return pos < p->n && p->s[pos] >= '0' && p->s[pos] <= '9';
}

static int new_value(parser *p, pt_json_type type, size_t off, size_t len, size_t *index)
{
    pt_json *doc = p->doc;
    pt_json_value *v = grow(doc->values, &doc->values_cap, doc->nvalues + 1, sizeof *v);
    if (!v)
        return out_of_memory(p);
    doc->values = v;
    v[doc->nvalues] = (pt_json_value){doc, type, off, len};
    *index = doc->nvalues++;
    return 0;
}

static int push_child(parser *p, size_t index)
{
    size_t *s = grow(p->stack, &p->stack_cap, p->nstack + 1, sizeof *s);
    if (!s)
        return out_of_memory(p);
    p->stack = s;
    s[p->nstack++] = index;
    return 0;
}

/* Moves the children pushed since `base` to kids as the run of container `index`. */
static int close_container(parser *p, size_t index, size_t base, size_t count)
{
    pt_json *doc = p->doc;
    size_t run = p->nstack - base;
    if (run) {
        size_t *k = grow(doc->kids, &doc->kids_cap, doc->nkids + run, sizeof *k);
        if (!k)
            return out_of_memory(p);
        doc->kids = k;
        memcpy(k + doc->nkids, p->stack + base, run * sizeof *k);
    }
    doc->values[index].off = doc->nkids;
    doc->values[index].len = count;
    doc->nkids += run;
    p->nstack = base;
    p->depth--;
    return 0;
}

/* Length of the valid UTF-8 sequence at s (n bytes available), or 0. */
static size_t utf8_sequence(const unsigned char *s, size_t n)
{
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4;
    else
        return 0; /* continuation byte, overlong lead or beyond U+10FFFF */
    if (c == 0xE0)
        lo = 0xA0; /* overlong */
    else if (c == 0xED)
        hi = 0x9F; /* UTF-16 surrogates */
    else if (c == 0xF0)
        lo = 0x90; /* overlong */
    else if (c == 0xF4)
        hi = 0x8F; /* beyond U+10FFFF */
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

int pt_json_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_sequence(u + i, n - i);
        if (!len)
            return 0;
        i += len;
    }
    return 1;
}

static size_t put_utf8(char *out, uint32_t cp)
{
    static const unsigned char lead[] = {0, 0, 0xC0, 0xE0, 0xF0};
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    size_t n = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    for (size_t i = n - 1; i > 0; i--, cp >>= 6)
        out[i] = (char)(0x80 | (cp & 0x3F));
    out[0] = (char)(lead[n] | cp);
    return n;
}

/* The 4 hex digits at pos, or -1. */
static long hex4(parser *p, size_t pos)
{
    if (pos > p->n || p->n - pos < 4)
        return -1;
    long v = 0;
    for (size_t i = pos; i < pos + 4; i++) {
        unsigned char c = p->s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The escape at p->pos (a backslash): appends its UTF-8 to out, advances. */
static int parse_escape(parser *p, char *out, size_t *k)
{
    size_t at = p->pos;
    if (at + 1 >= p->n)
        return fail_at(p, at + 1, "an escape character after '\\'");
    unsigned char e = p->s[at + 1];
    const char *simple = strchr("\"\\/bfnrt", e);
    if (simple && e) {
        static const char decoded[] = "\"\\/\b\f\n\r\t";
        out[(*k)++] = decoded[simple - "\"\\/bfnrt"];
        p->pos += 2;
        return 0;
    }
    if (e != 'u')
        return fail_at(p, at + 1, "one of \" \\ / b f n r t u after '\\'");
    long cp = hex4(p, at + 2);
    if (cp < 0)
        return pt_fail(p->err, PT_EINPUT, "offset %zu: expected 4 hex digits after \\u", at + 2);
    p->pos += 6;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return pt_fail(p->err, PT_EINPUT, "offset %zu: lone low surrogate \\u%04lX", at, cp);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        long low = -1;
        if (p->pos + 1 < p->n && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u')
            low = hex4(p, p->pos + 2);
        if (low < 0xDC00 || low > 0xDFFF)
            return pt_fail(p->err, PT_EINPUT, "offset %zu: high surrogate \\u%04lX is not "
                           "followed by a low surrogate escape", at, cp);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        p->pos += 6;
    }
    *k += put_utf8(out + *k, (uint32_t)cp);
    return 0;
}

/* The string at p->pos (a quote), decoded into doc->text. */
static int parse_string(parser *p, size_t *off, size_t *len)
{
    pt_json *doc = p->doc;
    size_t start = p->pos;
    /* decoding never lengthens: the rest of the input bounds this string */
    char *t = grow(doc->text, &doc->text_cap, doc->ntext + (p->n - p->pos) + 1, 1);
    if (!t)
        return out_of_memory(p);
    doc->text = t;
    char *out = t + doc->ntext;
    size_t k = 0;
    p->pos++;
    for (;;) {
        if (p->pos >= p->n)
            return pt_fail(p->err, PT_EINPUT, "offset %zu: unterminated string (it starts at "
                           "offset %zu)", p->pos, start);
        unsigned char c = p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20)
            return pt_fail(p->err, PT_EINPUT, "offset %zu: control character 0x%02x in a string "
                           "(it must be escaped)", p->pos, c);
        if (c == '\\') {
            int rc = parse_escape(p, out, &k);
            if (rc)
                return rc;
            continue;
        }
        size_t seq = utf8_sequence(p->s + p->pos, p->n - p->pos);
        if (!seq)
            return pt_fail(p->err, PT_EINPUT, "offset %zu: invalid UTF-8 in a string", p->pos);
        memcpy(out + k, p->s + p->pos, seq);
        k += seq;
        p->pos += seq;
    }
    out[k] = '\0';
    *off = doc->ntext;
    *len = k;
    doc->ntext += k + 1;
    return 0;
}

static int parse_number(parser *p, size_t *index)
{
    size_t start = p->pos;
    if (p->s[p->pos] == '-')
        p->pos++;
    if (!is_digit(p, p->pos))
        return fail_at(p, p->pos, "a digit");
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (is_digit(p, p->pos))
            return pt_fail(p->err, PT_EINPUT, "offset %zu: leading zeros are not allowed in "
                           "numbers", start);
    }
    while (is_digit(p, p->pos))
        p->pos++;
    if (p->pos < p->n && p->s[p->pos] == '.') {
        p->pos++;
        if (!is_digit(p, p->pos))
            return fail_at(p, p->pos, "a digit after the decimal point");
        while (is_digit(p, p->pos))
            p->pos++;
    }
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        if (!is_digit(p, p->pos))
            return fail_at(p, p->pos, "a digit in the exponent");
        while (is_digit(p, p->pos))
            p->pos++;
    }
    pt_json *doc = p->doc;
    size_t len = p->pos - start;
    char *t = grow(doc->text, &doc->text_cap, doc->ntext + len + 1, 1);
    if (!t)
        return out_of_memory(p);
    doc->text = t;
    memcpy(t + doc->ntext, p->s + start, len);
    t[doc->ntext + len] = '\0';
    doc->ntext += len + 1;
    return new_value(p, PT_JSON_NUMBER, doc->ntext - len - 1, len, index);
}

static int parse_value(parser *p, size_t *index);

static int enter(parser *p)
{
    if (++p->depth > PT_JSON_MAX_DEPTH)
        return pt_fail(p->err, PT_EINPUT, "offset %zu: nesting deeper than %d levels", p->pos,
                       PT_JSON_MAX_DEPTH);
    p->pos++; /* the opening bracket */
    skip_space(p);
    return 0;
}

static int parse_array(parser *p, size_t *index)
{
    int rc = enter(p);
    if (!rc)
        rc = new_value(p, PT_JSON_ARRAY, 0, 0, index);
    if (rc)
        return rc;
    size_t base = p->nstack, count = 0;
    if (accept(p, ']'))
        return close_container(p, *index, base, 0);
    for (;;) {
        size_t child;
        if ((rc = parse_value(p, &child)) != 0 || (rc = push_child(p, child)) != 0)
            return rc;
        count++;
        skip_space(p);
        if (accept(p, ','))
            continue;
        if (accept(p, ']'))
            return close_container(p, *index, base, count);
        return fail_at(p, p->pos, "',' or ']' in an array");
    }
}

static int parse_object(parser *p, size_t *index)
{
    int rc = enter(p);
    if (!rc)
        rc = new_value(p, PT_JSON_OBJECT, 0, 0, index);
    if (rc)
        return rc;
    size_t base = p->nstack, count = 0;
    if (accept(p, '}'))
        return close_container(p, *index, base, 0);
    for (;;) {
        skip_space(p);
        if (p->pos >= p->n || p->s[p->pos] != '"')
            return fail_at(p, p->pos, "a string key");
        size_t off, len, key, value;
        if ((rc = parse_string(p, &off, &len)) != 0 ||
            (rc = new_value(p, PT_JSON_STRING, off, len, &key)) != 0 ||
            (rc = push_child(p, key)) != 0)
            return rc;
        skip_space(p);
        if (p->pos >= p->n || p->s[p->pos] != ':')
            return fail_at(p, p->pos, "':' after an object key");
        p->pos++;
        if ((rc = parse_value(p, &value)) != 0 || (rc = push_child(p, value)) != 0)
            return rc;
        count++;
        skip_space(p);
        if (accept(p, ','))
            continue;
        if (accept(p, '}'))
            return close_container(p, *index, base, count);
        return fail_at(p, p->pos, "',' or '}' in an object");
    }
}

static int parse_literal(parser *p, size_t *index)
{
    static const struct { const char *word; pt_json_type type; size_t truth; } words[] = {
        {"true", PT_JSON_BOOL, 1}, {"false", PT_JSON_BOOL, 0}, {"null", PT_JSON_NULL, 0}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t len = strlen(words[i].word);
        if (words[i].word[0] != p->s[p->pos])
            continue;
        if (p->n - p->pos < len || memcmp(p->s + p->pos, words[i].word, len) != 0)
            return pt_fail(p->err, PT_EINPUT, "offset %zu: expected %s", p->pos, words[i].word);
        p->pos += len;
        return new_value(p, words[i].type, 0, words[i].truth, index);
    }
    return fail_at(p, p->pos, "a value");
}

static int parse_value(parser *p, size_t *index)
{
    skip_space(p);
    if (p->pos >= p->n)
        return fail_at(p, p->pos, "a value");
    unsigned char c = p->s[p->pos];
    if (c == '{')
        return parse_object(p, index);
    if (c == '[')
        return parse_array(p, index);
    if (c == '-' || (c >= '0' && c <= '9'))
        return parse_number(p, index);
    if (c == '"') {
        size_t off, len;
        int rc = parse_string(p, &off, &len);
        return rc ? rc : new_value(p, PT_JSON_STRING, off, len, index);
    }
    return parse_literal(p, index);
}

int pt_json_parse(pt_json **out, const char *text, size_t n, pt_err *err)
{
    *out = NULL;
    if (n > PT_JSON_MAX_BYTES)
        return pt_fail(err, PT_EINPUT, "the JSON text is %zu bytes; the limit is %zu", n,
                       PT_JSON_MAX_BYTES);
    pt_json *doc = calloc(1, sizeof *doc);
    if (!doc)
        return pt_fail(err, PT_ENOMEM, "out of memory parsing JSON");
    parser p = {.doc = doc, .s = (const unsigned char *)text, .n = n, .err = err};
    int rc = parse_value(&p, &doc->root);
    if (!rc) {
        skip_space(&p);
        if (p.pos < n)
            rc = fail_at(&p, p.pos, "the end of the text after the value");
    }
    free(p.stack);
    if (rc) {
        pt_json_free(doc);
        return rc;
    }
    *out = doc;
    return 0;
}

void pt_json_free(pt_json *doc)
{
    if (!doc)
        return;
    free(doc->values);
    free(doc->kids);
    free(doc->text);
    free(doc);
}

const pt_json_value *pt_json_root(const pt_json *doc) { return &doc->values[doc->root]; }

pt_json_type pt_json_type_of(const pt_json_value *v) { return v ? v->type : PT_JSON_NULL; }

const char *pt_json_type_name(pt_json_type t)
{
    static const char *const names[] = {"null", "a boolean", "a number", "a string", "an array",
                                        "an object"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "an unknown type";
}

size_t pt_json_count(const pt_json_value *v)
{
    return v && (v->type == PT_JSON_ARRAY || v->type == PT_JSON_OBJECT) ? v->len : 0;
}

static const pt_json_value *kid(const pt_json_value *v, size_t k)
{
    return &v->doc->values[v->doc->kids[v->off + k]];
}

const char *pt_json_key(const pt_json_value *obj, size_t i, size_t *len)
{
    if (!obj || obj->type != PT_JSON_OBJECT || i >= obj->len) {
        if (len)
            *len = 0;
        return NULL;
    }
    return pt_json_string(kid(obj, 2 * i), len);
}

const pt_json_value *pt_json_member(const pt_json_value *obj, size_t i)
{
    if (!obj || obj->type != PT_JSON_OBJECT || i >= obj->len)
        return NULL;
    return kid(obj, 2 * i + 1);
}

const pt_json_value *pt_json_get(const pt_json_value *obj, const char *key)
{
    size_t want = strlen(key);
    for (size_t i = 0; i < pt_json_count(obj) && obj->type == PT_JSON_OBJECT; i++) {
        size_t len;
        const char *k = pt_json_key(obj, i, &len);
        if (len == want && memcmp(k, key, len) == 0)
            return pt_json_member(obj, i);
    }
    return NULL;
}

const pt_json_value *pt_json_at(const pt_json_value *arr, size_t i)
{
    if (!arr || arr->type != PT_JSON_ARRAY || i >= arr->len)
        return NULL;
    return kid(arr, i);
}

const char *pt_json_string(const pt_json_value *v, size_t *len)
{
    if (!v || v->type != PT_JSON_STRING) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = v->len;
    return v->doc->text + v->off;
}

int pt_json_bool(const pt_json_value *v) { return v && v->type == PT_JSON_BOOL && v->len; }

const char *pt_json_number_text(const pt_json_value *v)
{
    return v && v->type == PT_JSON_NUMBER ? v->doc->text + v->off : NULL;
}

int pt_json_int64(const pt_json_value *v, int64_t *out, pt_err *err)
{
    *out = 0;
    const char *text = pt_json_number_text(v);
    if (!text)
        return pt_fail(err, PT_EINPUT, "expected an integer, found %s",
                       v ? pt_json_type_name(v->type) : "nothing");
    int negative = text[0] == '-';
    const char *d = text + negative;
    if (strpbrk(d, ".eE"))
        return pt_fail(err, PT_EINPUT, "%.40s is not an integer", text);
    uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t acc = 0;
    for (; *d; d++) {
        unsigned digit = (unsigned)(*d - '0');
        if (acc > (limit - digit) / 10)
            return pt_fail(err, PT_EINPUT, "%.40s does not fit in a 64-bit integer", text);
        acc = acc * 10 + digit;
    }
    if (!negative)
        *out = (int64_t)acc;
    else
        *out = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
    return 0;
}

int pt_json_double(const pt_json_value *v, double *out, pt_err *err)
{
    *out = 0;
    const char *text = pt_json_number_text(v);
    if (!text)
        return pt_fail(err, PT_EINPUT, "expected a number, found %s",
                       v ? pt_json_type_name(v->type) : "nothing");
    char *end;
    errno = 0;
    double d = strtod(text, &end);
    if (end != text + v->len)
        return pt_fail(err, PT_EINPUT, "%.40s cannot be converted (is the C locale in effect?)",
                       text);
    if (errno == ERANGE && isinf(d))
        return pt_fail(err, PT_EINPUT, "%.40s is out of the range of a double", text);
    *out = d;
    return 0;
}
