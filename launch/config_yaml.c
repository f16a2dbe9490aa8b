/*
 * config_yaml.c: reading a configuration from YAML, through libyaml's
 * document API (which keeps line numbers). Every key goes through the schema
 * (pt_config_set_value), so YAML, `--set` and checkpoints' stored configs
 * accept the same values with the same messages: "FILE:LINE: KEY: problem;
 * allowed: ...".
 */
#include "launch/config_schema.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

typedef struct {
    pt_config *c;
    const char *path;
    yaml_document_t *doc;
    pt_err *err;
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
    if (vn->type == YAML_MAPPING_NODE)
        return walk(w, vn, key);
    int ki = pt_config_find_key(key);
    if (ki < 0) {
        char hint[160];
        pt_config_suggest(key, hint, sizeof hint);
        return pt_fail(w->err, PT_EINPUT, "%s:%d: unknown key '%s'%s", w->path, line, key, hint);
    }
    if (w->c->line[ki] > 0)
        return pt_fail(w->err, PT_EINPUT, "%s:%d: %s is set twice (first on line %d)", w->path,
                       line, key, w->c->line[ki]);
    char where[PT_PATH_MAX + 16];
    snprintf(where, sizeof where, "%s:%d", w->path, (int)vn->start_mark.line + 1);
    if (vn->type != YAML_SCALAR_NODE)
        return pt_config_bad_value(w->err, where, &pt_config_keys[ki], "(a list)", "expected one value, got");
    const char *text = (const char *)vn->data.scalar.value;
    if (vn->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && *text == '\0')
        return pt_config_bad_value(w->err, where, &pt_config_keys[ki], "", "no value");
    int rc = pt_config_set_value(w->c, ki, text, where, w->err);
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
    if (root) {
        walk_ctx w = {c, name, &doc, err};
        rc = walk(&w, root, "");
    }
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
