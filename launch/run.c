/*
 * run.c: building a run from its configuration: core binding and threads,
 * the backend, the training and test data, the sampler and learning-rate
 * schedule, the layout (layout.c) and this rank's initial weights. Freed in
 * the reverse order by pt_run_close, which is safe on a partly built run.
 *
 * What can only be checked here (the data's size and labels, memory, the
 * device, the weights) is reported against the key that asked for it, with
 * the file and line where it was set (pt_config_key_fail).
 */
#include "launch/run.h"

#include "formats/formats.h"
#include "launch/weights.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* run.device: cpu, cuda, or auto (a GPU when the driver reports one). */
static int open_backend(pt_run *r, pt_err *err)
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
static int load_idx(pt_run *r, pt_dataset *ds, const char *images_key, const char *images,
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
static int load_text(pt_run *r, pt_dataset *ds, double begin, double end, const char *split,
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

/* Memory this rank may give its copy of the data: the node's RAM divided
 * among the node's ranks (each holds the whole data set). */
static double memory_per_rank(const pt_run *r)
{
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    return phys > 0 ? phys / pt_comm_local_size(r->comm) : 0;
}

/* Synthetic data is generated in memory, so data.synthetic_examples is
 * limited by it: refused before generating, when it clearly cannot fit. */
static int check_synthetic_memory(pt_run *r, pt_err *err)
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
static int synthetic_failed(pt_run *r, int rc, pt_err *err)
{
    if (rc == PT_ENOMEM)
        return pt_config_key_fail(&r->cfg, err, "data.synthetic_examples",
                                  "%s; allowed: fewer examples than %lld", err->msg,
                                  r->cfg.data.synthetic_examples);
    return rc ? pt_config_key_prefix(&r->cfg, err, "data.synthetic_examples") : 0;
}

static int load_data(pt_run *r, pt_run_mode mode, pt_err *err)
{
    const pt_config *c = &r->cfg;
    int rc = 0;
    switch (c->data.kind) {
    case PT_DATA_FASHION_MNIST:
    case PT_DATA_IDX:
        if (mode == PT_RUN_TRAIN &&
            (rc = load_idx(r, &r->train, "data.train_images", c->data.train_images,
                           "data.train_labels", c->data.train_labels, err)))
            return rc;
        if ((rc = load_idx(r, &r->test, "data.test_images", c->data.test_images, "data.test_labels",
                           c->data.test_labels, err)))
            return rc;
        if (r->test.height != r->arch.height || r->test.width != r->arch.width ||
            r->test.height % r->arch.patch || r->test.width % r->arch.patch) {
            /* IDX files may hold any image size: the model follows the data */
            r->arch.height = r->test.height;
            r->arch.width = r->test.width;
            if (r->arch.height % r->arch.patch || r->arch.width % r->arch.patch)
                return pt_config_key_fail(c, err, "model.patch",
                                          "%d does not divide the %dx%d images of '%s' "
                                          "(data.test_images); allowed: a divisor of both sides",
                                          r->arch.patch, r->test.height, r->test.width,
                                          c->data.test_images);
        }
        if (mode == PT_RUN_TRAIN &&
            (r->train.height != r->test.height || r->train.width != r->test.width))
            return pt_config_key_fail(c, err, "data.test_images",
                                      "'%s' holds %dx%d images, but data.train_images '%s' holds "
                                      "%dx%d; both splits must have images of one size",
                                      c->data.test_images, r->test.height, r->test.width,
                                      c->data.train_images, r->train.height, r->train.width);
        return 0;
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
    }
    return pt_fail(err, PT_EINTERNAL, "unknown data kind %d", c->data.kind);
}

/* One stage with a fixed number of micro-batches leaves nothing to plan, so
 * nothing checked that the model fits: the segment's allocation failed with
 * "out of memory" and no key. Checked here with what the planner counts:
 * parameters with their gradients and AdamW moments, and the activations of
 * one micro-batch (a lower bound: a schedule may keep more in flight). */
static int check_model_memory(pt_run *r, pt_err *err)
{
    const pt_config *c = &r->cfg;
    if (c->pipeline.stages != 1 || c->pipeline.microbatches == PT_AUTO)
        return 0; /* planned: the planner checks memory (layout.c) */
    const pt_arch *a = &r->arch;
    const int64_t m = c->pipeline.microbatches, micro = (c->train.batch + m - 1) / m;
    double params = 0, saved = 0, scratch = 0;
    for (int u = 0; u < pt_arch_units(a); u++) {
        pt_unit_info info;
        pt_unit_info_get(a, u, &info);
        params += (double)info.numel;
        /* per example, scaled in double: a long sequence times a large batch
         * passes what size_t holds */
        saved += (double)pt_unit_saved_bytes(a, r->be, u, 1);
        double w = (double)pt_unit_scratch_bytes(a, r->be, u, 1);
        scratch = w > scratch ? w : scratch;
    }
    const double gib = (double)(1ull << 30), have = r->cfg.pipeline.memory_gib > 0
        ? r->cfg.pipeline.memory_gib * gib : memory_per_rank(r);
    const double weights = 4 * params * (double)pt_backend_real_size(r->be);
    const double example = saved + scratch, need = weights + (double)micro * example;
    if (have <= 0 || need <= have)
        return 0;
    char where[] = "more than the %.3g GiB one stage may use (pipeline.memory_gib, or the node's "
                   "RAM over its ranks)";
    char room[160];
    snprintf(room, sizeof room, where, have / gib);
    if (weights >= have || weights >= need - weights)
        return pt_config_key_fail(c, err, "model.dim",
                                  "%d wide with %d blocks (model.layers): %.0f parameters take "
                                  "%.3g GiB with their gradients and AdamW moments, %s; allowed: a "
                                  "smaller model, or more pipeline.stages over more ranks",
                                  a->dim, a->layers, params, weights / gib, room);
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
                              c->train.batch, (long long)micro, c->pipeline.microbatches,
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
    default:
        snprintf(out, n, "'%s' (data.train_images)", c->data.train_images);
    }
}

int pt_run_open(pt_run *r, pt_comm *comm, const pt_config *cfg, pt_run_mode mode, pt_err *err)
{
    memset(r, 0, sizeof *r);
    r->cfg = *cfg;
    r->comm = comm;
    r->rank = pt_comm_rank(comm);
    r->ranks = pt_comm_size(comm);
    pt_config_arch(cfg, &r->arch);
    int rc;
    if ((rc = pt_comm_bind(comm, &r->threads, r->binding, sizeof r->binding, err)))
        goto fail;
    if (cfg->run.threads > 0) {
        r->threads = cfg->run.threads;
        /* Allowed (a config may be written for a bigger machine), but the
         * threads take turns on the cores and every step waits for the
         * slowest: a run that crawls should say why. */
        const int cores = pt_comm_cores(comm) / pt_comm_local_size(comm);
        if (r->rank == 0 && r->threads > (cores > 1 ? cores : 1)) {
            char at[PT_PATH_MAX + 32];
            pt_config_where(cfg, "run.threads", at, sizeof at);
            fprintf(stderr,
                    "pipetrain: warning: %srun.threads: %d threads per rank, but each rank has %d "
                    "core%s here; extra threads take turns and slow every step (0 = the cores "
                    "divided among the ranks)\n",
                    at, r->threads, cores > 1 ? cores : 1, cores > 1 ? "s" : "");
        }
    }
    /* the backend first, so the model's memory is checked before data that
     * can take long to make; IDX files decide the image size, so there the
     * check waits for them */
    const int known = cfg->data.kind != PT_DATA_IDX; /* the image size */
    if ((rc = open_backend(r, err)) ||
        (known && ((rc = pt_arch_check(&r->arch, err)) || (rc = check_model_memory(r, err)))) ||
        (rc = load_data(r, mode, err)) || (rc = pt_arch_check(&r->arch, err)) ||
        (!known && (rc = check_model_memory(r, err))))
        goto fail;

    const pt_config *c = &r->cfg;
    r->aug.hflip = c->data.hflip;
    r->aug.crop_pad = c->data.crop_pad;
    /* text data with augmentation is refused by pt_config_validate, so
     * what is left is a crop larger than the images (IDX: any size) */
    if (mode == PT_RUN_TRAIN && (rc = pt_augment_check(&r->aug, &r->train, err))) {
        pt_config_key_prefix(c, err, c->data.crop_pad ? "data.crop_pad" : "data.hflip");
        goto fail;
    }
    if (mode == PT_RUN_TRAIN) {
        char split[PT_PATH_MAX + 96];
        describe_train(c, split, sizeof split);
        if (c->train.batch > r->train.count) {
            rc = pt_config_key_fail(c, err, "train.batch",
                                    "%lld, but the training split has only %lld examples (%s); "
                                    "allowed for this data: 1 to %lld",
                                    c->train.batch, (long long)r->train.count, split,
                                    (long long)r->train.count);
            goto fail;
        }
        if ((rc = pt_sampler_init(&r->sampler, r->train.count, c->train.batch,
                                  (uint64_t)c->run.seed, c->data.shuffle, err))) {
            pt_config_key_prefix(c, err, "train.batch");
            goto fail;
        }
        int64_t per_epoch = pt_sampler_steps(&r->sampler);
        r->total_steps = per_epoch * c->train.epochs;
        if (c->train.max_steps > 0 && c->train.max_steps < r->total_steps)
            r->total_steps = c->train.max_steps;
        r->lr = (pt_lr_schedule){(pt_lr_kind)c->train.schedule, c->train.lr, c->train.min_lr,
                                 c->train.warmup_steps, r->total_steps};
    }

    pt_freeze_config fc = {(pt_freeze_kind)c->freeze.policy, c->freeze.alpha, c->freeze.max_depth};
    if ((rc = pt_freeze_init(&r->freeze, &fc, r->arch.layers, err))) {
        pt_err_prefix(err, "freeze");
        goto fail;
    }
    if ((rc = pt_layout_open(r, err)))
        goto fail;
    if (r->active && (rc = pt_segment_init_params(r->seg, err)))
        goto fail;
    if (r->active && *c->model.init_from &&
        (rc = pt_weights_load(r->seg, c->model.init_from, err))) {
        pt_config_key_prefix(c, err, "model.init_from");
        goto fail;
    }

    const int T = pt_arch_tokens(&r->arch);
    const size_t examples = (size_t)r->micro * r->max_micro;
    r->images = malloc((examples * pt_arch_input_floats(&r->arch) + 1) * sizeof(float));
    r->tokens = malloc((examples * T + 1) * sizeof(int32_t));
    r->targets = malloc((examples * T + 1) * sizeof(int32_t));
    r->batches = calloc((size_t)r->micro, sizeof *r->batches);
    r->batch_ids = calloc(examples + 1, sizeof *r->batch_ids);
    r->batch_first = calloc((size_t)r->micro, sizeof *r->batch_first);
    r->reduce = calloc((size_t)pt_arch_units(&r->arch) + (size_t)r->arch.layers + 8, sizeof *r->reduce);
    if (!r->images || !r->tokens || !r->targets || !r->batches || !r->reduce || !r->batch_ids ||
        !r->batch_first) {
        rc = pt_fail(err, PT_ENOMEM, "out of memory for batch staging");
        goto fail;
    }

    if (mode == PT_RUN_TRAIN) {
        char metrics[PT_PATH_MAX + 32];
        int lead = r->rank == 0;
        if (lead && (rc = pt_mkdir_p(c->run.dir, 0755, err)))
            goto fail;
        snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", c->run.dir);
        if ((rc = pt_progress_open(&r->progress, lead && c->run.metrics ? metrics : NULL,
                                   c->train.log_every, !lead, err)))
            goto fail;
        if (c->run.rank_metrics && r->active) {
            /* rank 0 made the directory; the others wait for it */
            if ((rc = pt_agree(r->pipe, 0, err)))
                goto fail;
            snprintf(metrics, sizeof metrics, "%s/metrics-rank%d.jsonl", c->run.dir, r->rank);
            if (!(r->rank_metrics = fopen(metrics, "a"))) {
                rc = pt_fail(err, PT_ESYS, "cannot open '%s': %s", metrics, strerror(errno));
                goto fail;
            }
        }
    }
    return 0;
fail:
    pt_run_close(r);
    return rc;
}

void pt_run_close(pt_run *r)
{
    pt_progress_close(&r->progress);
    if (r->rank_metrics)
        fclose(r->rank_metrics);
    free(r->images);
    free(r->tokens);
    free(r->targets);
    free(r->batches);
    free(r->reduce);
    free(r->batch_ids);
    free(r->batch_first);
    pt_layout_close(r);
    pt_freeze_free(&r->freeze);
    if (r->be)
        pt_backend_close(r->be);
    pt_sampler_free(&r->sampler);
    pt_dataset_free(&r->train);
    pt_dataset_free(&r->test);
    memset(r, 0, sizeof *r);
}

int pt_run_stage(pt_run *r, const pt_dataset *ds, const int64_t *ids, int n, int micro, int augment)
{
    const int per_image = pt_arch_input_floats(&r->arch);
    const int rows = (int)pt_arch_rows_per_example(&r->arch), T = pt_arch_tokens(&r->arch);
    pt_dataset_gather(ds, ids, n, augment ? &r->aug : NULL, (uint64_t)r->cfg.run.seed, r->epoch,
                      r->images, r->tokens, r->targets);
    memcpy(r->batch_ids, ids, (size_t)n * sizeof *ids);
    int m = micro < n ? micro : n, first = 0;
    for (int k = 0; k < m; k++) {
        int count = n / m + (k < n % m);
        pt_batch *b = &r->batches[k];
        r->batch_first[k] = first;
        b->n = count;
        b->images = ds->kind == PT_DATA_IMAGES ? r->images + (size_t)first * per_image : NULL;
        b->tokens = ds->kind == PT_DATA_TEXT ? r->tokens + (size_t)first * T : NULL;
        b->targets = r->targets + (size_t)first * rows;
        first += count;
    }
    return m;
}

int pt_run_reduce(pt_run *r, double *v, int n, pt_err *err)
{
    return r->pipe ? pt_allreduce_sum(r->pipe, v, (size_t)n, PT_DT_F64, err) : 0;
}

int pt_agree(pt_group *g, int rc, pt_err *err)
{
    if (!g)
        return rc;
    int64_t worst = rc;
    int got = pt_allreduce_max_i64(g, &worst, err);
    if (got)
        return got;
    if (rc == 0 && worst != 0)
        return pt_fail(err, (int)worst, "another rank failed (its message says why)");
    return rc;
}
