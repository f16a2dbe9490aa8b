/*
 * config.c: reading the run configuration. YAML (through libyaml's document
 * API, which keeps line numbers) and `--set key=value` overrides both end in
 * set_value(), which parses one value against its schema row; cross-key rules
 * and input files are checked once, in pt_config_validate(), after every
 * override. Every error names where the value came from, the key and what is
 * allowed, so the user can fix it without reading this file.
 */
#include "launch/config_schema.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

_Static_assert(sizeof(((pt_config *)0)->line) / sizeof(int) >= 64,
               "pt_config.line must have a slot per key");

static int find_key(const char *key)
{
    for (int i = 0; i < pt_config_key_count; i++)
        if (strcmp(pt_config_keys[i].key, key) == 0)
            return i;
    return -1;
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
static void suggest(const char *key, char *out, size_t n)
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

/* Human description of the values a key allows. */
static void allowed(const pt_key_spec *k, char *out, size_t n)
{
    const char *lo = (k->flags & PT_F_MIN_EXCL) ? ">" : ">=";
    const char *hi = (k->flags & PT_F_MAX_EXCL) ? "<" : "<=";
    switch (k->type) {
    case PT_K_INT:
    case PT_K_I64:
        snprintf(out, n, "an integer from %.0f to %.0f%s", k->min, k->max,
                 (k->flags & PT_F_AUTO) ? ", or auto" : "");
        break;
    case PT_K_FLOAT:
        snprintf(out, n, "a number %s %g and %s %g", lo, k->min, hi, k->max);
        break;
    case PT_K_BOOL:
        snprintf(out, n, "true or false");
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
    int i = find_key(key);
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

static int bad_value(pt_err *err, const char *where, const pt_key_spec *k, const char *text,
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
 * included: format_value escapes the line breaks), less NEL, which YAML
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

/* Parses text into key k of c. where: "FILE:LINE" or "--set". */
static int set_value(pt_config *c, int ki, const char *text, const char *where, pt_err *err)
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
            if (errno || end == text || *end)
                return bad_value(err, where, k, text, "not an integer:");
            if ((double)v < k->min || (double)v > k->max)
                return bad_value(err, where, k, text, "out of range:");
        }
        if (k->type == PT_K_INT)
            *(int *)field = (int)v;
        else
            *(long long *)field = v;
        return 0;
    }
    case PT_K_FLOAT: {
        errno = 0;
        double v = strtod(text, &end);
        if (errno || end == text || *end || !isfinite(v))
            return bad_value(err, where, k, text, "not a number:");
        int below = (k->flags & PT_F_MIN_EXCL) ? v <= k->min : v < k->min;
        int above = (k->flags & PT_F_MAX_EXCL) ? v >= k->max : v > k->max;
        if (below || above)
            return bad_value(err, where, k, text, "out of range:");
        *(double *)field = v;
        return 0;
    }
    case PT_K_BOOL: {
        static const char *yes[] = {"true", "yes", "on", "True", "TRUE", NULL};
        static const char *no[] = {"false", "no", "off", "False", "FALSE", NULL};
        for (int i = 0; yes[i]; i++)
            if (strcmp(text, yes[i]) == 0)
                return *(int *)field = 1, 0;
        for (int i = 0; no[i]; i++)
            if (strcmp(text, no[i]) == 0)
                return *(int *)field = 0, 0;
        return bad_value(err, where, k, text, "not a boolean:");
    }
    case PT_K_STR:
        if (strlen(text) >= k->size)
            return bad_value(err, where, k, text, "too long:");
        if (!yaml_text(text))
            return bad_value(err, where, k, text, "not text (invalid UTF-8 or a control character):");
        memcpy(field, text, strlen(text) + 1);
        return 0;
    case PT_K_ENUM: {
        int idx = word_index(k->words, text);
        if (idx < 0)
            return bad_value(err, where, k, text, "unknown value");
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
        if (set_value(c, i, pt_config_keys[i].def, "default", &err)) {
            fprintf(stderr, "pipetrain: bug: %s\n", err.msg);
            abort();
        }
    }
}

