/*
 * init_from.c: model.init_from, the weights a run starts from: pipetrain's
 * own safetensors, or for bert a Hugging Face BERT directory, whose
 * config.json must describe the model.* keys, sets the dropout left at auto
 * and names the labels a classifier was trained for; with its digest, which
 * every rank compares (launch/data.c), and a note when its vocab.txt or
 * tokenizer_config.json is not the run's.
 */
#include "interop/interop.h"
#include "formats/formats.h"
#include "tokenize/tokenize.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A classifier loaded with the weights (a pipetrain export) was trained
 * for the labels its config.json's id2label names: the data's must be the
 * same in the same order, or every row would stand for another label (as a
 * resume checks against the checkpoint's). Without a config.json or an
 * id2label in it, the rows cannot be checked: a note says so (when `note`,
 * one rank of the run), and they stand for the data's classes in order. */
static int check_init_labels(const char *config, const char *weights, const pt_dataset *data,
                             const char *train_file, int note, pt_err *err)
{
    char **names = NULL;
    int n = 0;
    int rc = *config ? pt_hf_bert_labels_read(config, &names, &n, err) : 0;
    if (rc == 0 && n == 0 && note)
        fprintf(stderr,
                "pipetrain: note: model.init_from '%s' has a classifier (head.fc.*) but %s%s%s: "
                "its rows are taken as the classes of data.train_file '%s' in order, unchecked "
                "(a pipetrain export's config.json names them)\n",
                weights, *config ? "its config.json '" : "no config.json beside it",
                *config ? config : "", *config ? "' has no id2label" : "", train_file);
    if (rc || n == 0 || data->kind != PT_DATA_TEXTCLS || !data->label_names) {
        pt_hf_labels_free(names, n);
        return rc;
    }
    for (int k = 0; rc == 0 && (k < n || k < data->classes); k++) {
        const char *was = k < n ? names[k] : "(none)";
        const char *is = k < data->classes ? data->label_names[k] : "(none)";
        if (k >= n || k >= data->classes || strcmp(was, is) != 0)
            rc = pt_fail(err, PT_EINPUT,
                         "its classifier was trained with class %d = '%.200s' (id2label of %s, %d "
                         "label%s), but '%s' (data.train_file) makes class %d '%.200s': the "
                         "classifier's rows would stand for other labels; use the labels it was "
                         "trained with, or weights without head.fc.*", k, was, config, n,
                         n == 1 ? "" : "s", train_file, k, is);
    }
    pt_hf_labels_free(names, n);
    return rc;
}

/* A bert's model.init_from: its weights' and config.json's paths (config
 * "" when there is none), the config.json checked against the model.* keys
 * of a (PT_EINPUT blaming the key that makes the other model). */
static int bert_files(const pt_config *c, const pt_arch *a, char weights[PT_PATH_MAX + 32],
                      char config[PT_PATH_MAX + 32], pt_err *err)
{
    int rc;
    if ((rc = pt_hf_paths(c->model.init_from, weights, PT_PATH_MAX + 32, config, PT_PATH_MAX + 32,
                          err)))
        return pt_config_key_prefix(c, err, "model.init_from");
    if (*config) {
        pt_hf_bert_config hc;
        const char *key = "model.init_from";
        if ((rc = pt_err_input(pt_hf_bert_config_read(config, &hc, err), err)) ||
            (rc = pt_hf_bert_config_check(&hc, a, config, &key, err)))
            return pt_config_key_prefix(c, err, *key ? key : "model.init_from");
    }
    return 0;
}

/* model.init_from: our own safetensors, or for bert a Hugging Face BERT
 * (its config.json, when there is one, must describe the model.* keys). */
static int load_init(pt_segment *seg, const pt_config *c, const pt_dataset *data, int note,
                     pt_err *err)
{
    int rc;
    if (c->model.kind != PT_MODEL_BERT) {
        if ((rc = pt_weights_load(seg, c->model.init_from, err)))
            pt_config_key_prefix(c, err, "model.init_from");
        return rc;
    }
    char weights[PT_PATH_MAX + 32], config[PT_PATH_MAX + 32];
    if ((rc = bert_files(c, pt_segment_arch(seg), weights, config, err)))
        return rc;
    int head = 0;
    if ((rc = pt_hf_bert_load(seg, weights, &head, err)) == 0 && head)
        rc = check_init_labels(config, weights, data, c->data.train_file, note, err);
    if (rc)
        pt_config_key_prefix(c, err, "model.init_from");
    return rc;
}

int pt_init_from_check(const pt_config *c, const pt_arch *a, pt_err *err)
{
    if (!*c->model.init_from)
        return 0;
    int rc;
    if (c->model.kind != PT_MODEL_BERT) {
        const char *key = NULL;
        int recorded;
        if ((rc = pt_err_input(pt_weights_check_shapes(a, c->model.init_from, err), err)) == 0)
            rc = pt_err_input(pt_weights_check_recorded(a, c->model.init_from, &key, &recorded, err),
                              err);
        if (rc)
            pt_config_key_prefix(c, err, key ? key : "model.init_from");
        return rc;
    }
    char weights[PT_PATH_MAX + 32], config[PT_PATH_MAX + 32];
    if ((rc = bert_files(c, a, weights, config, err)))
        return rc;
    if ((rc = pt_err_input(pt_hf_bert_check_shapes(a, weights, err), err)))
        pt_config_key_prefix(c, err, "model.init_from");
    return rc;
}

int pt_init_from_load(pt_segment *seg, const pt_config *c, const pt_dataset *data, int note,
                         pt_err *err)
{
    /* files that cannot be read are the input's fault, as files that do not parse */
    return pt_err_input(load_init(seg, c, data, note, err), err);
}

/* A bert initialised from a Hugging Face directory that has a vocab.txt:
 * token id i reaches the pretrained embedding row of that file's token i,
 * so a data.vocab that differs from it is worth a note (not an error:
 * replacing [unused] tokens with words of one's own is a use). Rank 0. */
static void note_init_vocab(const pt_config *c, const char *there)
{
    struct stat st;
    pt_err ignored;
    if (stat(there, &st) != 0 || !S_ISREG(st.st_mode)) { /* never wait on a FIFO */
        /* none is no vocabulary; a name there that is not a file (a
         * directory, a FIFO, a dangling link) is said, as one that does
         * not load is */
        if (lstat(there, &st) == 0)
            fprintf(stderr,
                    "pipetrain: note: model.init_from's '%s' is not a regular file, so data.vocab "
                    "'%s' was not compared with it\n",
                    there, c->data.vocab);
        return;
    }
    pt_vocab *a = NULL, *b = NULL;
    pt_err why;
    if (pt_vocab_load(&a, there, &why) != 0) { /* not silently: its ids may differ all the same */
        char shown[4 * sizeof why.msg + 1]; /* it quotes tokens: no control reaches the terminal */
        pt_utf8_printable(why.msg, strnlen(why.msg, sizeof why.msg), shown, sizeof shown);
        fprintf(stderr,
                "pipetrain: note: model.init_from's '%s' cannot be read as a vocabulary, so "
                "data.vocab '%s' was not compared with it (%s)\n",
                there, c->data.vocab, shown);
    } else if (pt_vocab_load(&b, c->data.vocab, &ignored) == 0) {
        const int32_t na = pt_vocab_size(a), nb = pt_vocab_size(b);
        int32_t differ = 0, first = -1;
        for (int32_t id = 0; id < na || id < nb; id++)
            if (id >= na || id >= nb || strcmp(pt_vocab_token(a, id), pt_vocab_token(b, id)) != 0) {
                differ++;
                if (first < 0)
                    first = id;
            }
        char ta[300] = "past its end", tb[300] = "past its end", tok[260];
        if (differ && first < na) {
            pt_utf8_printable(pt_vocab_token(a, first), strlen(pt_vocab_token(a, first)), tok, 65);
            snprintf(ta, sizeof ta, "'%s'", tok);
        }
        if (differ && first < nb) {
            pt_utf8_printable(pt_vocab_token(b, first), strlen(pt_vocab_token(b, first)), tok, 65);
            snprintf(tb, sizeof tb, "'%s'", tok);
        }
        if (differ)
            fprintf(stderr,
                    "pipetrain: note: data.vocab '%s' differs from model.init_from's '%s' in %d of "
                    "the ids (first: id %d is %s there, %s here): those ids reach pretrained "
                    "embedding rows of other tokens\n",
                    c->data.vocab, there, (int)differ, (int)first, ta, tb);
    }
    pt_vocab_free(a);
    pt_vocab_free(b);
}

/* The same for how texts are normalised: the model was pretrained on texts
 * normalised as the tokenizer_config.json beside its weights says, and a
 * run that tokenizes otherwise (a cased model fed lowercased text, from a
 * data.vocab elsewhere or a key set in the config) is worth a note. */
static void note_init_normalize(const pt_config *c, const char *there)
{
    pt_hf_normalizer hn;
    int found = 0, bad;
    pt_err why;
    if (pt_hf_tokenizer_config_read(there, 7, &hn, &found, &bad, &why) != 0) {
        char shown[4 * sizeof why.msg + 1];
        pt_utf8_printable(why.msg, strnlen(why.msg, sizeof why.msg), shown, sizeof shown);
        fprintf(stderr,
                "pipetrain: note: model.init_from's tokenizer_config.json cannot be read, so the "
                "run's normalisation was not compared with it (%s)\n", shown);
        return;
    }
    if (!found)
        return;
    if (hn.strip_accents < 0)
        hn.strip_accents = hn.lowercase;
    const int theirs[3] = {hn.lowercase, hn.strip_accents, hn.split_cjk};
    const int ours[3] = {c->data.lowercase, c->data.strip_accents, c->data.split_cjk};
    static const char *const key[3] = {"data.lowercase", "data.strip_accents", "data.split_cjk"};
    static const char *const field[3] = {"do_lower_case", "strip_accents",
                                         "tokenize_chinese_chars"};
    char diff[400] = "";
    size_t at = 0;
    for (int i = 0; i < 3; i++)
        if (ours[i] != theirs[i] && at < sizeof diff)
            at += (size_t)snprintf(diff + at, sizeof diff - at, "%s%s %s where it says %s %s",
                                   at ? ", " : "", key[i], ours[i] ? "true" : "false", field[i],
                                   theirs[i] ? "true" : "false");
    if (at)
        fprintf(stderr,
                "pipetrain: note: this run tokenizes otherwise than model.init_from's '%s' says "
                "its model was trained (%s): its texts reach the pretrained weights as words it "
                "never saw\n",
                there, diff);
}

/* A Hugging Face sequence classifier (BertForSequenceClassification's
 * classifier.weight and .bias) is not pipetrain's head (which pools the mean
 * of the real tokens, not the pooler's [CLS] vector): it is not loaded, and
 * a user fine-tuning, say, a sentiment model is told that the classifier
 * starts afresh. Not when the file also holds pipetrain's own head.fc.*,
 * which is loaded. Rank 0. */
static void note_init_classifier(const char *weights)
{
    pt_st_file *f;
    pt_err ignored;
    if (pt_st_open(&f, weights, &ignored))
        return; /* the load says what is wrong with it */
    const int at = pt_st_find(f, "classifier.weight");
    const pt_st_entry *e = at >= 0 ? pt_st_entry_at(f, at) : NULL;
    if (e && pt_st_find(f, "head.fc.weight") < 0)
        fprintf(stderr, "pipetrain: note: model.init_from '%s' holds transformers' sequence "
                "classifier (classifier.weight, %lld labels), which pipetrain does not load: its "
                "classifier (head.fc, on the mean of the real tokens) starts from run.seed; the "
                "encoder is loaded\n", weights, e->ndim == 2 ? (long long)e->shape[0] : -1LL);
    pt_st_close(f);
}

/* Weights without a config.json beside them: what the shapes cannot tell
 * (the heads, layer_norm_eps) goes unchecked, and dropout left at auto is
 * not the model's (transformers' BERT default is 0.1) but 0. */
static void note_init_config(const pt_config *c, const char *config, int training)
{
    struct stat st;
    if (lstat(config, &st) == 0 || errno != ENOENT)
        return; /* there (the load reads it), or what it refuses */
    const int hidden = c->model.hidden_dropout == PT_AUTO, attn = c->model.attn_dropout == PT_AUTO;
    char dropout[256] = "";
    if (training && (hidden || attn))
        snprintf(dropout, sizeof dropout, "; and %s%s%s left at auto %s 0, not the model's own "
                 "(Hugging Face's BERT default is 0.1): set %s", hidden ? "model.dropout" : "",
                 hidden && attn ? " and " : "", attn ? "model.attention_dropout" : "",
                 hidden && attn ? "are" : "is",
                 hidden && attn ? "them" : "it");
    pt_arch a;
    pt_config_arch(c, &a);
    fprintf(stderr, "pipetrain: note: model.init_from '%s' has no config.json beside its "
            "weights (%s): model.heads (%d) and model.ln_eps (%g) are taken as the config says, "
            "unchecked, as the weights' shapes do not tell them%s\n",
            c->model.init_from, config, c->model.heads, pt_arch_ln_eps(&a), dropout);
}

/* Weights of a vit or gpt that do not record what their shapes cannot tell
 * (an export written before exports recorded them, or weights written
 * elsewhere):
 * taken as the config says, unchecked. */
static void note_init_unrecorded(const pt_config *c)
{
    pt_arch a;
    pt_config_arch(c, &a);
    const char *key;
    int recorded = 0;
    pt_err ignored = {0};
    const int both = PT_RECORDED_HEADS | PT_RECORDED_LN_EPS;
    if (pt_weights_check_recorded(&a, c->model.init_from, &key, &recorded, &ignored) != 0 ||
        recorded == both)
        return; /* refused (pt_init_from_check says why), or checked */
    char eps[40], heads[64] = "", ln[96] = "";
    pt_number_text(pt_arch_ln_eps(&a), eps, sizeof eps);
    if (!(recorded & PT_RECORDED_HEADS))
        snprintf(heads, sizeof heads, "model.heads (%d)", c->model.heads);
    if (!(recorded & PT_RECORDED_LN_EPS))
        snprintf(ln, sizeof ln, "model.ln_eps (%s)", eps);
    fprintf(stderr, "pipetrain: note: model.init_from '%s' does not record the %s%s%s of the "
            "model it holds (an export of an older pipetrain, or weights written elsewhere): "
            "taken as the config says, unchecked, as the weights' shapes do not tell %s\n",
            c->model.init_from, heads, *heads && *ln ? " and " : "", ln,
            *heads && *ln ? "them" : "it");
}

/* A model taking model.init_from's weights: the notes above. */
void pt_init_from_notes(const pt_config *c, int training)
{
    char weights[PT_PATH_MAX + 32], config[PT_PATH_MAX + 32], vocab[PT_PATH_MAX + 32];
    char tokenizer[PT_PATH_MAX + 32];
    if (c->model.kind != PT_MODEL_BERT && *c->model.init_from) {
        note_init_unrecorded(c);
        return;
    }
    if (c->model.kind != PT_MODEL_BERT ||
        c->data.kind != PT_DATA_TEXT_CLASSIFICATION || !*c->model.init_from)
        return;
    pt_init_from_files(c, weights, config, vocab, tokenizer);
    if (!*vocab) /* weights the load refuses */
        return;
    note_init_config(c, config, training);
    note_init_vocab(c, vocab);
    note_init_normalize(c, tokenizer);
    note_init_classifier(weights);
}

void pt_init_from_files(const pt_config *c, char *weights, char *config, char *vocab,
                           char *tokenizer)
{
    const size_t n = PT_PATH_MAX + 32;
    pt_err ignored;
    weights[0] = config[0] = vocab[0] = '\0';
    if (tokenizer)
        tokenizer[0] = '\0';
    if (!*c->model.init_from)
        return;
    /* a bert's directory names its files whether they are there or not (a
     * directory holding only a vocab.txt still has a config.json's place);
     * its weights file names the others beside it; a path that is not
     * there names itself alone */
    struct stat st;
    const int there = stat(c->model.init_from, &st) == 0;
    if (c->model.kind == PT_MODEL_BERT && there && S_ISDIR(st.st_mode)) {
        snprintf(weights, n, "%s/model.safetensors", c->model.init_from);
    } else if (c->model.kind == PT_MODEL_BERT && there &&
               pt_hf_paths(c->model.init_from, weights, n, config, n, &ignored) == 0) {
        snprintf(weights, n, "%s", c->model.init_from);
    } else {
        snprintf(weights, n, "%s", c->model.init_from); /* what the load will refuse, as it is */
        config[0] = '\0';
        return;
    }
    const char *slash = strrchr(weights, '/');
    const int dir = slash ? (int)(slash - weights + 1) : 0;
    snprintf(config, n, "%.*sconfig.json", dir, weights);
    snprintf(vocab, n, "%.*svocab.txt", dir, weights);
    if (tokenizer)
        snprintf(tokenizer, n, "%.*stokenizer_config.json", dir, weights);
}

/* model.init_from's files (the weights, and a bert's config.json, which
 * sets its dropout) as one SHA-256 in hex, or "" when there are none or
 * they cannot be read (load_init reports that). */
void pt_init_from_digest(const pt_config *c, char hex[65])
{
    char weights[PT_PATH_MAX + 32], config[PT_PATH_MAX + 32] = "";
    pt_err ignored;
    hex[0] = '\0';
    if (!*c->model.init_from)
        return;
    if (c->model.kind == PT_MODEL_BERT) {
        if (pt_hf_paths(c->model.init_from, weights, sizeof weights, config, sizeof config, &ignored))
            return;
    } else {
        snprintf(weights, sizeof weights, "%s", c->model.init_from);
    }
    unsigned char d[2][32], both[32];
    uint64_t size;
    memset(d, 0, sizeof d);
    if (pt_sha256_file(weights, d[0], &size, &ignored) ||
        (*config && pt_sha256_file(config, d[1], &size, &ignored)))
        return;
    pt_sha256 *h = pt_sha256_begin();
    pt_sha256_add(h, d, sizeof d);
    if (pt_sha256_end(h, both, &ignored) == 0)
        pt_hex(both, 32, hex);
}

/* model.dropout and model.attention_dropout left at auto: 0, except for a
 * bert whose model.init_from has a config.json beside its weights, which
 * gives its own hidden_dropout_prob and attention_probs_dropout_prob
 * (transformers' 0.1 where it names none), as from_pretrained does. A value
 * set in the config wins over the file's, as a from_pretrained keyword does.
 * What comes out is the arch's, and the checkpoint records it. That
 * config.json is checked against the model.* keys here too, as the load
 * does, so that a model of other sizes is refused before it is allocated
 * (gigabytes, for a dim mistyped by a digit). */
int pt_init_from_dropout(const pt_config *c, pt_arch *a, int note, pt_err *err)
{
    const int hidden_auto = c->model.hidden_dropout == PT_AUTO;
    const int attn_auto = c->model.attn_dropout == PT_AUTO;
    if (c->model.kind != PT_MODEL_BERT || !*c->model.init_from)
        return 0;
    char weights[PT_PATH_MAX + 32], config[PT_PATH_MAX + 32];
    pt_hf_bert_config hc;
    if (pt_hf_paths(c->model.init_from, weights, sizeof weights, config, sizeof config, err))
        return pt_config_key_prefix(c, err, "model.init_from");
    if (!*config)
        return 0;
    const char *key = "model.init_from";
    if (pt_hf_bert_config_read(config, &hc, err))
        return pt_config_key_prefix(c, err, "model.init_from");
    if (pt_hf_bert_config_check(&hc, a, config, &key, err))
        return pt_config_key_prefix(c, err, *key ? key : "model.init_from");
    if (hidden_auto)
        a->hidden_dropout = hc.hidden_dropout;
    if (attn_auto)
        a->attn_dropout = hc.attn_dropout;
    /* transformers' sequence classifier would drop its pooled vector at
     * classifier_dropout; pipetrain's head drops it at model.dropout */
    if (hc.classifier_dropout >= 0 && hc.classifier_dropout != a->hidden_dropout && note)
        fprintf(stderr, "pipetrain: note: %s: classifier_dropout %g is not used: pipetrain's "
                "classifier drops the pooled vector at model.dropout (%g)\n", config,
                hc.classifier_dropout, a->hidden_dropout);
    return 0;
}
