/*
 * setup.c: wiring a session from its configuration: core binding and
 * threads, the device, the checks of memory (memory.c), the training and
 * test data (data.c), the engine's spec (every training choice the config
 * makes), the engine (train/), this rank's initial weights (interop/) and
 * the metrics files. Freed in the
 * reverse order by pt_session_close, which is safe on a partly built
 * session.
 */
#include "launch/session.h"
#include "signals/signals.h"
#include "checkpoint/checkpoint.h"

#include "formats/formats.h"
#include "outputs/outputs.h"
#include "interop/interop.h"
#include "hf/hf.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
        if ((rc = pt_backend_open(&r->be, gpu, threads, err))) {
            char at[PT_PATH_MAX + 32];
            pt_config_where(&r->cfg, "run.device", at, sizeof at);
            /* no GPU to use here (none on the machine or visible to the
             * rank, or a build without CUDA): a setting to change, exit 2
             * as bf16 without a GPU; a GPU here that failed stays exit 1 */
            if (err->code == PT_ENODEV)
                err->code = PT_EINPUT;
            return pt_err_prefix(err, "%srun.device is cuda", at);
        }
        return 0;
    case PT_DEVICE_AUTO: {
        pt_err none = {0};
        if (pt_backend_open(&r->be, gpu, threads, &none) == 0)
            return 0;
        /* no usable GPU: the CPU; with a word when there is a GPU that
         * cannot be used (too old, its libraries missing, out of memory) */
        if (r->rank == 0 && none.code != PT_ENODEV)
            fprintf(stderr, "pipetrain: note: run.device is auto, and the GPU cannot be used "
                    "(%s): training on the CPU\n", none.msg);
        break;
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

/* Collective: every rank trains on the same kind of device. run.device auto
 * resolves on each rank by itself, so nodes with and without a GPU would
 * give a job of both: each rank would plan its layout from its own
 * device's memory and staging (and the layouts could differ), and a
 * replica on the CPU would hold every GPU replica back. Refused naming the
 * key, a rank of each kind and its host; the same message on every rank. */
static int same_backend(pt_session *s, pt_err *err)
{
    struct {
        char backend[24];
        char host[72];
    } mine, *all;
    memset(&mine, 0, sizeof mine);
    const int size = pt_comm_size(s->comm);
    if (size < 2)
        return 0;
    snprintf(mine.backend, sizeof mine.backend, "%s", pt_backend_name(s->be));
    snprintf(mine.host, sizeof mine.host, "%s", pt_comm_host(s->comm));
    if (!(all = calloc((size_t)size, sizeof *all)))
        return pt_fail(err, PT_ENOMEM, "out of memory for the ranks' devices");
    int rc = pt_allgather(pt_comm_world(s->comm), &mine, all, sizeof mine, err);
    int other = -1;
    for (int i = 1; rc == 0 && i < size && other < 0; i++)
        if (strcmp(all[i].backend, all[0].backend) != 0)
            other = i;
    if (other >= 0)
        rc = pt_config_key_fail(&s->cfg, err, "run.device",
                                "auto, and the ranks found different devices: rank 0 (host %s) "
                                "the %s backend, rank %d (host %s) the %s backend; a job "
                                "trains on one kind: run.device cpu for every rank on the "
                                "CPU, or a GPU for every rank",
                                all[0].host,
                                all[0].backend, other, all[other].host, all[other].backend);
    free(all);
    return rc;
}

static pt_freeze_config freeze_config(const pt_config *c)
{
    return (pt_freeze_config){(pt_freeze_kind)c->freeze.policy, c->freeze.alpha,
                              c->freeze.max_depth};
}

/* freeze.start 0 on a fresh run: the blocks its first decision, made before
 * training and before the layout, freezes (the schedule's first bound; auto
 * has no gradient norms yet and freezes none) */
int pt_session_opening_depth(const pt_config *c, int layers)
{
    if (c->freeze.policy == PT_FREEZE_NONE || c->freeze.start != 0)
        return 0;
    const pt_freeze_config fc = freeze_config(c);
    pt_freeze_state st;
    pt_freeze_report rep;
    pt_err ignore;
    if (pt_freeze_init(&st, &fc, layers, &ignore))
        return 0; /* the run's own init reports it */
    const int depth = pt_freeze_decide(&st, &rep);
    pt_freeze_free(&st);
    return depth;
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
                                      "%d replicas, but a step has only train.batch = %lld "
                                      "example%s to share; allowed: 1 to %lld, or auto", D,
                                      c->train.batch,
                                      c->train.batch == 1 ? "" : "s", c->train.batch);
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
    sp->data_bytes = pt_session_data_bytes(ss);
    sp->cores = c->pipeline.cores;
    sp->elastic = c->pipeline.elastic;
    sp->overlap = c->pipeline.overlap;
    sp->bucket_bytes = (size_t)(c->pipeline.bucket_mib * (double)(1 << 20));
    sp->timeout_s = c->run.timeout_s;
    sp->check_replicas = c->run.check_replicas;
    sp->freeze = freeze_config(c);
    sp->freeze_every_step = c->freeze.unit == PT_FREEZE_EVERY_STEP;
    sp->freeze_start = c->freeze.start;
    sp->freeze_every = c->freeze.every;
    sp->cache = ss->cache_on;
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
                         .vocab_sha256 = s->vocab_sha256,
                         .lock = s->lock};
}

