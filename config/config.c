/*
 * config.c: the configuration values themselves. Every value, whether it
 * comes from YAML (yaml.c), a `--set key=value` override or a default,
 * is parsed by pt_config_set_value() against its schema row, so all three
 * accept the same text with the same messages; cross-key rules are checked
 * afterwards (check.c). Every error names where the value came from,
 * the key and what is allowed, so the user can fix it without reading this
 * file. Also here: writing the config back as YAML, and the key table.
 */
#include "config/schema.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(((pt_config *)0)->line) / sizeof(int) >= 64,
               "pt_config.line must have a slot per key");

int pt_config_find_key(const char *key)
{
    for (int i = 0; i < pt_config_key_count; i++)
        if (strcmp(pt_config_keys[i].key, key) == 0)
            return i;
    return -1;
}

int pt_config_is_section(const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; i < pt_config_key_count; i++)
        if (strncmp(pt_config_keys[i].key, name, n) == 0 && pt_config_keys[i].key[n] == '.')
            return 1;
    return 0;
}

static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    int d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}

/* " (did you mean 'x'?)" for the closest known key, or "" when none is close. */
void pt_config_suggest(const char *key, char *out, size_t n)
{
    int best = -1, dist = 4;
    for (int i = 0; i < pt_config_key_count; i++) {
        int e = edit_distance(key, pt_config_keys[i].key);
        const char *dot = strchr(pt_config_keys[i].key, '.');
        if (dot && strcmp(dot + 1, key) == 0)
            e = 1; /* the right key without its section */
        if (e < dist) {
            dist = e;
            best = i;
        }
    }
    if (best >= 0)
        snprintf(out, n, " (did you mean '%s'?)", pt_config_keys[best].key);
    else
        snprintf(out, n, "; `pipetrain keys` lists every key");
}

void pt_config_suggest_section(const char *name, char *out, size_t n)
{
    int best = -1, dist = 3;
    size_t best_len = 0;
    for (int i = 0; i < pt_config_key_count; i++) {
        const char *key = pt_config_keys[i].key, *dot = strrchr(key, '.');
        char section[64];
        if (!dot || (size_t)(dot - key) >= sizeof section)
            continue;
        memcpy(section, key, (size_t)(dot - key));
        section[dot - key] = '\0';
        int e = edit_distance(name, section);
        if (e < dist) {
            dist = e;
            best = i;
            best_len = (size_t)(dot - key);
        }
    }
    if (best >= 0)
        snprintf(out, n, " (did you mean section '%.*s'?)", (int)best_len, pt_config_keys[best].key);
    else
        pt_config_suggest(name, out, n);
}

/* Integer keys keep their range in the schema's double columns, which hold
 * each bound exactly (schema_bug checks it); values are compared as
 * integers, because near 2^63 a double cannot tell v from v + 1 (one past
 * run.seed's maximum used to pass the check). */
static long long int_min(const pt_key_spec *k) { return (long long)k->min; }
static long long int_max(const pt_key_spec *k) { return (long long)k->max; }

/* Why schema row k cannot be applied as written, or NULL. */
static const char *schema_bug(const pt_key_spec *k)
{
    const double two63 = 9223372036854775808.0;
    switch (k->type) {
    case PT_K_INT:
    case PT_K_I64:
        if (k->size != (k->type == PT_K_INT ? sizeof(int) : sizeof(long long)))
            return "the field is not of the key's integer type";
        if (!(k->min >= -two63 && k->max < two63 && k->min <= k->max) ||
            (double)int_min(k) != k->min || (double)int_max(k) != k->max)
            return "a bound is not an integer a long long holds";
        if (k->type == PT_K_INT && (int_min(k) < INT_MIN || int_max(k) > INT_MAX))
            return "a bound does not fit the int field";
        if ((k->flags & PT_F_AUTO) && int_min(k) <= PT_AUTO)
            return "the range includes the value that stands for auto";
        return NULL;
    case PT_K_FLOAT:
        if ((k->flags & PT_F_AUTO) && k->min <= PT_AUTO)
            return "the range includes the value that stands for auto";
        return k->min <= k->max ? NULL : "the range is empty";
    case PT_K_ENUM:
        return k->words && k->size == sizeof(int) ? NULL : "an enum needs words and an int field";
    case PT_K_BOOL: /* PT_AUTO (-1) is neither 0 nor 1: no range to check */
        return k->size == sizeof(int) ? NULL : "a boolean needs an int field";
    case PT_K_STR:
        return k->size > 1 ? NULL : "a string needs room";
    }
    return "no type";
}

