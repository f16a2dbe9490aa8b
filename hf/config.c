/*
 * config.c: a Hugging Face BERT directory's config.json (the model it
 * describes, checked against the model.* keys, and the labels a classifier
 * was trained for), its tokenizer_config.json (how text is normalised) and
 * where its files are (hf.h).
 */
#include "hf/hf_internal.h"

#include "formats/formats.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int get_int(const json_t *root, const char *path, const char *key, int lo, int hi, int *v,
                   pt_err *err)
{
    json_t *j = json_object_get(root, key);
    if (!j)
        return pt_fail(err, PT_EINPUT, "%s: %s: missing", path, key);
    /* read as a real (pt_hf_read_json): an integer is a whole number */
    const double x = json_number_value(j);
    if (!json_is_number(j) || x != floor(x))
        return pt_fail(err, PT_EINPUT, "%s: %s: not an integer", path, key);
    if (x < lo || x > hi)
        return pt_fail(err, PT_EINPUT, "%s: %s: %.17g is out of range [%d, %d]", path, key, x, lo,
                       hi);
    *v = (int)x;
    return 0;
}

/* A field's text for a message: the string, or what it is instead. */
static const char *text_or_kind(const json_t *j)
{
    return pt_json_cstr(j)     ? pt_json_cstr(j)
           : json_is_string(j) ? "a string holding a NUL character"
                               : "not a string";
}

/* transformers tests these fields as Python does (`if config.is_decoder:`),
 * so null, 0, "", [] and {} build the encoder as false does */
static int python_falsy(const json_t *v)
{
    return json_is_false(v) || json_is_null(v) ||
           (json_is_number(v) && json_number_value(v) == 0) ||
           (json_is_string(v) && json_string_length(v) == 0) ||
           (json_is_array(v) && json_array_size(v) == 0) ||
           (json_is_object(v) && json_object_size(v) == 0);
}

static int printable_short(const char *s)
{
    if (!s || strlen(s) > 48)
        return 0;
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e)
            return 0;
    return 1;
}

/* a JSON value as an error shows it: numbers, and short ASCII strings, as written */
static const char *describe_value(const json_t *v, char *buf, size_t n)
{
    if (json_is_true(v))
        return "true";
    if (json_is_number(v))
        snprintf(buf, n, "%.17g", json_number_value(v));
    else if (printable_short(pt_json_cstr(v)))
        snprintf(buf, n, "\"%s\"", pt_json_cstr(v));
    else
        return json_is_string(v) ? "a string" : json_is_array(v) ? "an array" : "an object";
    return buf;
}

/* A config.json or tokenizer_config.json (at most 1 MiB) as JSON, read as
 * transformers reads it (Python's json): every number a real, so that an
 * integer past 64 bits in a field pipetrain does not read is no error, and
 * a key given twice at its last value; errors name the file. */
int pt_hf_read_json(const char *path, json_t **root, pt_err *err)
{
    *root = NULL;
    void *text = NULL;
    size_t n = 0;
    int rc = pt_read_file(path, 1 << 20, &text, &n, err);
    if (rc)
        return rc;
    rc = pt_json_load_foreign(root, text, n, PT_JSON_REALS | PT_JSON_LAST_KEY_WINS, err);
    free(text);
    return rc ? pt_err_prefix(err, "%s", path) : 0;
}