/* ------------------------------------------------------------------ YAML */

typedef struct {
    pt_config *c;
    const char *path;
    yaml_document_t *doc;
    pt_err *err;
    unsigned char *walked; /* per node of doc: a mapping already walked */
} walk_ctx;

static int walk(walk_ctx *w, yaml_node_t *node, const char *prefix);

static int walk_pair(walk_ctx *w, yaml_node_pair_t *pair, const char *prefix)
{
    yaml_node_t *kn = yaml_document_get_node(w->doc, pair->key);
    yaml_node_t *vn = yaml_document_get_node(w->doc, pair->value);
    int line = (int)kn->start_mark.line + 1;
    if (kn->type != YAML_SCALAR_NODE)
        return pt_fail(w->err, PT_EINPUT, "%s:%d: a key must be a plain word", w->path, line);
    char key[256];
    int n = snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "",
                     (const char *)kn->data.scalar.value);
    if (n < 0 || (size_t)n >= sizeof key)
        return pt_fail(w->err, PT_EINPUT, "%s:%d: key too long", w->path, line);
    if (vn->type == YAML_MAPPING_NODE) {
        /* An alias (*name) reaches a mapping a second time: walking it again
         * would take exponential time for aliases of aliases of empty
         * mappings, and forever for one inside its own anchor. */
        size_t node = (size_t)(vn - w->doc->nodes.start);
        if (w->walked[node])
            return pt_fail(w->err, PT_EINPUT, "%s:%d: %s: aliases (*name) of mappings are not "
                           "supported; write the keys out", w->path, line, key);
        w->walked[node] = 1;
        return walk(w, vn, key);
    }
    int ki = find_key(key);
    if (ki < 0) {
        char hint[160];
        suggest(key, hint, sizeof hint);
        return pt_fail(w->err, PT_EINPUT, "%s:%d: unknown key '%s'%s", w->path, line, key, hint);
    }
    if (w->c->line[ki] > 0)
        return pt_fail(w->err, PT_EINPUT, "%s:%d: %s is set twice (first on line %d)", w->path,
                       line, key, w->c->line[ki]);
    char where[PT_PATH_MAX + 16];
    snprintf(where, sizeof where, "%s:%d", w->path, (int)vn->start_mark.line + 1);
    if (vn->type != YAML_SCALAR_NODE)
        return bad_value(w->err, where, &pt_config_keys[ki], "(a list)", "expected one value, got");
    const char *text = (const char *)vn->data.scalar.value;
    if (vn->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && *text == '\0')
        return bad_value(w->err, where, &pt_config_keys[ki], "", "no value");
    int rc = set_value(w->c, ki, text, where, w->err);
    if (rc == 0)
        w->c->line[ki] = line;
    return rc;
}

static int walk(walk_ctx *w, yaml_node_t *node, const char *prefix)
{
    if (node->type != YAML_MAPPING_NODE)
        return pt_fail(w->err, PT_EINPUT, "%s:%d: expected 'key: value' lines%s%s", w->path,
                       (int)node->start_mark.line + 1, *prefix ? " under " : "", prefix);
    yaml_node_pair_t *first = node->data.mapping.pairs.start, *top = node->data.mapping.pairs.top;
    for (yaml_node_pair_t *p = first; p < top; p++) {
        /* YAML forbids a key twice in one mapping; libyaml does not check */
        yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        for (yaml_node_pair_t *q = first; q < p && k->type == YAML_SCALAR_NODE; q++) {
            yaml_node_t *e = yaml_document_get_node(w->doc, q->key);
            if (e->type == YAML_SCALAR_NODE && strcmp((const char *)e->data.scalar.value,
                                                      (const char *)k->data.scalar.value) == 0)
                return pt_fail(w->err, PT_EINPUT, "%s:%d: '%s%s%s' appears twice (first on line %d)",
                               w->path, (int)k->start_mark.line + 1, prefix, *prefix ? "." : "",
                               (const char *)k->data.scalar.value, (int)e->start_mark.line + 1);
        }
        int rc = walk_pair(w, p, prefix);
        if (rc)
            return rc;
    }
    return 0;
}