/* Human description of the values a key allows. */
static void allowed(const pt_key_spec *k, char *out, size_t n)
{
    const char *lo = (k->flags & PT_F_MIN_EXCL) ? ">" : ">=";
    const char *hi = (k->flags & PT_F_MAX_EXCL) ? "<" : "<=";
    switch (k->type) {
    case PT_K_INT:
    case PT_K_I64:
        snprintf(out, n, "an integer from %lld to %lld%s", int_min(k), int_max(k),
                 (k->flags & PT_F_AUTO) ? ", or auto" : "");
        break;
    case PT_K_FLOAT:
        snprintf(out, n, "a number %s %g and %s %g%s", lo, k->min, hi, k->max,
                 (k->flags & PT_F_AUTO) ? ", or auto" : "");
        break;
    case PT_K_BOOL:
        snprintf(out, n, "true or false%s", (k->flags & PT_F_AUTO) ? ", or auto" : "");
        break;
    case PT_K_STR:
        snprintf(out, n, "a string of at most %zu bytes", k->size - 1);
        break;
    case PT_K_ENUM: {
        size_t len = (size_t)snprintf(out, n, "one of");
        for (int i = 0; k->words[i] && len < n; i++)
            len += (size_t)snprintf(out + len, n - len, "%s %s", i ? "," : "", k->words[i]);
        break;
    }
    }
}

static int word_index(const char *const *words, const char *word)
{
    for (int i = 0; words[i]; i++)
        if (strcmp(words[i], word) == 0)
            return i;
    return -1;
}

const char *pt_config_word(const char *key, int value)
{
    int i = pt_config_find_key(key);
    if (i < 0 || pt_config_keys[i].type != PT_K_ENUM || value < 0)
        return "?";
    for (int w = 0; pt_config_keys[i].words[w]; w++)
        if (w == value)
            return pt_config_keys[i].words[w];
    return "?";
}

/* text with control characters written as escapes, so a message stays one line */
static void printable(const char *text, char *out, size_t n)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p && o + 5 < n; p++) {
        if (*p == '\n')
            o += (size_t)snprintf(out + o, n - o, "\\n");
        else if (*p < 0x20 || *p == 0x7f)
            o += (size_t)snprintf(out + o, n - o, "\\x%02x", *p);
        else
            out[o++] = (char)*p;
    }
    out[o] = '\0';
}

int pt_config_bad_value(pt_err *err, const char *where, const pt_key_spec *k, const char *text,
                     const char *why)
{
    char what[256], shown[256];
    allowed(k, what, sizeof what);
    printable(text, shown, sizeof shown);
    return pt_fail(err, PT_EINPUT, "%s: %s: %s '%s'; allowed: %s", where, k->key, why, shown, what);
}

/* Whether a string value can be written back as a double-quoted YAML scalar
 * (format_value) and read again unchanged, as a checkpoint's config record
 * must be: valid UTF-8 of the characters a YAML file may hold (tab, CR and LF
 * included: format_value escapes the line breaks, U+2028 and U+2029 among
 * them), less NEL, which YAML
 * reads as a line break. Bytes that are not UTF-8 (from --set) and control
 * characters (from escapes like "\x01" or "\N") are not. */