int pt_hf_bert_config_read(const char *path, pt_hf_bert_config *out, pt_err *err)
{
    memset(out, 0, sizeof *out);
    json_t *root = NULL;
    int rc = pt_hf_read_json(path, &root, err);
    if (rc)
        return rc;
    if (!json_is_object(root)) {
        json_decref(root);
        return pt_fail(err, PT_EINPUT, "%s: not a JSON object", path);
    }
    /* absent: BertModel.from_pretrained reads the file as BERT's all the
     * same (the fields and the tensors' names are checked below) */
    const json_t *type = json_object_get(root, "model_type");
    if (type && (!pt_json_cstr(type) || strcmp(pt_json_cstr(type), "bert") != 0))
        rc = pt_fail(err, PT_EINPUT, "%s: model_type: %s; allowed: \"bert\"", path,
                     text_or_kind(type));
    if (rc == 0)
        rc = get_int(root, path, "hidden_size", 1, 1 << 16, &out->hidden, err);
    if (rc == 0)
        rc = get_int(root, path, "num_hidden_layers", 1, 1024, &out->layers, err);
    if (rc == 0)
        rc = get_int(root, path, "num_attention_heads", 1, 1 << 16, &out->heads, err);
    if (rc == 0)
        rc = get_int(root, path, "intermediate_size", 1, 1 << 18, &out->intermediate, err);
    if (rc == 0)
        rc = get_int(root, path, "vocab_size", 2, 1 << 24, &out->vocab, err);
    if (rc == 0)
        rc = get_int(root, path, "max_position_embeddings", 2, 1 << 20, &out->positions, err);
    if (rc == 0) {
        out->type_vocab = 2; /* transformers' defaults where a field is absent */
        out->ln_eps = 1e-12;
        if (json_object_get(root, "type_vocab_size"))
            rc = get_int(root, path, "type_vocab_size", 1, 1 << 10, &out->type_vocab, err);
        /* null: transformers gives the embedding no padding row (pad_id -1),
         * which changes nothing pipetrain computes (a padding token's
         * embedding never reaches the loss) */
        const json_t *pad = json_object_get(root, "pad_token_id");
        if (rc == 0 && json_is_null(pad))
            out->pad_id = -1;
        else if (rc == 0 && pad)
            rc = get_int(root, path, "pad_token_id", 0, out->vocab - 1, &out->pad_id, err);
    }
    if (rc == 0 && json_object_get(root, "layer_norm_eps")) {
        const json_t *e = json_object_get(root, "layer_norm_eps");
        if (!json_is_number(e) || !(json_number_value(e) > 0 && json_number_value(e) < 1))
            rc = pt_fail(err, PT_EINPUT, "%s: layer_norm_eps: must be a number in (0, 1)", path);
        else if (json_number_value(e) < 1e-38) /* as model.ln_eps */
            rc = pt_fail(err, PT_EINPUT, "%s: layer_norm_eps: %g is below what float32, in which "
                         "the model computes, can hold; allowed: 1e-38 to 1", path,
                         json_number_value(e));
        else
            out->ln_eps = json_number_value(e);
    }
    /* dropout: a training choice, not the weights' shape; auto takes it */
    out->hidden_dropout = out->attn_dropout = 0.1;
    const char *drop_field[2] = {"hidden_dropout_prob", "attention_probs_dropout_prob"};
    double *drop_value[2] = {&out->hidden_dropout, &out->attn_dropout};
    for (int i = 0; rc == 0 && i < 2; i++) {
        const json_t *e = json_object_get(root, drop_field[i]);
        if (!e)
            continue;
        if (!json_is_number(e) || !(json_number_value(e) >= 0 && json_number_value(e) < 1))
            rc = pt_fail(err, PT_EINPUT, "%s: %s: must be a number in [0, 1)", path, drop_field[i]);
        else
            *drop_value[i] = json_number_value(e);
    }
    if (rc == 0) {
        /* transformers' "gelu_python" is the same erf GELU, written out */
        const json_t *act = json_object_get(root, "hidden_act");
        const char *name = pt_json_cstr(act) ? pt_json_cstr(act) : "";
        if (act && strcmp(name, "gelu") != 0 && strcmp(name, "gelu_python") != 0)
            rc = pt_fail(err, PT_EINPUT,
                         "%s: hidden_act: %s; pipetrain's bert has the erf GELU (\"gelu\" or "
                         "\"gelu_python\") only",
                         path, text_or_kind(act));
    }
    /* BertForSequenceClassification's dropout before its classifier (null:
     * hidden_dropout_prob's); pipetrain's head is its own, and only notes it */
    out->classifier_dropout = -1;
    const json_t *cd = json_object_get(root, "classifier_dropout");
    if (rc == 0 && json_is_number(cd))
        out->classifier_dropout = json_number_value(cd);
    if (rc == 0) {
        const json_t *pos = json_object_get(root, "position_embedding_type");
        if (pos && (!pt_json_cstr(pos) || strcmp(pt_json_cstr(pos), "absolute") != 0))
            rc = pt_fail(err, PT_EINPUT,
                         "%s: position_embedding_type: %s; allowed: \"absolute\"", path,
                         text_or_kind(pos));
    }
    /* what would make transformers build another model from these weights:
     * a decoder masks attention causally, cross-attention adds layers */
    const char *changes[] = {"is_decoder", "add_cross_attention"};
    for (int i = 0; rc == 0 && i < 2; i++) {
        const json_t *v = json_object_get(root, changes[i]);
        if (v && !python_falsy(v)) {
            char shown[96];
            rc = pt_fail(err, PT_EINPUT,
                         "%s: %s: %s; pipetrain's bert is the encoder (false, or a value "
                         "Python reads as false: null, 0, \"\")",
                         path, changes[i], describe_value(v, shown, sizeof shown));
        }
    }
    if (rc == 0 && out->hidden % out->heads != 0)
        rc = pt_fail(err, PT_EINPUT,
                     "%s: num_attention_heads: %d does not divide hidden_size %d", path,
                     out->heads, out->hidden);
    json_decref(root);
    return rc;
}

