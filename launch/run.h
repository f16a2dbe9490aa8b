/*
 * run.h (internal to launch/): one training or evaluation run on this
 * process: its configuration, backend, data, model segment and the training
 * state a checkpoint must carry. run.c builds and frees it; train.c,
 * evaluate.c and checkpoint.c work on it.
 */
#ifndef PT_LAUNCH_RUN_H
#define PT_LAUNCH_RUN_H

#include "data/data.h"
#include "launch/config.h"
#include "launch/progress.h"
#include "nn/nn.h"

typedef struct pt_run {
    pt_config cfg;
    pt_arch arch;
    pt_backend *be;
    pt_dataset train, test;
    pt_sampler sampler;
    pt_augment aug;
    pt_segment *seg;   /* every unit of the model (single process) */
    int micro;         /* micro-batches per step */
    int max_micro;     /* most examples in one micro-batch */

    /* training state, all of it in every checkpoint */
    int64_t step;          /* optimizer steps done */
    int64_t epoch;         /* epoch in progress */
    int64_t epoch_step;    /* global batches of that epoch already done */
    pt_lr_schedule lr;
    int64_t total_steps;   /* steps the schedule spans */

    /* host staging for one micro-batch */
    float *images;
    int32_t *tokens, *targets;

    pt_progress progress;
} pt_run;

typedef enum { PT_RUN_TRAIN, PT_RUN_EVAL } pt_run_mode;

/* Builds the run from a validated config: backend, data, model (initialised
 * from the seed or model.init_from). Does not resume; see pt_checkpoint_load. */
int pt_run_open(pt_run *r, const pt_config *cfg, pt_run_mode mode, pt_err *err);
void pt_run_close(pt_run *r);

/* Copies examples ids[0..n) of a dataset into the staging buffers as a batch. */
void pt_run_stage(pt_run *r, const pt_dataset *ds, const int64_t *ids, int n, int augment,
                  pt_batch *batch);

/* train.c */
int pt_train(pt_run *r, pt_err *err);

/* evaluate.c: loss and accuracy over the first `limit` test examples (0 = all).
 * logits: NULL, or room for every row's logits ([examples * rows per example,
 * classes]), filled in test-split order. */
typedef struct pt_eval_result {
    double loss, accuracy;
    int64_t examples, rows;
} pt_eval_result;
int pt_evaluate(pt_run *r, int64_t limit, float *logits, pt_eval_result *out, pt_err *err);
/* GPT only: continues prompt by `length` bytes into out (NUL-terminated, out has length + 1 bytes). */
int pt_sample_text(pt_run *r, const char *prompt, int length, double temperature, int top_k,
                   uint64_t seed, char *out, pt_err *err);

#endif