/* Loads the YAML document the parser is set up to read; `name` is what
 * messages call it. */
static int load_with(pt_config *c, yaml_parser_t *parser, const char *name, pt_err *err)
{
    yaml_document_t doc;
    int rc = 0;
    if (!yaml_parser_load(parser, &doc))
        return pt_fail(err, PT_EINPUT, "%s:%d: YAML syntax error: %s", name,
                       (int)parser->problem_mark.line + 1, parser->problem ? parser->problem : "?");
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    unsigned char *walked = root ? calloc((size_t)(doc.nodes.top - doc.nodes.start), 1) : NULL;
    if (root && !walked)
        rc = pt_fail(err, PT_ENOMEM, "out of memory reading %s", name);
    if (root && walked) {
        walk_ctx w = {c, name, &doc, err, walked};
        rc = walk(&w, root, "");
    }
    free(walked);
    yaml_document_delete(&doc);
    if (rc == 0)
        snprintf(c->source, sizeof c->source, "%s", name);
    return rc;
}

int pt_config_load(pt_config *c, const char *path, pt_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return pt_fail(err, PT_EINPUT, "cannot open config '%s': %s", path, strerror(errno));
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        return pt_fail(err, PT_ENOMEM, "out of memory starting the YAML parser");
    }
    yaml_parser_set_input_file(&parser, f);
    int rc = load_with(c, &parser, path, err);
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}