/* RUN_DIR/NAME-rankR.jsonl: its path, and opened for appending. */
void pt_session_rank_file(const pt_session *s, const char *name, char *path, size_t n)
{
    snprintf(path, n, "%s/%s-rank%d.jsonl", s->cfg.run.dir, name, s->rank);
}

/* Each rank's files in run.dir, opened only under the lock: a job refused
 * for the lock, or refused before it, must not make or hold a log of the
 * job that has it (a refused start takes back the empty logs it made:
 * pt_rundir_logs_undo). */
int pt_session_open_logs(pt_session *s, pt_err *err)
{
    const pt_config *c = &s->cfg;
    char path[PT_PATH_MAX + 64];
    int rc = 0;
    if (s->rank == 0 && c->run.metrics) {
        snprintf(path, sizeof path, "%s/metrics.jsonl", c->run.dir);
        rc = pt_progress_open_log(&s->progress, path, err);
    }
    if (rc == 0 && c->run.rank_metrics) {
        pt_session_rank_file(s, "metrics", path, sizeof path);
        rc = pt_log_open(path, &s->rank_metrics, err);
    }
    if (rc == 0 && c->run.log_samples) {
        pt_session_rank_file(s, "samples", path, sizeof path);
        rc = pt_log_open(path, &s->sample_log, err);
    }
    if (rc == PT_EINPUT) /* a log run.dir cannot hold: the key that put it there */
        pt_config_key_prefix(c, err, "run.dir");
    s->run.spec.sample_log = s->sample_log;
    return rc;
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
    pt_output_sweep(path); /* a killed run's temporary file: run.dir's lock is ours */
    int rc = pt_layout_profile(&s->run, &p, err);
    if (rc == 0) {
        rc = pt_profile_write(path, &p, &s->run.arch, err);
        pt_profile_free(&p);
    }
    return rc;
}

/* data.lowercase, data.strip_accents and data.split_cjk left at auto take
 * what checkpoint `ckpt` (NULL or "": none) recorded its run tokenized with,
 * not what the tokenizer_config.json beside data.vocab says now: a resume
 * or an evaluation of it tokenizes as its run did. A key set in the config
 * to another value stays, with a note. A checkpoint from before the keys
 * records auto: its run was uncased, as the one tokenizer pipetrain had.
 * One whose config record cannot be read is refused while a key is at
 * auto; one whose manifest cannot be read at all leaves auto (the load
 * refuses it). */
