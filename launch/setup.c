/*
 * setup.c: wiring a session from its configuration: core binding and
 * threads, the device, the training and test data, the engine's spec (every
 * training choice the config makes), the engine (train/), this rank's
 * initial weights and the metrics files. Freed in the reverse order by
 * pt_session_close, which is safe on a partly built session.
 */
#include "launch/session.h"

#include "formats/formats.h"
#include "launch/weights.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* run.device: cpu, cuda, or auto (a GPU when the driver reports one). */
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
        if ((rc = pt_backend_open(&r->be, gpu, threads, err)))
            return pt_err_prefix(err, "run.device is cuda");
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
    if (bf16)
        return pt_fail(err, PT_EINPUT, "run.precision: bf16 needs a GPU; this run uses the CPU (run.device)");
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

static int load_data(pt_session *r, pt_arch *arch, pt_run_mode mode, pt_err *err)
{
    const pt_config *c = &r->cfg;
    int rc = 0;
    switch (c->data.kind) {
    case PT_DATA_FASHION_MNIST:
    case PT_DATA_IDX:
        if (mode == PT_RUN_TRAIN &&
            (rc = pt_idx_load(&r->train, c->data.train_images, c->data.train_labels,
                              c->model.classes, c->data.mean, c->data.std, err)))
            return rc;
        rc = pt_idx_load(&r->test, c->data.test_images, c->data.test_labels, c->model.classes,
                         c->data.mean, c->data.std, err);
        if (rc == 0 && (r->test.height != arch->height || r->test.width != arch->width ||
                        r->test.height % arch->patch || r->test.width % arch->patch)) {
            /* IDX files may hold any image size: the model follows the data */
            arch->height = r->test.height;
            arch->width = r->test.width;
            if (arch->height % arch->patch || arch->width % arch->patch)
                return pt_fail(err, PT_EINPUT,
                               "model.patch (%d) does not divide the %dx%d images of '%s'",
                               arch->patch, r->test.height, r->test.width, c->data.test_images);
        }
        if (rc == 0 && mode == PT_RUN_TRAIN &&
            (r->train.height != r->test.height || r->train.width != r->test.width))
            return pt_fail(err, PT_EINPUT, "training images are %dx%d but test images %dx%d",
                           r->train.height, r->train.width, r->test.height, r->test.width);
        return rc;
    case PT_DATA_TEXT_FILE:
    case PT_DATA_KJV: {
        double cut = 1.0 - c->data.test_fraction;
        if (mode == PT_RUN_TRAIN &&
            (rc = pt_text_load(&r->train, c->data.text, c->model.context, 0.0, cut, err)))
            return rc;
        return pt_text_load(&r->test, c->data.text, c->model.context, cut, 1.0, err);
    }
    case PT_DATA_SYNTH_IMAGES: {
        /* one draw split in two, so both splits share the class prototypes */
        int64_t n = c->data.synthetic_examples, n_test = n / 4 > 0 ? n / 4 : 1;
        if ((rc = pt_synthetic_images(&r->train, n + n_test, 1, c->data.image_size,
                                      c->data.image_size, c->model.classes, (uint64_t)c->run.seed,
                                      err)))
            return rc;
        return split_tail(&r->train, n_test, &r->test, err);
    }
    case PT_DATA_SYNTH_TEXT: {
        int64_t bytes = c->data.synthetic_examples * c->model.context + 1;
        if ((rc = pt_synthetic_text(&r->train, bytes, c->model.context, (uint64_t)c->run.seed, err)))
            return rc;
        return pt_synthetic_text(&r->test, bytes / 4 + 1, c->model.context,
                                 (uint64_t)c->run.seed + 1, err);
    }
    }
    return pt_fail(err, PT_EINTERNAL, "unknown data kind %d", c->data.kind);
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

/* RUN_DIR/NAME-rankR.jsonl, opened for appending. */
static int open_rank_file(const pt_session *s, const char *name, FILE **out, pt_err *err)
{
    char path[PT_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s-rank%d.jsonl", s->cfg.run.dir, name, s->rank);
    if (!(*out = fopen(path, "a")))
        return pt_fail(err, PT_ESYS, "cannot open '%s': %s", path, strerror(errno));
    return 0;
}

int pt_session_open(pt_session *s, pt_comm *comm, const pt_config *cfg, pt_run_mode mode, pt_err *err)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->comm = comm;
    s->rank = pt_comm_rank(comm);
    const pt_config *c = &s->cfg;
    pt_arch arch;
    pt_config_arch(cfg, &arch);
    int rc;
    if ((rc = pt_comm_bind(comm, &s->threads, s->binding, sizeof s->binding, err)))
        goto fail;
    if (c->run.threads > 0)
        s->threads = c->run.threads;
    if ((rc = load_data(s, &arch, mode, err)) || (rc = pt_arch_check(&arch, err)) ||
        (rc = open_backend(s, err)))
        goto fail;
    if (mode == PT_RUN_TRAIN) {
        pt_augment aug = {c->data.hflip, c->data.crop_pad};
        if ((rc = pt_augment_check(&aug, &s->train, err))) {
            pt_err_prefix(err, "data.hflip / data.crop_pad");
            goto fail;
        }
        if (c->train.batch > s->train.count) {
            rc = pt_fail(err, PT_EINPUT, "train.batch is %lld but the training data holds %lld "
                         "examples", c->train.batch, (long long)s->train.count);
            goto fail;
        }
    }
    pt_train_spec spec;
    make_spec(s, &arch, &spec);
    if ((rc = pt_run_open(&s->run, comm, &spec, mode, err)))
        goto fail;
    /* only active ranks load weights: the others learn of a failure here */
    rc = s->run.active && *c->model.init_from ? pt_weights_load(s->run.seg, c->model.init_from, err) : 0;
    if ((rc = pt_run_agree(&s->run, rc, err)))
        goto fail;
    if (mode == PT_RUN_TRAIN) {
        /* rank 0 makes run.dir once every input has proved good; then every
         * rank opens its own files in it */
        rc = s->rank == 0 ? pt_mkdir_p(c->run.dir, 0755, err) : 0;
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
    }
    return 0;
fail:
    pt_session_close(s);
    return rc;
}

void pt_session_close(pt_session *s)
{
    pt_progress_close(&s->progress);
    if (s->rank_metrics)
        fclose(s->rank_metrics);
    if (s->sample_log)
        fclose(s->sample_log);
    pt_run_close(&s->run);
    if (s->be)
        pt_backend_close(s->be);
    pt_dataset_free(&s->train);
    pt_dataset_free(&s->test);
    memset(s, 0, sizeof *s);
}