static int yaml_text(const char *text)
{
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000}; /* no overlong forms */
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        int n = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3
              : (*p & 0xF8) == 0xF0 ? 4 : 0;
        if (!n)
            return 0;
        uint32_t c = n == 1 ? *p : *p & (0x7F >> n);
        for (int i = 1; i < n; i++) { /* a NUL (end of string) fails this too */
            if ((p[i] & 0xC0) != 0x80)
                return 0;
            c = c << 6 | (p[i] & 0x3F);
        }
        if (c < least[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            return 0;
        if (!(c == '\t' || c == '\n' || c == '\r' || (c >= 0x20 && c <= 0x7E) ||
              (c >= 0xA0 && c <= 0xFFFD) || c >= 0x10000)) /* C0, DEL, C1 (NEL), U+FFFE/F */
            return 0;
        p += n;
    }
    return 1;
}

/* Whether a number is written with a leading zero before another digit
 * (017, -08, 010.5): YAML 1.1 (whose yes and on this reader takes) reads
 * 017 as octal 15, YAML 1.2 and strtoll as 17; neither is assumed. */
static int leading_zero(const char *text)
{
    const char *p = text + (*text == '+' || *text == '-');
    return p[0] == '0' && isdigit((unsigned char)p[1]);
}

/* Parses text into key k of c. where: "FILE:LINE" or "--set". */
int pt_config_set_value(pt_config *c, int ki, const char *text, const char *where, pt_err *err)
{
    const pt_key_spec *k = &pt_config_keys[ki];
    char *field = (char *)c + k->offset;
    char *end;
    switch (k->type) {
    case PT_K_INT:
    case PT_K_I64: {
        long long v;
        if ((k->flags & PT_F_AUTO) && strcmp(text, "auto") == 0) {
            v = PT_AUTO;
        } else {
            errno = 0;
            v = strtoll(text, &end, 10);
            /* strtoll skips leading white space; a trailing one is refused:
             * refuse both alike */
            if (end == text || *end || isspace((unsigned char)text[0]))
                return pt_config_bad_value(err, where, k, text, "not an integer:");
            /* ERANGE: an integer beyond what a long long holds, so beyond any range */
            if (leading_zero(text))
                return pt_config_bad_value(err, where, k, text,
                                           "a leading zero (octal in YAML 1.1, decimal in 1.2: "
                                           "write the number without it):");
            if (errno == ERANGE || v < int_min(k) || v > int_max(k))
                return pt_config_bad_value(err, where, k, text, "out of range:");
        }
        if (k->type == PT_K_INT)
            *(int *)field = (int)v;
        else
            *(long long *)field = v;
        return 0;
    }
    case PT_K_FLOAT: {
        if ((k->flags & PT_F_AUTO) && strcmp(text, "auto") == 0) {
            *(double *)field = PT_AUTO;
            return 0;
        }
        errno = 0;
        double v = strtod(text, &end);
        /* ERANGE: beyond a double (1e400), or below its smallest number
         * (1e-400 reads as 0, which is not what was written): out of range;
         * or a subnormal (1e-310: a number, as small as it reads, judged by
         * the key's range like any other) */
        const int overflow = errno == ERANGE && (isinf(v) || v == 0);
        /* and white space before it, or a hexadecimal float (0x1p-3), which
         * strtod reads and YAML's numbers are not */
        if (end == text || *end || (!isfinite(v) && !overflow) || isspace((unsigned char)text[0]) ||
            strpbrk(text, "xX"))
            return pt_config_bad_value(err, where, k, text, "not a number:");
        if (overflow)
            return pt_config_bad_value(err, where, k, text,
                                       isinf(v) ? "out of range (beyond a double):"
                                                : "out of range (below the smallest double, "
                                                  "which would read it as 0):");
        if (leading_zero(text))
            return pt_config_bad_value(err, where, k, text,
                                       "a leading zero (octal in YAML 1.1, decimal in 1.2: write "
                                       "the number without it):");
        int below = (k->flags & PT_F_MIN_EXCL) ? v <= k->min : v < k->min;
        int above = (k->flags & PT_F_MAX_EXCL) ? v >= k->max : v > k->max;
        if (below || above)
            return pt_config_bad_value(err, where, k, text, "out of range:");
        *(double *)field = v + 0.0; /* -0 is 0: written back, and compared on resume, as 0 */
        return 0;
    }
    case PT_K_BOOL: {
        static const char *yes[] = {"true", "yes", "on", "True", "TRUE", NULL};
        static const char *no[] = {"false", "no", "off", "False", "FALSE", NULL};
        if ((k->flags & PT_F_AUTO) && strcmp(text, "auto") == 0)
            return *(int *)field = PT_AUTO, 0;
        for (int i = 0; yes[i]; i++)
            if (strcmp(text, yes[i]) == 0)
                return *(int *)field = 1, 0;
        for (int i = 0; no[i]; i++)
            if (strcmp(text, no[i]) == 0)
                return *(int *)field = 0, 0;
        return pt_config_bad_value(err, where, k, text, "not a boolean:");
    }
    case PT_K_STR:
        if (strlen(text) >= k->size)
            return pt_config_bad_value(err, where, k, text, "too long:");
        if (!yaml_text(text))
            return pt_config_bad_value(err, where, k, text,
                                       "not text (invalid UTF-8 or a control character):");
        memcpy(field, text, strlen(text) + 1);
        if (k->flags & PT_F_DIR)
            for (size_t len = strlen(field); len > 1 && field[len - 1] == '/'; len--)
                field[len - 1] = '\0';
        return 0;
    case PT_K_ENUM: {
        int idx = word_index(k->words, text);
        if (idx < 0) {
            c->unknown_names = 1;
            return pt_config_bad_value(err, where, k, text, "unknown value");
        }
        *(int *)field = idx;
        return 0;
    }
    }
    return pt_fail(err, PT_EINTERNAL, "key %s has no type", k->key);
}

