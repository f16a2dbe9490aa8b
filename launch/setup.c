/*
 * setup.c: wiring a session from its configuration: core binding and
 * threads, the device, the training and test data, the engine's spec (every
 * training choice the config makes), the engine (train/), this rank's
 * initial weights and the metrics files. Freed in the reverse order by
 * pt_session_close, which is safe on a partly built session.
 */
#include "launch/session.h"
#include "checkpoint/checkpoint.h"

#include "formats/formats.h"
#include "launch/weights.h"
#include "hf/hf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* run.device: cpu, cuda, or auto (a GPU when the driver reports one). */
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
                         "labels), but '%s' (data.train_file) makes class %d '%.200s': the "
                         "classifier's rows would stand for other labels; use the labels it was "
                         "trained with, or weights without head.fc.*", k, was, config, n,
                         train_file, k, is);
    }
    pt_hf_labels_free(names, n);
    return rc;
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
    if ((rc = pt_hf_paths(c->model.init_from, weights, sizeof weights, config, sizeof config, err)))
        return pt_config_key_prefix(c, err, "model.init_from");
    if (*config) {
        pt_hf_bert_config hc;
        const char *key = "model.init_from";
        if ((rc = pt_hf_bert_config_read(config, &hc, err)) ||
            (rc = pt_hf_bert_config_check(&hc, pt_segment_arch(seg), config, &key, err)))
            return pt_config_key_prefix(c, err, *key ? key : "model.init_from");
    }
    int head = 0;
    if ((rc = pt_hf_bert_load(seg, weights, &head, err)) == 0 && head)
        rc = check_init_labels(config, weights, data, c->data.train_file, note, err);
    if (rc)
        pt_config_key_prefix(c, err, "model.init_from");
    return rc;
}

/* A bert initialised from a Hugging Face directory that has a vocab.txt:
 * token id i reaches the pretrained embedding row of that file's token i,
 * so a data.vocab that differs from it is worth a note (not an error:
 * replacing [unused] tokens with words of one's own is a use). Rank 0. */
