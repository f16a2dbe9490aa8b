/*
 * run.h (internal to launch/): one training or evaluation run as this rank
 * sees it: the configuration, the layout (which stage of the pipeline this
 * rank is, which units it holds, the schedule), its backend, data and
 * segment, and the training state a checkpoint must carry. A single process
 * is a one-stage pipeline: there is one code path. run.c and layout.c build
 * it; train.c, evaluate.c and checkpoint.c work on it.
 */
#ifndef PT_LAUNCH_RUN_H
#define PT_LAUNCH_RUN_H

#include "balance/balance.h"
#include "cache/cache.h"
#include "comm/comm.h"
#include "data/data.h"
#include "freeze/freeze.h"
#include "launch/config.h"
#include "launch/progress.h"
#include "nn/nn.h"
#include "pipe/pipe.h"

typedef struct pt_run {
    pt_config cfg;
    pt_arch arch;
    pt_comm *comm;     /* the world (not owned) */
    int rank, ranks;   /* world rank and size */

    /* layout (layout.c) */
    pt_plan plan;          /* stages K, micro-batches M, unit bounds, predictions */
    int active;            /* this rank runs a stage; the others wait for the end */
    int stage;             /* this rank's stage when active */
    pt_group *pipe;        /* the pipeline's ranks, group rank = stage (NULL when K = 1) */
    pt_schedule sched;
    pt_stage_exec *exec;
    pt_cost_model cost;    /* per-unit costs, kept for re-planning (empty when K = 1 is fixed) */
    struct pt_prefix *prefix; /* stage 0's input when a frozen prefix is in front of it */
    pt_cache *cache;       /* the frozen prefix's activations (stage 0, cache.enabled) */
    char job[64];          /* identifies this job on the node (the cache's name) */
    int threads;           /* compute threads of this rank */
    char binding[256];     /* how this rank was bound to cores */

    pt_backend *be;
    pt_dataset train, test;
    pt_sampler sampler;
    pt_augment aug;
    pt_segment *seg;   /* this stage's units */
    int micro;         /* micro-batches per step (plan.micro) */
    int max_micro;     /* most examples in one micro-batch */

    /* training state, all of it in every checkpoint */
    int64_t step;          /* optimizer steps done */
    int64_t epoch;         /* epoch in progress */
    int64_t epoch_step;    /* global batches of that epoch already done */
    pt_lr_schedule lr;
    int64_t total_steps;   /* steps the schedule spans */
    int frozen_units;      /* leading units of the model that are frozen */
    int source_units;      /* of those, the ones stage 0's prefix source produces (cache or compute) */
    pt_freeze_state freeze;

    /* frozen-prefix samples of this epoch served by the cache and computed
     * (stage 0; reported and reset with the epoch's metrics) */
    int64_t cache_hits, prefix_computed;

    /* host staging for the micro-batches of one step */
    float *images;
    int32_t *tokens, *targets;
    pt_batch *batches;     /* [micro] */
    int64_t *batch_ids;    /* sample ids of the staged examples, in micro-batch order */
    int *batch_first;      /* [micro] index of each micro-batch's first example */
    double *reduce;        /* per-unit gradient sums of squares, then the step's scalars */

    pt_progress progress;
    FILE *rank_metrics;    /* run.rank_metrics: this rank's step timings */
} pt_run;

typedef enum { PT_RUN_TRAIN, PT_RUN_EVAL } pt_run_mode;

/* Builds the run from a validated config: backend, data, layout, this rank's
 * segment (initialised from the seed or model.init_from). Collective over the
 * world. Does not resume; see pt_checkpoint_load. */
int pt_run_open(pt_run *r, pt_comm *comm, const pt_config *cfg, pt_run_mode mode, pt_err *err);
void pt_run_close(pt_run *r);

static inline int pt_run_first_stage(const pt_run *r) { return r->stage == 0; }
static inline int pt_run_last_stage(const pt_run *r) { return r->stage == r->plan.stages - 1; }

/* Stages examples ids[0..n) of a dataset as r->batches[0..m), m = the number
 * of micro-batches they make (sizes differ by at most one, first ones
 * larger); returns m. n <= micro * max_micro. */
int pt_run_stage(pt_run *r, const pt_dataset *ds, const int64_t *ids, int n, int micro, int augment);

/* Sums doubles over the pipeline's ranks (no-op for one stage). */
int pt_run_reduce(pt_run *r, double *v, int n, pt_err *err);
/* Collective over group g (NULL: only this rank): every member passes its
 * status and gets an error if any failed (its own message, or "another rank
 * failed"). */
int pt_agree(pt_group *g, int rc, pt_err *err);

/* layout.c: measures the topology, plans K, M and the partition (profiling on
 * rank 0 when something is left to choose), and builds this rank's stage. */
int pt_layout_open(pt_run *r, pt_err *err);
void pt_layout_close(pt_run *r);
/* After r->frozen_units changed: re-plans the partition (K and M stay) with
 * frozen units priced forward-only, or zero when the cache serves them, moves
 * units to their new stages and rebuilds this rank's stage. Collective over
 * the pipeline. */
int pt_layout_replan(pt_run *r, pt_err *err);
/* Describes topology, mode and plan (what `pipetrain plan` prints). */
void pt_layout_print(const pt_run *r, FILE *out);

/* train.c */
int pt_train(pt_run *r, pt_err *err);
/* From now on SIGINT, SIGTERM and SIGUSR1 ask pt_train to finish the step,
 * save and stop (a second one exits at once). Called before the run is built,
 * so a signal during setup is not fatal either: it stops after the first step. */
void pt_train_catch_stop_signals(void);

/* evaluate.c: loss and accuracy over the first `limit` test examples (0 = all).
 * Collective over the pipeline. with_logits (the same on every stage): keep
 * each row's logits in `logits` ([examples * rows per example, classes], in
 * test-split order), which the last stage must provide; others pass NULL. */
typedef struct pt_eval_result {
    double loss, accuracy;
    int64_t examples, rows;
} pt_eval_result;
int pt_evaluate(pt_run *r, int64_t limit, int with_logits, float *logits, pt_eval_result *out,
                pt_err *err);
/* GPT only: continues prompt by `length` bytes into out (NUL-terminated, out has length + 1 bytes). */
int pt_sample_text(pt_run *r, const char *prompt, int length, double temperature, int top_k,
                   uint64_t seed, char *out, pt_err *err);

#endif
