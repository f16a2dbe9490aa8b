/*
 * data.c: a session's data: the training and test sets the config names
 * (IDX images, text, labelled texts for bert, or synthetic), within this
 * rank's share of the node's memory; how labelled texts are tokenized; their
 * digests, which checkpoints record,
 * and the check that every rank reads the same files.
 */
#include "launch/session.h"
#include "checkpoint/checkpoint.h"
#include "formats/formats.h"
#include "interop/interop.h"
#include "hf/hf.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void note_test_is_training(const pt_session *r);

/* What a checkpoint records of the data and a resume compares, and every
 * rank's against rank 0's once the engine is up (same_data). Synthetic data
 * are a function of the config (which is compared) and may be large: not
 * digested. A digest that fails (out of memory) is left unknown, with a
 * note, so that every rank still goes through the same collectives. */
void pt_session_digest_data(pt_session *s, pt_run_mode mode)
{
    const pt_config *c = &s->cfg;
    const int synthetic = c->data.kind == PT_DATA_SYNTH_IMAGES || c->data.kind == PT_DATA_SYNTH_TEXT;
    pt_err why;
    if (synthetic || mode == PT_RUN_PLAN)
        return;
    if ((mode == PT_RUN_TRAIN && pt_checkpoint_data_sha256(&s->train, s->train_sha256, &why)) ||
        pt_checkpoint_data_sha256(&s->test, s->test_sha256, &why)) {
        s->train_sha256[0] = s->test_sha256[0] = '\0';
        fprintf(stderr, "pipetrain: rank %d: note: the data's digest is left out of its "
                "checkpoints (%s)\n", s->rank, why.msg);
    }
    if (mode == PT_RUN_TRAIN)
        note_test_is_training(s);
}

/* The settings each rank took from a file beside its inputs where the
 * config leaves them at auto (the tokenizer_config.json beside data.vocab,
 * model.init_from's config.json) against rank 0's, named: those files are
 * not digested, and the examples or initial weights they change would be
 * blamed instead. Collective over the world. */
static int same_settings(pt_session *s, pt_err *err)
{
    const pt_config *c = &s->cfg;
    const int text = c->data.kind == PT_DATA_TEXT_CLASSIFICATION;
    double mine[5] = {text ? c->data.lowercase : 0, text ? c->data.strip_accents : 0,
                      text ? c->data.split_cjk : 0, s->arch.hidden_dropout, s->arch.attn_dropout};
    double root[5];
    memcpy(root, mine, sizeof root);
    int rc = pt_bcast(pt_comm_world(s->comm), root, sizeof root, 0, err);
    if (rc)
        return rc;
    static const char *const key[5] = {"data.lowercase", "data.strip_accents", "data.split_cjk",
                                       "model.dropout", "model.attention_dropout"};
    for (int k = 0; k < 5; k++) {
        if (memcmp(&mine[k], &root[k], sizeof mine[k]) == 0)
            continue;
        char from[2 * PT_PATH_MAX + 96] = "its value", file[PT_PATH_MAX + 32];
        if (k < 3) {
            pt_tokenizer_config_path(c, file);
        } else {
            char weights[PT_PATH_MAX + 32], vocab[PT_PATH_MAX + 32], tokcfg[PT_PATH_MAX + 32];
            pt_init_from_files(c, weights, file, vocab, tokcfg);
        }
        struct stat st;
        if (!*file)
            snprintf(from, sizeof from, "model.init_from '%s'", c->model.init_from);
        else if (lstat(file, &st) == 0)
            snprintf(from, sizeof from, "'%s'", file);
        else /* this rank's copy lacks the file: its defaults */
            snprintf(from, sizeof from, "the defaults ('%s' is not there)", file);
        if (k < 3)
            return pt_fail(err, PT_EINPUT, "this rank takes %s = %s from %s, rank 0 takes %s: "
                           "every rank must read the same files", key[k], mine[k] ? "true" : "false",
                           from, root[k] ? "true" : "false");
        return pt_fail(err, PT_EINPUT, "this rank takes %s = %g from %s, rank 0 takes %g: every "
                       "rank must read the same files", key[k], mine[k], from, root[k]);
    }
    return 0;
}

