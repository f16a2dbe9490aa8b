/*
 * config_check.c: the rules between keys, and the input files that must
 * exist, checked once after the YAML file and every `--set` override were
 * applied. Each message names where the key it blames was set (FILE:LINE,
 * --set, or the default), what is wrong and what would be allowed.
 */
#include "launch/config_schema.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

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

int pt_config_validate(const pt_config *c, pt_err *err)
{
    int rc;
    if (!*c->run.dir)
        return pt_config_key_fail(c, err, "run.dir", "must name a directory");
    const int vit = c->model.kind == PT_MODEL_VIT;
    const int image_data = c->data.kind == PT_DATA_FASHION_MNIST || c->data.kind == PT_DATA_IDX ||
                           c->data.kind == PT_DATA_SYNTH_IMAGES;
    if (vit != image_data)
        return pt_config_key_fail(c, err, "data.kind", "%s data cannot train a %s model (model.kind)",
                        pt_config_word("data.kind", c->data.kind),
                        pt_config_word("model.kind", c->model.kind));
    if (c->model.dim % c->model.heads)
        return pt_config_key_fail(c, err, "model.heads", "%d does not divide model.dim (%d)",
                        c->model.heads, c->model.dim);
    if (vit) {
        int size = c->data.kind == PT_DATA_SYNTH_IMAGES ? c->data.image_size : 28;
        if (c->data.kind != PT_DATA_IDX && size % c->model.patch)
            return pt_config_key_fail(c, err, "model.patch", "%d does not divide the image size %d",
                            c->model.patch, size);
    }
    if (c->train.min_lr > c->train.lr)
        return pt_config_key_fail(c, err, "train.min_lr", "%g is above train.lr (%g)", c->train.min_lr,
                        c->train.lr);
    if (c->pipeline.microbatches != PT_AUTO && c->pipeline.microbatches > c->train.batch)
        return pt_config_key_fail(c, err, "pipeline.microbatches",
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
        return pt_config_key_fail(c, err, "cache.enabled",
                        "the cache would keep the frozen blocks' output for one random "
                        "augmentation of each image and serve it every epoch, which is not the "
                        "model being trained; turn off data.hflip and data.crop_pad, or the cache");
    if (c->cache.enabled && c->freeze.policy == 0)
        return pt_config_key_fail(c, err, "cache.enabled", "the cache holds frozen blocks' output, but "
                                                  "freeze.policy is none");
    if (*c->cache.disk_dir) {
        struct stat st;
        if (stat(c->cache.disk_dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return pt_config_key_fail(c, err, "cache.disk_dir", "'%s' is not a directory", c->cache.disk_dir);
    }
    if (!vit && c->sample.length > 0 && !*c->sample.prompt)
        return pt_config_key_fail(c, err, "sample.prompt", "sampling needs a non-empty prompt");
    return 0;
}