static int recorded_normalize(pt_session *s, const char *ckpt, pt_err *err)
{
    if (!ckpt || !*ckpt || s->cfg.data.kind != PT_DATA_TEXT_CLASSIFICATION)
        return 0;
    pt_config *was = malloc(sizeof *was); /* large: keep it off the stack */
    pt_err why;
    char cwd[PT_PATH_MAX];
    int rc = 0;
    if (!was)
        return pt_fail(err, PT_ENOMEM, "out of memory");
    if (pt_checkpoint_read_config_record(ckpt, was, &why) != 0) {
        /* a manifest that reads but whose config record does not (from a
         * newer pipetrain, or damaged): how its run tokenized is unknown,
         * and guessing would give the weights other tokens. One that does
         * not read at all is the load's to report. */
        const int auto_left = s->cfg.data.lowercase == PT_AUTO ||
                              s->cfg.data.strip_accents == PT_AUTO ||
                              s->cfg.data.split_cjk == PT_AUTO;
        if (auto_left && pt_checkpoint_read_cwd(ckpt, cwd, sizeof cwd, &(pt_err){0}) == 0)
            rc = pt_fail(err, PT_EINPUT,
                         "checkpoint %s: %s; so how its run tokenized (data.lowercase, "
                         "data.strip_accents, data.split_cjk) is not known: set those keys",
                         ckpt, why.msg);
    } else {
        int *const now[3] = {&s->cfg.data.lowercase, &s->cfg.data.strip_accents,
                             &s->cfg.data.split_cjk};
        /* 0 or 1: one from before the keys reads as uncased (checkpoint.h) */
        const int then[3] = {was->data.lowercase, was->data.strip_accents, was->data.split_cjk};
        static const char *const key[3] = {"data.lowercase", "data.strip_accents",
                                           "data.split_cjk"};
        char diff[300] = "";
        size_t at = 0;
        for (int i = 0; i < 3; i++) {
            if (*now[i] == PT_AUTO)
                *now[i] = then[i];
            else if (then[i] != *now[i] && at < sizeof diff)
                at += (size_t)snprintf(diff + at, sizeof diff - at, "%s%s %s, its run %s",
                                       at ? "; " : "", key[i], *now[i] ? "true" : "false",
                                       then[i] ? "true" : "false");
        }
        if (at && s->rank == 0)
            fprintf(stderr,
                    "pipetrain: note: this run tokenizes otherwise than checkpoint %s's did (%s): "
                    "its texts reach the trained weights as other tokens\n",
                    ckpt, diff);
        snprintf(s->normalized_from, sizeof s->normalized_from, "%s", ckpt);
    }
    free(was);
    return rc;
}

int pt_session_check_normalize(const pt_session *s, const char *ckpt, pt_err *err)
{
    if (!ckpt || !*ckpt || s->cfg.data.kind != PT_DATA_TEXT_CLASSIFICATION || !s->norm_auto)
        return 0;
    pt_config *was = malloc(sizeof *was); /* large: keep it off the stack */
    pt_err ignored;
    int rc = 0;
    if (!was)
        return pt_fail(err, PT_ENOMEM, "out of memory");
    if (pt_checkpoint_read_config_record(ckpt, was, &ignored) == 0) { /* else the load refuses */
        const int then[3] = {was->data.lowercase, was->data.strip_accents, was->data.split_cjk};
        const int now[3] = {s->cfg.data.lowercase, s->cfg.data.strip_accents,
                            s->cfg.data.split_cjk};
        static const char *const key[3] = {"data.lowercase", "data.strip_accents",
                                           "data.split_cjk"};
        for (int i = 0; rc == 0 && i < 3; i++)
            if ((s->norm_auto & 1 << i) && then[i] != now[i])
                rc = pt_fail(err, PT_EINPUT,
                             "checkpoint %s, which this job resumes, came while the job started: "
                             "its run had %s %s, and this job took %s from %s; start the job "
                             "again", ckpt, key[i], then[i] ? "true" : "false",
                             now[i] ? "true" : "false",
                             *s->normalized_from ? s->normalized_from
                                                 : "the tokenizer_config.json beside data.vocab");
    }
    free(was);
    return rc;
}

/* model.init_from's weights into the engine, on the ranks that hold units
 * (the others learn of a failure in the agreement that follows) */
static int load_init_weights(pt_session *s, pt_err *err)
{
    const pt_config *c = &s->cfg;
    return s->run.active && *c->model.init_from
        ? pt_init_from_load(s->run.seg, c, s->train.label_names ? &s->train : &s->test,
                               s->rank == pt_mesh_rank(&s->run.mesh, 0, s->run.mesh.stages - 1),
                               err)
        : 0;
}

int pt_session_load_pending_init(pt_session *s, pt_err *err)
{
    /* each rank planned from its own reading of run.dir, so some may have
     * loaded the weights already: the agreement is every rank's */
    int rc = 0;
    if (s->init_pending) {
        s->init_pending = 0;
        if ((rc = pt_init_from_check(&s->cfg, &s->arch, err)) == 0)
            rc = load_init_weights(s, err);
    }
    return pt_run_agree(&s->run, rc, err);
}