/* Every rank reads the data itself (on a node of its own, from a copy of
 * its own): the same examples, vocabulary and initial weights everywhere, or replicas would
 * train on different token ids or examples without a word. Rank 0's
 * digests against this rank's; collective over the world. */
int pt_session_same_data(pt_session *s, pt_err *err)
{
    const pt_config *c = &s->cfg;
    /* a setting that differs is named first; every rank still goes through
     * the digests' broadcast below */
    pt_err first;
    const int settings = same_settings(s, &first);
    char init[65], root[4][65];
    pt_init_from_digest(c, init);
    memcpy(root[0], s->train_sha256, 65);
    memcpy(root[1], s->test_sha256, 65);
    memcpy(root[2], s->vocab_sha256, 65);
    memcpy(root[3], init, 65);
    int rc = pt_bcast(pt_comm_world(s->comm), root, sizeof root, 0, err);
    if (settings) {
        *err = first;
        return settings;
    }
    if (rc)
        return rc;
    const char *mine[4] = {s->train_sha256, s->test_sha256, s->vocab_sha256, init};
    static const char *const what[4] = {"training data", "test data", "vocabulary",
                                        "initial weights"};
    static const int order[4] = {3, 2, 0, 1}; /* the examples' ids follow from the vocabulary */
    for (int i = 0; i < 4; i++) {
        const int k = order[i];
        if (!*root[k] || !*mine[k] || strcmp(root[k], mine[k]) == 0) /* not known: not compared */
            continue;
        char from[2 * PT_PATH_MAX + 80];
        if (k == 3 && c->model.kind == PT_MODEL_BERT)
            snprintf(from, sizeof from, "model.init_from '%s' (its weights, or its config.json)",
                     c->model.init_from);
        else if (k == 3)
            snprintf(from, sizeof from, "model.init_from '%s'", c->model.init_from);
        else if (k == 2)
            snprintf(from, sizeof from, "data.vocab '%s'", c->data.vocab);
        else
            pt_config_data_source(c, k, from, sizeof from);
        return pt_fail(err, PT_EINPUT,
                       "this rank reads other %s than rank 0 from %s (digest %.16s... here, "
                       "%.16s... on rank 0): every rank must read the same files",
                       what[k], from, mine[k], root[k]);
    }
    return 0;
}

/* Moves the last n_test examples of all into test; all keeps the rest. */
static int split_tail(pt_dataset *all, int64_t n_test, pt_dataset *test, pt_err *err)
{
    *test = *all;
    test->count = n_test;
    if (all->kind == PT_DATA_IMAGES) {
        size_t per = (size_t)all->channels * all->height * all->width;
        test->images = malloc((size_t)n_test * per * sizeof(float));
        test->labels = malloc((size_t)n_test * sizeof(int32_t));
        test->bytes = NULL;
        if (!test->images || !test->labels) {
            free(test->images);
            free(test->labels);
            memset(test, 0, sizeof *test);
            return pt_fail(err, PT_ENOMEM, "out of memory splitting synthetic data");
        }
        int64_t first = all->count - n_test;
        memcpy(test->images, all->images + (size_t)first * per, (size_t)n_test * per * sizeof(float));
        memcpy(test->labels, all->labels + first, (size_t)n_test * sizeof(int32_t));
        all->count = first;
    }
    return 0;
}

/* An allocation that failed while a data file was read: under an address
 * space or allocation limit below the RAM (the half of the RAM a file may
 * take is checked as it is read, PT_DATA_TOO_BIG), the data is too big for
 * this process, which is the input's to change, as data over that half is:
 * the same exit status, and the key of the file. Every data loader does so
 * (IDX, text, labelled texts). */
static int data_too_big_here(const pt_config *c, pt_err *err, const char *key)
{
    return pt_config_key_fail(c, err, key,
                              "%s; allowed: data that fits in the memory this process may use",
                              err->msg);
}

/* One split of IDX images. A label >= model.classes is reported against
 * model.classes (found by loading again with every byte a class); any other
 * problem names the file, and the key that chose it. */