void pt_config_defaults(pt_config *c)
{
    memset(c, 0, sizeof *c);
    if (pt_config_key_count > (int)(sizeof c->line / sizeof c->line[0])) {
        fprintf(stderr, "pipetrain: bug: pt_config.line has fewer slots than keys\n");
        abort();
    }
    for (int i = 0; i < pt_config_key_count; i++) {
        pt_err err;
        const char *bug = schema_bug(&pt_config_keys[i]);
        if (bug) {
            fprintf(stderr, "pipetrain: bug: schema row %s: %s\n", pt_config_keys[i].key, bug);
            abort();
        }
        if (pt_config_set_value(c, i, pt_config_keys[i].def, "default", &err)) {
            fprintf(stderr, "pipetrain: bug: %s\n", err.msg);
            abort();
        }
    }
}


static void format_value(const pt_config *c, const pt_key_spec *k, char *out, size_t n);

/* Index of the first key of a section (one that exists). */
static int first_in_section(const char *section)
{
    size_t n = strlen(section);
    for (int i = 0; i < pt_config_key_count; i++)
        if (strncmp(pt_config_keys[i].key, section, n) == 0 && pt_config_keys[i].key[n] == '.')
            return i;
    return 0;
}

int pt_config_set(pt_config *c, const char *assignment, pt_err *err)
{
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return pt_fail(err, PT_EINPUT, "--set %s: expected key=value", assignment);
    char key[256];
    size_t len = (size_t)(eq - assignment);
    if (len >= sizeof key)
        return pt_fail(err, PT_EINPUT, "--set: key too long");
    memcpy(key, assignment, len);
    key[len] = '\0';
    int ki = pt_config_find_key(key);
    if (ki < 0 && pt_config_is_section(key))
        return pt_fail(err, PT_EINPUT,
                       "--set: %s: a section, and --set sets one key: section.key=value, such as "
                       "%s=...; `pipetrain keys` lists every key",
                       key, pt_config_keys[first_in_section(key)].key);
    if (ki < 0) {
        char hint[160];
        pt_config_suggest(key, hint, sizeof hint);
        return pt_fail(err, PT_EINPUT, "--set: unknown key '%s'%s", key, hint);
    }
    /* a key --set gave before: the last value is used, and noted */
    char was[PT_PATH_MAX + 64] = "";
    const int again = c->line[ki] == -1;
    if (again)
        format_value(c, &pt_config_keys[ki], was, sizeof was);
    int rc = pt_config_set_value(c, ki, eq + 1, "--set", err);
    if (rc == 0)
        c->line[ki] = -1;
    if (rc == 0 && again) {
        /* "key old -> new", each value cut to 80 bytes (a path may take
         * 1023); keys that no longer fit are counted, not dropped unsaid */
        char now[PT_PATH_MAX + 64], one[512];
        format_value(c, &pt_config_keys[ki], now, sizeof now);
        /* cut between UTF-8 characters: a continuation byte is never first */
        int wl = strlen(was) > 80 ? 80 : (int)strlen(was), nl = strlen(now) > 80 ? 80 : (int)strlen(now);
        while (wl > 0 && wl < (int)strlen(was) && ((unsigned char)was[wl] & 0xC0) == 0x80)
            wl--;
        while (nl > 0 && nl < (int)strlen(now) && ((unsigned char)now[nl] & 0xC0) == 0x80)
            nl--;
        snprintf(one, sizeof one, "%s %.*s%s -> %.*s%s", key, wl, was, strlen(was) > 80 ? "..." : "",
                 nl, now, strlen(now) > 80 ? "..." : "");
        const size_t at = strlen(c->set_twice);
        if (!c->set_twice_more && at + 2 + strlen(one) < sizeof c->set_twice)
            snprintf(c->set_twice + at, sizeof c->set_twice - at, "%s%s", at ? ", " : "", one);
        else
            c->set_twice_more++;
    }
    return rc;
}

