/*
 * memory.c: what a session's run needs of this rank's memory, checked
 * before anything large is made: the node's RAM over its ranks, the data
 * set and the cache's share of it, the step's inputs staged in host memory,
 * and for a single stage with fixed micro-batches (whose cut nothing
 * plans) the model's stage by the planner's own count. Each refusal names
 * the key to change and a value that fits.
 */
#include "launch/session.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Memory this rank may give its copy of the data: the node's RAM divided
 * among the node's ranks (each holds the whole data set). */
double pt_session_memory_per_rank(const pt_session *r)
{
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    return phys > 0 ? phys / pt_comm_local_size(r->comm) : 0;
}

/* A step stages its replica's share of train.batch at once in host memory
 * (inputs, targets and records: train/layout.c), whatever the layout: a
 * batch whose staging cannot fit a rank's RAM even spread over every rank
 * is refused naming train.batch (plan and eval too, which size it alike)
 * rather than failing at the allocation with no key. */
int pt_session_check_staging(pt_session *s, pt_err *err)
{
    const pt_config *c = &s->cfg;
    const int ranks = pt_comm_size(s->comm);
    const int replicas = c->pipeline.replicas == PT_AUTO || c->pipeline.replicas > ranks
                             ? ranks : c->pipeline.replicas;
    const double share = ceil((double)c->train.batch / (replicas > 0 ? replicas : 1));
    const double per = pt_run_staging_bytes(&s->arch);
    /* host memory, whatever pipeline.memory_gib says of a device's */
    const double gib = (double)(1ull << 30), have = pt_session_memory_per_rank(s);
    if (have <= 0 || share * per <= have)
        return 0;
    return pt_config_key_fail(c, err, "train.batch",
                              "%lld examples, %.0f per replica, whose inputs and targets a step "
                              "holds at once in host memory take %.3g GiB, more than the %.3g "
                              "GiB per rank here (the node's RAM over its ranks); allowed: a "
                              "batch of at most %.0f per replica",
                              c->train.batch, share, share * per / gib, have / gib,
                              floor(have / per));
}

/* This rank's share of the node's activation cache where a run stores
 * entries in it (the cache on and a freeze policy): the segment's pages
 * are the node's RAM too, up to cache.memory_gib or an entry for every
 * example, whichever is less. */
static double cache_share(const pt_session *r)
{
    const pt_config *c = &r->cfg;
    if (!r->cache_on || c->freeze.policy == PT_FREEZE_NONE)
        return 0;
    const double row = (double)pt_arch_tokens(&r->arch) * r->arch.dim *
                       (double)(r->be ? pt_backend_act_size(r->be) : sizeof(float));
    const double entries = row * (double)(r->train.count + r->test.count);
    const double most = c->cache.memory_gib * (double)(1ull << 30);
    const int ranks = pt_comm_local_size(r->comm);
    return (entries < most ? entries : most) / (ranks > 0 ? ranks : 1);
}

/* The data set this rank holds (both splits, once loaded), and its share
 * of the cache. */
double pt_session_data_bytes(const pt_session *r)
{
    return pt_dataset_bytes(&r->train) + pt_dataset_bytes(&r->test) + cache_share(r);
}

/* What one stage of r's model holds for a replica's share of `share`
 * examples in m micro-batches, by the planner's count; q: the rest of the
 * request (q->batch: the batch counted). The units' sizes are their exact
 * sizes at that micro-batch, except with pipeline.replicas auto on several
 * ranks: there the planner picks D, from sizes interpolated between the
 * two micro-batch sizes a run of q->batch times the units at, and this
 * counts the same, so that what a refusal suggests fits there too. */