static int load_idx(pt_session *r, pt_dataset *ds, const char *images_key, const char *images,
                    const char *labels_key, const char *labels, pt_err *err)
{
    const pt_config *c = &r->cfg;
    int rc = pt_idx_load(ds, images, labels, c->model.classes, c->data.mean, c->data.std, err);
    /* under an allocation limit below the RAM: the data is too big here (the
     * data module's messages start with the file they are about) */
    if (rc == PT_ENOMEM)
        return data_too_big_here(c, err,
                                 strncmp(err->msg, labels, strlen(labels)) == 0 ? labels_key
                                                                              : images_key);
    if (rc != PT_EINPUT && rc != PT_ESYS) /* ESYS: a file that cannot be read, named below */
        return rc;
    pt_dataset all;
    pt_err again;
    if (rc == PT_EINPUT &&
        pt_idx_load(&all, images, labels, 256, c->data.mean, c->data.std, &again) == 0) {
        int64_t at = 0;
        for (int64_t i = 1; i < all.count; i++)
            at = all.labels[i] > all.labels[at] ? i : at;
        const int top = all.labels[at];
        pt_dataset_free(&all);
        if (top >= c->model.classes)
            return pt_config_key_fail(c, err, "model.classes",
                                      "%d, but '%s' (%s) holds label %d (example %lld), and "
                                      "labels must be below model.classes; allowed for this "
                                      "data: %d to 256",
                                      c->model.classes, labels, labels_key, top, (long long)at,
                                      top + 1 > 2 ? top + 1 : 2);
    }
    /* the data module's messages start with the file they are about */
    size_t n = strlen(labels);
    int about_labels = strncmp(err->msg, labels, n) == 0 && err->msg[n] == ':';
    return pt_config_key_prefix(c, err, about_labels ? labels_key : images_key);
}

/* One split of a text file. When the split is too short for model.context
 * (found by loading it again with a context of 1), that is what is reported. */
static int load_text(pt_session *r, pt_dataset *ds, double begin, double end, const char *split,
                     pt_err *err)
{
    const pt_config *c = &r->cfg;
    int rc = pt_text_load(ds, c->data.text, c->model.context, begin, end, err);
    if (rc == PT_ENOMEM)
        return data_too_big_here(c, err, "data.text");
    /* it cannot be read, or is too big: the key that names it */
    if (rc != PT_EINPUT || strstr(err->msg, PT_DATA_TOO_BIG))
        return rc ? pt_config_key_prefix(c, err, "data.text") : 0;
    pt_dataset shortest;
    pt_err again;
    if (pt_text_load(&shortest, c->data.text, 1, begin, end, &again) == 0) {
        const int64_t bytes = shortest.nbytes;
        pt_dataset_free(&shortest);
        /* what both splits can hold: a context the other split is too short
         * for is no way out either */
        const double cut = 1.0 - c->data.test_fraction;
        int64_t fits = bytes;
        if (pt_text_load(&shortest, c->data.text, 1, begin == 0.0 ? cut : 0.0,
                         begin == 0.0 ? 1.0 : cut, &again) == 0) {
            if (shortest.nbytes < fits)
                fits = shortest.nbytes;
            pt_dataset_free(&shortest);
        }
        char allowed[96];
        if (fits - 1 >= 2)
            snprintf(allowed, sizeof allowed, "2 to %lld", (long long)fits - 1);
        else
            snprintf(allowed, sizeof allowed,
                     "none (a longer text, or another data.test_fraction)");
        return pt_config_key_fail(c, err, "model.context",
                                  "%d, but the %s split of '%s' (data.text, the last "
                                  "data.test_fraction = %g of it for testing) has %lld bytes, and "
                                  "one example needs model.context + 1; allowed for this text: %s",
                                  c->model.context, split, c->data.text, c->data.test_fraction,
                                  (long long)bytes, allowed);
    }
    /* a test split too short for even one token and its successor: the
     * fraction's (the file's where the training split is the short one) */
    const int short_test = strcmp(split, "test") == 0 && strstr(err->msg, "too few for one example");
    return pt_config_key_prefix(c, err, short_test ? "data.test_fraction" : "data.text");
}