int pt_config_load_text(pt_config *c, const char *text, size_t len, const char *name, pt_err *err)
{
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        return pt_fail(err, PT_ENOMEM, "out of memory starting the YAML parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int rc = load_with(c, &parser, name, err);
    yaml_parser_delete(&parser);
    return rc;
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
    int ki = find_key(key);
    if (ki < 0) {
        char hint[160];
        suggest(key, hint, sizeof hint);
        return pt_fail(err, PT_EINPUT, "--set: unknown key '%s'%s", key, hint);
    }
    int rc = set_value(c, ki, eq + 1, "--set", err);
    if (rc == 0)
        c->line[ki] = -1;
    return rc;
}

/* ------------------------------------------------------------ validation */

/* "FILE:LINE: " where key was set, "--set: " or "" (a default). */
static void where(const pt_config *c, const char *key, char *out, size_t n)
{
    int ki = find_key(key);
    int line = ki >= 0 ? c->line[ki] : 0;
    if (line > 0)
        snprintf(out, n, "%s:%d: ", c->source, line);
    else if (line < 0)
        snprintf(out, n, "--set: ");
    else
        snprintf(out, n, "%s%s(default) ", c->source, *c->source ? ": " : "");
}

static int key_fail(const pt_config *c, pt_err *err, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int key_fail(const pt_config *c, pt_err *err, const char *key, const char *fmt, ...)
{
    char at[PT_PATH_MAX + 32], msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    where(c, key, at, sizeof at);
    return pt_fail(err, PT_EINPUT, "%s%s: %s", at, key, msg);
}

static int need_file(const pt_config *c, const char *key, const char *path, pt_err *err)
{
    struct stat st;
    if (!*path)
        return key_fail(c, err, key, "a file is needed here");
    if (stat(path, &st) != 0)
        return key_fail(c, err, key, "cannot use '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return key_fail(c, err, key, "'%s' is not a regular file", path);
    return 0;
}

int pt_config_validate(const pt_config *c, pt_err *err)
{
    int rc;
    if (!*c->run.dir)
        return key_fail(c, err, "run.dir", "must name a directory");
    const int vit = c->model.kind == PT_MODEL_VIT;
    const int image_data = c->data.kind == PT_DATA_FASHION_MNIST || c->data.kind == PT_DATA_IDX ||
                           c->data.kind == PT_DATA_SYNTH_IMAGES;
    if (vit != image_data)
        return key_fail(c, err, "data.kind", "%s data cannot train a %s model (model.kind)",
                        pt_config_word("data.kind", c->data.kind),
                        pt_config_word("model.kind", c->model.kind));
    if (c->model.dim % c->model.heads)
        return key_fail(c, err, "model.heads", "%d does not divide model.dim (%d)",
                        c->model.heads, c->model.dim);
    if (vit) {
        int size = c->data.kind == PT_DATA_SYNTH_IMAGES ? c->data.image_size : 28;
        if (c->data.kind != PT_DATA_IDX && size % c->model.patch)
            return key_fail(c, err, "model.patch", "%d does not divide the image size %d",
                            c->model.patch, size);
    }
    if (c->train.min_lr > c->train.lr)
        return key_fail(c, err, "train.min_lr", "%g is above train.lr (%g)", c->train.min_lr,
                        c->train.lr);
    if (c->pipeline.microbatches != PT_AUTO && c->pipeline.microbatches > c->train.batch)
        return key_fail(c, err, "pipeline.microbatches",
                        "%d micro-batches cannot be cut from a batch of %lld",
                        c->pipeline.microbatches, c->train.batch);
    if (c->data.kind == PT_DATA_FASHION_MNIST || c->data.kind == PT_DATA_IDX) {
        if ((rc = need_file(c, "data.train_images", c->data.train_images, err)) ||
            (rc = need_file(c, "data.train_labels", c->data.train_labels, err)) ||
            (rc = need_file(c, "data.test_images", c->data.test_images, err)) ||
            (rc = need_file(c, "data.test_labels", c->data.test_labels, err)))
            return rc;
    }
    if ((c->data.kind == PT_DATA_TEXT_FILE || c->data.kind == PT_DATA_KJV) &&
        (rc = need_file(c, "data.text", c->data.text, err))) {
        if (c->data.kind == PT_DATA_KJV)
            strncat(err->msg, " (scripts/setup.sh writes the KJV text there)",
                    sizeof err->msg - strlen(err->msg) - 1);
        return rc;
    }
    if (*c->model.init_from && (rc = need_file(c, "model.init_from", c->model.init_from, err)))
        return rc;
    if (c->cache.enabled && (c->data.hflip || c->data.crop_pad))
        return key_fail(c, err, "cache.enabled",
                        "the cache would keep the frozen blocks' output for one random "
                        "augmentation of each image and serve it every epoch, which is not the "
                        "model being trained; turn off data.hflip and data.crop_pad, or the cache");
    if (c->cache.enabled && c->freeze.policy == 0)
        return key_fail(c, err, "cache.enabled", "the cache holds frozen blocks' output, but "
                                                  "freeze.policy is none");
    if (*c->cache.disk_dir) {
        struct stat st;
        if (stat(c->cache.disk_dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return key_fail(c, err, "cache.disk_dir", "'%s' is not a directory", c->cache.disk_dir);
    }
    if (!vit && c->sample.length > 0 && !*c->sample.prompt)
        return key_fail(c, err, "sample.prompt", "sampling needs a non-empty prompt");
    return 0;
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
    } else {
        a->causal = 1;
        a->vocab = 256;
        a->context = c->model.context;
    }
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
        snprintf(out, n, "%.17g", *(const double *)field);
        break;
    case PT_K_BOOL:
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

int pt_config_write_yaml(const pt_config *c, FILE *out)
{
    char section[32] = "";
    for (int i = 0; i < pt_config_key_count; i++) {
        const pt_key_spec *k = &pt_config_keys[i];
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