/* ------------------------------------------------ messages about keys */

void pt_config_where(const pt_config *c, const char *key, char *out, size_t n)
{
    int ki = pt_config_find_key(key);
    int line = ki >= 0 ? c->line[ki] : 0;
    if (line > 0)
        snprintf(out, n, "%s:%d: ", c->source, line);
    else if (line < 0)
        snprintf(out, n, "--set: ");
    else
        snprintf(out, n, "%s%s(default) ", c->source, *c->source ? ": " : "");
}

int pt_config_key_fail(const pt_config *c, pt_err *err, const char *key, const char *fmt, ...)
{
    /* the body as long as the message may be: a path of up to PT_PATH_MAX
     * bytes quoted in it must not cut off the reason and what is allowed
     * (a 768-byte body did, for an 800-byte data.vocab) */
    char at[PT_PATH_MAX + 32], msg[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pt_config_where(c, key, at, sizeof at);
    return pt_fail(err, PT_EINPUT, "%s%s: %s", at, key, msg);
}

int pt_config_key_prefix(const pt_config *c, pt_err *err, const char *key)
{
    char at[PT_PATH_MAX + 32];
    pt_config_where(c, key, at, sizeof at);
    return pt_err_prefix(err, "%s%s", at, key);
}

void pt_config_arch(const pt_config *c, pt_arch *a)
{
    memset(a, 0, sizeof *a);
    a->kind = (pt_model_kind)c->model.kind;
    a->dim = c->model.dim;
    a->layers = c->model.layers;
    a->heads = c->model.heads;
    a->mlp_hidden = c->model.mlp_hidden ? c->model.mlp_hidden : 4 * c->model.dim;
    a->init_std = c->model.init_std;
    a->seed = (uint64_t)c->run.seed;
    if (a->kind == PT_MODEL_VIT) {
        a->causal = 0;
        a->channels = 1;
        a->height = a->width = c->data.kind == PT_DATA_SYNTH_IMAGES ? c->data.image_size : 28;
        a->patch = c->model.patch;
        a->classes = c->model.classes;
    } else if (a->kind == PT_MODEL_BERT) {
        a->causal = 0;
        a->vocab = c->model.vocab;
        a->context = c->model.context;
        a->classes = c->model.classes;
        a->positions = c->model.positions;
        a->type_vocab = c->model.type_vocab;
        a->pad_id = 0;
        a->ln_eps = c->model.ln_eps > 0 ? c->model.ln_eps : 1e-12;
    } else {
        a->causal = 1;
        a->vocab = 256;
        a->context = c->model.context;
    }
    if (a->kind != PT_MODEL_BERT)
        a->ln_eps = c->model.ln_eps;
    /* auto: 0 here; for a bert with model.init_from's config.json, the session
     * puts that file's probabilities in (interop/init_from.c) */
    a->hidden_dropout = c->model.hidden_dropout >= 0 ? c->model.hidden_dropout : 0;
    a->attn_dropout = c->model.attn_dropout >= 0 ? c->model.attn_dropout : 0;
}

/* ---------------------------------------------------------------- output */

static void format_value(const pt_config *c, const pt_key_spec *k, char *out, size_t n)
{
    const char *field = (const char *)c + k->offset;
    switch (k->type) {
    case PT_K_INT:
        if ((k->flags & PT_F_AUTO) && *(const int *)field == PT_AUTO)
            snprintf(out, n, "auto");
        else
            snprintf(out, n, "%d", *(const int *)field);
        break;
    case PT_K_I64:
        snprintf(out, n, "%lld", *(const long long *)field);
        break;
    case PT_K_FLOAT:
        if ((k->flags & PT_F_AUTO) && *(const double *)field == PT_AUTO)
            snprintf(out, n, "auto");
        else
            pt_number_text(*(const double *)field, out, n);
        break;
    case PT_K_BOOL:
        if ((k->flags & PT_F_AUTO) && *(const int *)field == PT_AUTO)
            snprintf(out, n, "auto");
        else
            snprintf(out, n, "%s", *(const int *)field ? "true" : "false");
        break;
    case PT_K_ENUM:
        snprintf(out, n, "%s", pt_config_word(k->key, *(const int *)field));
        break;
    case PT_K_STR: {
        /* double-quoted YAML scalar */
        size_t o = 0;
        out[o++] = '"';
        for (const char *s = field; *s && o + 5 < n; s++) {
            if (*s == '"' || *s == '\\') {
                out[o++] = '\\';
                out[o++] = *s;
            } else if (*s == '\n' || *s == '\r') { /* raw, YAML would fold them */
                out[o++] = '\\';
                out[o++] = *s == '\n' ? 'n' : 'r';
            } else if ((unsigned char)s[0] == 0xE2 && (unsigned char)s[1] == 0x80 &&
                       ((unsigned char)s[2] == 0xA8 || (unsigned char)s[2] == 0xA9)) {
                /* U+2028 and U+2029 are line breaks to YAML too: \L and \P */
                out[o++] = '\\';
                out[o++] = (unsigned char)s[2] == 0xA8 ? 'L' : 'P';
                s += 2;
            } else {
                out[o++] = *s;
            }
        }
        out[o++] = '"';
        out[o] = '\0';
        break;
    }
    }
}

void pt_config_data_source(const pt_config *c, int test, char *out, size_t n)
{
    switch (c->data.kind) {
    case PT_DATA_FASHION_MNIST:
    case PT_DATA_IDX:
        snprintf(out, n, "%s '%s' and %s '%s'", test ? "data.test_images" : "data.train_images",
                 test ? c->data.test_images : c->data.train_images,
                 test ? "data.test_labels" : "data.train_labels",
                 test ? c->data.test_labels : c->data.train_labels);
        break;
    case PT_DATA_TEXT_FILE:
    case PT_DATA_KJV:
        snprintf(out, n, "data.text '%s'", c->data.text);
        break;
    case PT_DATA_TEXT_CLASSIFICATION:
        if (test && *c->data.test_file)
            snprintf(out, n, "data.test_file '%s'", c->data.test_file);
        else
            snprintf(out, n, "data.train_file '%s'", c->data.train_file);
        break;
    default:
        snprintf(out, n, "its data.* settings");
    }
}

const char *pt_config_data_key(const pt_config *c)
{
    switch (c->data.kind) {
    case PT_DATA_FASHION_MNIST:
    case PT_DATA_IDX:
        return "data.train_images";
    case PT_DATA_TEXT_FILE:
    case PT_DATA_KJV:
        return "data.text";
    case PT_DATA_TEXT_CLASSIFICATION:
        return "data.train_file";
    default:
        return "data.synthetic_examples";
    }
}

int pt_config_differences(const pt_config *a, const pt_config *b, const char *prefix, char *out,
                          size_t n)
{
    int count = 0;
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < pt_config_key_count; i++) {
        const pt_key_spec *k = &pt_config_keys[i];
        if (strncmp(k->key, prefix, strlen(prefix)) != 0 ||
            (!pt_config_reads(a, k->key, 0) && !pt_config_reads(b, k->key, 0)))
            continue;
        char va[PT_PATH_MAX + 64], vb[PT_PATH_MAX + 64];
        format_value(a, k, va, sizeof va);
        format_value(b, k, vb, sizeof vb);
        if (strcmp(va, vb) == 0)
            continue;
        int w = snprintf(out + used, n - used, "%s%s %s -> %s", count ? ", " : "", k->key, va, vb);
        count++;
        if (w > 0 && used + (size_t)w < n)
            used += (size_t)w;
        else
            used = n - 1; /* cut: the rest is not written */
    }
    return count;
}