int pt_hf_bert_config_check(const pt_hf_bert_config *c, const pt_arch *a, const char *path,
                            const char **key, pt_err *err)
{
    const struct {
        const char *key, *field;
        long long ours, theirs;
    } pairs[] = {
        {"model.dim", "hidden_size", a->dim, c->hidden},
        {"model.layers", "num_hidden_layers", a->layers, c->layers},
        {"model.heads", "num_attention_heads", a->heads, c->heads},
        {"model.mlp_hidden", "intermediate_size", a->mlp_hidden, c->intermediate},
        {"model.vocab", "vocab_size", a->vocab, c->vocab},
        {"model.positions", "max_position_embeddings", a->positions, c->positions},
        {"model.type_vocab", "type_vocab_size", a->type_vocab, c->type_vocab},
    };
    *key = "";
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++)
        if (pairs[i].ours != pairs[i].theirs) {
            *key = pairs[i].key;
            return pt_fail(err, PT_EINPUT, "is %lld, but %s says %s %lld", pairs[i].ours, path,
                           pairs[i].field, pairs[i].theirs);
        }
    if (c->pad_id >= 0 && c->pad_id != a->pad_id) {
        *key = "model.init_from";
        return pt_fail(err, PT_EINPUT, "%s: pad_token_id is %d; pipetrain's bert pads with id %d",
                       path, c->pad_id, a->pad_id);
    }
    if (fabs(c->ln_eps - pt_arch_ln_eps(a)) > 1e-6 * c->ln_eps) {
        *key = "model.ln_eps";
        return pt_fail(err, PT_EINPUT, "is %g, but %s says layer_norm_eps %g", pt_arch_ln_eps(a),
                       path, c->ln_eps);
    }
    return 0;
}

