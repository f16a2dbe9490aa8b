/*
 * weights.c: a Hugging Face BERT's model.safetensors into pipetrain's bert
 * units, and an export of them back, with config.json and the tokenizer
 * files (the mapping is in hf.h, the names in names.c).
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

/* The index in f of one Hugging Face tensor of the expected shape (*at),
 * under its name or its other spelling (its name into full). */
static int find_part(pt_st_file *f, const char *path, const char *prefix, const char *name,
                     int ndim, const int64_t *shape, int *at, char full[NAME_MAX_LEN + 8],
                     pt_err *err)
{
    char legacy[NAME_MAX_LEN + 8];
    snprintf(full, NAME_MAX_LEN + 8, "%s%s", prefix, name);
    int i = pt_st_find(f, full);
    const int alt = pt_hf_other_spelling(full, legacy, sizeof legacy) ? pt_st_find(f, legacy) : -1;
    if (i >= 0 && alt >= 0)
        return pt_fail(err, PT_EINPUT, "'%s' has both '%s' and '%s', two names of one tensor", path,
                       full, legacy);
    if (i < 0 && alt >= 0) {
        i = alt;
        memcpy(full, legacy, sizeof legacy);
    }
    if (i < 0)
        return pt_fail(err, PT_EINPUT, "'%s' has no tensor '%s' (the model needs it)", path, full);
    const pt_st_entry *e = pt_st_entry_at(f, i);
    int same = e->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = e->shape[d] == shape[d];
    if (!same) {
        char want[96], got[96];
        pt_st_shape_text(ndim, shape, want, sizeof want);
        pt_st_shape_text(e->ndim, e->shape, got, sizeof got);
        return pt_fail(err, PT_EINPUT, "'%s': tensor '%s' has shape %s; the model needs %s", path,
                       full, got, want);
    }
    *at = i;
    return 0;
}

/* Reads one Hugging Face tensor of the expected shape into dst. */
static int read_part(pt_st_file *f, const char *path, const char *prefix, const char *name,
                     int ndim, const int64_t *shape, float *dst, size_t numel, pt_err *err)
{
    char full[NAME_MAX_LEN + 8];
    int i;
    int rc = find_part(f, path, prefix, name, ndim, shape, &i, full, err);
    if (rc == 0)
        rc = pt_st_read_f32(f, i, dst, numel, err);
    if (rc)
        return rc;
    for (size_t j = 0; j < numel; j++)
        if (!isfinite(dst[j]))
            return pt_fail(err, PT_EINPUT,
                           "'%s': tensor '%s' holds %s at element %zu of %zu; weights must be "
                           "finite numbers",
                           path, full,
                           isnan(dst[j]) ? "NaN" : "Inf (or a number beyond float32's range)", j,
                           numel);
    return 0;
}

/* The prefix the encoder's names have in f: BertForSequenceClassification
 * and BertForMaskedLM save the encoder under "bert." */
static const char *encoder_prefix(pt_st_file *f)
{
    return pt_st_find(f, "embeddings.word_embeddings.weight") < 0 &&
                   pt_st_find(f, "bert.embeddings.word_embeddings.weight") >= 0
               ? "bert."
               : "";
}

int pt_hf_bert_check_shapes(const pt_arch *a, const char *path, pt_err *err)
{
    pt_st_file *f;
    int rc = pt_st_open(&f, path, err);
    if (rc)
        return rc;
    const char *prefix = encoder_prefix(f);
    for (int u = 0; rc == 0 && u < pt_arch_units(a); u++) {
        pt_unit_info info;
        pt_unit_info_get(a, u, &info);
        if (info.role == PT_UNIT_HEAD && pt_st_find(f, info.params[0].name) < 0 &&
            pt_st_find(f, info.params[1].name) < 0)
            continue; /* the seed's classifier */
        for (int k = 0; rc == 0 && k < info.n_params; k++) {
            const pt_param_info *p = &info.params[k];
            char names[3][NAME_MAX_LEN], full[NAME_MAX_LEN + 8];
            int parts = pt_hf_names(&info, k, names);
            if (parts == 0) {
                parts = 1;
                snprintf(names[0], NAME_MAX_LEN, "%s", p->name);
            }
            int64_t shape[4];
            memcpy(shape, p->shape, sizeof shape);
            shape[0] /= parts;
            for (int i = 0, at; rc == 0 && i < parts; i++)
                rc = find_part(f, path, info.role == PT_UNIT_HEAD ? "" : prefix, names[i], p->ndim,
                               shape, &at, full, err);
        }
    }
    pt_st_close(f);
    return rc;
}