int pt_session_open(pt_session *s, pt_comm *comm, const pt_config *cfg, pt_run_mode mode,
                    const char *resume, pt_err *err)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->comm = comm;
    s->rank = pt_comm_rank(comm);
    const pt_config *c = &s->cfg;
    /* a checkpoint will give the weights: an eval's, or the one a resume
     * would take (a plan of a resume, as train: model.init_from unread) */
    const int from_ckpt = resume && *resume;
    pt_config_arch(cfg, &s->arch);
    s->norm_auto = (c->data.lowercase == PT_AUTO) | (c->data.strip_accents == PT_AUTO) << 1 |
                   (c->data.split_cjk == PT_AUTO) << 2;
    /* the frozen blocks of the checkpoint a resume would take (each rank
     * reads it; the planner uses rank 0's): the memory checks count them
     * without gradients or moments. A bad file is the load's to report. */
    pt_err unread;
    if (mode != PT_RUN_EVAL && resume && *resume &&
        pt_checkpoint_read_depth(resume, s->arch.layers, &s->resume_depth, &unread) != 0)
        s->resume_depth = 0;
    /* an evaluation keeps no gradients or moments and saves nothing for a
     * backward: its memory is that of a model frozen whole */
    if (mode == PT_RUN_EVAL)
        s->resume_depth = s->arch.layers;
    s->sizes_given = resume && *resume ? PT_SIZES_OF_CHECKPOINT
                     : *c->model.init_from ? PT_SIZES_OF_INIT
                                           : 0;
    /* a resume keeps the checkpoint's batch (its data position is in
     * batches): what fits is reached by micro-batches, or a smaller share per
     * replica by more replicas, never by another train.batch */
    s->batch_kept = mode != PT_RUN_EVAL && s->sizes_given == PT_SIZES_OF_CHECKPOINT;
    /* nor does it open the cache (nor count its memory): its frozen prefix
     * would ride in front of stage 0, and the planner cuts the model whole */
    s->cache_on = pt_config_cache_on(c) && mode != PT_RUN_EVAL;
    if (mode != PT_RUN_EVAL && !(resume && *resume))
        s->opening_depth = pt_session_opening_depth(c, s->arch.layers);
    int rc;
    if ((rc = recorded_normalize(s, resume, err)) || (rc = pt_init_from_dropout(&s->cfg, &s->arch, s->rank == 0, err)) ||
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
    const size_t used = strlen(s->binding);
    snprintf(s->binding + used, sizeof s->binding - used, ", %d %s", s->threads,
             s->threads == 1 ? "thread" : "threads");
    /* the backend first, so the model's memory and the batch's staging are
     * checked before data that can take long to make; IDX files decide the
     * image size, so there the checks wait for them */
    const int known = c->data.kind != PT_DATA_IDX; /* the image size */
    if ((rc = open_backend(s, err)) ||
        (known && ((rc = pt_arch_check(&s->arch, err)) || (rc = pt_session_check_staging(s, err)) ||
                   (rc = pt_session_check_model_memory(s, mode, err)))) ||
        (rc = pt_session_load_data(s, mode, err)) || (rc = pt_arch_check(&s->arch, err)) ||
        (rc = pt_session_check_model_memory(s, mode, err)) || /* now with the data set counted */
        (rc = from_ckpt ? 0 : pt_init_from_check(c, &s->arch, err)) ||
        (rc = pt_session_check_staging(s, err)))
        goto agree;
    /* allowed (a plan for a bigger machine), but what does not fit here
     * fails at an allocation: say so first */
    if (s->rank == 0 && c->pipeline.memory_gib > 0 && pt_session_memory_per_rank(s) > 0 &&
        strcmp(pt_backend_name(s->be), "cpu") == 0 &&
        c->pipeline.memory_gib * (1ull << 30) > pt_session_memory_per_rank(s)) {
        char at[PT_PATH_MAX + 32];
        pt_config_where(c, "pipeline.memory_gib", at, sizeof at);
        fprintf(stderr,
                "pipetrain: warning: %spipeline.memory_gib: %g GiB per rank, more than the %.3g "
                "GiB each rank has here (the node's RAM over its ranks); a layout planned for it "
                "may not fit this machine\n", at, c->pipeline.memory_gib,
                pt_session_memory_per_rank(s) / (1ull << 30));
    }
    if (mode == PT_RUN_TRAIN && c->run.profile_ops && (rc = pt_backend_profile_ops(s->be, err))) {
        rc = pt_config_key_fail(c, err, "run.profile_ops",
                                "true, but this run trains on the %s backend, whose ops are "
                                "queued on a device; allowed there: false (op timing is for the "
                                "CPU backend)", pt_backend_name(s->be));
        goto agree;
    }
    pt_session_digest_data(s, mode);
    /* plan refuses what train would, from the same training split */
    if (mode != PT_RUN_EVAL) {
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
                                    "%lld, but the training split has only %lld example%s (%s); "
                                    "allowed for this data: 1 to %lld",
                                    c->train.batch, (long long)s->train.count,
                                    s->train.count == 1 ? "" : "s", split,
                                    (long long)s->train.count);
            goto agree;
        }
    }
    if ((rc = check_layout_keys(s, err)))
        goto agree;
