/*
 * test_json.c: the JSON parser of formats/formats.h. Valid documents (nesting,
 * every escape, \u with surrogate pairs, raw UTF-8, numbers at the int64
 * limits), then a table of invalid ones, each of which must be refused with
 * the byte offset of the defect in the message.
 */
#include "formats/formats.h"
#include "tests/common/cunit_main.h"

#include <math.h>
#include <stdlib.h>

static pt_json *parse_ok(const char *text)
{
    pt_json *doc = NULL;
    pt_err err = {0};
    int rc = pt_json_parse(&doc, text, strlen(text), &err);
    if (rc)
        printf("\n  unexpected error for %s: %s\n", text, err.msg);
    CU_ASSERT(rc == 0);
    return doc;
}

static void test_nested_document(void)
{
    const char *text = " {\"a\": [1, 2.5, -3e2, true, false, null, [], {}],\n"
                       "  \"b\": {\"c\": \"d\", \"e\": {\"f\": [[[\"deep\"]]]}},"
                       " \"\": \"empty key\"} ";
    pt_json *doc = parse_ok(text);
    CU_ASSERT_FATAL(doc != NULL);
    const pt_json_value *root = pt_json_root(doc);
    CU_ASSERT(pt_json_type_of(root) == PT_JSON_OBJECT);
    CU_ASSERT(pt_json_count(root) == 3);
    size_t len;
    CU_ASSERT_STRING_EQUAL(pt_json_key(root, 0, &len), "a");
    CU_ASSERT(len == 1);
    CU_ASSERT_STRING_EQUAL(pt_json_key(root, 2, &len), "");
    CU_ASSERT(len == 0);
    CU_ASSERT(pt_json_key(root, 3, &len) == NULL);

    const pt_json_value *a = pt_json_get(root, "a");
    CU_ASSERT(pt_json_type_of(a) == PT_JSON_ARRAY && pt_json_count(a) == 8);
    pt_json_type types[] = {PT_JSON_NUMBER, PT_JSON_NUMBER, PT_JSON_NUMBER, PT_JSON_BOOL,
                            PT_JSON_BOOL, PT_JSON_NULL, PT_JSON_ARRAY, PT_JSON_OBJECT};
    for (size_t i = 0; i < 8; i++)
        CU_ASSERT(pt_json_type_of(pt_json_at(a, i)) == types[i]);
    CU_ASSERT(pt_json_at(a, 8) == NULL);
    CU_ASSERT(pt_json_bool(pt_json_at(a, 3)) == 1 && pt_json_bool(pt_json_at(a, 4)) == 0);
    CU_ASSERT_STRING_EQUAL(pt_json_number_text(pt_json_at(a, 2)), "-3e2");
    double d;
    CU_ASSERT(pt_json_double(pt_json_at(a, 2), &d, NULL) == 0 && d == -300.0);
    CU_ASSERT(pt_json_count(pt_json_at(a, 6)) == 0 && pt_json_count(pt_json_at(a, 7)) == 0);

    const pt_json_value *f = pt_json_get(pt_json_get(pt_json_get(root, "b"), "e"), "f");
    const pt_json_value *deep = pt_json_at(pt_json_at(pt_json_at(f, 0), 0), 0);
    CU_ASSERT_STRING_EQUAL(pt_json_string(deep, NULL), "deep");
    CU_ASSERT_STRING_EQUAL(pt_json_string(pt_json_get(root, ""), NULL), "empty key");
    CU_ASSERT_STRING_EQUAL(pt_json_string(pt_json_member(pt_json_get(root, "b"), 0), NULL), "d");

    /* accessors on the wrong type or NULL give nothing, not a crash */
    CU_ASSERT(pt_json_get(a, "x") == NULL);
    CU_ASSERT(pt_json_get(root, "missing") == NULL);
    CU_ASSERT(pt_json_at(root, 0) == NULL);
    CU_ASSERT(pt_json_string(a, &len) == NULL && len == 0);
    CU_ASSERT(pt_json_member(a, 0) == NULL);
    CU_ASSERT(pt_json_count(NULL) == 0 && pt_json_get(NULL, "a") == NULL);
    CU_ASSERT(pt_json_number_text(deep) == NULL);
    pt_json_free(doc);
    pt_json_free(NULL);
}

