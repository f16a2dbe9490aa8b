/*
 * json.c: the few choices about JSON that every reader and writer of
 * pipetrain's files must make alike, on top of jansson.
 */
#include "formats/formats.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static int load(json_t **out, const char *text, size_t n, size_t flags, pt_err *err)
{
    json_error_t e;
    *out = json_loadb(text, n, flags, &e);
    if (!*out) {
        /* jansson reads a raw NUL byte as the end of the text ("... expected
         * near end of file", at a column before it): name the byte instead */
        const char *nul = memchr(text, 0, n);
        if (nul && nul - text <= (ptrdiff_t)e.position) {
            int line = 1;
            for (const char *c = text; c < nul; c++)
                line += *c == '\n';
            return pt_fail(err, PT_EINPUT, "line %d (byte %td): a NUL byte, which JSON text cannot "
                           "hold (write it \\u0000 inside a string)", line, nul - text);
        }
        return pt_fail(err, PT_EINPUT, "line %d, column %d (byte %d): %s", e.line, e.column,
                       e.position, e.text);
    }
    return 0;
}

int pt_json_load(json_t **out, const char *text, size_t n, pt_err *err)
{
    return load(out, text, n, JSON_REJECT_DUPLICATES, err);
}

int pt_json_load_reals(json_t **out, const char *text, size_t n, pt_err *err)
{
    return load(out, text, n, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, err);
}

/* A copy of text in which each \u0000 escape in an object key is \uFFFD
 * (jansson refuses a NUL in a key whatever its flags): the same length, so
 * that a parse error's line and column are still the file's. A string is
 * a key when the next byte after it that is not white space is ':'. NULL
 * when out of memory. */
static char *keys_without_nul(const char *text, size_t n)
{
    char *t = malloc(n ? n : 1);
    if (!t)
        return NULL;
    memcpy(t, text, n);
    size_t i = 0;
    while (i < n) {
        if (t[i] != '"') {
            i++;
            continue;
        }
        const size_t start = i++;
        while (i < n && t[i] != '"')
            i += t[i] == '\\' ? 2 : 1;
        if (i >= n)
            break; /* no closing quote: the parse says so */
        const size_t end = i++;
        size_t j = i;
        while (j < n && (t[j] == ' ' || t[j] == '\t' || t[j] == '\n' || t[j] == '\r'))
            j++;
        if (j >= n || t[j] != ':')
            continue;
        for (size_t k = start + 1; k < end;) {
            if (t[k] != '\\') {
                k++;
                continue;
            }
            if (k + 5 < end && t[k + 1] == 'u' && memcmp(t + k + 2, "0000", 4) == 0)
                memcpy(t + k + 2, "FFFD", 4);
            k += 2;
        }
    }
    return t;
}

int pt_json_load_foreign(json_t **out, const char *text, size_t n, int flags, pt_err *err)
{
    char *t = keys_without_nul(text, n);
    if (!t)
        return pt_fail(err, PT_ENOMEM, "out of memory for %zu bytes of JSON", n);
    const int rc = load(out, t, n,
                        JSON_ALLOW_NUL | (flags & PT_JSON_REALS ? JSON_DECODE_INT_AS_REAL : 0) |
                            (flags & PT_JSON_LAST_KEY_WINS ? 0 : JSON_REJECT_DUPLICATES),
                        err);
    free(t);
    return rc;
}

const char *pt_json_cstr(const json_t *j)
{
    const char *s = json_string_value(j);
    return s && strlen(s) == json_string_length(j) ? s : NULL;
}

json_t *pt_json_number(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* Length of the valid UTF-8 character at s (shortest form, no surrogate,
 * at most U+10FFFF), or 0. */
static size_t utf8_char(const unsigned char *s)
{
    const unsigned c = s[0];
    size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
        (c == 0xF4 && s[1] > 0x8F))
        return 0;
    return n;
}

json_t *pt_json_text(const char *s)
{
    json_t *j = json_string(s);
    if (j)
        return j;
    const unsigned char *u = (const unsigned char *)s;
    char *out = malloc(3 * strlen(s) + 1), *o = out;
    if (!out)
        return NULL;
    while (*u) {
        size_t n = utf8_char(u);
        if (n) {
            memcpy(o, u, n);
            o += n;
            u += n;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            u++;
        }
    }
    *o = '\0';
    j = json_string(out);
    free(out);
    return j;
}

int pt_json_get_i64(const json_t *obj, const char *key, int64_t *v, const char *what, pt_err *err)
{
    const json_t *j = json_object_get(obj, key);
    if (!json_is_integer(j))
        return pt_fail(err, PT_EINPUT, "%s: \"%s\" is %s", what, key,
                       j ? "not an integer" : "missing");
    *v = (int64_t)json_integer_value(j);
    return 0;
}

int pt_json_get_f64(const json_t *obj, const char *key, double *v, const char *what, pt_err *err)
{
    const json_t *j = json_object_get(obj, key);
    if (!json_is_number(j))
        return pt_fail(err, PT_EINPUT, "%s: \"%s\" is %s", what, key,
                       j ? "not a number" : "missing");
    *v = json_number_value(j);
    return 0;
}