/* Notes on labels a text-classification run cannot learn: a file in which
 * every label occurs once (TEXT<TAB>LABEL read the other way round, or one
 * label per example: nothing to generalise from), or, after a
 * data.test_fraction split, labels left with no training example (the
 * classifier never sees them, and scores 0 on their test examples). */
static void note_label_counts(const pt_config *c, const pt_dataset *train, const pt_dataset *test)
{
    int64_t *in_train = calloc((size_t)train->classes, sizeof *in_train);
    int64_t *in_test = calloc((size_t)train->classes, sizeof *in_test);
    if (!in_train || !in_test) {
        free(in_train);
        free(in_test);
        return;
    }
    for (int64_t i = 0; i < train->count; i++)
        in_train[train->labels[i]]++;
    for (int64_t i = 0; i < test->count; i++)
        in_test[test->labels[i]]++;
    int once = 1, untrained = 0, first = -1;
    for (int k = 0; k < train->classes; k++) {
        once &= in_train[k] + (*c->data.test_file ? 0 : in_test[k]) == 1;
        if (in_train[k] == 0 && untrained++ == 0)
            first = k;
    }
    if (once && train->classes >= 4)
        fprintf(stderr, "pipetrain: note: every one of the %d labels of '%s' (data.train_file) "
                "occurs once ('%s', '%s', ...): is it written TEXT<TAB>LABEL? a .tsv "
                "line is LABEL<TAB>TEXT\n", train->classes, c->data.train_file,
                train->label_names[0], train->label_names[1]);
    else if (untrained)
        fprintf(stderr, "pipetrain: note: %d of the %d labels of '%s' (data.train_file) "
                "('%s'%s) %s all %s examples in the data.test_fraction split: the classifier "
                "never trains on %s\n", untrained, train->classes, c->data.train_file,
                train->label_names[first], untrained > 1 ? ", ..." : "",
                untrained > 1 ? "have" : "has", untrained > 1 ? "their" : "its",
                untrained > 1 ? "them" : "it");
    free(in_train);
    free(in_test);
}

/* Notes on how a text-classification file's labels became classes, where a
 * user could expect otherwise: integer labels are names like any other, so
 * classes follow their byte order ("10" before "2"), where Hugging Face's
 * datasets take an integer label as the class itself; and a .jsonl file
 * that writes labels both as integers and as strings (which Hugging Face's
 * JSON loader refuses) has 1 and "1" as one class. */
static void note_label_names(const pt_config *c, const pt_dataset *train)
{
    if (train->int_label_line && train->string_label_line)
        fprintf(stderr, "pipetrain: note: '%s' (data.train_file) writes labels as JSON integers "
                "(first on line %lld) and as strings (first on line %lld); a label is its "
                "name, so the integer 1 and the string \"1\" are one class\n",
                c->data.train_file, (long long)train->int_label_line,
                (long long)train->string_label_line);
    int k, instead;
    if (pt_textcls_out_of_value_order(train, &k, &instead))
        fprintf(stderr, "pipetrain: note: the %d labels of '%s' (data.train_file) are "
                "integers, and classes are numbered in their byte order as names, not by "
                "value: class %d is label '%s', not '%s'; the columns of `eval --logits`, "
                "its report and an export's id2label follow this order\n", train->classes,
                c->data.train_file, k, train->label_names[k], train->label_names[instead]);
}

/* A data.vocab of n tokens (its last line ended without a newline:
 * unended) under model.vocab rows. Fewer tokens than rows is allowed (a
 * checkpoint that pads its embedding keeps rows no token reaches), but
 * padding adds fewer than 128 rows, and a last line without a newline is
 * what a copy cut short leaves: either is worth a note, as the words such a
 * file lost are read as [UNK] without a word. */
static void note_vocab_short(const pt_config *c, int32_t n, int unended, const char *last)
{
    const int32_t rows = (int32_t)c->model.vocab;
    if (n >= rows || (rows - n < 128 && !unended))
        return;
    char tok[260], why[400];
    pt_utf8_printable(last, strlen(last), tok, 65);
    if (rows - n >= 128)
        snprintf(why, sizeof why, "more than a padded embedding adds (under 128 rows)%s%s%s",
                 unended ? "; its last line, '" : "", unended ? tok : "",
                 unended ? "', has no newline" : "");
    else
        snprintf(why, sizeof why, "and its last line, '%s', has no newline", tok);
    fprintf(stderr, "pipetrain: note: '%s' (data.vocab) has %d tokens, %d fewer than model.vocab "
            "(%d), %s: if the file was cut short, the words it lost are read as [UNK]; if the "
            "model's rows are as meant, this is no error (else set model.vocab: %d)\n",
            c->data.vocab, (int)n, (int)(rows - n), (int)rows, why, (int)n);
}