static int write_yaml(const pt_config *c, int read_only, FILE *out)
{
    char section[32] = "";
    pt_config *defaults = read_only ? malloc(sizeof *defaults) : NULL; /* large */
    if (read_only && !defaults)
        return PT_ENOMEM;
    if (defaults)
        pt_config_defaults(defaults);
    for (int i = 0; i < pt_config_key_count; i++) {
        const pt_key_spec *k = &pt_config_keys[i];
        if (read_only && !pt_config_reads(c, k->key, 0)) {
            /* read neither by a run that starts fresh nor by a resume; or
             * only by a resume, and at its default (left out, a fresh run
             * from the text would note it as set and not read) */
            char v[2 * PT_PATH_MAX + 8], d[2 * PT_PATH_MAX + 8];
            format_value(c, k, v, sizeof v);
            format_value(defaults, k, d, sizeof d);
            if (!pt_config_reads(c, k->key, 1) || strcmp(v, d) == 0)
                continue;
        }
        const char *dot = strchr(k->key, '.');
        size_t sl = (size_t)(dot - k->key);
        if (strlen(section) != sl || strncmp(section, k->key, sl) != 0) {
            memcpy(section, k->key, sl);
            section[sl] = '\0';
            fprintf(out, "%s:\n", section);
        }
        char value[2 * PT_PATH_MAX + 8];
        format_value(c, k, value, sizeof value);
        fprintf(out, "  %s: %s\n", dot + 1, value);
    }
    free(defaults);
    return ferror(out) ? PT_ESYS : 0;
}

void pt_config_print_keys(FILE *out)
{
    fprintf(out, "| key | default | allowed | meaning |\n| --- | --- | --- | --- |\n");
    for (int i = 0; i < pt_config_key_count; i++) {
        const pt_key_spec *k = &pt_config_keys[i];
        char what[256];
        allowed(k, what, sizeof what);
        fprintf(out, "| `%s` | `%s` | %s | %s |\n", k->key, *k->def ? k->def : "''", what, k->doc);
    }
}

int pt_config_write_yaml(const pt_config *c, FILE *out) { return write_yaml(c, 0, out); }

int pt_config_write_yaml_read(const pt_config *c, FILE *out) { return write_yaml(c, 1, out); }