int pt_hf_bert_load(pt_segment *s, const char *path, int *head_loaded, pt_err *err)
{
    *head_loaded = 0;
    const pt_arch *a = pt_segment_arch(s);
    if (a->kind != PT_MODEL_BERT)
        return pt_fail(err, PT_EINTERNAL, "Hugging Face BERT weights for a model that is not bert");
    pt_st_file *f;
    int rc = pt_st_open(&f, path, err);
    if (rc)
        return rc;
    const char *prefix = encoder_prefix(f);
    float *host = NULL;
    const int first = pt_segment_first(s), last = first + pt_segment_count(s);
    for (int u = first; rc == 0 && u < last; u++) {
        pt_unit_info info;
        pt_unit_info_get(a, u, &info);
        /* the classifier: from the file when it has one (a pipetrain export), else the seed's */
        if (info.role == PT_UNIT_HEAD && pt_st_find(f, info.params[0].name) < 0 &&
            pt_st_find(f, info.params[1].name) < 0)
            continue;
        *head_loaded |= info.role == PT_UNIT_HEAD;
        free(host);
        host = malloc(info.numel * sizeof *host + 1);
        if (!host) {
            rc = pt_fail(err, PT_ENOMEM, "out of memory loading '%s'", path);
            break;
        }
        for (int k = 0; rc == 0 && k < info.n_params; k++) {
            const pt_param_info *p = &info.params[k];
            char names[3][NAME_MAX_LEN];
            int parts = pt_hf_names(&info, k, names);
            if (parts == 0) { /* our own name */
                parts = 1;
                snprintf(names[0], NAME_MAX_LEN, "%s", p->name);
            }
            int64_t shape[4];
            memcpy(shape, p->shape, sizeof shape);
            shape[0] /= parts;
            size_t numel = p->numel / (size_t)parts;
            for (int i = 0; rc == 0 && i < parts; i++)
                rc = read_part(f, path, info.role == PT_UNIT_HEAD ? "" : prefix, names[i], p->ndim, shape,
                               host + p->offset + (size_t)i * numel, numel, err);
        }
        if (rc == 0)
            rc = pt_segment_unit_set(s, u, PT_PART_PARAM, host, err);
    }
    free(host);
    for (int i = 0; rc == 0 && i < pt_st_count(f); i++) {
        const char *name = pt_st_entry_at(f, i)->name;
        const size_t pl = strlen(prefix);
        if (strncmp(name, "head.fc.", 8) == 0 && pt_unit_find(a, "head") >= 0) {
            pt_unit_info head;
            pt_unit_info_get(a, pt_arch_units(a) - 1, &head);
            if (strcmp(name, head.params[0].name) == 0 || strcmp(name, head.params[1].name) == 0)
                continue;
        }
        if (strncmp(name, prefix, pl) != 0) {
            if (!pt_hf_ignorable(name))
                rc = pt_fail(err, PT_EINPUT,
                             "'%s' has tensor '%s' outside the encoder's '%s' names, which this "
                             "model does not have",
                             path, name, prefix);
            continue;
        }
        char current[NAME_MAX_LEN + 8];
        const char *local = name + pl;
        if (pt_hf_other_spelling(local, current, sizeof current) && !pt_hf_known_name(a, local))
            local = current; /* LayerNorm's gamma or beta */
        if (!pt_hf_ignorable(local) && !pt_hf_known_name(a, local)) {
            char hint[64] = ""; /* only a layer's tensor can mean more layers */
            if (strncmp(local, "encoder.layer.", 14) == 0)
                snprintf(hint, sizeof hint, " (model.layers is %d: more layers in the file?)",
                         a->layers);
            rc = pt_fail(err, PT_EINPUT, "'%s' has tensor '%s', which this model does not have%s",
                         path, name, hint);
        }
    }
    pt_st_close(f);
    return rc;
}