/* Text classification: the labelled texts of data.train_file, tokenized with
 * data.vocab into model.context tokens each; the test split from
 * data.test_file (its labels must be the training file's) or drawn from the
 * training file (data.test_fraction). The training file is read in eval
 * too: its labels number the classes. Errors name the key of the file. */
static int load_textcls(pt_session *r, pt_run_mode mode, pt_err *err)
{
    const pt_config *c = &r->cfg;
    pt_vocab *vocab = NULL;
    pt_hf_normalizer norm;
    int rc = pt_vocab_load(&vocab, c->data.vocab, err);
    if (rc)
        return pt_config_key_prefix(c, err, "data.vocab");
    if ((rc = pt_resolve_normalize(&r->cfg, &norm, err))) {
        pt_vocab_free(vocab);
        return rc;
    }
    pt_vocab_set_normalize(vocab, (pt_normalize){norm.lowercase, norm.strip_accents, norm.split_cjk});
    /* more rows than tokens is allowed: checkpoints that pad their
     * embedding (to a multiple of 8, say) keep rows no token reaches */
    if (pt_vocab_size(vocab) > c->model.vocab) {
        rc = pt_config_key_fail(c, err, "model.vocab",
                                "%d, but '%s' (data.vocab) has %d tokens; allowed: %d or more",
                                c->model.vocab, c->data.vocab, (int)pt_vocab_size(vocab),
                                (int)pt_vocab_size(vocab));
        pt_vocab_free(vocab);
        return rc;
    }
    if (pt_vocab_specials(vocab).pad != 0) {
        rc = pt_config_key_fail(c, err, "data.vocab",
                                "'%s' has [PAD] at id %d; pipetrain's bert pads with id 0",
                                c->data.vocab, (int)pt_vocab_specials(vocab).pad);
        pt_vocab_free(vocab);
        return rc;
    }
    if ((rc = pt_checkpoint_vocab_sha256(vocab, r->vocab_sha256, err))) {
        pt_vocab_free(vocab);
        return rc;
    }
    if ((rc = pt_textcls_load(&r->train, c->data.train_file, vocab, c->model.context, NULL,
                              err))) {
        rc = rc == PT_ENOMEM ? data_too_big_here(c, err, "data.train_file")
                             : pt_config_key_prefix(c, err, "data.train_file");
    } else if (*c->data.test_file) {
        if ((rc = pt_textcls_load(&r->test, c->data.test_file, vocab, c->model.context,
                                  &r->train, err)))
            rc = rc == PT_ENOMEM ? data_too_big_here(c, err, "data.test_file")
                                 : pt_config_key_prefix(c, err, "data.test_file");
    } else if ((rc = pt_textcls_split(&r->train, c->data.test_fraction, &r->test, err)) ==
               PT_EINPUT) {
        /* the fraction is in range (the schema's), so the split left a side
         * empty: round(fraction * count) is 0 or all (data.h) */
        const int64_t n = r->train.count;
        const int64_t test = (int64_t)floor(c->data.test_fraction * (double)n + 0.5);
        rc = pt_config_key_fail(c, err, "data.test_fraction",
                                "%g of the %lld example%s of '%s' (data.train_file) leaves %lld "
                                "for testing and %lld for training; allowed: a fraction that "
                                "leaves at least one example to each split, or a data.test_file",
                                c->data.test_fraction, (long long)n, n == 1 ? "" : "s",
                                c->data.train_file, (long long)test, (long long)(n - test));
    }
    /* (what note_vocab_short says, once the data has loaded) */
    const int32_t tokens = pt_vocab_size(vocab);
    const int unended = pt_vocab_unended(vocab);
    char last[PT_VOCAB_MAX_TOKEN_BYTES + 1];
    snprintf(last, sizeof last, "%s", pt_vocab_token(vocab, tokens - 1));
    pt_vocab_free(vocab);
    if (rc)
        return rc;
    if (r->train.classes > c->model.classes)
        return pt_config_key_fail(c, err, "model.classes",
                                  "%d, but '%s' (data.train_file) has %d labels (from '%s' to "
                                  "'%s'); allowed for this data: %d to %d",
                                  c->model.classes, c->data.train_file, r->train.classes,
                                  r->train.label_names[0],
                                  r->train.label_names[r->train.classes - 1],
                                  r->train.classes > 2 ? r->train.classes : 2,
                                  PT_DATA_MAX_CLASSES);
    if (mode == PT_RUN_TRAIN && r->rank == 0 && r->train.classes == 1)
        fprintf(stderr, "pipetrain: note: '%s' (data.train_file) has one label, '%.200s': every "
                "training example is class 0, so the classifier has nothing to tell apart\n",
                c->data.train_file, r->train.label_names[0]);
    if (mode == PT_RUN_TRAIN && r->rank == 0 && r->train.classes > 1)
        note_label_counts(c, &r->train, &r->test);
    if (mode == PT_RUN_TRAIN && r->rank == 0)
        note_label_names(c, &r->train);
    if (mode != PT_RUN_EVAL && r->rank == 0)
        note_vocab_short(c, tokens, unended, last);
    if (mode == PT_RUN_EVAL)
        pt_dataset_free(&r->train); /* evaluation needs only the test split */
    return 0;
}