static int stage_of(const pt_session *r, const pt_arch *a, const pt_plan_request *q, int D,
                    int64_t share, int64_t m, pt_stage_bytes *sb, pt_err *err)
{
    const pt_config *c = &r->cfg;
    const int64_t micro = (share + m - 1) / m;
    int small = (int)micro, large = (int)micro;
    if (pt_comm_size(r->comm) > 1 && c->pipeline.replicas == PT_AUTO)
        pt_cost_timed_sizes(a, r->be, q->batch, pt_comm_size(r->comm),
                            c->pipeline.memory_gib * (double)(1ull << 30), &small, &large);
    pt_cost_model cm;
    int rc = pt_cost_sizes(&cm, a, r->be, small, large, err);
    if (rc)
        return rc;
    const int bounds[2] = {0, pt_arch_units(a)};
    pt_plan_stage_bytes(&cm, q, 1, D, (int)m, (int)micro, bounds, 0, sb);
    pt_cost_model_free(&cm);
    return 0;
}

static int one_stage(const pt_session *r, const pt_plan_request *q, int D, int64_t share, int64_t m,
                     pt_stage_bytes *sb, pt_err *err)
{
    return stage_of(r, &r->arch, q, D, share, m, sb, err);
}

static double stage_total(const pt_stage_bytes *sb)
{
    return sb->weights + sb->micro_batches + sb->step + sb->linear_work;
}

/* Whether a replica's share of `share` examples in m micro-batches of arch
 * a (r's model at another size) fits `have` on one stage, by the same
 * count, its staged inputs sized for a. */
static int share_fits(const pt_session *r, const pt_arch *a, const pt_plan_request *q, int D,
                      int64_t share, int64_t m, double have, int *fits, pt_err *err)
{
    pt_plan_request qa = *q;
    if (qa.staging_bytes_per_example > 0)
        qa.staging_bytes_per_example = pt_run_staging_bytes(a);
    pt_stage_bytes sb;
    int rc = stage_of(r, a, &qa, D, share, m, &sb, err);
    if (rc == 0)
        *fits = stage_total(&sb) <= have;
    return rc;
}

/* Whether one example of arch a alone fits `have` on one stage. */
static int example_fits(const pt_session *r, const pt_arch *a, const pt_plan_request *q, int D,
                        double have, int *fits, pt_err *err)
{
    return share_fits(r, a, q, D, 1, 1, have, fits, err);
}

/* One of the model's sizes the config sets, at v: the width (v heads'
 * widths: model.dim is a multiple of model.heads; the MLP's with it where
 * the config leaves model.mlp_hidden to it), the blocks, GPT's context
 * (its position table's rows), BERT's position table. */
typedef enum { SIZE_DIM, SIZE_LAYERS, SIZE_CONTEXT, SIZE_POSITIONS } model_size;

static void resize(pt_arch *a, const pt_config *c, model_size which, int v)
{
    switch (which) {
    case SIZE_DIM:
        a->dim = v * a->heads;
        if (!c->model.mlp_hidden)
            a->mlp_hidden = 4 * a->dim;
        break;
    case SIZE_LAYERS: a->layers = v; break;
    case SIZE_CONTEXT: a->context = v; break;
    case SIZE_POSITIONS: a->positions = v; break;
    }
}

/* The largest v in [lo, hi] at which r's model, resized, holds the
 * configured step (a replica's share in m micro-batches) within `have` on
 * one stage, by the same count; 0 when not even lo does. Each size only
 * adds memory as it grows, so a bisection finds it. */
static int largest_size_that_fits(const pt_session *r, pt_run_mode mode, const pt_plan_request *q,
                                  int D, int64_t share, int64_t m, double have, model_size which,
                                  int lo, int hi, int *found, pt_err *err)
{
    int rc, fits;
    *found = 0;
    if (lo > hi)
        return 0;
    int yes = lo - 1, no = hi + 1, v = lo; /* lo first: none fits unless it does */
    while (no - yes > 1) {
        pt_arch a = r->arch;
        resize(&a, &r->cfg, which, v);
        /* other blocks: an evaluation's all frozen, or another first
         * decision (freeze.start 0) */
        pt_plan_request qv = *q;
        if (which == SIZE_LAYERS)
            qv.frozen_units = pt_freeze_units(
                mode == PT_RUN_EVAL ? v : pt_session_opening_depth(&r->cfg, v));
        if ((rc = share_fits(r, &a, &qv, D, share, m, have, &fits, err)))
            return rc;
        if (!fits && v == lo)
            return 0;
        *(fits ? &yes : &no) = v;
        v = yes + (no - yes) / 2;
    }
    *found = yes;
    return 0;
}

