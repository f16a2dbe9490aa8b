/*
 * train.h: the train module's public interface: the training engine as one
 * rank runs it.
 *
 * A run is K pipeline stages x D replicas of the model over the world's
 * ranks (comm/'s mesh), planned by balance/. A step takes the global batch
 * from the sampler, gives each replica its share, runs the pipeline schedule
 * (pipe/), all-reduces the gradients of each stage among its replicas (dp/),
 * clips by the global norm and applies AdamW: every replica then holds the
 * same weights. At freeze decisions (freeze/) the re-planning controller
 * freezes the bottom blocks and, with an elastic layout, plans K and D again
 * for the smaller active model: units move to their new owners (dp/) and the
 * frozen prefix comes from the node's activation cache (cache/).
 *
 * The world is the control plane: every rank, active or idle, ends every
 * step in the same all-reduce (idle ranks add zeros), so all ranks see the
 * same losses, gradient norms and stop requests, make the same freeze
 * decisions, and take part in every re-plan: an idle rank becomes a replica
 * when a plan needs it.
 *
 * This module parses nothing: launch/ fills a pt_train_spec from the config.
 */
#ifndef PT_TRAIN_H
#define PT_TRAIN_H

#include "balance/balance.h"
#include "cache/cache.h"
#include "comm/comm.h"
#include "data/data.h"
#include "dp/dp.h"
#include "freeze/freeze.h"
#include "nn/nn.h"
#include "pipe/pipe.h"

#include <stdio.h>

#define PT_TRAIN_AUTO (-1) /* a layout choice left to the planner */

/* Everything the engine needs, from launch/ (which owns what it points to). */
typedef struct pt_train_spec {
    pt_arch arch;
    pt_backend *be;               /* this rank's device */
    int threads;                  /* compute threads of this rank */
    const pt_dataset *train, *test;
    uint64_t seed;
    int shuffle;
    pt_augment aug;
    int64_t batch;                /* global batch */
    int epochs;
    int64_t max_steps;            /* 0: no limit */
    /* optimizer */
    pt_lr_kind lr_kind;
    double lr, min_lr;
    int64_t warmup;
    double weight_decay, beta1, beta2, eps, grad_clip;
    /* layout: each of stages, replicas, micro fixed or PT_TRAIN_AUTO */
    int stages, replicas, micro;
    int gpipe;                    /* 1: GPipe, 0: 1F1B */
    int recompute;
    double mem_limit;             /* bytes per device; 0: the node's RAM over its ranks, less
                                     data_bytes */
    double data_bytes;            /* the data set every rank holds in memory */
    int cores;                    /* per node, as the planner prices sharing; 0: hwloc's count */
    int elastic;                  /* re-plan what is auto at freeze decisions */
    int overlap;                  /* all-reduce overlaps the backward */
    size_t bucket_bytes;          /* all-reduce bucket size */
    double timeout_s;
    int64_t check_replicas;       /* steps between weight-hash checks of the replicas; 0 off */
    /* freezing and the activation cache */
    pt_freeze_config freeze;
    int freeze_every_step;        /* decisions counted in steps, not epochs */
    int64_t freeze_start, freeze_every;
    int cache;                    /* serve the frozen prefix from the node's cache */
    uint64_t cache_memory, cache_disk;
    const char *cache_dir;
    int cache_min_depth;
    FILE *sample_log;             /* each step's sample ids of this replica, or NULL */
    /* the planner's measured inputs to use instead of measuring (rank 0's
     * counts; NULL: measure); strict: one measured on another world is an
     * error (pipeline.profile), else it is measured again with a note (the
     * profile a resumed checkpoint carries) */
    const struct pt_profile *profile;
    int profile_strict;
    /* a strict profile to plan from when `profile` (not strict) does not
     * fit this world: pipeline.profile's, given beside a resumed
     * checkpoint's (NULL: none) */
    const struct pt_profile *profile_fallback;
    /* frozen blocks of the checkpoint a train run resumes (rank 0's reading;
     * 0: none): the first layout is planned and built for that frozen
     * prefix, as the saved run's later layouts were (its units need no
     * gradients or moments); the whole model's layout is only planned, to
     * fix K, D and M where the re-plans keep them, and when no layout fits
     * the whole model's training memory, not even that */
    int resume_depth;
    /* a train run that, by this rank's reading of run.dir, starts from
     * step 0 (rank 0's reading counts), or a plan: with freeze.start 0 the
     * first decision is made before the layout, which is planned for it as
     * for a resume's frozen blocks (pt_run.opening) */
    int fresh;
    /* where this rank is, kept up to date for a signal handler to print (it
     * may read the pointer at any moment: it always points at a whole
     * string); NULL: not wanted */
    const char *volatile *where;
    /* where rank 0 reports, when the planner finds no layout in the memory
     * limit at the start, the largest train.batch it finds one for (0: not
     * even a batch of 1); NULL: not wanted */
    int64_t *fits_batch;
} pt_train_spec;

