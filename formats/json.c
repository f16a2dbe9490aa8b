/*
 * json.c: the few choices about JSON that every reader and writer of
 * pipetrain's files must make alike, on top of jansson.
 */
#include "formats/formats.h"

#include <math.h>

static int load(json_t **out, const char *text, size_t n, size_t flags, pt_err *err)
{
    json_error_t e;
    *out = json_loadb(text, n, JSON_REJECT_DUPLICATES | flags, &e);
    if (!*out)
        return pt_fail(err, PT_EINPUT, "line %d, column %d (byte %d): %s", e.line, e.column,
                       e.position, e.text);
    return 0;
}

int pt_json_load(json_t **out, const char *text, size_t n, pt_err *err)
{
    return load(out, text, n, 0, err);
}

int pt_json_load_reals(json_t **out, const char *text, size_t n, pt_err *err)
{
    return load(out, text, n, JSON_DECODE_INT_AS_REAL, err);
}

json_t *pt_json_number(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
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