/* config.json's text, ending in a newline, into *out (malloc'd). */
static int config_text(const pt_arch *a, const char *const *labels, int n_labels, const char *path,
                       char **out, size_t *len, pt_err *err)
{
    json_t *o = json_object();
    if (!o)
        return pt_fail(err, PT_ENOMEM, "out of memory writing '%s'", path);
    json_t *arch = json_array();
    json_array_append_new(arch, json_string("BertModel"));
    json_object_set_new(o, "architectures", arch);
    json_object_set_new(o, "model_type", json_string("bert"));
    json_object_set_new(o, "hidden_size", json_integer(a->dim));
    json_object_set_new(o, "num_hidden_layers", json_integer(a->layers));
    json_object_set_new(o, "num_attention_heads", json_integer(a->heads));
    json_object_set_new(o, "intermediate_size", json_integer(a->mlp_hidden));
    json_object_set_new(o, "vocab_size", json_integer(a->vocab));
    json_object_set_new(o, "max_position_embeddings", json_integer(a->positions));
    json_object_set_new(o, "type_vocab_size", json_integer(a->type_vocab));
    json_object_set_new(o, "pad_token_id", json_integer(a->pad_id));
    json_object_set_new(o, "layer_norm_eps", pt_json_number(pt_arch_ln_eps(a)));
    json_object_set_new(o, "hidden_act", json_string("gelu"));
    json_object_set_new(o, "position_embedding_type", json_string("absolute"));
    json_object_set_new(o, "hidden_dropout_prob", pt_json_number(a->hidden_dropout));
    json_object_set_new(o, "attention_probs_dropout_prob", pt_json_number(a->attn_dropout));
    json_object_set_new(o, "initializer_range", pt_json_number(a->init_std));
    if (n_labels > 0) { /* transformers' names of the classifier's rows */
        json_t *id2label = json_object(), *label2id = json_object();
        for (int k = 0; k < n_labels; k++) {
            char id[16];
            snprintf(id, sizeof id, "%d", k);
            json_object_set_new(id2label, id, json_string(labels[k]));
            json_object_set_new(label2id, labels[k], json_integer(k));
        }
        json_object_set_new(o, "id2label", id2label);
        json_object_set_new(o, "label2id", label2id);
    }
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!text)
        return pt_fail(err, PT_ENOMEM, "out of memory writing '%s'", path);
    size_t n = strlen(text);
    char *line = realloc(text, n + 2);
    if (!line) {
        free(text);
        return pt_fail(err, PT_ENOMEM, "out of memory writing '%s'", path);
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    *out = line;
    *len = n + 1;
    return 0;
}

int pt_hf_vocab_check(const char *path, const char *text, size_t n, int lines, pt_err *err)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += text[i] == '\n';
    if (n > 0 && text[n - 1] != '\n')
        count++;
    /* model.vocab may exceed the lines (a padded embedding: rows no token
     * reaches), as training allows and transformers' BertTokenizer does */
    if (count > (size_t)lines)
        return pt_fail(err, PT_EINPUT, "'%s' has %zu lines, more than the model's vocabulary of %d",
                       path, count, lines);
    return 0;
}

/* tokenizer_config.json's text (for transformers' BertTokenizerFast, which
 * AutoTokenizer makes; the slow BertTokenizer reads it too, but ignores
 * split_special_tokens), ending in a newline, into *out (malloc'd). */
static int tokenizer_text(const pt_hf_tokenizer *tok, const char *path, char **out, size_t *len,
                          pt_err *err)
{
    json_t *o = json_pack("{s:s, s:b, s:b, s:b, s:b, s:i, s:s, s:s, s:s, s:s, s:s}", "tokenizer_class",
                          "BertTokenizer", "do_lower_case", tok->norm.lowercase != 0,
                          "do_basic_tokenize", 1, "strip_accents", tok->norm.strip_accents != 0,
                          "tokenize_chinese_chars", tok->norm.split_cjk != 0, "model_max_length",
                          tok->context, "unk_token",
                          "[UNK]", "sep_token", "[SEP]", "pad_token", "[PAD]", "cls_token", "[CLS]",
                          "mask_token", "[MASK]");
    if (o && json_object_set_new(o, "split_special_tokens", json_true()))
        json_decref(o), o = NULL;
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    char *line = text ? realloc(text, strlen(text) + 2) : NULL;
    if (!line) {
        free(text);
        return pt_fail(err, PT_ENOMEM, "out of memory writing '%s'", path);
    }
    *len = strlen(line);
    line[(*len)++] = '\n';
    line[*len] = '\0';
    *out = line;
    return 0;
}

/* A file written and synced under its temporary name, to commit later. */
static int staged(pt_wfile **f, const char *path, const void *data, size_t n, pt_err *err)
{
    int rc = pt_wfile_open(f, path, err);
    if (rc == 0 && ((rc = pt_wfile_write(*f, data, n, err)) || (rc = pt_wfile_sync(*f, err)))) {
        pt_wfile_abort(*f);
        *f = NULL;
    }
    return rc;
}