static void test_string_escapes_and_unicode(void)
{
    pt_json *doc = parse_ok("[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\","
                            " \"\\u00e9\\u4E2D\\ud83d\\ude00\","
                            " \"\xc3\xa9\xe2\x98\x83\xf0\x9f\x98\x80\","
                            " \"a\\u0000b\", \"\\u0041\"]");
    CU_ASSERT_FATAL(doc != NULL);
    const pt_json_value *root = pt_json_root(doc);
    size_t len;
    CU_ASSERT_STRING_EQUAL(pt_json_string(pt_json_at(root, 0), &len), "\"\\/\b\f\n\r\t");
    CU_ASSERT(len == 8);
    CU_ASSERT_STRING_EQUAL(pt_json_string(pt_json_at(root, 1), &len),
                           "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80");
    CU_ASSERT(len == 9);
    CU_ASSERT_STRING_EQUAL(pt_json_string(pt_json_at(root, 2), NULL),
                           "\xc3\xa9\xe2\x98\x83\xf0\x9f\x98\x80");
    const char *nul = pt_json_string(pt_json_at(root, 3), &len);
    CU_ASSERT(len == 3 && memcmp(nul, "a\0b", 4) == 0);
    CU_ASSERT_STRING_EQUAL(pt_json_string(pt_json_at(root, 4), NULL), "A");
    pt_json_free(doc);

    CU_ASSERT(pt_json_utf8_valid("\xf4\x8f\xbf\xbf", 4) == 1); /* U+10FFFF */
    CU_ASSERT(pt_json_utf8_valid("\xf4\x90\x80\x80", 4) == 0); /* beyond it */
    CU_ASSERT(pt_json_utf8_valid("\xe2\x98", 2) == 0);         /* cut short */
}

static void test_numbers(void)
{
    pt_json *doc = parse_ok("[0, -0, 123, 9223372036854775807, -9223372036854775808,"
                            " 9223372036854775808, -9223372036854775809, 1.5, 1e3, 1E3,"
                            " 1.5e3, -0.25, 1e-400, 1e400, 12345678901234567890123]");
    CU_ASSERT_FATAL(doc != NULL);
    const pt_json_value *r = pt_json_root(doc);
    int64_t v;
    pt_err err = {0};
    int64_t ints[] = {0, 0, 123, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < 5; i++) {
        CU_ASSERT(pt_json_int64(pt_json_at(r, i), &v, &err) == 0);
        CU_ASSERT(v == ints[i]);
    }
    for (size_t i = 5; i < 7; i++) {
        CU_ASSERT(pt_json_int64(pt_json_at(r, i), &v, &err) == PT_EINPUT);
        CU_ASSERT(strstr(err.msg, "does not fit in a 64-bit integer") != NULL);
    }
    for (size_t i = 7; i < 10; i++) {
        CU_ASSERT(pt_json_int64(pt_json_at(r, i), &v, &err) == PT_EINPUT);
        CU_ASSERT(strstr(err.msg, "is not an integer") != NULL);
    }
    CU_ASSERT(pt_json_int64(pt_json_at(r, 14), &v, &err) == PT_EINPUT);
    CU_ASSERT(pt_json_int64(NULL, &v, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "found nothing") != NULL);
    CU_ASSERT(pt_json_int64(r, &v, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "found an array") != NULL);

    double d;
    CU_ASSERT(pt_json_double(pt_json_at(r, 10), &d, &err) == 0 && d == 1500.0);
    CU_ASSERT(pt_json_double(pt_json_at(r, 11), &d, &err) == 0 && d == -0.25);
    CU_ASSERT(pt_json_double(pt_json_at(r, 3), &d, &err) == 0 && d == 9223372036854775807.0);
    CU_ASSERT(pt_json_double(pt_json_at(r, 12), &d, &err) == 0 && fabs(d) < 1e-300);
    CU_ASSERT(pt_json_double(pt_json_at(r, 13), &d, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "out of the range of a double") != NULL);
    CU_ASSERT(pt_json_double(pt_json_at(r, 14), &d, &err) == 0 && d > 1.2e22 && d < 1.3e22);
    pt_json_free(doc);
}