/* Synthetic data is generated in memory, so data.synthetic_examples is
 * limited by it: refused before generating, when it clearly cannot fit. */
static int check_synthetic_memory(pt_session *r, pt_err *err)
{
    const pt_config *c = &r->cfg;
    const double n = (double)c->data.synthetic_examples, gib = (double)(1ull << 30);
    double per_example, fixed = 0;
    char what[96];
    if (c->data.kind == PT_DATA_SYNTH_IMAGES) {
        /* float pixels and a label; the test quarter is drawn with the
         * training set and then copied; one prototype per class */
        const double pixels = (double)c->data.image_size * c->data.image_size;
        per_example = 1.5 * (4 * pixels + 4);
        fixed = 4 * pixels * c->model.classes;
        snprintf(what, sizeof what, "%dx%d images", c->data.image_size, c->data.image_size);
    } else {
        per_example = 1.25 * c->model.context; /* the test split is a quarter as long */
        snprintf(what, sizeof what, "%d bytes of text", c->model.context);
    }
    /* half of it: the rest is for the model, its activations and the batches */
    const double need = n * per_example + fixed, have = pt_session_memory_per_rank(r) / 2;
    const int ranks = pt_comm_local_size(r->comm);
    if (have <= 0 || need <= have)
        return 0;
    /* one prototype image per class: where there are more classes than
     * examples, the classes are the size; else the images are */
    if (fixed >= have / 2)
        return pt_config_key_fail(c, err, c->model.classes > n ? "model.classes" : "data.image_size",
                                  "%d classes' prototype images of %dx%d pixels take %.1f GiB, "
                                  "more than half of the %.1f GiB for the data here (the node's "
                                  "RAM over its ranks, halved); allowed: %s", c->model.classes,
                                  c->data.image_size, c->data.image_size, fixed / gib, have / gib,
                                  c->model.classes > n ? "fewer classes" : "smaller images");
    const double fit = (have - fixed) / per_example;
    char allowed[96];
    if (fit >= 16)
        snprintf(allowed, sizeof allowed, "at most %.0f here", fit);
    else
        snprintf(allowed, sizeof allowed, "none fits here, even 16: make the examples smaller");
    return pt_config_key_fail(c, err, "data.synthetic_examples",
                              "%lld examples of %s need %.1f GiB with their test split, more than "
                              "%.1f GiB, half the memory each rank has here (the node's RAM over "
                              "its %d rank%s); allowed: %s",
                              c->data.synthetic_examples, what, need / gib, have / gib, ranks,
                              ranks > 1 ? "s" : "", allowed);
}