/* The planner's measured inputs: the unit costs and links a plan is made
 * from, and the world they were measured on. A plan is a function of these
 * and the config, so a run given the profile an earlier run measured (its
 * checkpoints carry it) makes the same layouts at the same freeze decisions,
 * and so computes the same bits; measuring again may pick another layout,
 * which agrees only up to the order of floating-point sums. */
typedef struct pt_profile {
    int ranks, cores, threads;    /* cores: of a node, as the planner priced them */
    int *node_of;                 /* [ranks] */
    char backend[32];
    double memory_per_rank;       /* bytes: the least of any rank's device (a GPU's as its
                                     backend counts it, else the node's RAM over its ranks),
                                     the memory limit when pipeline.memory_gib is not set;
                                     profile.json's ram_bytes_per_rank */
    double bw_intra, bw_inter, latency;
    pt_cost_model cost;           /* units 0: nothing was profiled (nothing to choose) */
} pt_profile;

void pt_profile_free(pt_profile *p);

/* One step as this rank saw it. */
typedef struct pt_step_result {
    double loss, grad_norm, lr;
    int64_t examples;             /* in the global batch */
    int64_t rows, correct;        /* the loss's rows over all ranks (examples; gpt: tokens),
                                     and those whose highest logit was the target */
    pt_reducer_stats allreduce;   /* this rank's gradient all-reduce */
    int stop;                     /* some rank was asked to stop */
    int failed;                   /* some rank asked because it failed (PT_STOP_FAILED) */
} pt_step_result;

/* Why a rank asks the others to stop after this step (pt_run_step). */
enum { PT_STOP_SIGNAL = 1, PT_STOP_FAILED = 2 };

/* What a re-plan did (the same on every rank; bytes summed over ranks). */
typedef struct pt_transition {
    int old_stages, old_replicas, old_micro;
    int new_stages, new_replicas, new_micro;
    uint64_t bytes;
    double seconds;
} pt_transition;

