/*
 * json.h: a small JSON parser (RFC 8259) for file headers that come from
 * outside, such as safetensors headers.
 *
 * A parsed document owns all its values; values are read through accessors and
 * stay valid until pt_json_free. Limits keep hostile input harmless: nesting
 * deeper than PT_JSON_MAX_DEPTH and texts longer than PT_JSON_MAX_BYTES are
 * rejected, so the recursive parser cannot exhaust the stack. Strings must be
 * valid UTF-8; escapes (including \uXXXX surrogate pairs) are decoded to UTF-8.
 * Decoded strings are NUL-terminated but may contain NUL (from \u0000): callers
 * that need C strings compare the length with strlen. Numbers keep their text;
 * the int64 and double accessors convert on demand. Duplicate object keys are
 * kept (pt_json_get returns the first); callers that need unique keys check.
 * Memory is about 50 bytes per value (a 100 MB array of one-digit numbers
 * needs some 2.5 GB), so callers bound the text size to what they can afford.
 *
 * Errors say "offset N: expected X, found Y"; callers prefix the file name.
 */
#ifndef PT_LAUNCH_JSON_H
#define PT_LAUNCH_JSON_H

#include "nn/nn.h"

#include <stddef.h>
#include <stdint.h>

#define PT_JSON_MAX_DEPTH 64
#define PT_JSON_MAX_BYTES ((size_t)1 << 30)

typedef enum {
    PT_JSON_NULL,
    PT_JSON_BOOL,
    PT_JSON_NUMBER,
    PT_JSON_STRING,
    PT_JSON_ARRAY,
    PT_JSON_OBJECT
} pt_json_type;

typedef struct pt_json pt_json;             /* a parsed document */
typedef struct pt_json_value pt_json_value; /* one value inside it */

/* Parses n bytes (no NUL terminator needed; a NUL byte is an error). */
int pt_json_parse(pt_json **out, const char *text, size_t n, pt_err *err);
void pt_json_free(pt_json *doc); /* NULL-safe */
const pt_json_value *pt_json_root(const pt_json *doc);

/* Accessors tolerate NULL and values of the wrong type: they then return
 * NULL / 0, so lookups can be chained and checked once. */
pt_json_type pt_json_type_of(const pt_json_value *v); /* PT_JSON_NULL for NULL */
const char *pt_json_type_name(pt_json_type t);        /* "null", "a number", ... */

/* Members of an object or elements of an array; 0 for anything else. */
size_t pt_json_count(const pt_json_value *v);

/* Object member i: its key (and the key's length) and its value. */
const char *pt_json_key(const pt_json_value *obj, size_t i, size_t *len);
const pt_json_value *pt_json_member(const pt_json_value *obj, size_t i);

/* The first member whose key equals key, or NULL. Linear in the members. */
const pt_json_value *pt_json_get(const pt_json_value *obj, const char *key);

/* Array element i, or NULL. */
const pt_json_value *pt_json_at(const pt_json_value *arr, size_t i);

/* The decoded string (NUL-terminated) and its length, or NULL. */
const char *pt_json_string(const pt_json_value *v, size_t *len);

/* 1 for true, 0 for false (and for anything that is not a boolean). */
int pt_json_bool(const pt_json_value *v);

/* The number as written, e.g. "-1.5e3", or NULL. */
const char *pt_json_number_text(const pt_json_value *v);

/* An integer number: PT_EINPUT (err may be NULL) if v is not a number, has a
 * fraction or exponent, or does not fit in int64. */
int pt_json_int64(const pt_json_value *v, int64_t *out, pt_err *err);

/* Any number as a double: PT_EINPUT if v is not a number or overflows a
 * double (underflow to 0 is accepted). Uses strtod, so the C locale's '.'
 * must be in effect (pipetrain never calls setlocale). */
int pt_json_double(const pt_json_value *v, double *out, pt_err *err);

/* 1 if the n bytes are valid UTF-8 (no overlong forms, surrogates or code
 * points above U+10FFFF), else 0. Writers use it to avoid producing JSON that
 * this parser would refuse. */
int pt_json_utf8_valid(const char *s, size_t n);

#endif