/* Out of memory (an allocation limit below the RAM) or a size the data
 * module refuses: either way, fewer synthetic examples is the fix. */
static int synthetic_failed(pt_session *r, int rc, pt_err *err)
{
    if (rc == PT_ENOMEM)
        return pt_config_key_fail(&r->cfg, err, "data.synthetic_examples",
                                  "%s; allowed: fewer examples than %lld", err->msg,
                                  r->cfg.data.synthetic_examples);
    return rc ? pt_config_key_prefix(&r->cfg, err, "data.synthetic_examples") : 0;
}

static int load_data(pt_session *r, pt_run_mode mode, pt_err *err)
{
    const pt_config *c = &r->cfg;
    int rc = 0;
    /* a file may take half of what a rank has, as IDX pixels and synthetic
     * data may (the rest is the model's) */
    pt_data_set_memory_limit((int64_t)(pt_session_memory_per_rank(r) / 2));
    switch (c->data.kind) {
    case PT_DATA_FASHION_MNIST:
    case PT_DATA_IDX: {
        /* the image sizes from the headers first: a model that cannot take
         * them is refused before any pixel is decompressed */
        int th, tw, rh = 0, rw = 0;
        int64_t tn, rn = 0;
        if ((rc = pt_idx_image_size(c->data.test_images, &tn, &th, &tw, err)))
            return pt_config_key_prefix(c, err, "data.test_images");
        if (mode != PT_RUN_EVAL &&
            (rc = pt_idx_image_size(c->data.train_images, &rn, &rh, &rw, err)))
            return pt_config_key_prefix(c, err, "data.train_images");
        /* the pixels as floats, with their labels, in half the memory of a
         * rank (as synthetic data): a header that declares more is refused
         * before it is inflated (a small gzip file can declare gigabytes) */
        const double have = pt_session_memory_per_rank(r) / 2, gib = (double)(1ull << 30);
        const double need = (double)tn * ((double)th * tw * 4 + 4) +
                            (double)rn * ((double)rh * rw * 4 + 4);
        if (have > 0 && need > have) {
            const int train_big = (double)rn * rh * rw >= (double)tn * th * tw;
            return pt_config_key_fail(c, err, train_big ? "data.train_images" : "data.test_images",
                                      "'%s' declares %lld images of %dx%d: the splits' pixels as "
                                      "floats take %.1f GiB, more than %.1f GiB, half the memory "
                                      "each rank has here (the node's RAM over its ranks)",
                                      train_big ? c->data.train_images : c->data.test_images,
                                      (long long)(train_big ? rn : tn), train_big ? rh : th,
                                      train_big ? rw : tw, need / gib, have / gib);
        }
        if (th != r->arch.height || tw != r->arch.width || th % r->arch.patch ||
            tw % r->arch.patch) {
            /* IDX files may hold any image size: the model follows the data */
            r->arch.height = th;
            r->arch.width = tw;
            /* both splits named where both hold that size */
            if ((th % r->arch.patch || tw % r->arch.patch) && mode != PT_RUN_EVAL && rh == th &&
                rw == tw)
                return pt_config_key_fail(c, err, "model.patch",
                                          "%d does not divide the %dx%d images of '%s' "
                                          "(data.train_images) and '%s' (data.test_images); "
                                          "allowed: a divisor of both sides",
                                          r->arch.patch, th, tw, c->data.train_images,
                                          c->data.test_images);
            if (th % r->arch.patch || tw % r->arch.patch)
                return pt_config_key_fail(c, err, "model.patch",
                                          "%d does not divide the %dx%d images of '%s' "
                                          "(data.test_images); allowed: a divisor of both sides",
                                          r->arch.patch, th, tw, c->data.test_images);
        }
        if (mode != PT_RUN_EVAL && (rh != th || rw != tw))
            return pt_config_key_fail(c, err, "data.test_images",
                                      "'%s' holds %dx%d images, but data.train_images '%s' holds "
                                      "%dx%d; both splits must have images of one size",
                                      c->data.test_images, th, tw, c->data.train_images, rh, rw);
        if (mode != PT_RUN_EVAL &&
            (rc = load_idx(r, &r->train, "data.train_images", c->data.train_images,
                           "data.train_labels", c->data.train_labels, err)))
            return rc;
        return load_idx(r, &r->test, "data.test_images", c->data.test_images, "data.test_labels",
                        c->data.test_labels, err);
    }
    case PT_DATA_TEXT_FILE:
    case PT_DATA_KJV: {
        double cut = 1.0 - c->data.test_fraction;
        if (!(cut > 0.0 && cut < 1.0)) /* a fraction too small to move 1 - f off 1 */
            return pt_config_key_fail(c, err, "data.test_fraction",
                                      "%g of '%s' (data.text) leaves no part of it for testing "
                                      "(1 - %g is 1 in double precision); allowed: a fraction "
                                      "that leaves at least one example to each split",
                                      c->data.test_fraction, c->data.text,
                                      c->data.test_fraction);
        if (mode != PT_RUN_EVAL && (rc = load_text(r, &r->train, 0.0, cut, "training", err)))
            return rc;
        return load_text(r, &r->test, cut, 1.0, "test", err);
    }
    case PT_DATA_SYNTH_IMAGES: {
        if ((rc = check_synthetic_memory(r, err)))
            return rc;
        /* one draw split in two, so both splits share the class prototypes */
        int64_t n = c->data.synthetic_examples, n_test = n / 4 > 0 ? n / 4 : 1;
        rc = pt_synthetic_images(&r->train, n + n_test, 1, c->data.image_size, c->data.image_size,
                                 c->model.classes, (uint64_t)c->run.seed, err);
        if (rc == 0)
            rc = split_tail(&r->train, n_test, &r->test, err);
        return synthetic_failed(r, rc, err);
    }
    case PT_DATA_SYNTH_TEXT: {
        if ((rc = check_synthetic_memory(r, err)))
            return rc;
        int64_t bytes = c->data.synthetic_examples * c->model.context + 1;
        rc = pt_synthetic_text(&r->train, bytes, c->model.context, (uint64_t)c->run.seed, err);
        if (rc == 0)
            rc = pt_synthetic_text(&r->test, bytes / 4 + 1, c->model.context,
                                   (uint64_t)c->run.seed + 1, err);
        return synthetic_failed(r, rc, err);
    }
    case PT_DATA_TEXT_CLASSIFICATION:
        return load_textcls(r, mode, err);
    }
    return pt_fail(err, PT_EINTERNAL, "unknown data kind %d", c->data.kind);
}