int pt_hf_paths(const char *path, char *weights, size_t wn, char *config, size_t cn, pt_err *err)
{
    /* what the user named is missing: bad input, not a system failure
     * (exit 2) */
    struct stat st;
    if (stat(path, &st) != 0)
        return pt_fail(err, PT_EINPUT, "%s: %s", path, strerror(errno));
    const int isdir = S_ISDIR(st.st_mode);
    int n;
    if (isdir) {
        n = snprintf(weights, wn, "%s/model.safetensors", path);
        if (n < 0 || (size_t)n >= wn)
            return pt_fail(err, PT_EINPUT, "%s: path too long", path);
        n = snprintf(config, cn, "%s/config.json", path);
    } else {
        n = snprintf(weights, wn, "%s", path);
        if (n < 0 || (size_t)n >= wn)
            return pt_fail(err, PT_EINPUT, "%s: path too long", path);
        const char *slash = strrchr(path, '/');
        int dir = slash ? (int)(slash - path) : 1;
        n = snprintf(config, cn, "%.*s/config.json", dir, slash ? path : ".");
    }
    if (n < 0 || (size_t)n >= cn)
        return pt_fail(err, PT_EINPUT, "%s: path too long", path);
    /* none is allowed (a bare model.safetensors); one that is there but
     * cannot be read as a file (a directory, a FIFO, a link to nothing) is
     * refused rather than passed over, which would leave its settings
     * (dropout) unread */
    if (lstat(config, &st) != 0 && errno == ENOENT) {
        config[0] = '\0';
    } else if (stat(config, &st) != 0) {
        return pt_fail(err, PT_EINPUT, "%s: %s", config, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        return pt_fail(err, PT_EINPUT, "'%s' is not a regular file (%s)", config,
                       pt_file_kind(st.st_mode));
    }
    if (stat(weights, &st) != 0) {
        const int e = errno;
        /* weights split over several files (save_pretrained's
         * max_shard_size), which pipetrain does not read */
        char index[4096 + 16];
        snprintf(index, sizeof index, "%.*s.index.json", (int)strlen(weights), weights);
        if (isdir && stat(index, &st) == 0)
            return pt_fail(err, PT_EINPUT, "%s: %s (the directory holds sharded weights, "
                           "model.safetensors.index.json and its shards; pipetrain reads one "
                           "model.safetensors: save the model with a max_shard_size above "
                           "its size)", weights, strerror(e));
        return pt_fail(err, PT_EINPUT, "%s: %s%s", weights, strerror(e),
                       isdir ? " (a Hugging Face model directory holds its weights as "
                               "model.safetensors)"
                             : "");
    }
    return 0; /* its type: pt_st_open's to check */
}

void pt_hf_labels_free(char **names, int n)
{
    for (int k = 0; names && k < n; k++)
        free(names[k]);
    free(names);
}

int pt_hf_bert_labels_read(const char *path, char ***names, int *n, pt_err *err)
{
    *names = NULL;
    *n = 0;
    json_t *root = NULL;
    int rc = pt_hf_read_json(path, &root, err);
    if (rc)
        return rc;
    const json_t *map = json_object_get(root, "id2label");
    const size_t count = json_object_size(map);
    char **out = NULL;
    if (map && (!json_is_object(map) || count == 0 || count > 1 << 20))
        rc = pt_fail(err, PT_EINPUT, "%s: id2label: not an object of class ids and names", path);
    else if (map && !(out = calloc(count, sizeof *out)))
        rc = pt_fail(err, PT_ENOMEM, "%s: out of memory", path);
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)map, key, value) {
        if (rc)
            break;
        char *end = NULL;
        errno = 0;
        const long id = strtol(key, &end, 10);
        if (!*key || *end || errno || id < 0 || (size_t)id >= count || key[0] == '+' ||
            (key[0] == '0' && key[1]) || out[id] || !pt_json_cstr(value))
            rc = pt_fail(err, PT_EINPUT, "%s: id2label: '%.40s' %s; allowed: keys 0 to %zu once "
                         "each, names as strings without a NUL character", path, key,
                         !json_is_string(value)   ? "names no string"
                         : !pt_json_cstr(value)   ? "names a string holding a NUL character"
                                                  : "is not a class id or repeats one",
                         count - 1);
        else if (!(out[id] = strdup(pt_json_cstr(value))))
            rc = pt_fail(err, PT_ENOMEM, "%s: out of memory", path);
    }
    json_decref(root);
    if (rc) {
        pt_hf_labels_free(out, (int)count);
        return rc;
    }
    *names = out;
    *n = (int)count;
    return 0;
}

int pt_hf_tokenizer_config_read(const char *path, int want, pt_hf_normalizer *out, int *found,
                                int *field, pt_err *err)
{
    *out = (pt_hf_normalizer){1, -1, 1}; /* transformers' BertTokenizer defaults */
    *found = 0;
    *field = -1;
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : pt_fail(err, PT_EINPUT, "%s: %s", path, strerror(errno));
    if (stat(path, &st) != 0) /* a link to nothing: a file meant to be there (a cut download) */
        return pt_fail(err, PT_EINPUT, "%s: a link to nothing (%s)", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) /* never wait on a FIFO */
        return pt_fail(err, PT_EINPUT, "%s: not a regular file", path);
    json_t *root = NULL;
    int rc = pt_hf_read_json(path, &root, err);
    if (rc)
        return rc;
    *found = 1;
    if (!json_is_object(root))
        rc = pt_fail(err, PT_EINPUT, "%s: not a JSON object", path);
    const char *keys[3] = {"do_lower_case", "strip_accents", "tokenize_chinese_chars"};
    int *value[3] = {&out->lowercase, &out->strip_accents, &out->split_cjk};
    for (int i = 0; rc == 0 && i < 3; i++) {
        const json_t *v = json_object_get(root, keys[i]);
        if (!(want & 1 << i) || !v || (i == 1 && json_is_null(v)))
            continue;
        if (!json_is_boolean(v)) {
            rc = pt_fail(err, PT_EINPUT, "%s: %s: not %s", path, keys[i],
                         i == 1 ? "true, false or null" : "true or false");
            *field = i;
        } else {
            *value[i] = json_is_true(v);
        }
    }
    json_decref(root);
    return rc;
}