agree: /* every rank fails here or goes on together: what follows is collective */
    if ((rc = pt_group_agree(pt_comm_world(s->comm), rc, err)) || (rc = same_backend(s, err)))
        goto fail;
    pt_train_spec spec;
    make_spec(s, &s->arch, &spec);
    if ((rc = given_profile(s, mode != PT_RUN_EVAL ? resume : NULL, &spec.profile_strict, err)))
        goto fail;
    spec.profile = s->profile.ranks ? &s->profile : NULL;
    spec.profile_fallback = s->profile_fallback.ranks ? &s->profile_fallback : NULL;
    spec.resume_depth = s->resume_depth;
    spec.fresh = mode != PT_RUN_EVAL && !(resume && *resume);
    /* what a refusal may suggest: a resume keeps the checkpoint's model and
     * batch, model.init_from's sizes are its weights' */
    int64_t fits_batch = 0;
    spec.fits_batch = s->batch_kept ? NULL : &fits_batch;
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
            const double have = c->pipeline.memory_gib > 0 ? c->pipeline.memory_gib * gib : pt_session_memory_per_rank(s);
            char from[PT_PATH_MAX + 64] = "";
            if (spec.profile_strict)
                snprintf(from, sizeof from, "; the unit sizes are pipeline.profile's, '%s'",
                         c->pipeline.profile);
            char batch[96] = "batch";
            if (fits_batch > 0 && fits_batch < c->train.batch)
                snprintf(batch, sizeof batch, "batch (train.batch = %lld has one)",
                         (long long)fits_batch);
            char allowed[160];
            if (s->batch_kept)
                snprintf(allowed, sizeof allowed, "more memory, or more stages over more ranks (a "
                         "resume keeps the checkpoint's model and train.batch)");
            else if (s->sizes_given)
                snprintf(allowed, sizeof allowed, "more memory, more stages over more ranks, or a "
                         "smaller %s (the model's sizes are %s)", batch,
                         s->sizes_given == PT_SIZES_OF_INIT ? "model.init_from's" : "the checkpoint's");
            else
                snprintf(allowed, sizeof allowed, "more memory, more stages over more ranks, or a "
                         "smaller model or %s", batch);
            rc = pt_config_key_fail(c, err, "pipeline.memory_gib",
                                    "%.3g GiB per device%s, and no pipeline layout fits in it (%.400s%s); "
                                    "allowed: %s", have / gib,
                                    c->pipeline.memory_gib > 0 ? "" : " (the node's RAM over its ranks)",
                                    why, from, allowed);
        }
        goto fail;
    }
    /* a checkpoint's weights replace model.init_from's: they are not read
     * (a damaged or changed init_from would refuse an unrelated checkpoint);
     * a train's resume is settled under run.dir's lock, so there they wait
     * (pt_session_load_pending_init) */
    s->init_pending = from_ckpt && mode == PT_RUN_TRAIN && *c->model.init_from;
    if ((rc = pt_run_agree(&s->run, from_ckpt ? 0 : load_init_weights(s, err), err)) ||
        (rc = pt_run_agree(&s->run, pt_session_same_data(s, err), err)))
        goto fail;
    if (mode == PT_RUN_TRAIN) {
        /* rank 0 makes run.dir once every input has proved good (every rank
         * opens its logs there once rank 0 holds its lock: cmd_train) */
        size_t made = 0;
        rc = s->rank == 0 ? pt_rundir_make(c->run.dir, &made, err) : 0;
        if (rc) /* a refused run leaves no directory it made, parents included */
            pt_rmdir_made(c->run.dir, made);
        s->run_dir_made = rc == 0 ? made : 0;
        /* a place the user named that cannot be made is the key's fault; a
         * file system out of space or inodes is not (exit 1, no key named) */
        if ((rc == PT_ESYS || rc == PT_EINPUT) && (rc = pt_err_input(rc, err)) == PT_EINPUT)
            pt_config_key_prefix(c, err, "run.dir");
        if ((rc = pt_run_agree(&s->run, rc, err)))
            goto fail;
        /* the logs are opened under the lock (pt_session_open_logs); the
         * progress lines only here */
        pt_progress_open(&s->progress, c->train.log_every, s->rank != 0);
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
    /* a run.dir this session made goes with its refusal (nothing is in it
     * yet: the logs open under the lock) */
    if (s->run_dir_made)
        pt_rmdir_made(s->cfg.run.dir, s->run_dir_made);
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
