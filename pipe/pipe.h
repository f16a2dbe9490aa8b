/*
 * pipe.h: the pipe module's public interface: pipeline schedules as data, and
 * (later in this header) the executor that runs one stage's part of a
 * schedule. pipe/ does not choose partitions; balance/ does.
 */
#ifndef PT_PIPE_H
#define PT_PIPE_H

#include "comm/comm.h"
#include "nn/nn.h"

#include <stdio.h>

/* ------------------------------------------------------------- schedules */

typedef enum { PT_SCHED_GPIPE = 0, PT_SCHED_1F1B = 1 } pt_sched_kind;

typedef enum {
    PT_A_FWD,       /* forward of a micro-batch through this stage */
    PT_A_BWD,       /* backward of a micro-batch */
    PT_A_SEND_ACT,  /* output activation to the next stage */
    PT_A_RECV_ACT,  /* input activation from the previous stage */
    PT_A_SEND_GRAD, /* input gradient to the previous stage */
    PT_A_RECV_GRAD  /* output gradient from the next stage */
} pt_action_kind;

typedef struct pt_action {
    pt_action_kind kind;
    int mb;    /* micro-batch */
    int fused; /* 1: completes together with the next action (one transfer group) */
} pt_action;

/* For every stage, its list of actions in one training step. Stages before
 * `trainable` hold only frozen units: they run forwards only, and no
 * gradient flows back to them. */
typedef struct pt_schedule {
    pt_sched_kind kind;
    int stages, micro, trainable;
    int *len;         /* [stages] */
    pt_action **act;  /* [stages][len[s]] */
} pt_schedule;

int pt_schedule_build(pt_schedule *s, pt_sched_kind kind, int stages, int micro, int trainable,
                      pt_err *err);
void pt_schedule_free(pt_schedule *s);
/* Structure (each micro-batch forwarded and backwarded once per stage, in
 * dependency order, every send matched by the peer's receive) and a
 * deadlock-free run under rendezvous semantics. */
int pt_schedule_validate(const pt_schedule *s, pt_err *err);
/* The rendezvous simulation alone; rounds gets the number of lock-step rounds. */
int pt_schedule_simulate(const pt_schedule *s, int *rounds, pt_err *err);
/* Most micro-batches whose activations a stage holds at once (forward done,
 * backward not yet): the activation slots it needs. */
int pt_schedule_in_flight(const pt_schedule *s, int stage);
void pt_schedule_print(const pt_schedule *s, FILE *out);
const char *pt_action_name(pt_action_kind k);

/* -------------------------------------------------------------- executor */

/* One rank's stage of a pipeline: its segment, its place in the schedule and
 * the group of the pipeline's ranks (group rank == stage index; NULL for a
 * one-stage pipeline). */
/* A source for the first stage's input in place of running its first units:
 * it writes the activation that enters segment unit `input_unit` for
 * micro-batch mb into x ([n, T, d], backend memory); the units before it are
 * frozen and are not run by the stage. `training` is 0 for evaluation. */
typedef int (*pt_stage_input_fn)(void *ctx, int mb, const pt_batch *batch, int training, void *x,
                                 pt_err *err);

/* Optional callbacks into the layer above the executor (the gradient
 * all-reduce): unit_done(ctx, unit) after each unit's backward in the step's
 * last backward, when that unit's gradient for the step is final; progress
 * between actions, to let transfers in flight advance. */
typedef struct pt_stage_hooks {
    void (*unit_done)(void *ctx, int unit);
    void (*progress)(void *ctx);
    void *ctx;
} pt_stage_hooks;

typedef struct pt_stage_spec {
    const pt_schedule *sched;
    int stage;
    pt_group *pipe;
    pt_segment *seg;   /* created with pt_stage_exec_slots() slots */
    int max_micro;     /* most examples in one micro-batch */
    int recompute;     /* keep only the stage input per micro-batch; recompute in backward */
    pt_stage_input_fn input; /* stage 0 only, or NULL */
    void *input_ctx;
    int input_unit;          /* the segment unit the source's activation enters (units before it
                                must be frozen) */
    pt_stage_hooks hooks;    /* all NULL: none */
    int replica;             /* for messages: which replica this stage belongs to */
    /* where the executor publishes pt_stage_exec_where's string each time
     * it changes, for a signal handler that may read it at any moment (the
     * string it points at is never rewritten while published); NULL: none */
    const char *volatile *publish_where;
} pt_stage_spec;

typedef struct pt_stage_exec pt_stage_exec;

/* Where one step's time went on this stage (seconds). compute_cpu is the
 * process CPU time of forward and backward actions: unlike wall time it does
 * not grow when ranks share a core. */
typedef struct pt_exec_times {
    double step_wall, compute_wall, compute_cpu, comm_wall;
} pt_exec_times;

/* Activation slots the stage's segment needs. */
int pt_stage_exec_slots(const pt_schedule *s, int stage, int recompute);
int pt_stage_exec_create(pt_stage_exec **out, const pt_stage_spec *spec, pt_err *err);
void pt_stage_exec_destroy(pt_stage_exec *x);
/* One training step: batches[m] is micro-batch m (host data; the first stage
 * reads the inputs, the last the targets, all read n). Gradients accumulate
 * in the segment; the last stage adds the loss to *stats. */
int pt_stage_exec_step(pt_stage_exec *x, const pt_batch *batches, pt_stats *stats, pt_err *err);
/* Forward only (evaluation, sampling) of n_micro <= M micro-batches, in slot 0. */
int pt_stage_exec_forward(pt_stage_exec *x, const pt_batch *batches, int n_micro, pt_stats *stats,
                          pt_err *err);
/* The action in progress, e.g. "step 12, stage 1, action 7 of 36: recv-grad
 * of micro-batch 3 (stage 2)". */
const char *pt_stage_exec_where(const pt_stage_exec *x);
const pt_exec_times *pt_stage_exec_times(const pt_stage_exec *x);

#endif