typedef struct pt_run {
    pt_train_spec spec;
    pt_arch arch;
    pt_comm *comm;
    int rank, ranks;
    pt_backend *be;
    pt_sampler sampler;

    /* layout (layout.c) */
    pt_plan plan;          /* K, D, M, unit bounds, predictions */
    pt_mesh mesh;          /* who is (replica, stage) */
    pt_mesh_groups groups; /* this rank's pipeline, stage replicas and active ranks */
    int active, replica, stage;
    pt_schedule sched;
    pt_stage_exec *exec;
    pt_reducer *reducer;
    pt_cost_model cost;    /* per-unit costs, for (re-)planning; empty when nothing is chosen */
    double bw_intra, bw_inter, latency; /* measured links */
    /* the planner's inputs that a node measures for itself, the same on
     * every rank (layout.c): rank 0's node's cores and threads per rank,
     * and the least memory of any rank's device. Nodes may differ in
     * each (cores, RAM, ranks placed on them, run.threads 0), and a rank
     * that planned from its own would lay out another mesh than its peers. */
    int node0_cores, node0_threads;
    double least_memory_per_rank;
    int noted_host_transfers; /* layout.c's note that NCCL is not used, made */
    struct pt_prefix *prefix;
    pt_cache *cache;       /* this node's activation cache (cache on) */
    char job[64];          /* identifies the job on its nodes */
    pt_segment *seg;       /* this rank's units */
    int micro, max_micro;

    /* training state, all of it in every checkpoint */
    int64_t step, epoch, epoch_step;
    pt_lr_schedule lr;
    int64_t total_steps;
    int frozen_units;      /* leading units of the model that are frozen */
    int built_frozen;      /* frozen_units when the current layout was built */
    int source_units;      /* of those, the ones stage 0's prefix source produces */
    pt_freeze_state freeze;
    /* the decision a fresh run with freeze.start 0 made before its first
     * layout (made: 1), for the training loop to log at step 0 */
    struct {
        int made;
        pt_freeze_report report;
    } opening;

    /* this epoch's frozen-prefix samples served by the cache and computed,
     * over every replica (reset by whoever reports them), and of the
     * computed ones those whose first units the cache served (where it
     * serves part of the frozen prefix: the plan's cached_units); step_hits,
     * step_computed and step_part_hits are this rank's in the step under way
     * (stage 0 of a replica counts them), which the step's combine adds in */
    int64_t cache_hits, prefix_computed, cache_part_hits;
    int64_t step_hits, step_computed, step_part_hits;
    int sample_log_errno; /* the first failed write to spec.sample_log (then no more); 0 */
    /* set by pt_evaluate while it runs the test split: batch_ids then hold
     * test indices, cached as ids train->count + index; eval_hits counts
     * its cache hits */
    int evaluating;
    int64_t eval_hits;

    /* host staging for one step's micro-batches */
    float *images;
    int32_t *tokens, *targets;
    pt_batch *batches;
    int64_t *batch_ids;
    int *batch_first;
    int staged_examples;   /* capacity of the staging, in examples (and micro-batches) */
    double *reduce;        /* per-unit sums of squares, then the step's scalars */
    pt_note where;         /* the step's phase outside the executor */
} pt_run;

/* What a run is built for: training; evaluation (a model with no gradients,
 * moments or saved activations); or a plan of training that runs nothing
 * (the engine builds it as for an evaluation). */
typedef enum { PT_RUN_TRAIN, PT_RUN_EVAL, PT_RUN_PLAN } pt_run_mode;

/* run.c: builds this rank's engine: sampler and schedule (training), freeze
 * state, layout (profiling and planning, collective over the world) and the
 * segment, initialised from the seed. Does not resume. */
int pt_run_open(pt_run *r, pt_comm *comm, const pt_train_spec *spec, pt_run_mode mode, pt_err *err);
void pt_run_close(pt_run *r);

static inline int pt_run_first_stage(const pt_run *r) { return r->active && r->stage == 0; }
static inline int pt_run_last_stage(const pt_run *r)
{
    return r->active && r->stage == r->plan.stages - 1;
}
/* The rank that writes a unit's state in checkpoints: replica 0's. */
static inline int pt_run_writes_units(const pt_run *r) { return r->active && r->replica == 0; }

/* Stages examples ids[0..n) as r->batches[0..m): m micro-batches of sizes
 * differing by at most one; returns m. */
int pt_run_stage(pt_run *r, const pt_dataset *ds, const int64_t *ids, int n, int micro, int augment);

/* Collective over the world: every rank passes its status and gets an error
 * if any failed (its own message, or "another rank failed" with err->relayed
 * set, so that the caller reports the failed rank's message, not this). */
int pt_run_agree(pt_run *r, int rc, pt_err *err);

/* Bytes per example a rank stages in host memory of its replica's share of
 * a step, whatever the layout (stage_buffers: inputs, tokens, targets,
 * records). */
