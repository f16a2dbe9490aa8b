/*
 * yaml.c: reading a configuration from YAML, through libyaml's
 * document API (which keeps line numbers). Every key goes through the schema
 * (pt_config_set_value), so YAML, `--set` and checkpoints' stored configs
 * accept the same values with the same messages: "FILE:LINE: KEY: problem;
 * allowed: ...".
 */
#include "config/schema.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

typedef struct {
    pt_config *c;
    const char *path;
    yaml_document_t *doc;
    pt_err *err;
    unsigned char *walked; /* per node of doc: a mapping already walked */
    const size_t *tagged;  /* where the scalars with an explicit tag start (prescan) */
    int n_tagged;
} walk_ctx;

static int walk(walk_ctx *w, yaml_node_t *node, const char *prefix);

/* A plain scalar YAML reads as null: empty, ~, null, Null or NULL. */
static int is_null_scalar(const char *text, size_t len)
{
    return len == strlen(text) && (len == 0 || strcmp(text, "~") == 0 || strcmp(text, "null") == 0 ||
                                   strcmp(text, "Null") == 0 || strcmp(text, "NULL") == 0);
}

static int walk_pair(walk_ctx *w, yaml_node_pair_t *pair, const char *prefix)
{
    yaml_node_t *kn = yaml_document_get_node(w->doc, pair->key);
    yaml_node_t *vn = yaml_document_get_node(w->doc, pair->value);
    int line = (int)kn->start_mark.line + 1;
    if (kn->type != YAML_SCALAR_NODE)
        return pt_fail(w->err, PT_EINPUT, "%s:%d: a key must be a plain word", w->path, line);
    /* an empty key ("": or ? with nothing) would join its keys to the
     * section above as if it were not there */
    if (kn->data.scalar.length == 0)
        return pt_fail(w->err, PT_EINPUT, "%s:%d: an empty key%s%s; a key is a word", w->path, line,
                       *prefix ? " under " : "", prefix);
    char key[256];
    int n = snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "",
                     (const char *)kn->data.scalar.value);
    if (n < 0 || (size_t)n >= sizeof key)
        return pt_fail(w->err, PT_EINPUT,
                       "%s:%d: key '%.60s...' is longer than any key; `pipetrain keys` lists every "
                       "key", w->path, line, key);
    for (int i = 0; i < w->n_tagged; i++)
        if (w->tagged[i] == kn->start_mark.index)
            return pt_fail(w->err, PT_EINPUT, "%s:%d: %s: a YAML tag on the key ('%s'), which a "
                           "config does not take", w->path, line, key, (const char *)kn->tag);
    int ki = pt_config_find_key(key);
    /* an empty mapping under a name that is no section: its keys are not
     * there to be refused one by one, so the name is (it passed, setting
     * nothing, and a file of a million such names took minutes in the
     * duplicate check of each mapping) */
    if (vn->type == YAML_MAPPING_NODE && ki < 0 && !pt_config_is_section(key) &&
        vn->data.mapping.pairs.start == vn->data.mapping.pairs.top) {
        char hint[160];
        pt_config_suggest_section(key, hint, sizeof hint);
        w->c->unknown_names = 1;
        return pt_fail(w->err, PT_EINPUT, "%s:%d: unknown key '%s' (an empty section)%s", w->path,
                       line, key, hint);
    }
    if (vn->type == YAML_MAPPING_NODE && ki < 0) {
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
    if (ki < 0 && pt_config_is_section(key))
        return pt_fail(w->err, PT_EINPUT,
                       "%s:%d: %s: section %s must be a mapping of key: value lines, indented "
                       "under '%s:'; here it is %s",
                       w->path, line, key, key, key,
                       vn->type == YAML_SEQUENCE_NODE ? "a list"
                       : *(const char *)vn->data.scalar.value ? "a single value"
                                                              : "empty");
    if (ki < 0) {
        char hint[160];
        pt_config_suggest(key, hint, sizeof hint);
        w->c->unknown_names = 1;
        return pt_fail(w->err, PT_EINPUT, "%s:%d: unknown key '%s'%s", w->path, line, key, hint);
    }
    if (w->c->line[ki] > 0)
        return pt_fail(w->err, PT_EINPUT, "%s:%d: %s: set twice (first on line %d)", w->path,
                       line, key, w->c->line[ki]);
    /* the value's line; but a value that starts before its key came
     * through an alias (*name), and its anchor's line is not this key's;
     * and an implicit empty value (`? key` with no `:`) has no text of its
     * own, libyaml marking it where the next token starts (a line below) */
    const int implicit_empty = vn->type == YAML_SCALAR_NODE && vn->data.scalar.length == 0 &&
                               vn->start_mark.index == vn->end_mark.index;
    char where[PT_PATH_MAX + 16];
    snprintf(where, sizeof where, "%s:%d", w->path,
             vn->start_mark.index < kn->start_mark.index || implicit_empty
                 ? line
                 : (int)vn->start_mark.line + 1);
    if (vn->type != YAML_SCALAR_NODE)
        return pt_config_bad_value(w->err, where, &pt_config_keys[ki],
                                   vn->type == YAML_MAPPING_NODE ? "(a mapping)" : "(a list)",
                                   "expected one value, got");
    const char *text = (const char *)vn->data.scalar.value;
    /* a tag would ask for a conversion the schema does not make (!!binary
     * text read as a path, !!float 16 as an integer): refused, whichever
     * (the document gives an explicit !!str the implicit one's tag, so the
     * event stream's say which scalars have one) */
    for (int i = 0; i < w->n_tagged; i++)
        if (w->tagged[i] == vn->start_mark.index)
            return pt_config_bad_value(w->err, where, &pt_config_keys[ki], (const char *)vn->tag,
                                       "a YAML tag, which a config does not take:");
    /* YAML's null (empty, ~, null) is no value, not the text "~" or a
     * directory named "null" (quote it to mean the text) */
    if (vn->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        is_null_scalar(text, vn->data.scalar.length))
        return pt_config_bad_value(w->err, where, &pt_config_keys[ki], text,
                                   *text ? "no value (YAML's null):" : "no value");
    if (strlen(text) != vn->data.scalar.length)
        return pt_config_bad_value(w->err, where, &pt_config_keys[ki], text,
                                   "a NUL character (\\0) after");
    /* a quoted number is a string in every YAML, so "016" has no octal
     * reading to be taken for: its leading zeros go (the plain 016, which
     * YAML 1.1 reads as 15, is refused by the number's parser) */
    const pt_key_type type = pt_config_keys[ki].type;
    char *plain = NULL; /* as long as the text: "0000...17" reads as 17 however many zeros */
    if (vn->data.scalar.style != YAML_PLAIN_SCALAR_STYLE &&
        (type == PT_K_INT || type == PT_K_I64 || type == PT_K_FLOAT)) {
        const size_t sign = *text == '+' || *text == '-';
        size_t z = sign;
        while (text[z] == '0' && isdigit((unsigned char)text[z + 1]))
            z++;
        if (!(plain = malloc(strlen(text) + 1)))
            return pt_fail(w->err, PT_ENOMEM, "out of memory reading %s", w->path);
        snprintf(plain, strlen(text) + 1, "%.*s%s", (int)sign, text, text + z);
        text = plain;
    }
    int rc = pt_config_set_value(w->c, ki, text, where, w->err);
    free(plain);
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
        /* a quoted "\0" reaches us as a NUL inside the scalar: the C string
         * would end there and read as another key (checked before the keys
         * are compared as strings) */
        yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        if (k->type == YAML_SCALAR_NODE &&
            strlen((const char *)k->data.scalar.value) != k->data.scalar.length)
            return pt_fail(w->err, PT_EINPUT, "%s:%d: a key holds a NUL character", w->path,
                           (int)k->start_mark.line + 1);
        /* YAML forbids a key twice in one mapping; libyaml does not check */
        for (yaml_node_pair_t *q = first; q < p && k->type == YAML_SCALAR_NODE; q++) {
            yaml_node_t *e = yaml_document_get_node(w->doc, q->key);
            /* a key that is an alias (*name) has its anchor's place, before
             * the pair ahead of it ends: libyaml keeps no line of the
             * alias itself */
            const int aliased =
                p > first &&
                k->start_mark.index < yaml_document_get_node(w->doc, (p - 1)->value)->end_mark.index;
            if (aliased && e->type == YAML_SCALAR_NODE &&
                strcmp((const char *)e->data.scalar.value, (const char *)k->data.scalar.value) == 0)
                return pt_fail(w->err, PT_EINPUT, "%s:%d: '%s%s%s' appears twice: there, then "
                               "through a YAML alias (*name) of it as a key after line %d",
                               w->path, (int)e->start_mark.line + 1, prefix, *prefix ? "." : "",
                               (const char *)k->data.scalar.value,
                               (int)yaml_document_get_node(w->doc, (p - 1)->value)->end_mark.line + 1);
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

/* A config is a few dozen `key: value` lines in sections: a few kilobytes,
 * nested two levels deep (three with a flow list as a value), with an anchor
 * or two at most. The limits below are far above that, and far below what
 * makes libyaml slow: its scanner visits every open flow level for every
 * token, and its loader finds each anchor and alias by a linear search, so
 * deep nesting and many anchors take quadratic time (a 200 KB `[[[...]]]`
 * took 46 s to refuse). They are checked on libyaml's event stream, which
 * stops at the first excess, before the document is built. */
#define MAX_BYTES ((size_t)1 << 20)
#define MAX_DEPTH 16
#define MAX_ANCHORS 64

/* The bytes of the line break at u[i] (u[0 .. end) UTF-8), 0 if none: the
 * breaks libyaml counts, LF, CR LF, CR, NEL, LS and PS. */
static size_t break_at(const unsigned char *u, size_t i, size_t end)
{
    if (u[i] == '\n')
        return 1;
    if (u[i] == '\r')
        return i + 1 < end && u[i + 1] == '\n' ? 2 : 1;
    if (u[i] == 0xC2 && i + 1 < end && u[i + 1] == 0x85)
        return 2;
    if (u[i] == 0xE2 && i + 2 < end && u[i + 1] == 0x80 && (u[i + 2] == 0xA8 || u[i + 2] == 0xA9))
        return 3;
    return 0;
}

/* Line (1-based) of byte `at` of text, lines ended as libyaml ends them
 * (its marks count the same breaks). */
static int line_at(const char *text, size_t at)
{
    int line = 1;
    const unsigned char *u = (const unsigned char *)text;
    /* libyaml reads UTF-16 after its byte-order mark: count its units, not
     * bytes (U+010A has an 0x0A byte) */
    const int le = at >= 2 && u[0] == 0xFF && u[1] == 0xFE, be = at >= 2 && u[0] == 0xFE && u[1] == 0xFF;
    if (le || be) {
        for (size_t i = 2; i + 2 <= at; i += 2) {
            const unsigned c = le ? u[i] | (unsigned)u[i + 1] << 8 : (unsigned)u[i] << 8 | u[i + 1];
            const unsigned next = i + 4 <= at ? (le ? u[i + 2] | (unsigned)u[i + 3] << 8
                                                    : (unsigned)u[i + 2] << 8 | u[i + 3])
                                              : 0;
            /* the breaks libyaml counts: LF, CR (CR LF once), NEL, LS, PS */
            line += c == '\n' || (c == '\r' && next != '\n') || c == 0x85 || c == 0x2028 ||
                    c == 0x2029;
        }
        return line;
    }
    for (size_t i = 0; i < at;) {
        const size_t b = break_at(u, i, at);
        line += b > 0;
        i += b ? b : 1;
    }
    return line;
}

static int syntax_error(const yaml_parser_t *p, const char *text, size_t len, const char *name,
                        pt_err *err)
{
    if (p->error == YAML_MEMORY_ERROR)
        return pt_fail(err, PT_ENOMEM, "%s: out of memory parsing the YAML", name);
    /* libyaml's reader (bad UTF-8, control characters) says where by byte
     * offset and leaves problem_mark at the start */
    const int line = p->error == YAML_READER_ERROR
                         ? line_at(text, p->problem_offset < len ? p->problem_offset : len)
                         : (int)p->problem_mark.line + 1;
    /* libyaml takes a key of more than 1024 characters for no key at all;
     * its message then says a ':' is missing from a line that has one, or
     * (in a section) that the line's ':' is out of place */
    const char *why = p->problem ? p->problem : "?";
    if (p->error == YAML_SCANNER_ERROR && (strcmp(why, "could not find expected ':'") == 0 ||
                                           strcmp(why, "mapping values are not allowed in this "
                                                       "context") == 0)) {
        /* the problem's line (UTF-8 text: libyaml reads UTF-16 itself) */
        const unsigned char *u = (const unsigned char *)text;
        const int utf16 = len >= 2 && ((u[0] == 0xFF && u[1] == 0xFE) || (u[0] == 0xFE && u[1] == 0xFF));
        size_t i = 0;
        for (int l = 1; !utf16 && l < line && i < len;) {
            const size_t b = break_at(u, i, len);
            l += b > 0;
            i += b ? b : 1;
        }
        while (!utf16 && i < len && (u[i] == ' ' || u[i] == '\t'))
            i++; /* the key starts after its indentation */
        size_t chars = 0; /* UTF-8 characters before the line's first ':' */
        for (; !utf16 && i < len && u[i] != ':' && !break_at(u, i, len); i++)
            chars += (u[i] & 0xC0) != 0x80;
        if (!utf16 && i < len && u[i] == ':' && chars > 1024)
            return pt_fail(err, PT_EINPUT, "%s:%d: YAML syntax error: a key of %zu characters; "
                           "YAML takes a plain key of at most 1024", name, line, chars);
    }
    return pt_fail(err, PT_EINPUT, "%s:%d: YAML syntax error: %s", name, line, why);
}

/* The first pass: size, nesting depth, anchors and documents, checked on the
 * event stream (constant memory, stopped at the first problem); and where
 * the scalars with an explicit tag start (at most MAX_ANCHORS of them). */
static int prescan(const char *text, size_t len, const char *name, size_t *tagged, int *n_tagged,
                   pt_err *err)
{
    *n_tagged = 0;
    if (len > MAX_BYTES)
        return pt_fail(err, PT_EINPUT,
                       "%s:%d: the file is larger than 1 MiB (%zu bytes), the most a config "
                       "may be, and passes that on this line; a config is a few kilobytes of "
                       "key: value lines",
                       name, line_at(text, MAX_BYTES), MAX_BYTES);
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return pt_fail(err, PT_ENOMEM, "out of memory starting the YAML parser");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    int rc = 0, depth = 0, anchors = 0, documents = 0, done = 0;
    while (rc == 0 && !done) {
        yaml_event_t e;
        if (!yaml_parser_parse(&p, &e)) {
            rc = syntax_error(&p, text, len, name, err);
            break;
        }
        const int line = (int)e.start_mark.line + 1;
        const yaml_char_t *anchor = NULL;
        if (e.type == YAML_SCALAR_EVENT)
            anchor = e.data.scalar.anchor;
        else if (e.type == YAML_SEQUENCE_START_EVENT)
            anchor = e.data.sequence_start.anchor;
        else if (e.type == YAML_MAPPING_START_EVENT)
            anchor = e.data.mapping_start.anchor;
        if (anchor && ++anchors > MAX_ANCHORS)
            rc = pt_fail(err, PT_EINPUT,
                         "%s:%d: more than %d YAML anchors (&name); a config needs a few at most",
                         name, line, MAX_ANCHORS);
        const yaml_char_t *node_tag = e.type == YAML_SEQUENCE_START_EVENT ? e.data.sequence_start.tag
                                      : e.type == YAML_MAPPING_START_EVENT ? e.data.mapping_start.tag
                                                                           : NULL;
        if (rc == 0 && node_tag) /* a section or a list: no key to name, its line */
            rc = pt_fail(err, PT_EINPUT, "%s:%d: a YAML tag ('%s'), which a config does not take",
                         name, line, (const char *)node_tag);
        if (rc == 0 && e.type == YAML_SCALAR_EVENT && e.data.scalar.tag) {
            if (*n_tagged == MAX_ANCHORS)
                rc = pt_fail(err, PT_EINPUT, "%s:%d: more than %d YAML tags (!!type); a config "
                             "takes none", name, line, MAX_ANCHORS);
            else
                tagged[(*n_tagged)++] = e.start_mark.index;
        }
        switch (rc ? YAML_NO_EVENT : e.type) { /* one problem, one message */
        case YAML_DOCUMENT_START_EVENT:
            /* libyaml's loader reads the first document only: keys in a
             * second one would be ignored without a word */
            if (++documents > 1)
                rc = pt_fail(err, PT_EINPUT,
                             "%s:%d: a second YAML document starts here ('---'); a config is "
                             "one document, and keys in a second one would be ignored: move them "
                             "into the first and remove the '---'",
                             name, line);
            break;
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            if (++depth > MAX_DEPTH)
                rc = pt_fail(err, PT_EINPUT,
                             "%s:%d: nested more than %d levels deep here; a config needs 2 "
                             "(a section, then key: value lines under it)",
                             name, line, MAX_DEPTH);
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            depth--;
            break;
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        default:
            break;
        }
        yaml_event_delete(&e);
    }
    yaml_parser_delete(&p);
    return rc;
}

/* A document without a node (an empty file, only comments, a FIFO whose
 * writer had not come yet) sets nothing: c->empty_source says so. */
int pt_config_load_text(pt_config *c, const char *text, size_t len, const char *name, pt_err *err)
{
    size_t tagged[MAX_ANCHORS];
    int n_tagged;
    int rc = prescan(text, len, name, tagged, &n_tagged, err);
    if (rc)
        return rc;
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return pt_fail(err, PT_ENOMEM, "out of memory starting the YAML parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        rc = syntax_error(&parser, text, len, name, err);
        yaml_parser_delete(&parser);
        return rc;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    /* a document of no nodes, or of one null (a bare `---`, `~`, `null`),
     * sets nothing: said as an empty file is */
    if (root && root->type == YAML_SCALAR_NODE && root->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        is_null_scalar((const char *)root->data.scalar.value, root->data.scalar.length))
        root = NULL;
    c->empty_source = !root;
    unsigned char *walked = root ? calloc((size_t)(doc.nodes.top - doc.nodes.start), 1) : NULL;
    if (root && !walked)
        rc = pt_fail(err, PT_ENOMEM, "out of memory reading %s", name);
    if (root && walked) {
        walk_ctx w = {c, name, &doc, err, walked, tagged, n_tagged};
        rc = walk(&w, root, "");
    }
    free(walked);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (rc == 0)
        snprintf(c->source, sizeof c->source, "%s", name);
    return rc;
}

int pt_config_has_settings(const pt_config *c, pt_err *err)
{
    if (!c->empty_source)
        return 0;
    return pt_fail(err, PT_EINPUT, "config '%s' holds no settings (it is empty, only comments or "
                   "YAML's null, or a pipe that had no writer when it was read); write the run's settings in it "
                   "(`pipetrain keys` lists them)", c->source);
}

int pt_config_load(pt_config *c, const char *path, pt_err *err)
{
    /* a FIFO (<(...), /dev/stdin) is read up to the limit below, and is not
     * waited on when it has no writer */
    if (strlen(path) >= sizeof c->source) /* the name every message gives */
        return pt_fail(err, PT_EINPUT, "config '%.64s...' is %zu bytes long; a path of at most %zu "
                       "bytes is taken (give a shorter name of the same file)", path, strlen(path),
                       sizeof c->source - 1);
    int fd = pt_open_input(path, 1, err);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (fd >= 0 && !f) {
        close(fd);
        return pt_fail(err, PT_ENOMEM, "out of memory reading config '%s'", path);
    }
    if (!f) {
        pt_err_input(err->code, err);
        return pt_err_prefix(err, "config");
    }
    /* one byte more than the limit, so that prescan sees a file that is too long */
    char *text = malloc(MAX_BYTES + 1);
    if (!text) {
        fclose(f);
        return pt_fail(err, PT_ENOMEM, "out of memory reading config '%s'", path);
    }
    /* a stop signal while a pipe is slow to write interrupts the read: it
     * goes on (the run stops after its first step, with a checkpoint) */
    size_t len = 0;
    int failed = 0;
    for (;;) {
        len += fread(text + len, 1, MAX_BYTES + 1 - len, f);
        if (len > MAX_BYTES || !ferror(f))
            break;
        if (errno != EINTR) {
            failed = errno;
            break;
        }
        clearerr(f);
    }
    int rc = failed
                 ? pt_fail(err, PT_EINPUT, "cannot read config '%s': %s%s", path, strerror(failed),
                           failed == EAGAIN ? " (a device with nothing to read now: a config is "
                                              "a file or a pipe)" : "")
                 : pt_config_load_text(c, text, len, path, err);
    free(text);
    fclose(f);
    return rc;
}