/* The shortest model.context c allows a's kind: BERT's [CLS] and [SEP]
 * and a token; GPT's token and the next, or where it samples
 * (sample.length) its prompt and the byte it draws. */
static int least_context(const pt_config *c, const pt_arch *a)
{
    if (a->kind == PT_MODEL_BERT)
        return 3;
    const size_t prompt = c->sample.length > 0 ? strlen(c->sample.prompt) + 1 : 0;
    return prompt > 2 ? (int)prompt : 2;
}

/* What a refusal blaming the weights allows: the widest model.dim, the most
 * model.layers and (GPT, BERT) the longest model.context, each with the
 * others as configured, whose model holds the configured step (or, where
 * none does, one example), where the
 * config's sizes are its to change (not a checkpoint's or
 * model.init_from's); no fewer blocks than freeze.max_depth and
 * cache.min_depth name, each counted with the frozen prefix its first
 * decision makes (freeze.start 0). */
static int smaller_model(const pt_session *r, pt_run_mode mode, const pt_plan_request *q, int D,
                         int64_t share, int64_t m, double have, char *out, size_t n, pt_err *err)
{
    const pt_config *c = &r->cfg;
    const pt_arch *a = &r->arch;
    const char *stages = "more pipeline.stages over more ranks";
    if (r->sizes_given) {
        snprintf(out, n, "%s (the model's sizes are %s)", stages,
                 r->sizes_given == PT_SIZES_OF_INIT ? "model.init_from's" : "the checkpoint's");
        return 0;
    }
    snprintf(out, n, "a smaller model, or %s", stages);
    int dim = 0, layers = 0, context = 0, rc;
    const int text = a->kind != PT_MODEL_VIT, shortest = least_context(c, a);
    int fewest = 1; /* (what freeze.max_depth and cache.min_depth allow) */
    if (c->freeze.policy != 0 && c->freeze.max_depth > fewest)
        fewest = c->freeze.max_depth;
    if (c->cache.min_depth > fewest)
        fewest = c->cache.min_depth;
    /* the configured step; where no size holds it, one example (whose
     * refusal then names the micro-batches or batch that fit) */
    int alone = 0;
    for (; alone < 2; alone++) {
        const int64_t s = alone ? 1 : share, k = alone ? 1 : m;
        if ((rc = largest_size_that_fits(r, mode, q, D, s, k, have, SIZE_DIM, 1,
                                         a->dim / a->heads - 1, &dim, err)) ||
            (rc = largest_size_that_fits(r, mode, q, D, s, k, have, SIZE_LAYERS, fewest,
                                         a->layers - 1, &layers, err)) ||
            (text && (rc = largest_size_that_fits(r, mode, q, D, s, k, have, SIZE_CONTEXT,
                                                  shortest, a->context - 1, &context, err))))
            return rc;
        if (dim || layers || context)
            break;
    }
    if (!dim && !layers && !context)
        return 0;
    /* "or narrower" where a narrower one is allowed at all */
    char part[3][64];
    int parts = 0;
    if (dim)
        snprintf(part[parts++], sizeof part[0],
                 dim > 1 ? "model.dim = %d or narrower" : "model.dim = %d", dim * a->heads);
    if (layers)
        snprintf(part[parts++], sizeof part[0],
                 layers > fewest ? "model.layers = %d or fewer" : "model.layers = %d", layers);
    if (context)
        snprintf(part[parts++], sizeof part[0],
                 context > shortest ? "model.context = %d or shorter" : "model.context = %d",
                 context);
    const char *then = " for one example: then more micro-batches or a smaller batch)";
    snprintf(out, n, "%s%s%s%s%s%s%s, or %s", part[0], parts > 1 ? ", or " : "",
             parts > 1 ? part[1] : "", parts > 2 ? ", or " : "", parts > 2 ? part[2] : "",
             !alone ? "" : parts > 1 ? " (each" : " (", !alone ? "" : then + (parts > 1 ? 0 : 1),
             stages);
    return 0;
}