int pt_hf_bert_save(const pt_segment *s, const char *dir, const char *const *labels, int n_labels,
                    const pt_hf_tokenizer *tok, pt_err *err)
{
    const pt_arch *a = pt_segment_arch(s);
    const int units = pt_arch_units(a);
    if (a->kind != PT_MODEL_BERT || pt_segment_first(s) != 0 || pt_segment_count(s) != units)
        return pt_fail(err, PT_EINTERNAL, "Hugging Face export needs a whole bert model");
    char weights[4096], config[4096], vocab[4096], tokcfg[4096];
    if (snprintf(weights, sizeof weights, "%s/model.safetensors", dir) >= (int)sizeof weights ||
        snprintf(config, sizeof config, "%s/config.json", dir) >= (int)sizeof config ||
        snprintf(vocab, sizeof vocab, "%s/vocab.txt", dir) >= (int)sizeof vocab ||
        snprintf(tokcfg, sizeof tokcfg, "%s/tokenizer_config.json", dir) >= (int)sizeof tokcfg)
        return pt_fail(err, PT_EINPUT, "%s: path too long", dir);
    /* the directories this export makes are taken back if it fails: a
     * failed export leaves the disk as it found it */
    size_t made;
    int tracked; /* and if a signal ends the export, from its first mkdir on */
    int rc = pt_mkdir_p_made(dir, 0777, &made, &tracked, err);
    if (rc) { /* a place the user named that cannot be made: bad input, as for train */
        pt_rmdir_made(dir, made);
        pt_made_dirs_untrack(tracked);
        return pt_err_input(rc, err);
    }
    size_t total = 0;
    int n = 0, grouped = 0;
    for (int u = 0; u < units; u++) {
        pt_unit_info info;
        pt_unit_info_get(a, u, &info);
        total += info.numel;
        n += info.n_params + 2 * (u > 0 && u < units - 1); /* qkv: 3 tensors, not 1 */
    }
    float *host = malloc(total * sizeof *host + 1);
    pt_st_tensor *t = calloc((size_t)n, sizeof *t);
    char(*names)[NAME_MAX_LEN] = calloc((size_t)n, NAME_MAX_LEN);
    int64_t(*shapes)[4] = calloc((size_t)n, sizeof *shapes);
    if (!host || !t || !names || !shapes) {
        rc = pt_fail(err, PT_ENOMEM, "out of memory writing '%s'", weights);
        goto done;
    }
    size_t at = 0;
    int i = 0;
    for (int u = 0; rc == 0 && u < units; u++) {
        pt_unit_info info;
        pt_unit_info_get(a, u, &info);
        if ((rc = pt_segment_unit_get(s, u, PT_PART_PARAM, host + at, err)))
            break;
        for (int k = 0; k < info.n_params; k++) {
            const pt_param_info *p = &info.params[k];
            char hf[3][NAME_MAX_LEN];
            int parts = pt_hf_names(&info, k, hf);
            if (parts == 0) { /* the classifier, under its own name */
                parts = 1;
                snprintf(hf[0], NAME_MAX_LEN, "%s", p->name);
            }
            size_t numel = p->numel / (size_t)parts;
            for (int j = 0; j < parts; j++, i++) {
                memcpy(names[i], hf[j], NAME_MAX_LEN);
                memcpy(shapes[i], p->shape, sizeof shapes[i]);
                shapes[i][0] /= parts;
                t[i] = (pt_st_tensor){names[i], p->ndim, shapes[i],
                                      host + at + p->offset + (size_t)j * numel};
            }
        }
        at += info.numel;
    }
    /* every file is written and synced under a temporary name first, and
     * only then are they renamed into place, one after another (config.json
     * last): an output that cannot be written (a directory or a FIFO by any
     * name, a full disk) fails before any file is replaced; what is left to
     * fail then is a rename or a directory fsync, which the file system
     * rarely refuses */
    const char *meta[] = {"format", "pt", NULL};
    char *text = NULL, *tok_text = NULL;
    size_t len = 0, tok_len = 0;
    /* vocab.txt, tokenizer_config.json, model.safetensors, config.json */
    pt_wfile *files[4] = {NULL, NULL, NULL, NULL};
    if (rc == 0 && tok && (rc = tokenizer_text(tok, tokcfg, &tok_text, &tok_len, err)) == 0 &&
        (rc = staged(&files[0], vocab, tok->vocab, tok->vocab_bytes, err)) == 0)
        rc = staged(&files[1], tokcfg, tok_text, tok_len, err);
    if (rc == 0)
        rc = pt_st_write_staged(weights, t, i, meta, &files[2], err);
    if (rc == 0 && (rc = config_text(a, labels, n_labels, config, &text, &len, err)) == 0)
        rc = staged(&files[3], config, text, len, err);
    /* all staged: each put in place (one whose rename fails leaves the old
     * file; after a failed directory fsync the new one is in place, so the
     * others follow it rather than leave a mix of old and new); after a
     * failure before this point, none */
    const int staged_all = rc == 0;
    if (staged_all) { /* a stop waits until all four are in place */
        pt_wfile_group_begin();
        grouped = 1;
    }
    for (int f = 0; f < 4; f++) {
        if (files[f] && staged_all) {
            pt_err later;
            const int c = pt_wfile_commit(files[f], rc ? &later : err);
            rc = rc ? rc : c;
        } else {
            pt_wfile_abort(files[f]);
        }
    }
    free(text);
    free(tok_text);
done:
    if (rc) /* taken back first, then untracked: a signal between them finds it gone */
        pt_rmdir_made(dir, made);
    pt_made_dirs_untrack(tracked);
    if (grouped) /* a signal put off ends the process now */
        pt_wfile_group_end();
    free(host);
    free(t);
    free(names);
    free(shapes);
    return rc;
}