/* A training run whose test examples come from its training file (the
 * same file under both keys, by another name too, or a copy: the same
 * examples, as the data's digests tell) evaluates on examples it trains on:
 * allowed (a check that a model can fit its data), said once, on rank 0. */
static void note_test_is_training(const pt_session *r)
{
    const pt_config *c = &r->cfg;
    const char *train_key, *test_key, *train, *test;
    if (c->data.kind == PT_DATA_TEXT_CLASSIFICATION) {
        train_key = "data.train_file", test_key = "data.test_file";
        train = c->data.train_file, test = c->data.test_file;
    } else if (c->data.kind == PT_DATA_FASHION_MNIST || c->data.kind == PT_DATA_IDX) {
        train_key = "data.train_images", test_key = "data.test_images";
        train = c->data.train_images, test = c->data.test_images;
    } else {
        return;
    }
    struct stat a, b;
    if (r->rank != 0 || !*test)
        return;
    const int same = stat(train, &a) == 0 && stat(test, &b) == 0 && a.st_dev == b.st_dev &&
                     a.st_ino == b.st_ino;
    const int copy = !same && *r->train_sha256 && strcmp(r->train_sha256, r->test_sha256) == 0;
    if (same || copy)
        fprintf(stderr,
                "pipetrain: note: %s '%s' %s (%s '%s'): the run's test figures are on examples it "
                "trains on\n",
                test_key, test, same ? "is the training file" : "holds the training file's examples",
                train_key, train);
}

int pt_session_load_data(pt_session *r, pt_run_mode mode, pt_err *err)
{
    /* a data file that cannot be read (an I/O error, a /proc file) is the
     * input's fault as much as one that does not parse: exit 2 */
    return pt_err_input(load_data(r, mode, err), err);
}