/* The length whose one example fits, where r's does not: the longest
 * context (gpt, bert; memory grows with it), or the smallest patch that
 * divides the images (vit); 0 when none does. */
static int length_that_fits(const pt_session *r, pt_run_mode mode, const pt_plan_request *q,
                            int D, double have, int *found, pt_err *err)
{
    if (r->arch.kind != PT_MODEL_VIT) /* one example, from the shortest context allowed */
        return largest_size_that_fits(r, mode, q, D, 1, 1, have, SIZE_CONTEXT,
                                      least_context(&r->cfg, &r->arch), r->arch.context - 1, found,
                                      err);
    pt_arch a = r->arch;
    int rc, fits;
    *found = 0;
    for (int p = r->arch.patch + 1; p <= a.height && p <= a.width; p++) {
        if (a.height % p || a.width % p)
            continue;
        a.patch = p;
        if ((rc = example_fits(r, &a, q, D, have, &fits, err)))
            return rc;
        if (fits) {
            *found = p;
            return 0;
        }
    }
    return 0;
}

/* One stage with a fixed number of micro-batches leaves no cut to plan (with
 * pipeline.replicas auto on several ranks the planner only picks D), and
 * nothing checked that the model fits: the segment's allocation failed
 * with "out of memory" and no key. Checked here by the planner's own count
 * of a stage (pt_plan_stage_bytes): parameters with the training units'
 * gradients and AdamW moments, and the activations of the micro-batches
 * the schedule keeps in flight (gpipe: all of them; 1F1B on one stage, or
 * recompute: one), the frozen units' work area and prefix slot, the
 * largest scratch, the buffers and the staged share of the step, and the
 * linear layers' working memory. Without pipeline.memory_gib the limit is
 * a GPU's memory as its backend counts it, else the node's RAM over its
 * ranks less the data set each rank holds (0 before it is loaded). What a
 * refusal suggests is counted the same way, and fits. */