static void test_scalars_duplicates_and_depth(void)
{
    pt_json *doc = parse_ok(" \t\n42\r\n");
    CU_ASSERT(doc && pt_json_type_of(pt_json_root(doc)) == PT_JSON_NUMBER);
    pt_json_free(doc);
    doc = parse_ok("\"x\"");
    CU_ASSERT(doc && pt_json_string(pt_json_root(doc), NULL)[0] == 'x');
    pt_json_free(doc);
    doc = parse_ok("null");
    CU_ASSERT(doc && pt_json_type_of(pt_json_root(doc)) == PT_JSON_NULL);
    pt_json_free(doc);

    doc = parse_ok("{\"a\": 1, \"a\": 2}"); /* kept; the first wins on lookup */
    CU_ASSERT_FATAL(doc != NULL);
    int64_t v;
    CU_ASSERT(pt_json_count(pt_json_root(doc)) == 2);
    CU_ASSERT(pt_json_int64(pt_json_get(pt_json_root(doc), "a"), &v, NULL) == 0 && v == 1);
    pt_json_free(doc);

    /* exactly the depth limit is accepted */
    char text[2 * PT_JSON_MAX_DEPTH + 8];
    size_t n = 0;
    for (int i = 0; i < PT_JSON_MAX_DEPTH; i++)
        text[n++] = '[';
    for (int i = 0; i < PT_JSON_MAX_DEPTH; i++)
        text[n++] = ']';
    text[n] = '\0';
    doc = parse_ok(text);
    CU_ASSERT(doc != NULL);
    pt_json_free(doc);
}

typedef struct bad_case {
    const char *text;
    size_t len; /* 0: strlen */
    size_t offset;
    const char *phrase;
} bad_case;

static const bad_case bad_cases[] = {
    {"", 0, 0, "expected a value, found the end"},
    {"   ", 0, 3, "expected a value"},
    {"[1,2,]", 0, 5, "expected a value, found ']'"},
    {"{\"a\":1,}", 0, 7, "expected a string key, found '}'"},
    {"[1,,2]", 0, 3, "expected a value"},
    {"[1 2]", 0, 3, "expected ',' or ']'"},
    {"{\"a\" 1}", 0, 5, "expected ':'"},
    {"{1:2}", 0, 1, "expected a string key"},
    {"{\"a\":}", 0, 5, "expected a value"},
    {"{\"a\":1 \"b\":2}", 0, 7, "expected ',' or '}'"},
    {"\"abc", 0, 4, "unterminated string"},
    {"[\"abc]", 0, 6, "unterminated string"},
    {"\"\\x\"", 0, 2, "after '\\'"},
    {"\"\\", 0, 2, "an escape character"},
    {"\"\\u12\"", 0, 3, "4 hex digits"},
    {"\"\\u12G4\"", 0, 3, "4 hex digits"},
    {"\"\\ud800\"", 0, 1, "not followed by a low surrogate"},
    {"\"\\ud800\\u0041\"", 0, 1, "not followed by a low surrogate"},
    {"\"\\ud800\\", 0, 1, "not followed by a low surrogate"},
    {"\"\\udc00\"", 0, 1, "lone low surrogate"},
    {"\"a\x01\"", 0, 2, "control character 0x01"},
    {"\"a\nb\"", 0, 2, "control character 0x0a"},
    {"\"\xff\"", 0, 1, "invalid UTF-8"},
    {"\"\xc0\xaf\"", 0, 1, "invalid UTF-8"},
    {"\"\xed\xa0\x80\"", 0, 1, "invalid UTF-8"},
    {"\"\xe2\x98\"", 0, 1, "invalid UTF-8"},
    {"01", 0, 0, "leading zeros"},
    {"-01", 0, 0, "leading zeros"},
    {"-", 0, 1, "expected a digit"},
    {"-x", 0, 1, "expected a digit"},
    {"1.", 0, 2, "after the decimal point"},
    {"1.e5", 0, 2, "after the decimal point"},
    {"1e", 0, 2, "in the exponent"},
    {"1e+", 0, 3, "in the exponent"},
    {"+1", 0, 0, "expected a value, found '+'"},
    {".5", 0, 0, "expected a value"},
    {"NaN", 0, 0, "expected a value"},
    {"Infinity", 0, 0, "expected a value"},
    {"tru", 0, 0, "expected true"},
    {"nul", 0, 0, "expected null"},
    {"fals", 0, 0, "expected false"},
    {"truex", 0, 4, "expected the end of the text"},
    {"1 2", 0, 2, "expected the end of the text"},
    {"{} x", 0, 3, "expected the end of the text"},
    {"[", 0, 1, "expected a value, found the end"},
    {"{", 0, 1, "expected a string key, found the end"},
    {"[1,2", 0, 4, "expected ',' or ']'"},
    {"[1]\0", 4, 3, "found byte 0x00"},
    {"'a'", 0, 0, "expected a value, found '''"},
    {"[\x01]", 0, 1, "found byte 0x01"},
};

