/*
 * check.c: the rules between keys, and the input files that must
 * exist, checked once after the YAML file and every `--set` override were
 * applied. Each message names where the key it blames was set (FILE:LINE,
 * --set, or the default), what is wrong and what would be allowed.
 */
#include "config/schema.h"

#include "data/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int need_file(const pt_config *c, const char *key, const char *path, pt_err *err)
{
    struct stat st;
    if (!*path)
        return pt_config_key_fail(c, err, key, "a file is needed here");
    if (stat(path, &st) != 0)
        return pt_config_key_fail(c, err, key, "cannot use '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return pt_config_key_fail(c, err, key, "'%s' is not a regular file", path);
    return 0;
}

static int is_image_data(const pt_config *c)
{
    return c->data.kind == PT_DATA_FASHION_MNIST || c->data.kind == PT_DATA_IDX ||
           c->data.kind == PT_DATA_SYNTH_IMAGES;
}

/* Side of the images, or 0 where the files decide it (data.kind idx). */
static int image_side(const pt_config *c)
{
    return c->data.kind == PT_DATA_SYNTH_IMAGES ? c->data.image_size
           : c->data.kind == PT_DATA_FASHION_MNIST ? 28
                                                  : 0;
}

static int model_rules(const pt_config *c, pt_err *err)
{
    const int vit = c->model.kind == PT_MODEL_VIT;
    /* text classification's model is checked after its files (textcls_rules) */
    if (c->model.kind == PT_MODEL_BERT && c->data.kind != PT_DATA_TEXT_CLASSIFICATION)
        return pt_config_key_fail(c, err, "data.kind",
                                  "%s data cannot train a bert model (model.kind); allowed with "
                                  "bert: text_classification",
                                  pt_config_word("data.kind", c->data.kind));
    if (c->data.kind != PT_DATA_TEXT_CLASSIFICATION && vit != is_image_data(c))
        return pt_config_key_fail(c, err, "data.kind",
                                  "%s data cannot train a %s model (model.kind); allowed with %s: "
                                  "%s",
                                  pt_config_word("data.kind", c->data.kind),
                                  pt_config_word("model.kind", c->model.kind),
                                  pt_config_word("model.kind", c->model.kind),
                                  vit ? "fashion_mnist, idx, synthetic_images"
                                      : "text, kjv, synthetic_text");
    /* [CLS] and [SEP] take two of a bert example's tokens: at 2, no text */
    if (c->model.kind == PT_MODEL_BERT && c->model.context < 3)
        return pt_config_key_fail(c, err, "model.context",
                                  "%d leaves no token for the text ([CLS] and [SEP] take 2); "
                                  "allowed with bert: 3 to 65536", c->model.context);
    if (c->model.kind == PT_MODEL_BERT && c->model.positions < c->model.context)
        return pt_config_key_fail(c, err, "model.positions",
                                  "%d is fewer than model.context (%d); allowed: at least %d",
                                  c->model.positions, c->model.context, c->model.context);
    /* dropout is BERT's (nn's bert units); the pre-LN vit and gpt have none */
    const char *drop_keys[2] = {"model.dropout", "model.attention_dropout"};
    const double drop[2] = {c->model.hidden_dropout, c->model.attn_dropout};
    for (int i = 0; i < 2; i++)
        if (c->model.kind != PT_MODEL_BERT && drop[i] > 0)
            return pt_config_key_fail(c, err, drop_keys[i],
                                      "%g, but a %s model (model.kind) has no dropout; allowed "
                                      "with %s: 0 or auto (bert has dropout)",
                                      drop[i], pt_config_word("model.kind", c->model.kind),
                                      pt_config_word("model.kind", c->model.kind));
    if (c->model.dim % c->model.heads)
        return pt_config_key_fail(c, err, "model.heads",
                                  "%d does not divide model.dim (%d); allowed: a divisor of %d",
                                  c->model.heads, c->model.dim, c->model.dim);
    const int side = image_side(c);
    if (vit && side && side % c->model.patch)
        return pt_config_key_fail(c, err, "model.patch",
                                  "%d does not divide the image size %d; allowed: a divisor of %d",
                                  c->model.patch, side, side);
    /* IDX labels are bytes, and the loader takes at most 256 classes */
    const int idx = c->data.kind == PT_DATA_FASHION_MNIST || c->data.kind == PT_DATA_IDX;
    if (idx && c->model.classes > 256)
        return pt_config_key_fail(c, err, "model.classes",
                                  "%d, but IDX labels are bytes (0 to 255); allowed with data.kind "
                                  "%s: 2 to 256",
                                  c->model.classes, pt_config_word("data.kind", c->data.kind));
    /* the kernels compute in float32, where a smaller epsilon is 0 or
     * loses its digits (0/0 where a variance is 0) */
    if (c->model.ln_eps > 0 && c->model.ln_eps < 1e-38)
        return pt_config_key_fail(c, err, "model.ln_eps",
                                  "%g is below what float32, in which the model computes, can "
                                  "hold; allowed: 0 (the model's default) or 1e-38 to 1 (1 "
                                  "excluded)",
                                  c->model.ln_eps);
    if (c->run.device == PT_DEVICE_CPU && c->run.precision == PT_PRECISION_BF16)
        return pt_config_key_fail(c, err, "run.precision",
                                  "bf16 needs a GPU, and run.device is cpu; allowed on the CPU: "
                                  "fp32");
    return 0;
}

static int data_rules(const pt_config *c, pt_err *err)
{
    if (!is_image_data(c)) {
        if (c->data.hflip)
            return pt_config_key_fail(c, err, "data.hflip",
                                      "flips images, and data.kind %s is text; allowed with text: "
                                      "false",
                                      pt_config_word("data.kind", c->data.kind));
        if (c->data.crop_pad)
            return pt_config_key_fail(c, err, "data.crop_pad",
                                      "%d crops images, and data.kind %s is text; allowed with "
                                      "text: 0",
                                      c->data.crop_pad, pt_config_word("data.kind", c->data.kind));
    }
    const int side = image_side(c);
    if (is_image_data(c) && side && c->data.crop_pad > side)
        return pt_config_key_fail(c, err, "data.crop_pad",
                                  "%d is more than the image size %d; allowed: 0 to %d",
                                  c->data.crop_pad, side, side);
    return 0;
}

static int train_rules(const pt_config *c, pt_err *err)
{
    if (c->train.min_lr > 0 && c->train.min_lr < 1e-38)
        return pt_config_key_fail(c, err, "train.min_lr",
                                  "%g is below what float32, in which the update is computed, can "
                                  "hold; allowed: 0 or 1e-38 to train.lr", c->train.min_lr);
    if (c->train.min_lr > c->train.lr)
        return pt_config_key_fail(c, err, "train.min_lr",
                                  "%g is above train.lr (%g); allowed: 0 to train.lr",
                                  c->train.min_lr, c->train.lr);
    if (c->pipeline.microbatches != PT_AUTO && c->pipeline.microbatches > c->train.batch)
        return pt_config_key_fail(c, err, "pipeline.microbatches",
                                  "%d micro-batches cannot be cut from a batch of %lld "
                                  "(train.batch); allowed: 1 to %lld, or auto",
                                  c->pipeline.microbatches, c->train.batch, c->train.batch);
    /* a stage holds at least one unit: embedding, 2 per block, head */
    const int units = 2 * c->model.layers + 2;
    if (c->pipeline.stages != PT_AUTO && c->pipeline.stages > units)
        return pt_config_key_fail(c, err, "pipeline.stages",
                                  "%d stages, but a model of %d block%s (model.layers) has %d units "
                                  "to share among them (embedding, 2 per block, head); allowed: 1 "
                                  "to %d, or auto",
                                  c->pipeline.stages, c->model.layers,
                                  c->model.layers == 1 ? "" : "s", units, units);
    return 0;
}

/* The error in err, with a pointer to scripts/setup.sh when key has its
 * default value (a file setup.sh makes). Returns the code. */
static int setup_writes(const pt_config *c, const char *key, const char *path, pt_err *err)
{
    const int ki = pt_config_find_key(key);
    if (ki >= 0 && strcmp(path, pt_config_keys[ki].def) == 0)
        strncat(err->msg, " (scripts/setup.sh writes it)", sizeof err->msg - strlen(err->msg) - 1);
    return err->code;
}

/* A text-classification file: there, and named .tsv or .jsonl. */
static int textcls_file(const pt_config *c, const char *key, const char *path, pt_err *err)
{
    int rc = need_file(c, key, path, err);
    if (!rc && (rc = pt_textcls_check_path(path, err)))
        pt_config_key_prefix(c, err, key);
    return rc;
}

static int file_rules(const pt_config *c, pt_err *err)
{
    int rc;
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
    if (c->data.kind == PT_DATA_TEXT_CLASSIFICATION) {
        if ((rc = textcls_file(c, "data.train_file", c->data.train_file, err)))
            return setup_writes(c, "data.train_file", c->data.train_file, err);
        if (*c->data.test_file && (rc = textcls_file(c, "data.test_file", c->data.test_file, err)))
            return rc;
        if ((rc = need_file(c, "data.vocab", c->data.vocab, err)))
            return setup_writes(c, "data.vocab", c->data.vocab, err);
    }
    if (*c->model.init_from && c->model.kind == PT_MODEL_BERT) { /* a directory, or its file */
        struct stat st;
        if (stat(c->model.init_from, &st) != 0)
            return pt_config_key_fail(c, err, "model.init_from", "cannot use '%s': %s",
                                      c->model.init_from, strerror(errno));
    } else if (*c->model.init_from &&
               (rc = need_file(c, "model.init_from", c->model.init_from, err))) {
        return rc;
    }
    if (*c->pipeline.profile && (rc = need_file(c, "pipeline.profile", c->pipeline.profile, err)))
        return rc;
    return 0;
}

/* Text classification trains a BERT classifier (model.kind bert); checked
 * once its files have been. */
static int textcls_rules(const pt_config *c, pt_err *err)
{
    if (c->data.kind != PT_DATA_TEXT_CLASSIFICATION || c->model.kind == PT_MODEL_BERT)
        return 0;
    const int vit = c->model.kind == PT_MODEL_VIT;
    return pt_config_key_fail(c, err, "data.kind",
                              "text_classification needs a BERT classifier (model.kind bert), "
                              "and model.kind is %s; allowed with %s: %s",
                              pt_config_word("model.kind", c->model.kind),
                              pt_config_word("model.kind", c->model.kind),
                              vit ? "fashion_mnist, idx, synthetic_images"
                                  : "text, kjv, synthetic_text");
}

/* The cache holds frozen blocks' output: without a freeze policy it would
 * never serve, so cache.enabled is then a key the run does not read (a
 * note, as for the freeze.* keys), not an error: a no-freezing ablation of
 * a config with the cache on changes freeze.policy alone. */
int pt_config_cache_on(const pt_config *c) { return c->cache.enabled && c->freeze.policy != 0; }

static int cache_rules(const pt_config *c, pt_err *err)
{
    if (pt_config_cache_on(c) && (c->data.hflip || c->data.crop_pad))
        return pt_config_key_fail(c, err, "cache.enabled",
                                  "the cache would keep the frozen blocks' output for one random "
                                  "augmentation of each image and serve it every epoch, which is "
                                  "not the model being trained; turn off data.hflip and "
                                  "data.crop_pad, or the cache");
    /* a cap above the model's blocks caps nothing: likely a config for
     * another model, said rather than read as "all" (as cache.min_depth) */
    if (c->freeze.policy != 0 && c->freeze.max_depth > c->model.layers)
        return pt_config_key_fail(c, err, "freeze.max_depth",
                                  "%d, but the model has %d block%s (model.layers); allowed: 0 "
                                  "(all of them) to %d",
                                  c->freeze.max_depth, c->model.layers,
                                  c->model.layers == 1 ? "" : "s", c->model.layers);
    /* Half a disk tier is refused rather than warned about: either way the
     * run would go on without one, and a warning scrolls away with the
     * progress lines while the user believes the tier is there. */
    if (c->cache.disk_gib > 0 && !*c->cache.disk_dir)
        return pt_config_key_fail(c, err, "cache.disk_gib",
                                  "%g GiB of disk tier, but cache.disk_dir names no directory to "
                                  "put it in; allowed without cache.disk_dir: 0",
                                  c->cache.disk_gib);
    if (*c->cache.disk_dir && c->cache.disk_gib <= 0)
        return pt_config_key_fail(c, err, "cache.disk_dir",
                                  "'%s' is set, but cache.disk_gib is 0, so nothing would be "
                                  "written there; allowed with cache.disk_gib 0: ''",
                                  c->cache.disk_dir);
    if (pt_config_cache_on(c) && c->cache.memory_gib <= 0 && c->cache.disk_gib <= 0)
        return pt_config_key_fail(c, err, "cache.memory_gib",
                                  "0, and there is no disk tier, so the cache could hold nothing; "
                                  "allowed with cache.enabled: more than 0, or a disk tier");
    /* the cache starts at min_depth frozen blocks: more than can ever freeze
     * would leave it unused without a word */
    if (c->cache.min_depth > c->model.layers)
        return pt_config_key_fail(c, err, "cache.min_depth",
                                  "%d, but the model has %d block%s (model.layers); allowed: 1 to "
                                  "%d",
                                  c->cache.min_depth, c->model.layers,
                                  c->model.layers == 1 ? "" : "s", c->model.layers);
    if (c->freeze.max_depth > 0 && c->cache.min_depth > c->freeze.max_depth)
        return pt_config_key_fail(c, err, "cache.min_depth",
                                  "%d, but at most %d block%s ever freeze (freeze.max_depth); "
                                  "allowed: 1 to %d",
                                  c->cache.min_depth, c->freeze.max_depth,
                                  c->freeze.max_depth == 1 ? "" : "s", c->freeze.max_depth);
    return 0;
}

int pt_config_check_disk_tier(const pt_config *c, pt_err *err)
{
    /* (with the cache off the key is unused, and said to be) */
    if (pt_config_cache_on(c) && *c->cache.disk_dir) {
        struct stat st;
        if (stat(c->cache.disk_dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return pt_config_key_fail(c, err, "cache.disk_dir", "'%s' is not a directory",
                                      c->cache.disk_dir);
        /* the disk tier's file is made there: a directory this process
         * cannot write (its permissions, a read-only mount) is refused now,
         * not when the cache is made, maybe hours into the run. A file is
         * made there and removed, since permissions alone do not tell:
         * root may write anywhere they allow, yet /proc makes no file */
        if (access(c->cache.disk_dir, W_OK | X_OK) != 0)
            return pt_config_key_fail(c, err, "cache.disk_dir", "'%s' cannot be written: %s",
                                      c->cache.disk_dir, strerror(errno));
        char probe[PT_PATH_MAX + 32];
        if (snprintf(probe, sizeof probe, "%s/.pipetrain-probe-XXXXXX", c->cache.disk_dir) <
                (int)sizeof probe) {
            const int fd = mkstemp(probe);
            if (fd < 0)
                return pt_config_key_fail(c, err, "cache.disk_dir",
                                          "'%s' cannot hold the disk tier's file: making a file "
                                          "there failed: %s", c->cache.disk_dir, strerror(errno));
            close(fd);
            unlink(probe);
        }
    }
    return 0;
}

static int sample_rules(const pt_config *c, pt_err *err)
{
    if (c->model.kind != PT_MODEL_GPT || c->sample.length == 0)
        return 0;
    const size_t len = strlen(c->sample.prompt);
    if (len == 0)
        return pt_config_key_fail(c, err, "sample.prompt",
                                  "sampling needs a non-empty prompt (or sample.length 0)");
    /* The sampler's window is model.context bytes: the prompt and the byte
     * being drawn. It would keep only the last context - 1 bytes of a longer
     * prompt and continue a text the user did not write. */
    if (len > (size_t)c->model.context - 1) {
        /* where the context came from, too: often the key the user wrote */
        char at[PT_PATH_MAX + 32];
        pt_config_where(c, "model.context", at, sizeof at);
        const size_t n = strlen(at);
        if (n >= 2 && at[n - 2] == ':')
            at[n - 2] = '\0';
        else if (n >= 1 && at[n - 1] == ' ')
            at[n - 1] = '\0';
        /* the default prompt: the user wrote none, so say which it is and
         * that setting one is the first way out */
        const int dflt = c->line[pt_config_find_key("sample.prompt")] == 0;
        char fits[32];
        if (c->model.context - 1 == 1)
            snprintf(fits, sizeof fits, "1 byte");
        else
            snprintf(fits, sizeof fits, "1 to %d bytes", c->model.context - 1);
        return pt_config_key_fail(c, err, "sample.prompt",
                                  "%s%s%s%zu bytes, but the model sees model.context = %d bytes "
                                  "(%s), the prompt and the byte it samples; allowed: %s "
                                  "(%sor a longer model.context, or sample.length 0)",
                                  dflt ? "the default prompt, '" : "", dflt ? c->sample.prompt : "",
                                  dflt ? "', is " : "", len, c->model.context, at, fits,
                                  dflt ? "set sample.prompt to a shorter one, " : "");
    }
    return 0;
}

/* run.dir is made (with its parents) when training starts: a file in the way
 * would stop the run only then, with nothing said about the key. */
static int run_dir_rules(const pt_config *c, pt_err *err)
{
    if (!*c->run.dir)
        return pt_config_key_fail(c, err, "run.dir", "must name a directory");
    char path[PT_PATH_MAX];
    snprintf(path, sizeof path, "%s", c->run.dir);
    for (char *cut = path + strlen(path);; ) {
        struct stat st;
        if (stat(path, &st) == 0) {
            if (!S_ISDIR(st.st_mode) && strcmp(path, c->run.dir) == 0)
                return pt_config_key_fail(c, err, "run.dir",
                                          "'%s' is a file, not a directory; allowed: a "
                                          "directory, or a path to make one at",
                                          path);
            if (!S_ISDIR(st.st_mode))
                return pt_config_key_fail(c, err, "run.dir",
                                          "'%s' is a file, so '%s' cannot be made under it; "
                                          "allowed: a directory, or a path to make one at",
                                          path, c->run.dir);
            /* its checkpoints directory, where the first save would fail
             * after the training it was to keep */
            char ck[PT_PATH_MAX + 16];
            snprintf(ck, sizeof ck, "%s/checkpoints", c->run.dir);
            if (strcmp(path, c->run.dir) == 0 && lstat(ck, &st) == 0 &&
                (stat(ck, &st) != 0 || !S_ISDIR(st.st_mode)))
                return pt_config_key_fail(c, err, "run.dir",
                                          "'%s' is not a directory (%s), but checkpoints are saved "
                                          "there; remove or rename it, or choose another run.dir",
                                          ck, stat(ck, &st) != 0 ? "a link that leads nowhere"
                                                                 : pt_file_kind(st.st_mode));
            return 0;
        }
        while (cut > path && *cut != '/')
            cut--;
        if (cut == path)
            return 0; /* nothing of it exists yet: made from the current directory */
        *cut = '\0';
    }
}

/* train.resume names a checkpoint: a directory holding a manifest. */
static int resume_rules(const pt_config *c, pt_err *err)
{
    const char *dir = c->train.resume;
    if (!*dir || strcmp(dir, "auto") == 0)
        return 0;
    char manifest[PT_PATH_MAX + 16];
    snprintf(manifest, sizeof manifest, "%s/manifest", dir);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || stat(manifest, &st) != 0)
        return pt_config_key_fail(c, err, "train.resume",
                                  "'%s' is not a checkpoint (a directory with a manifest); "
                                  "allowed: '' (start fresh), auto (the newest in run.dir), or a "
                                  "directory such as RUN_DIR/checkpoints/step_0000000100",
                                  dir);
    return 0;
}

/* ------------------------------------------------------- keys not read */

/* Which configurations read a key: a test, and for the note what reads it
 * and what this configuration has instead ("model.kind is gpt"). */
typedef struct {
    const char *keys; /* space-separated */
    int (*reads)(const pt_config *c, int resuming);
    const char *reader; /* "model.kind vit" */
    void (*have)(const pt_config *c, char *out, size_t n);
} pt_key_reader;

static int is_vit(const pt_config *c, int r) { (void)r; return c->model.kind == PT_MODEL_VIT; }
static int not_vit(const pt_config *c, int r) { return !is_vit(c, r); }
static int is_gpt(const pt_config *c, int r) { (void)r; return c->model.kind == PT_MODEL_GPT; }
static int not_gpt(const pt_config *c, int r) { return !is_gpt(c, r); }
static int is_bert(const pt_config *c, int r) { (void)r; return c->model.kind == PT_MODEL_BERT; }
static int gpt_samples(const pt_config *c, int r) { return is_gpt(c, r) && c->sample.length > 0; }
static int is_idx(const pt_config *c, int r)
{
    (void)r;
    return c->data.kind == PT_DATA_FASHION_MNIST || c->data.kind == PT_DATA_IDX;
}
static int is_text_file(const pt_config *c, int r)
{
    (void)r;
    return c->data.kind == PT_DATA_TEXT_FILE || c->data.kind == PT_DATA_KJV;
}
static int is_textcls(const pt_config *c, int r)
{
    (void)r;
    return c->data.kind == PT_DATA_TEXT_CLASSIFICATION;
}
static int cuts_test(const pt_config *c, int r)
{
    return is_text_file(c, r) || (is_textcls(c, r) && !*c->data.test_file);
}
static int is_synthetic(const pt_config *c, int r)
{
    (void)r;
    return c->data.kind == PT_DATA_SYNTH_IMAGES || c->data.kind == PT_DATA_SYNTH_TEXT;
}
static int is_synth_images(const pt_config *c, int r)
{
    (void)r;
    return c->data.kind == PT_DATA_SYNTH_IMAGES;
}
static int decays(const pt_config *c, int r) { (void)r; return c->train.schedule != PT_LR_CONSTANT; }
static int freezes(const pt_config *c, int r)
{
    (void)r;
    return strcmp(pt_config_word("freeze.policy", c->freeze.policy), "none") != 0;
}
/* elastic re-plans whatever of the layout is auto at freeze decisions, and
 * on a resume of a checkpoint with frozen blocks (whatever the policy now) */
static int replans(const pt_config *c, int r)
{
    return (freezes(c, r) || r) && (c->pipeline.stages == PT_AUTO ||
                                    c->pipeline.replicas == PT_AUTO ||
                                    c->pipeline.microbatches == PT_AUTO);
}
/* one replica (fixed: a re-plan keeps it): no all-reduce, nothing to compare */
static int replicates(const pt_config *c, int r) { (void)r; return c->pipeline.replicas != 1; }
static int caches(const pt_config *c, int r) { (void)r; return pt_config_cache_on(c); }
/* (false says the cache is off with or without freezing: nothing to note) */
static int cache_switch(const pt_config *c, int r) { return !c->cache.enabled || freezes(c, r); }

static void have_model(const pt_config *c, char *out, size_t n)
{
    snprintf(out, n, "model.kind is %s", pt_config_word("model.kind", c->model.kind));
}
static void have_data(const pt_config *c, char *out, size_t n)
{
    if (is_textcls(c, 0) && *c->data.test_file)
        snprintf(out, n, "data.test_file is set");
    else
        snprintf(out, n, "data.kind is %s", pt_config_word("data.kind", c->data.kind));
}
static void have_sampling(const pt_config *c, char *out, size_t n)
{
    if (!is_gpt(c, 0))
        have_model(c, out, n);
    else
        snprintf(out, n, "sample.length is %d", c->sample.length);
}
static void have_schedule(const pt_config *c, char *out, size_t n)
{
    snprintf(out, n, "train.schedule is %s", pt_config_word("train.schedule", c->train.schedule));
}
static void have_policy(const pt_config *c, char *out, size_t n)
{
    snprintf(out, n, "freeze.policy is %s", pt_config_word("freeze.policy", c->freeze.policy));
}
static void have_layout(const pt_config *c, char *out, size_t n)
{
    if (c->pipeline.stages == PT_AUTO || c->pipeline.replicas == PT_AUTO ||
        c->pipeline.microbatches == PT_AUTO)
        snprintf(out, n, "freeze.policy is none (and the run starts fresh)");
    else
        snprintf(out, n, "pipeline.stages, pipeline.replicas and pipeline.microbatches are all "
                 "fixed");
}
static void have_replicas(const pt_config *c, char *out, size_t n)
{
    (void)c;
    snprintf(out, n, "pipeline.replicas is 1");
}
static void have_cache(const pt_config *c, char *out, size_t n)
{
    if (c->cache.enabled)
        have_policy(c, out, n);
    else
        snprintf(out, n, "cache.enabled is false");
}

static const pt_key_reader readers[] = {
    {"model.patch", is_vit, "model.kind vit", have_model},
    {"model.context", not_vit, "model.kind gpt and bert (a vit's tokens are its patches)",
     have_model},
    {"model.classes", not_gpt, "model.kind vit and bert (a gpt predicts bytes)", have_model},
    {"model.vocab model.positions model.type_vocab model.dropout model.attention_dropout", is_bert,
     "model.kind bert", have_model},
    {"data.train_images data.train_labels data.test_images data.test_labels data.mean data.std",
     is_idx, "data.kind fashion_mnist and idx", have_data},
    {"data.text", is_text_file, "data.kind text and kjv", have_data},
    {"data.train_file data.test_file data.vocab data.lowercase data.strip_accents data.split_cjk",
     is_textcls, "data.kind text_classification", have_data},
    {"data.test_fraction", cuts_test,
     "data.kind text and kjv, and text_classification without data.test_file", have_data},
    {"data.synthetic_examples", is_synthetic, "data.kind synthetic_images and synthetic_text",
     have_data},
    {"data.image_size", is_synth_images, "data.kind synthetic_images", have_data},
    {"sample.length", is_gpt, "model.kind gpt", have_model},
    {"sample.temperature sample.top_k sample.prompt", gpt_samples,
     "model.kind gpt with sample.length above 0", have_sampling},
    {"train.min_lr", decays, "train.schedule cosine and linear", have_schedule},
    {"freeze.alpha freeze.every freeze.unit freeze.start freeze.max_depth", freezes,
     "freeze.policy schedule and auto", have_policy},
    {"pipeline.elastic", replans,
     "some of pipeline.stages, pipeline.replicas and pipeline.microbatches at auto, and "
     "freeze.policy schedule or auto or a resume", have_layout},
    {"run.check_replicas pipeline.overlap pipeline.bucket_mib", replicates,
     "pipeline.replicas auto or above 1", have_replicas},
    {"cache.enabled", cache_switch, "freeze.policy schedule and auto", have_policy},
    {"cache.memory_gib cache.disk_dir cache.disk_gib cache.min_depth", caches,
     "cache.enabled true and freeze.policy schedule or auto", have_cache},
};

/* The rule for key, or NULL (every configuration reads it). */
static const pt_key_reader *reader_of(const char *key)
{
    const size_t n = strlen(key);
    for (size_t r = 0; r < sizeof readers / sizeof readers[0]; r++)
        for (const char *k = readers[r].keys; *k;) {
            const size_t len = strcspn(k, " ");
            if (len == n && strncmp(k, key, n) == 0)
                return &readers[r];
            k += len + (k[len] == ' ');
        }
    return NULL;
}

int pt_config_reads(const pt_config *c, const char *key, int resuming)
{
    const pt_key_reader *r = reader_of(key);
    return !r || r->reads(c, resuming);
}

int pt_config_unused(const pt_config *c, int resuming,
                     void (*note)(const char *key, const char *why, void *arg), void *arg)
{
    int count = 0;
    for (int ki = 0; ki < pt_config_key_count; ki++) {
        const char *key = pt_config_keys[ki].key;
        const pt_key_reader *r = reader_of(key);
        if (c->line[ki] == 0 || !r || r->reads(c, resuming)) /* default, or read */
            continue;
        char have[160], why[512];
        r->have(c, have, sizeof have);
        snprintf(why, sizeof why, "read only with %s, and %s", r->reader, have);
        count++;
        if (note)
            note(key, why, arg);
    }
    return count;
}

int pt_config_validate(const pt_config *c, pt_err *err)
{
    int rc;
    if ((rc = run_dir_rules(c, err)) || (rc = model_rules(c, err)) || (rc = data_rules(c, err)) ||
        (rc = train_rules(c, err)) || (rc = file_rules(c, err)) || (rc = textcls_rules(c, err)) ||
        (rc = cache_rules(c, err)) ||
        (rc = sample_rules(c, err)) || (rc = resume_rules(c, err)))
        return rc;
    return 0;
}