double pt_run_staging_bytes(const pt_arch *a);

/* layout.c: the layout at the start, and again after r->frozen_units grew:
 * re-planned (elastic: K, D and M as far as they are auto) and carried out
 * (units move to their new owners with their moments). Collective over the
 * world; *t (may be NULL) says what changed. */
int pt_layout_open(pt_run *r, pt_err *err);
void pt_layout_close(pt_run *r);
int pt_layout_replan(pt_run *r, pt_transition *t, pt_err *err);
/* This run's measured inputs, as a new pt_profile (free with pt_profile_free). */
int pt_layout_profile(const pt_run *r, pt_profile *out, pt_err *err);
/* What `pipetrain plan` prints: topology, mode, layout, who does what,
 * predictions, runners-up, idle ranks and why. */
void pt_layout_print(const pt_run *r, FILE *out);
/* "single-device", "multi-device" or "multi-node". */
const char *pt_layout_mode(const pt_run *r);

/* Whether this rank asks to stop: 0, or PT_STOP_SIGNAL and/or
 * PT_STOP_FAILED. */
typedef int (*pt_stop_query)(void *ctx);
/* step.c: one optimizer step at the sampler's position, on every rank (idle
 * ranks only join the step's all-reduce). Advances step, epoch_step.
 * stop (may be NULL) is asked just before the step's results are combined,
 * so that a request made while the step runs ends the run after this step;
 * every rank learns the answers in out (stop, failed) to stop after the
 * same step. */
int pt_run_step(pt_run *r, pt_stop_query stop, void *stop_ctx, pt_step_result *out,
                pt_err *err);
/* Whether a freeze decision is due now (epoch_done: an epoch just ended; at
 * step 0, before training, only when freeze.start is 0). */
int pt_freeze_due(const pt_run *r, int epoch_done);
/* The first layout was planned from rank 0's reading of run.dir before the
 * job locked it: for the frozen blocks of the checkpoint it would resume
 * (spec.resume_depth), or, on a fresh start, for the opening decision
 * (spec.fresh). Once the start is settled under the lock (resuming: a
 * checkpoint is loaded next), this checks that reading still holds: a
 * resume drops the opening decision (the checkpoint's freeze state
 * replaces it; one with fewer frozen blocks than planned is refused by the
 * load); a fresh start whose layout froze a vanished checkpoint's blocks is
 * refused (PT_EINPUT), as it would train them frozen. The same on every
 * rank. */
int pt_run_check_start(pt_run *r, int resuming, pt_err *err);
/* Makes the decision (the same on every rank: the norms behind it are the
 * job's); returns 1 when the frozen prefix grew, with r->frozen_units set
 * to it and the stages still laid out for the old one, which
 * pt_layout_replan then lays out again. A checkpoint saved in between
 * holds the new freeze state (its newly frozen units without moments). */
int pt_run_freeze_decide(pt_run *r, pt_freeze_report *rep);

/* evaluate.c: loss and accuracy over the first `limit` test examples (0 =
 * all), split over the replicas. keep: replica 0 alone, keeping on its last
 * stage (NULL elsewhere, or when not wanted), in test order, every row's
 * logits in `logits` ([rows, classes]) and every example's head input (the
 * final hidden states, pt_segment_head_input) in `hidden` ([examples, T, d]).
 * Collective over the world. */
typedef struct pt_eval_result {
    double loss, accuracy;
    int64_t examples, rows;
    int64_t cache_hits; /* test examples whose frozen prefix came from the cache */
    /* a classifier's (ViT, BERT, at most PT_EVAL_MAX_CLASSES classes) counts
     * by class, else classes 0 and confusion NULL: confusion[t * classes + p]
     * rows of target t predicted p (the first of the highest logits) */
    int classes;
    int64_t *confusion;
} pt_eval_result;
#define PT_EVAL_MAX_CLASSES 1024
/* Whether evaluations of this model count by class (a classifier of at
 * most PT_EVAL_MAX_CLASSES classes). */