static void test_invalid_documents(void)
{
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        size_t len = c->len ? c->len : strlen(c->text);
        pt_json *doc = (pt_json *)1;
        pt_err err = {0};
        int rc = pt_json_parse(&doc, c->text, len, &err);
        char want[64];
        snprintf(want, sizeof want, "offset %zu:", c->offset);
        int ok = rc == PT_EINPUT && doc == NULL && strstr(err.msg, want) == err.msg &&
                 strstr(err.msg, c->phrase) != NULL;
        if (!ok)
            printf("\n  case %zu (%s): rc %d, message: %s\n", i, c->text, rc, err.msg);
        CU_ASSERT(ok);
    }
}

static void test_nesting_limit(void)
{
    /* one level too deep, and far too deep (would overflow a stack without the limit) */
    size_t sizes[] = {PT_JSON_MAX_DEPTH + 1, 1000000};
    for (size_t k = 0; k < 2; k++) {
        size_t n = sizes[k];
        char *text = malloc(2 * n);
        memset(text, '[', n);
        memset(text + n, ']', n);
        pt_json *doc = NULL;
        pt_err err = {0};
        CU_ASSERT(pt_json_parse(&doc, text, 2 * n, &err) == PT_EINPUT);
        CU_ASSERT(doc == NULL);
        CU_ASSERT(strstr(err.msg, "offset 64: nesting deeper than 64 levels") != NULL);
        free(text);
    }
    /* the same through objects: {"a":{"a":... */
    size_t levels = PT_JSON_MAX_DEPTH + 1;
    char *deep = malloc(5 * levels + 1);
    for (size_t i = 0; i < levels; i++)
        memcpy(deep + 5 * i, "{\"a\":", 5);
    pt_json *doc = NULL;
    pt_err err = {0};
    CU_ASSERT(pt_json_parse(&doc, deep, 5 * levels, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "offset 320: nesting deeper than 64 levels") != NULL);
    free(deep);
}

static const pt_test json_tests[] = {
    {"nested_document", test_nested_document},
    {"string_escapes_and_unicode", test_string_escapes_and_unicode},
    {"numbers", test_numbers},
    {"scalars_duplicates_and_depth", test_scalars_duplicates_and_depth},
    {"invalid_documents", test_invalid_documents},
    {"nesting_limit", test_nesting_limit},
    {NULL, NULL}};

static const pt_test_suite suites[] = {{"json", json_tests}, {NULL, NULL}};