void pt_session_note_init_vocab(const pt_session *s)
{
    const pt_config *c = &s->cfg;
    char weights[PT_PATH_MAX + 32], config[PT_PATH_MAX + 32], there[PT_PATH_MAX + 48];
    pt_err ignored;
    struct stat st;
    if (s->rank != 0 || c->model.kind != PT_MODEL_BERT ||
        c->data.kind != PT_DATA_TEXT_CLASSIFICATION || !*c->model.init_from ||
        pt_hf_paths(c->model.init_from, weights, sizeof weights, config, sizeof config, &ignored))
        return;
    char *slash = strrchr(weights, '/');
    snprintf(there, sizeof there, "%.*svocab.txt", slash ? (int)(slash - weights + 1) : 0, weights);
    if (stat(there, &st) != 0 || !S_ISREG(st.st_mode)) /* none, or never wait on a FIFO */
        return;
    pt_vocab *a = NULL, *b = NULL;
    if (pt_vocab_load(&a, there, &ignored) == 0 && pt_vocab_load(&b, c->data.vocab, &ignored) == 0) {
        const int32_t na = pt_vocab_size(a), nb = pt_vocab_size(b);
        int32_t differ = 0, first = -1;
        for (int32_t id = 0; id < na || id < nb; id++)
            if (id >= na || id >= nb || strcmp(pt_vocab_token(a, id), pt_vocab_token(b, id)) != 0) {
                differ++;
                if (first < 0)
                    first = id;
            }
        char ta[80] = "past its end", tb[80] = "past its end";
        if (differ && first < na)
            snprintf(ta, sizeof ta, "'%.64s'", pt_vocab_token(a, first));
        if (differ && first < nb)
            snprintf(tb, sizeof tb, "'%.64s'", pt_vocab_token(b, first));
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

/* What a checkpoint records of the data and a resume compares, and every
 * rank's against rank 0's once the engine is up (same_data). Synthetic data
 * are a function of the config (which is compared) and may be large: not
 * digested. A digest that fails (out of memory) is left unknown, with a
 * note, so that every rank still goes through the same collectives. */
static void digest_data(pt_session *s, pt_run_mode mode)
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
}

/* model.init_from's files (the weights, and a bert's config.json, which
 * sets its dropout) as one SHA-256 in hex, or "" when there are none or
 * they cannot be read (load_init reports that). */
static void init_digest(const pt_config *c, char hex[65])
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

/* Every rank reads the data itself (on a node of its own, from a copy of
 * its own): the same examples, vocabulary and initial weights everywhere, or replicas would
 * train on different token ids or examples without a word. Rank 0's
 * digests against this rank's; collective over the world. */
static int same_data(pt_session *s, pt_err *err)
{
    const pt_config *c = &s->cfg;
    char init[65], root[4][65];
    init_digest(c, init);
    memcpy(root[0], s->train_sha256, 65);
    memcpy(root[1], s->test_sha256, 65);
    memcpy(root[2], s->vocab_sha256, 65);
    memcpy(root[3], init, 65);
    int rc = pt_bcast(pt_comm_world(s->comm), root, sizeof root, 0, err);
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
        if (k == 3)
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

/* model.dropout and model.attention_dropout left at auto: 0, except for a
 * bert whose model.init_from has a config.json beside its weights, which
 * gives its own hidden_dropout_prob and attention_probs_dropout_prob
 * (transformers' 0.1 where it names none), as from_pretrained does. A value
 * set in the config wins over the file's, as a from_pretrained keyword does.
 * What comes out is the arch's, and the checkpoint records it. */
static int resolve_dropout(pt_session *s, pt_err *err)
{
    const pt_config *c = &s->cfg;
    const int hidden_auto = c->model.hidden_dropout == PT_AUTO;
    const int attn_auto = c->model.attn_dropout == PT_AUTO;
    if ((!hidden_auto && !attn_auto) || c->model.kind != PT_MODEL_BERT || !*c->model.init_from)
        return 0;
    char weights[PT_PATH_MAX + 32], config[PT_PATH_MAX + 32];
    pt_hf_bert_config hc;
    if (pt_hf_paths(c->model.init_from, weights, sizeof weights, config, sizeof config, err))
        return pt_config_key_prefix(c, err, "model.init_from");
    if (!*config)
        return 0;
    if (pt_hf_bert_config_read(config, &hc, err))
        return pt_config_key_prefix(c, err, "model.init_from");
    if (hidden_auto)
        s->arch.hidden_dropout = hc.hidden_dropout;
    if (attn_auto)
        s->arch.attn_dropout = hc.attn_dropout;
    return 0;
}

static int open_backend(pt_session *r, pt_err *err)
{
    const int threads = r->threads > 0 ? r->threads : 1;
    const int bf16 = r->cfg.run.precision == PT_PRECISION_BF16;
    /* one GPU per rank of a node: the local rank's */
    char gpu[32];
    snprintf(gpu, sizeof gpu, "%s:%d", bf16 ? "cuda-bf16" : "cuda", pt_comm_local_rank(r->comm));
    int rc;
    switch (r->cfg.run.device) {
    case PT_DEVICE_CUDA:
        if ((rc = pt_backend_open(&r->be, gpu, threads, err))) {
            char at[PT_PATH_MAX + 32];
            pt_config_where(&r->cfg, "run.device", at, sizeof at);
            return pt_err_prefix(err, "%srun.device is cuda", at);
        }
        return 0;
    case PT_DEVICE_AUTO: {
        pt_err none;
        if (pt_backend_open(&r->be, gpu, threads, &none) == 0)
            return 0;
        break; /* no usable GPU: the CPU */
    }
    default:
        break;
    }
    if (bf16) /* run.device cpu is refused earlier, by pt_config_validate */
        return pt_config_key_fail(&r->cfg, err, "run.precision",
                                  "bf16 needs a GPU, and run.device is auto but found none, so "
                                  "this run would use the CPU; allowed on the CPU: fp32");
    return pt_backend_open(&r->be, "cpu", threads, err);
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

/* One split of IDX images. A label >= model.classes is reported against
 * model.classes (found by loading again with every byte a class); any other
 * problem names the file, and the key that chose it. */
static int load_idx(pt_session *r, pt_dataset *ds, const char *images_key, const char *images,
                    const char *labels_key, const char *labels, pt_err *err)
{
    const pt_config *c = &r->cfg;
    int rc = pt_idx_load(ds, images, labels, c->model.classes, c->data.mean, c->data.std, err);
    if (rc != PT_EINPUT)
        return rc;
    pt_dataset all;
    pt_err again;
    if (pt_idx_load(&all, images, labels, 256, c->data.mean, c->data.std, &again) == 0) {
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
    if (rc != PT_EINPUT)
        return rc;
    pt_dataset shortest;
    pt_err again;
    if (pt_text_load(&shortest, c->data.text, 1, begin, end, &again) == 0) {
        const int64_t bytes = shortest.nbytes;
        pt_dataset_free(&shortest);
        char allowed[96];
        if (bytes - 1 >= 2)
            snprintf(allowed, sizeof allowed, "2 to %lld", (long long)bytes - 1);
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
    return pt_config_key_prefix(c, err, "data.text");
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
    int rc = pt_vocab_load(&vocab, c->data.vocab, err);
    if (rc)
        return pt_config_key_prefix(c, err, "data.vocab");
    if (pt_vocab_size(vocab) != c->model.vocab) {
        rc = pt_config_key_fail(c, err, "model.vocab",
                                "%d, but '%s' (data.vocab) has %d tokens; allowed: %d",
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
        pt_config_key_prefix(c, err, "data.train_file");
    } else if (*c->data.test_file) {
        if ((rc = pt_textcls_load(&r->test, c->data.test_file, vocab, c->model.context,
                                  &r->train, err)))
            pt_config_key_prefix(c, err, "data.test_file");
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
    if (mode != PT_RUN_TRAIN)
        pt_dataset_free(&r->train); /* evaluation needs only the test split */
    return 0;
}

/* Memory this rank may give its copy of the data: the node's RAM divided
 * among the node's ranks (each holds the whole data set). */
static double memory_per_rank(const pt_session *r)
{
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    return phys > 0 ? phys / pt_comm_local_size(r->comm) : 0;
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
    const double need = n * per_example + fixed, have = memory_per_rank(r) / 2;
    const int ranks = pt_comm_local_size(r->comm);
    if (have <= 0 || need <= have)
        return 0;
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
    switch (c->data.kind) {
    case PT_DATA_FASHION_MNIST:
    case PT_DATA_IDX: {
        /* the image sizes from the headers first: a model that cannot take
         * them is refused before any pixel is decompressed */
        int th, tw, rh = 0, rw = 0;
        if ((rc = pt_idx_image_size(c->data.test_images, &th, &tw, err)))
            return pt_config_key_prefix(c, err, "data.test_images");
        if (mode == PT_RUN_TRAIN &&
            (rc = pt_idx_image_size(c->data.train_images, &rh, &rw, err)))
            return pt_config_key_prefix(c, err, "data.train_images");
        if (th != r->arch.height || tw != r->arch.width || th % r->arch.patch ||
            tw % r->arch.patch) {
            /* IDX files may hold any image size: the model follows the data */
            r->arch.height = th;
            r->arch.width = tw;
            if (th % r->arch.patch || tw % r->arch.patch)
                return pt_config_key_fail(c, err, "model.patch",
                                          "%d does not divide the %dx%d images of '%s' "
                                          "(data.test_images); allowed: a divisor of both sides",
                                          r->arch.patch, th, tw, c->data.test_images);
        }
        if (mode == PT_RUN_TRAIN && (rh != th || rw != tw))
            return pt_config_key_fail(c, err, "data.test_images",
                                      "'%s' holds %dx%d images, but data.train_images '%s' holds "
                                      "%dx%d; both splits must have images of one size",
                                      c->data.test_images, th, tw, c->data.train_images, rh, rw);
        if (mode == PT_RUN_TRAIN &&
            (rc = load_idx(r, &r->train, "data.train_images", c->data.train_images,
                           "data.train_labels", c->data.train_labels, err)))
            return rc;
        return load_idx(r, &r->test, "data.test_images", c->data.test_images, "data.test_labels",
                        c->data.test_labels, err);
    }
    case PT_DATA_TEXT_FILE:
    case PT_DATA_KJV: {
        double cut = 1.0 - c->data.test_fraction;
        if (mode == PT_RUN_TRAIN && (rc = load_text(r, &r->train, 0.0, cut, "training", err)))
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

/* One stage with a fixed number of micro-batches leaves nothing to plan, so
 * nothing checked that the model fits: the segment's allocation failed with
 * "out of memory" and no key. Checked here with what the planner counts:
 * parameters with their gradients and AdamW moments, and the activations of
 * one micro-batch (a lower bound: a schedule may keep more in flight). */
static int check_model_memory(pt_session *r, pt_err *err)
{
    const pt_config *c = &r->cfg;
    /* one process runs one stage and one replica, with one micro-batch
     * unless the config says otherwise; with several ranks only a fixed
     * single stage with fixed micro-batches goes unplanned */
    const int ranks = pt_comm_size(r->comm);
    const int micro_auto = c->pipeline.microbatches == PT_AUTO;
    /* (one process with micro-batches left to the planner under a memory
     * limit is planned: train/layout.c) */
    const int single = ranks == 1 ? !(micro_auto && c->pipeline.memory_gib > 0)
                                  : c->pipeline.stages == 1 && !micro_auto;
    if (!single)
        return 0; /* planned: the planner checks memory (train/layout.c) */
    const pt_arch *a = &r->arch;
    const int64_t replicas = ranks == 1 ? 1 : c->pipeline.replicas == PT_AUTO ? ranks : c->pipeline.replicas;
    const int64_t share = (c->train.batch + replicas - 1) / replicas;
    const int64_t m = c->pipeline.microbatches == PT_AUTO ? 1 : c->pipeline.microbatches;
    const int64_t micro = (share + m - 1) / m;
    /* a resumed checkpoint's frozen units keep no gradients or moments and
     * save nothing for a backward */
    const int frozen = pt_freeze_units(r->resume_depth);
    double params = 0, trained = 0, saved = 0, scratch = 0;
    for (int u = 0; u < pt_arch_units(a); u++) {
        pt_unit_info info;
        pt_unit_info_get(a, u, &info);
        params += (double)info.numel;
        trained += u < frozen ? 0.0 : (double)info.numel;
        /* per example, scaled in double: a long sequence times a large batch
         * passes what size_t holds */
        saved += u < frozen ? 0.0 : (double)pt_unit_saved_bytes(a, r->be, u, 1);
        double w = (double)pt_unit_scratch_bytes(a, r->be, u, 1);
        scratch = w > scratch ? w : scratch;
    }
    const double gib = (double)(1ull << 30), have = r->cfg.pipeline.memory_gib > 0
        ? r->cfg.pipeline.memory_gib * gib : memory_per_rank(r);
    const double weights = (params + 3 * trained) * (double)pt_backend_real_size(r->be);
    const double example = saved + scratch, need = weights + (double)micro * example;
    if (have <= 0 || need <= have)
        return 0;
    char where[] = "more than the %.3g GiB one stage may use (pipeline.memory_gib, or the node's "
                   "RAM over its ranks)";
    char room[160];
    snprintf(room, sizeof room, where, have / gib);
    if (weights >= have)
        return pt_config_key_fail(c, err, "model.dim",
                                  "%d wide with %d blocks (model.layers): %.0f parameters take "
                                  "%.3g GiB with their gradients and AdamW moments, %s; allowed: a "
                                  "smaller model, or more pipeline.stages over more ranks",
                                  a->dim, a->layers, params, weights / gib, room);
    if (weights >= need - weights)
        return pt_config_key_fail(c, err, "model.dim",
                                  "%d wide with %d blocks (model.layers): %.0f parameters take "
                                  "%.3g GiB with their gradients and AdamW moments, and a "
                                  "micro-batch's activations %.3g GiB more: together %s; allowed: "
                                  "a smaller model, more pipeline.stages over more ranks, or "
                                  "smaller micro-batches",
                                  a->dim, a->layers, params, weights / gib,
                                  (need - weights) / gib, room);
    const int tokens = pt_arch_tokens(a);
    if (example > have - weights)
        return a->kind == PT_MODEL_GPT
                   ? pt_config_key_fail(c, err, "model.context",
                                        "%d: one example's activations take %.3g GiB, %s; allowed: "
                                        "a shorter context",
                                        a->context, example / gib, room)
                   : pt_config_key_fail(c, err, "model.patch",
                                        "%d cuts %dx%d images into %d tokens, and one example's "
                                        "activations take %.3g GiB, %s; allowed: a larger patch, "
                                        "or smaller images",
                                        a->patch, a->height, a->width, tokens, example / gib, room);
    return pt_config_key_fail(c, err, "train.batch",
                              "%lld in micro-batches of %lld examples (pipeline.microbatches = "
                              "%d), whose activations take %.3g GiB, %s; allowed: at most %.0f "
                              "examples per micro-batch (more micro-batches, or a smaller batch)",
                              c->train.batch, (long long)micro, (int)m,
                              (double)micro * example / gib, room, (have - weights) / example);
}

/* What the training split is made of, for messages about its size. */
static void describe_train(const pt_config *c, char *out, size_t n)
{
    switch (c->data.kind) {
    case PT_DATA_SYNTH_IMAGES:
    case PT_DATA_SYNTH_TEXT:
        snprintf(out, n, "data.synthetic_examples");
        break;
    case PT_DATA_TEXT_FILE:
    case PT_DATA_KJV:
        snprintf(out, n, "'%s' (data.text) cut into examples of model.context = %d bytes",
                 c->data.text, c->model.context);
        break;
    case PT_DATA_TEXT_CLASSIFICATION:
        if (*c->data.test_file)
            snprintf(out, n, "the labelled texts of '%s' (data.train_file)", c->data.train_file);
        else
            snprintf(out, n, "the labelled texts of '%s' (data.train_file) less its "
                     "data.test_fraction = %g", c->data.train_file, c->data.test_fraction);
        break;
    default:
        snprintf(out, n, "'%s' (data.train_images)", c->data.train_images);
    }
}

/* pipeline.stages and pipeline.replicas against the ranks and the model,
 * before anything is planned, so the message names the key. */
static int check_layout_keys(const pt_session *s, pt_err *err)
{
    const pt_config *c = &s->cfg;
    const int ranks = pt_comm_size(s->comm), units = pt_arch_units(&s->arch);
    const int *node_of = pt_comm_node_map(s->comm);
    int widest = 0; /* most ranks on one node */
    for (int n = 0; n < pt_comm_nodes(s->comm); n++) {
        int k = 0;
        for (int q = 0; q < ranks; q++)
            k += node_of[q] == n;
        widest = k > widest ? k : widest;
    }
    const int K = c->pipeline.stages, D = c->pipeline.replicas;
    if (K != PT_AUTO && K > widest)
        return pt_config_key_fail(c, err, "pipeline.stages",
                                  "%d stages, but %s %d rank%s and a pipeline never crosses nodes; "
                                  "allowed here: 1 to %d, or auto (or start at least %d ranks per "
                                  "node with mpirun)",
                                  K, pt_comm_nodes(s->comm) == 1 ? "rank 0's node has" : "no node has more than",
                                  widest, widest == 1 ? "" : "s", widest, K);
    if (K != PT_AUTO && K > units)
        return pt_config_key_fail(c, err, "pipeline.stages",
                                  "%d stages, but the model has only %d units; allowed: 1 to %d, or "
                                  "auto", K, units, units);
    if (D != PT_AUTO) {
        const int cap = pt_mesh_capacity(ranks, node_of, K != PT_AUTO ? K : 1);
        if (D > cap)
            return pt_config_key_fail(c, err, "pipeline.replicas",
                                      "%d replicas, but %d rank%s at most %d pipeline%s of %d "
                                      "stage%s (a pipeline never crosses nodes); allowed here: 1 to "
                                      "%d, or auto", D, ranks, ranks == 1 ? " holds" : "s hold", cap,
                                      cap == 1 ? "" : "s", K != PT_AUTO ? K : 1,
                                      K == 1 || K == PT_AUTO ? "" : "s", cap);
        if (D > c->train.batch)
            return pt_config_key_fail(c, err, "pipeline.replicas",
                                      "%d replicas, but a step has only train.batch = %lld examples "
                                      "to share; allowed: 1 to %lld, or auto", D, c->train.batch,
                                      c->train.batch);
        /* the batch splits as evenly as it can: the smallest share is
         * batch / D, and each of its micro-batches holds an example */
        const int M = c->pipeline.microbatches;
        const long long share = c->train.batch / D;
        if (M != PT_AUTO && M > share)
            return pt_config_key_fail(c, err, "pipeline.microbatches",
                                      "%d micro-batches, but train.batch = %lld over %d replicas "
                                      "(pipeline.replicas) leaves the smallest share %lld "
                                      "example%s; allowed with these: 1 to %lld, or auto",
                                      M, c->train.batch, D, share, share == 1 ? "" : "s", share);
    }
    return 0;
}

/* The engine's spec from the config; the session's device and data. */
static void make_spec(const pt_session *ss, const pt_arch *arch, pt_train_spec *sp)
{
    const pt_config *c = &ss->cfg;
    const double gib = (double)(1ull << 30);
    memset(sp, 0, sizeof *sp);
    sp->arch = *arch;
    sp->be = ss->be;
    sp->threads = ss->threads;
    sp->train = ss->train.count ? &ss->train : NULL;
    sp->test = &ss->test;
    sp->seed = (uint64_t)c->run.seed;
    sp->shuffle = c->data.shuffle;
    sp->aug.hflip = c->data.hflip;
    sp->aug.crop_pad = c->data.crop_pad;
    sp->batch = c->train.batch;
    sp->epochs = c->train.epochs;
    sp->max_steps = c->train.max_steps;
    sp->lr_kind = (pt_lr_kind)c->train.schedule;
    sp->lr = c->train.lr;
    sp->min_lr = c->train.min_lr;
    sp->warmup = c->train.warmup_steps;
    sp->weight_decay = c->train.weight_decay;
    sp->beta1 = c->train.beta1;
    sp->beta2 = c->train.beta2;
    sp->eps = c->train.eps;
    sp->grad_clip = c->train.grad_clip;
    sp->stages = c->pipeline.stages == PT_AUTO ? PT_TRAIN_AUTO : c->pipeline.stages;
    sp->replicas = c->pipeline.replicas == PT_AUTO ? PT_TRAIN_AUTO : c->pipeline.replicas;
    sp->micro = c->pipeline.microbatches == PT_AUTO ? PT_TRAIN_AUTO : c->pipeline.microbatches;
    sp->gpipe = c->pipeline.schedule == PT_PIPE_GPIPE;
    sp->recompute = c->pipeline.recompute;
    sp->mem_limit = c->pipeline.memory_gib * gib;
    sp->cores = c->pipeline.cores;
    sp->elastic = c->pipeline.elastic;
    sp->overlap = c->pipeline.overlap;
    sp->bucket_bytes = (size_t)(c->pipeline.bucket_mib * (double)(1 << 20));
    sp->timeout_s = c->run.timeout_s;
    sp->check_replicas = c->run.check_replicas;
    sp->freeze = (pt_freeze_config){(pt_freeze_kind)c->freeze.policy, c->freeze.alpha,
                                    c->freeze.max_depth};
    sp->freeze_every_step = c->freeze.unit == PT_FREEZE_EVERY_STEP;
    sp->freeze_start = c->freeze.start;
    sp->freeze_every = c->freeze.every;
    sp->cache = c->cache.enabled;
    sp->cache_memory = (uint64_t)(c->cache.memory_gib * gib);
    sp->cache_disk = (uint64_t)(c->cache.disk_gib * gib);
    sp->cache_dir = c->cache.disk_dir;
    sp->cache_min_depth = c->cache.min_depth;
    sp->sample_log = ss->sample_log;
    sp->where = pt_stop_signal_where();
}

pt_ckpt_run pt_session_ckpt(pt_session *s)
{
    return (pt_ckpt_run){.run = &s->run,
                         .cfg = &s->cfg,
                         .train = &s->train,
                         .test = &s->test,
                         .train_sha256 = s->train_sha256,
                         .test_sha256 = s->test_sha256,
                         .vocab_sha256 = s->vocab_sha256};
}

/* RUN_DIR/NAME-rankR.jsonl: its path, and opened for appending. */
void pt_session_rank_file(const pt_session *s, const char *name, char *path, size_t n)
{
    snprintf(path, n, "%s/%s-rank%d.jsonl", s->cfg.run.dir, name, s->rank);
}

static int open_rank_file(const pt_session *s, const char *name, FILE **out, pt_err *err)
{
    char path[PT_PATH_MAX + 64];
    pt_session_rank_file(s, name, path, sizeof path);
    return pt_log_open(path, out, err);
}

/* Each of this rank's logs: a last line cut short by an earlier run is
 * removed, with a note. Only under run.dir's lock: a job refused for it
 * must not touch the lines of the job that holds it. */
int pt_session_cut_logs(pt_session *s, pt_err *err)
{
    char path[PT_PATH_MAX + 64];
    FILE *files[3] = {s->progress.metrics, s->rank_metrics, s->sample_log};
    const char *names[3] = {NULL, "metrics", "samples"};
    int rc = 0;
    for (int i = 0; rc == 0 && i < 3; i++) {
        if (!files[i])
            continue;
        if (names[i])
            pt_session_rank_file(s, names[i], path, sizeof path);
        else
            snprintf(path, sizeof path, "%s", s->progress.metrics_path);
        int64_t cut = 0;
        if ((rc = pt_log_cut(files[i], path, &cut, err)) == 0 && cut)
            fprintf(stderr, "pipetrain: note: '%s' ended in a line cut short (%lld bytes: a run "
                    "stopped while writing it, or the disk was full); it was removed\n", path,
                    (long long)cut);
    }
    return rc;
}

/* The profile the engine plans from, read by rank 0 alone (the engine uses
 * rank 0's): a resumed checkpoint's own when it has one, so the resumed run
 * makes the saved run's layouts whatever became of files outside it (a bad
 * one is the load's to report), with pipeline.profile's as the fallback
 * for a world the checkpoint's does not fit; else pipeline.profile's (an
 * error names the key); else none. Every rank learns whether rank 0
 * failed. */
static int given_profile(pt_session *s, const char *resume, int *strict, pt_err *err)
{
    const pt_config *c = &s->cfg;
    int rc = 0;
    *strict = 0;
    if (s->rank == 0) {
        pt_err ignored;
        if (resume && *resume &&
            pt_checkpoint_read_profile(resume, &s->arch, &s->profile, &ignored) != 0)
            memset(&s->profile, 0, sizeof s->profile);
        if (s->profile.ranks && *c->pipeline.profile)
            fprintf(stderr, "pipetrain: note: resuming %s, which carries the measurements its run "
                    "planned from: they are used where they fit this world, else "
                    "pipeline.profile's\n", resume);
        if (*c->pipeline.profile) {
            pt_profile *into = s->profile.ranks ? &s->profile_fallback : &s->profile;
            *strict = !s->profile.ranks;
            if ((rc = pt_profile_read(c->pipeline.profile, &s->arch, into, err)))
                pt_config_key_prefix(c, err, "pipeline.profile");
        }
    }
    int64_t worst = rc;
    int got = pt_allreduce_max_i64(pt_comm_world(s->comm), &worst, err);
    if (got)
        return got;
    if (rc == 0 && worst != 0)
        return pt_fail(err, (int)worst, "rank 0 refused pipeline.profile (its message says why)");
    return rc;
}

int pt_session_write_profile(const pt_session *s, pt_err *err)
{
    if (s->rank != 0)
        return 0;
    pt_profile p;
    char path[PT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/profile.json", s->cfg.run.dir);
    int rc = pt_layout_profile(&s->run, &p, err);
    if (rc == 0) {
        rc = pt_profile_write(path, &p, &s->run.arch, err);
        pt_profile_free(&p);
    }
    return rc;
}

int pt_session_open(pt_session *s, pt_comm *comm, const pt_config *cfg, pt_run_mode mode,
                    const char *resume, pt_err *err)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->comm = comm;
    s->rank = pt_comm_rank(comm);
    const pt_config *c = &s->cfg;
    pt_config_arch(cfg, &s->arch);
    /* the frozen blocks of the checkpoint a resume would take (each rank
     * reads it; the planner uses rank 0's): the memory checks count them
     * without gradients or moments. A bad file is the load's to report. */
    pt_err unread;
    if (mode == PT_RUN_TRAIN && resume && *resume &&
        pt_checkpoint_read_depth(resume, s->arch.layers, &s->resume_depth, &unread) != 0)
        s->resume_depth = 0;
    /* an evaluation keeps no gradients or moments and saves nothing for a
     * backward: its memory is that of a model frozen whole */
    if (mode == PT_RUN_EVAL)
        s->resume_depth = s->arch.layers;
    int rc;
    if ((rc = resolve_dropout(s, err)) ||
        (rc = pt_comm_bind(comm, &s->threads, s->binding, sizeof s->binding, err)))
        goto agree;
    if (c->run.threads > 0) {
        s->threads = c->run.threads;
        /* Allowed (a config may be written for a bigger machine), but the
         * threads take turns on the cores and every step waits for the
         * slowest: a run that crawls should say why. */
        const int cores = pt_comm_cores(comm) / pt_comm_local_size(comm);
        if (s->rank == 0 && s->threads > (cores > 1 ? cores : 1)) {
            char at[PT_PATH_MAX + 32];
            pt_config_where(c, "run.threads", at, sizeof at);
            fprintf(stderr,
                    "pipetrain: warning: %srun.threads: %d threads per rank, but each rank has %d "
                    "core%s here; extra threads take turns and slow every step (0 = the cores "
                    "divided among the ranks)\n",
                    at, s->threads, cores > 1 ? cores : 1, cores > 1 ? "s" : "");
        }
    }
    /* the backend first, so the model's memory is checked before data that
     * can take long to make; IDX files decide the image size, so there the
     * check waits for them */
    const int known = c->data.kind != PT_DATA_IDX; /* the image size */
    if ((rc = open_backend(s, err)) ||
        (known && ((rc = pt_arch_check(&s->arch, err)) || (rc = check_model_memory(s, err)))) ||
        (rc = load_data(s, mode, err)) || (rc = pt_arch_check(&s->arch, err)) ||
        (!known && (rc = check_model_memory(s, err))))
        goto agree;
    if (mode == PT_RUN_TRAIN && c->run.profile_ops && (rc = pt_backend_profile_ops(s->be, err))) {
        rc = pt_config_key_fail(c, err, "run.profile_ops",
                                "true, but this run trains on the %s backend, whose ops are "
                                "queued on a device; allowed there: false (op timing is for the "
                                "CPU backend)", pt_backend_name(s->be));
        goto agree;
    }
    digest_data(s, mode);
    if (mode == PT_RUN_TRAIN) {
        pt_augment aug = {c->data.hflip, c->data.crop_pad};
        /* text data with augmentation is refused by pt_config_validate, so
         * what is left is a crop larger than the images (IDX: any size) */
        if ((rc = pt_augment_check(&aug, &s->train, err))) {
            pt_config_key_prefix(c, err, c->data.crop_pad ? "data.crop_pad" : "data.hflip");
            goto agree;
        }
        char split[PT_PATH_MAX + 96];
        describe_train(c, split, sizeof split);
        if (c->train.batch > s->train.count) {
            rc = pt_config_key_fail(c, err, "train.batch",
                                    "%lld, but the training split has only %lld examples (%s); "
                                    "allowed for this data: 1 to %lld",
                                    c->train.batch, (long long)s->train.count, split,
                                    (long long)s->train.count);
            goto agree;
        }
    }
    if ((rc = check_layout_keys(s, err)))
        goto agree;
agree: /* every rank fails here or goes on together: what follows is collective */
    if ((rc = pt_group_agree(pt_comm_world(s->comm), rc, err)))
        goto fail;
    pt_train_spec spec;
    make_spec(s, &s->arch, &spec);
    if ((rc = given_profile(s, resume, &spec.profile_strict, err)))
        goto fail;
    spec.profile = s->profile.ranks ? &s->profile : NULL;
    spec.profile_fallback = s->profile_fallback.ranks ? &s->profile_fallback : NULL;
    spec.resume_depth = s->resume_depth;
    if ((rc = pt_run_open(&s->run, comm, &spec, mode, err))) {
        if (rc == PT_EINPUT && s->rank == 0 && (spec.profile_strict || spec.profile_fallback) &&
            strncmp(err->msg, "measured on another", 19) == 0) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            rc = pt_config_key_fail(c, err, "pipeline.profile", "'%s' was %.800s; measure again "
                                    "(pipeline.profile: '') or use a profile of this world",
                                    c->pipeline.profile, why);
            goto fail;
        }
        /* the layout keys were checked above: what the planner refuses is memory */
        if (rc == PT_EINPUT && strstr(err->msg, "fits")) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            const double gib = (double)(1ull << 30);
            const double have = c->pipeline.memory_gib > 0 ? c->pipeline.memory_gib * gib : memory_per_rank(s);
            char from[PT_PATH_MAX + 64] = "";
            if (spec.profile_strict)
                snprintf(from, sizeof from, "; the unit sizes are pipeline.profile's, '%s'",
                         c->pipeline.profile);
            rc = pt_config_key_fail(c, err, "pipeline.memory_gib",
                                    "%.3g GiB per device%s, and no pipeline layout fits in it (%.400s%s); "
                                    "allowed: more memory, more stages over more ranks, or a smaller "
                                    "model or batch", have / gib,
                                    c->pipeline.memory_gib > 0 ? "" : " (the node's RAM over its ranks)",
                                    why, from);
        }
        goto fail;
    }
    /* only active ranks load weights: the others learn of a failure here */
    rc = s->run.active && *c->model.init_from
             ? load_init(s->run.seg, c, s->train.label_names ? &s->train : &s->test,
                         s->rank == pt_mesh_rank(&s->run.mesh, 0, s->run.mesh.stages - 1), err)
             : 0;
    if ((rc = pt_run_agree(&s->run, rc, err)) || (rc = pt_run_agree(&s->run, same_data(s, err), err)))
        goto fail;
    if (mode == PT_RUN_TRAIN) {
        /* rank 0 makes run.dir once every input has proved good; then every
         * rank opens its own files in it */
        rc = s->rank == 0 ? pt_mkdir_p(c->run.dir, 0755, err) : 0;
        if (rc == PT_ESYS) { /* a place the user named that cannot be made */
            rc = pt_err_input(rc, err);
            pt_config_key_prefix(c, err, "run.dir");
        }
        if ((rc = pt_run_agree(&s->run, rc, err)))
            goto fail;
        char metrics[PT_PATH_MAX + 32];
        const int lead = s->rank == 0;
        snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", c->run.dir);
        if ((rc = pt_progress_open(&s->progress, lead && c->run.metrics ? metrics : NULL,
                                   c->train.log_every, !lead, err)))
            goto fail;
        if (c->run.rank_metrics && (rc = open_rank_file(s, "metrics", &s->rank_metrics, err)))
            goto fail;
        if (c->run.log_samples && (rc = open_rank_file(s, "samples", &s->sample_log, err)))
            goto fail;
        s->run.spec.sample_log = s->sample_log;
        /* run.profile_ops writes RUN_DIR/op_profile-rank<R>.json at the end:
         * what is in its way is refused now, not after the training */
        char path[PT_PATH_MAX + 64];
        struct stat st;
        snprintf(path, sizeof path, "%s/op_profile-rank%d.json", c->run.dir, s->rank);
        if (c->run.profile_ops && lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
            rc = pt_config_key_fail(c, err, "run.profile_ops",
                                    "true, but '%s' is there and is not a regular file (%s); "
                                    "the op profile is written there at the end of the run: move "
                                    "it away", path, pt_file_kind(st.st_mode));
            goto fail;
        }
    }
    return 0;
fail:
    pt_session_close(s);
    return rc;
}

void pt_session_close(pt_session *s)
{
    *pt_stop_signal_where() = NULL; /* it may point into what is freed here */
    pt_progress_close(&s->progress);
    if (s->rank_metrics)
        fclose(s->rank_metrics);
    if (s->sample_log)
        fclose(s->sample_log);
    pt_run_close(&s->run);
    pt_profile_free(&s->profile);
    pt_profile_free(&s->profile_fallback);
    if (s->be)
        pt_backend_close(s->be);
    pt_dataset_free(&s->train);
    pt_dataset_free(&s->test);
    memset(s, 0, sizeof *s);
}