int pt_eval_by_class(const pt_arch *a);
int pt_evaluate(pt_run *r, int64_t limit, int keep, float *logits, float *hidden,
                pt_eval_result *out, pt_err *err);
void pt_eval_result_free(pt_eval_result *e);

/* One class's figures from a pt_eval_result's counts, as scikit-learn's
 * classification_report gives them: precision tp / predicted and recall
 * tp / examples, 0 where the count under them is 0; F1 their harmonic
 * mean, 0 where both are 0. */
typedef struct pt_class_figures {
    int64_t examples, predicted, correct;
    double precision, recall, f1;
} pt_class_figures;
pt_class_figures pt_eval_class(const pt_eval_result *e, int k);
/* Unweighted means over the classes that have test examples or
 * predictions (scikit-learn's "macro avg"), and the means weighted by
 * examples ("weighted avg"); 0 when there are no counts. */
typedef struct pt_eval_averages {
    double precision, recall, f1;
    double weighted_precision, weighted_recall, weighted_f1;
    int classes; /* the classes averaged */
} pt_eval_averages;
pt_eval_averages pt_eval_means(const pt_eval_result *e);
/* GPT only: continues prompt by `length` bytes into out (length + 1 bytes,
 * NUL-terminated; the same on every rank). Collective over the world. */
int pt_sample_text(pt_run *r, const char *prompt, int length, double temperature, int top_k,
                   uint64_t seed, char *out, pt_err *err);

/* fault.c: the failure-injection hook of the failure tests.
 * PIPETRAIN_TEST_FAULT=RANK:STEP:KIND[:POINT] makes world rank RANK (-1:
 * every rank) fail at optimizer step STEP (1-based; `*`: any step) at POINT: `step`
 * (default, before the step runs), `combined` (just after the step's results
 * were combined over the ranks), `cache-open` (with STEP 0: the node's first
 * rank has created the activation cache, the others have not attached), `start-up` (with STEP 0: every rank read
 * the config, nothing else is done), `settling` (with STEP 0: train's
 * session is open and run.dir locked, the checkpoint to resume not yet
 * chosen), `finished` (the last step is done, its
 * last evaluation and checkpoint are not), `ended` (with STEP 0: every
 * rank met at the job's end, MPI not yet finalized), `eval` (a round of an evaluation
 * at step STEP), `replan` (the layout for a new frozen prefix at step STEP
 * is planned, nothing moved yet), `groups` (before this rank makes a
 * layout's process groups, at the start with STEP 0 or at a re-plan),
 * `place` (this rank's process groups of a
 * layout are made, at the start with STEP 0 or at a re-plan; the cache and
 * the stage not yet), `stage` (this rank's buffers and segment
 * of a layout are made, at the start with STEP 0 or at a re-plan; nothing
 * moved yet), or one of the phases of saving the checkpoint of step STEP:
 * `checkpoint-prepared` (the step directory is empty), `checkpoint-writing`
 * (a unit file is half written under its temporary name), `checkpoint` (the
 * unit files are written, the manifest is not) and `checkpoint-manifest` (the
 * manifest is written, older checkpoints are not pruned yet). KIND is `error`
 * (a reported error), `crash` (SIGKILL, as if the process were lost),
 * `hang` (stops answering), `stop` (SIGUSR1 to itself, as a stop signal
 * arriving at that moment; the run goes on to stop as the signal says),
 * `slow` (8 s there, answering the other ranks' questions as busy, as long
 * work that goes on does: pt_comm_busy), `pause` (2 s there, then on: a
 * test changes the files meanwhile) or `sigstop` (SIGSTOP to itself, the
 * first time only: a rank stopped there, until a test continues it).
 * Several
 * faults are separated by commas; the first that matches acts. Unset, it
 * costs one getenv per call. */
int pt_test_fault(const char *point, int rank, int64_t step, pt_err *err);

#endif