int pt_session_check_model_memory(pt_session *r, pt_run_mode mode, pt_err *err)
{
    const pt_config *c = &r->cfg;
    /* one process runs one stage and one replica, with one micro-batch
     * unless the config says otherwise; with several ranks a fixed single
     * stage with fixed micro-batches is checked here (the planner, where
     * pipeline.replicas is auto, only picks D) */
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
    /* with D >= 2 replicas the gradient all-reduce receives the others'
     * copies of the chunk this rank sums: (D - 1) / D of the gradients, in
     * host memory (dp/reduce.c; a GPU's NCCL or host copies are not the
     * device's). With D auto this counts D = the ranks (the smallest share
     * each): the planner counts the same for every D it tries
     * (balance/plan.c), so a suggestion made here fits that layout there */
    const int reduce = replicas > 1 && pt_backend_is_host(r->be);
    const int64_t micro = (share + m - 1) / m;
    /* a resumed checkpoint's frozen units, or those of a fresh run's opening
     * decision, keep no gradients or moments and save nothing for a
     * backward; an evaluation is laid out with every block frozen (its
     * resume depth: setup), the head not (train/layout.c) */
    const int depth = r->resume_depth > r->opening_depth ? r->resume_depth : r->opening_depth;
    const int frozen = pt_freeze_units(depth);
    /* what the parameters are counted with: for a frozen prefix only that
     * of the units that train (an evaluation's segment keeps the head's) */
    char state[160] = "";
    const int units = pt_arch_units(a), training = units - frozen;
    if (training > 0)
        snprintf(state, sizeof state, " with %s gradients%s AdamW moments%s",
                 mode == PT_RUN_EVAL ? "the head's"
                 : frozen > 0        ? (training == 1 ? "the one training unit's" : "the training units'")
                                     : "their",
                 reduce ? "," : " and", reduce ? " and the gradient all-reduce's buffers" : "");
    double params = 0;
    for (int u = 0; u < units; u++) {
        pt_unit_info info;
        pt_unit_info_get(a, u, &info);
        params += (double)info.numel;
    }
    const int D = (int)replicas;
    const pt_plan_request q = {
        .ranks = ranks, .stages = 1, .replicas = D, .micro = (int)m,
        .schedule = c->pipeline.schedule == PT_PIPE_GPIPE ? PT_PLAN_GPIPE : PT_PLAN_1F1B,
        .recompute = c->pipeline.recompute, .batch = c->train.batch, .frozen_units = frozen,
        .staging_bytes_per_example = pt_backend_is_host(r->be) ? pt_run_staging_bytes(a) : 0,
        .reduce_buffers = reduce,
    };
    pt_stage_bytes sb;
    int rc = one_stage(r, &q, D, share, m, &sb, err);
    if (rc)
        return rc;
    /* (at least a byte of RAM left: a data set that takes it all leaves no room) */
    const double ram = pt_session_memory_per_rank(r);
    pt_device_info dev;
    const int gpu = pt_backend_device_info(r->be, &dev);
    const double gib = (double)(1ull << 30), have = r->cfg.pipeline.memory_gib > 0
        ? r->cfg.pipeline.memory_gib * gib : gpu ? dev.memory : ram > 0 ? fmax(ram - pt_session_data_bytes(r), 1) : 0;
    const double weights = sb.weights, work = sb.linear_work, need = stage_total(&sb);
    if (have <= 0 || need <= have)
        return 0;
    char room[256];
    if (gpu)
        snprintf(room, sizeof room,
                 "more than the %.3g GiB one stage may use (pipeline.memory_gib, or the GPU's "
                 "memory less the CUDA backend's reserve)", have / gib);
    else
        snprintf(room, sizeof room,
                 "more than the %.3g GiB one stage may use (pipeline.memory_gib, or the node's RAM "
                 "over its ranks less the data set a rank holds%s)",
                 have / gib,
                 r->cfg.pipeline.memory_gib <= 0 && cache_share(r) > 0
                     ? " and its share of the activation cache, cache.memory_gib"
                     : "");
    /* weights too big, and mostly one table: its key, not the width (the
     * word table of bert, the position table of bert or gpt, the classifier
     * of vit or bert; gpt's 256 byte rows never are one) */
    const double words = a->kind == PT_MODEL_BERT ? (double)a->vocab * a->dim : 0;
    const double places = a->kind == PT_MODEL_BERT  ? (double)a->positions * a->dim
                          : a->kind == PT_MODEL_GPT ? (double)a->context * a->dim
                                                    : 0;
    const double rows = a->kind != PT_MODEL_GPT ? (double)a->classes * a->dim : 0;
    const double table = fmax(words, fmax(places, rows));
    if (weights >= have && table > params / 2) {
        const char *key = table == words    ? "model.vocab"
                          : table == places ? (a->kind == PT_MODEL_BERT ? "model.positions"
                                                                        : "model.context")
                                            : "model.classes";
        const int count = table == words ? a->vocab : table == places
                              ? (a->kind == PT_MODEL_BERT ? a->positions : a->context) : a->classes;
        const char *what = table == words ? "tokens" : table == places ? "positions" : "classes";
        /* BERT's most positions that fit (its table holds at least the
         * context); GPT's context is among the smaller model's sizes */
        char allowed[768], smaller[512];
        const int bert = a->kind == PT_MODEL_BERT;
        int most = 0;
        if ((rc = smaller_model(r, mode, &q, D, share, m, have, smaller, sizeof smaller, err)) ||
            (bert && table == places && !r->sizes_given &&
             (rc = largest_size_that_fits(r, mode, &q, D, share, m, have, SIZE_POSITIONS,
                                          a->context, count - 1, &most, err))))
            return rc;
        if (r->sizes_given || (table == places && !bert))
            snprintf(allowed, sizeof allowed, "%s", smaller);
        else if (most > 0)
            snprintf(allowed, sizeof allowed, "model.positions = %d or fewer (no fewer than "
                     "model.context), or %s", most, smaller);
        else
            snprintf(allowed, sizeof allowed, "%s, or %s",
                     table == words    ? "a vocabulary of fewer tokens (data.vocab, and "
                                         "model.vocab with it)"
                     : table == places ? (a->positions > a->context
                                              ? "fewer positions"
                                              : "fewer positions with a shorter model.context")
                                       : "fewer classes",
                     smaller);
        return pt_config_key_fail(c, err, key,
                                  "%d %s, %d wide (model.dim): their table alone holds %.0f of "
                                  "the model's %.0f parameters, which take %.3g GiB%s, %s; "
                                  "allowed: %s",
                                  count, what, a->dim, table, params, weights / gib, state, room,
                                  allowed);
    }
    char smaller[512];
    if (weights >= have) {
        if ((rc = smaller_model(r, mode, &q, D, share, m, have, smaller, sizeof smaller, err)))
            return rc;
        return pt_config_key_fail(c, err, "model.dim",
                                  "%d wide with %d block%s (model.layers): %.0f parameters take "
                                  "%.3g GiB%s, %s; allowed: %s",
                                  a->dim, a->layers, a->layers == 1 ? "" : "s", params,
                                  weights / gib, state, room, smaller);
    }
    /* one example alone past what the weights leave: no batch fits, the
     * example is too long */
    pt_stage_bytes one;
    if ((rc = one_stage(r, &q, D, 1, 1, &one, err)))
        return rc;
    char beside[256];
    snprintf(beside, sizeof beside, "beside the %.3g GiB of the parameters%s and the linear "
             "layers' working memory, together", (weights + work) / gib, state);
    const double example = one.micro_batches + one.step;
    if (stage_total(&one) > have) {
        if (weights >= example) { /* the weights are most of it */
            if ((rc = smaller_model(r, mode, &q, D, share, m, have, smaller, sizeof smaller, err)))
                return rc;
            return pt_config_key_fail(c, err, "model.dim",
                                      "%d wide with %d block%s (model.layers): %.0f parameters "
                                      "take %.3g GiB%s, and one example's activations %.3g GiB "
                                      "more: together %s; allowed: %s",
                                      a->dim, a->layers, a->layers == 1 ? "" : "s", params,
                                      weights / gib, state, example / gib, room, smaller);
        }
        const int tokens = pt_arch_tokens(a);
        /* GPT's context and ViT's patch are a checkpoint's sizes (its
         * position table, its patch embedding); BERT's context is not */
        const int fixed = r->sizes_given && a->kind != PT_MODEL_BERT;
        int length = 0;
        if (fixed && (rc = smaller_model(r, mode, &q, D, share, m, have, smaller, sizeof smaller,
                                         err)))
            return rc;
        if (!fixed && (rc = length_that_fits(r, mode, &q, D, have, &length, err)))
            return rc;
        char allowed[600];
        if (a->kind != PT_MODEL_VIT) { /* tokens of text: GPT's bytes, BERT's word pieces */
            if (fixed)
                snprintf(allowed, sizeof allowed, "%s", smaller);
            else if (length > 0)
                snprintf(allowed, sizeof allowed, "a context of at most %d", length);
            else
                snprintf(allowed, sizeof allowed, "a shorter context");
            return pt_config_key_fail(c, err, "model.context",
                                      "%d: one example's activations take %.3g GiB %s %s; "
                                      "allowed: %s",
                                      a->context, example / gib, beside, room, allowed);
        }
        if (fixed)
            snprintf(allowed, sizeof allowed, "%s", smaller);
        else if (length > 0)
            snprintf(allowed, sizeof allowed, "a patch of %d (%d tokens), or smaller images", length,
                     1 + (a->height / length) * (a->width / length));
        else
            snprintf(allowed, sizeof allowed, "a larger patch, or smaller images");
        return pt_config_key_fail(c, err, "model.patch",
                                  "%d cuts %dx%d images into %d tokens, and one example's "
                                  "activations take %.3g GiB %s %s; allowed: %s",
                                  a->patch, a->height, a->width, tokens, example / gib, beside,
                                  room, allowed);
    }
    /* the most micro-batches a layout allows: the smallest replica's share
     * (train.batch over D, rounded down; the larger shares are one more) */
    const int64_t most = c->train.batch / replicas > 0 ? c->train.batch / replicas : 1;
    const char *kept = " (a resume keeps the checkpoint's train.batch)";
    /* as many micro-batches as that fit: the fewest that do, from the
     * config's up. Whether a count fits is not monotone in it (the staged
     * step holds M ceil(share / M) examples, and GPipe has M micro-batches
     * in flight), so no bisection: one count per micro-batch size is tried,
     * the first of each (more micro-batches of one size only hold more),
     * up to `most`, which fits. A count M sets the micro-batch size,
     * ceil(share / M), and the message names the count found and that
     * size: a layout that was counted. Not "or more", for the same
     * rounding. */
    pt_stage_bytes ones;
    if ((rc = one_stage(r, &q, D, share, most, &ones, err)))
        return rc;
    if (most > m && stage_total(&ones) <= have) {
        int64_t hi = most;
        for (int64_t k = m + 1; k < most;) {
            const int64_t size = (share + k - 1) / k;
            pt_stage_bytes t;
            if ((rc = one_stage(r, &q, D, share, k, &t, err)))
                return rc;
            if (stage_total(&t) <= have) {
                hi = k;
                break;
            }
            k = size > 1 ? (share + size - 2) / (size - 1) : most;
        }
        const int64_t size = (share + hi - 1) / hi;
        return pt_config_key_fail(c, err, "train.batch",
                                  "%lld in micro-batches of %lld example%s (pipeline.microbatches "
                                  "= %lld), whose activations take %.3g GiB %s %s; allowed: "
                                  "pipeline.microbatches = %lld (micro-batches of %lld "
                                  "example%s)%s",
                                  c->train.batch, (long long)micro, micro == 1 ? "" : "s",
                                  (long long)m, (need - weights - work) / gib, beside, room,
                                  (long long)hi, (long long)size, size == 1 ? "" : "s",
                                  r->batch_kept ? kept : ", or a smaller batch");
    }
    /* not even those: the largest share whose micro-batches of one do (a
     * batch of D times it splits evenly) */
    if ((rc = one_stage(r, &q, D, share, share, &ones, err)))
        return rc;
    const int uneven = stage_total(&ones) <= have; /* only the smaller share's count stops it */
    int64_t lo = 1, hi = uneven ? share + 1 : share;
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        pt_plan_request qb = q; /* the batch it names: D times the share */
        qb.batch = mid * D;
        pt_stage_bytes t;
        if ((rc = one_stage(r, &qb, D, mid, mid, &t, err)))
            return rc;
        *(stage_total(&t) <= have ? &lo : &hi) = mid;
    }
    if (uneven)
        return pt_config_key_fail(c, err, "train.batch",
                                  "%lld examples over %lld replicas, shares of %lld and %lld: the "
                                  "larger fits only in %lld micro-batches of one, more than the "
                                  "smaller holds, and %lld (micro-batches of %lld) are %s %s; "
                                  "allowed: %sat most %lld example%s per replica, in micro-batches "
                                  "of one (pipeline.microbatches = %lld)%s",
                                  c->train.batch, (long long)replicas, (long long)share,
                                  (long long)most, (long long)share, (long long)most,
                                  (long long)((share + most - 1) / most), beside, room,
                                  r->batch_kept ? "more memory, or more replicas for " : "",
                                  (long long)lo, lo == 1 ? "" : "s", (long long)lo,
                                  r->batch_kept ? kept : "");
    return pt_config_key_fail(c, err, "train.batch",
                              "%lld example%s, %lld per replica: even in micro-batches of one "
                              "example, a step's activations, staged inputs and buffers take "
                              "%.3g GiB %s %s; allowed: %sat most %lld example%s per replica, in "
                              "micro-batches of one (pipeline.microbatches = %lld)%s",
                              c->train.batch, c->train.batch == 1 ? "" : "s", (long long)share,
                              (stage_total(&ones) - weights - work) / gib, beside, room,
                              r->batch_kept ? "more memory, or more replicas for " : "",
                              (long long)lo, lo == 1 ? "" : "s", (long long)lo,
                              r->batch_kept ? kept : "");
}

