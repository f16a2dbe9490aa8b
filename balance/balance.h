/*
 * balance.h: the balance module's public interface: pricing units and
 * choosing how to lay a model out on pipeline stages. It computes plans; it
 * executes nothing.
 */
#ifndef PT_BALANCE_H
#define PT_BALANCE_H

#include "nn/nn.h"

#include <stdio.h>

/* ------------------------------------------------------------ partition */

/* A contiguous min-max partition problem. Costs are per unit; memory of a
 * stage covering units [a, b) is
 * fixed(a, b) + slots[stage] * (per_slot(a, b) - mem_slot_less), fixed and
 * per_slot given as prefix sums (length units + 1): mem_slot_less is what a
 * stage's slot holds less than its units' sum (a unit's output, counted
 * with each unit, is kept inside a stage but not after its last unit).
 * mem_limit <= 0: no limit. */
typedef struct pt_partition_problem {
    int units, stages;
    const double *cost;
    const double *mem_fixed_prefix, *mem_slot_prefix;
    const int *slots;
    double mem_limit;
    double mem_slot_less;
} pt_partition_problem;

/* bounds gets stages + 1 entries: stage s holds units [bounds[s], bounds[s+1]).
 * PT_EINPUT when no partition fits. */
int pt_partition_solve(const pt_partition_problem *p, int *bounds, double *bottleneck, pt_err *err);
/* Whether every stage of bounds fits p's memory limit (always, without
 * one), by the measure pt_partition_solve checks. When the partition
 * pt_partition_solve returns for p without its limit fits, it is also what
 * pt_partition_solve returns for p, bottleneck and all: the limit only
 * removes split points, and none the returned partition uses. */
int pt_partition_fits(const pt_partition_problem *p, const int *bounds);
double pt_partition_cost(const double *cost, const int *bounds, int stage);

/* ------------------------------------------------------------ cost model */

enum { PT_COST_WORK_STEPS = 32 };

/* One unit's measured cost at the two profiled micro-batch sizes. */
typedef struct pt_unit_cost {
    double fwd[2], bwd[2];         /* seconds per micro-batch */
    double param_bytes;            /* parameters */
    double state_bytes;            /* gradients and AdamW moments (released when frozen) */
    double saved_bytes[2];         /* activations kept per micro-batch in flight */
    double scratch_bytes[2];       /* working memory while the unit runs */
} pt_unit_cost;

typedef struct pt_cost_model {
    int units;
    int batch[2];                  /* the profiled micro-batch sizes */
    double boundary_bytes_per_example;
    /* what the backend keeps for the linear layers beside every stage at
     * micro-batches of up to 2^i examples (nn.h pt_arch_linear_work_bytes;
     * pt_cost_linear_work): from the model and the backend, never from a
     * profile */
    double linear_work_bytes[PT_COST_WORK_STEPS];
    pt_unit_cost *unit;            /* [units] */
} pt_cost_model;

/* The cost model's sizes alone (parameters, their state, activations and
 * scratch at micro-batch sizes small and large), every time 0: what memory
 * a layout takes, known without running anything. */
int pt_cost_sizes(pt_cost_model *m, const pt_arch *a, const pt_backend *be, int small, int large,
                  pt_err *err);
/* The micro-batch sizes a run of `batch` on `ranks` ranks times a's units
 * at (and so the two sizes a planned layout's memory is interpolated
 * between): the smallest and the largest a layout can pick, the larger no
 * more than one unit's timing fits in under mem_limit (0: none). */
void pt_cost_timed_sizes(const pt_arch *a, const pt_backend *be, int64_t batch, int ranks,
                         double mem_limit, int *small, int *large);
/* Those sizes, and every unit timed on this backend at micro-batch sizes
 * small and large (small <= large). */
int pt_cost_profile(pt_cost_model *m, const pt_arch *a, pt_backend *be, int small, int large,
                    pt_err *err);
/* Times unit u of a model pt_cost_sizes made (both of its sizes), as
 * pt_cost_profile does for every unit; on failure m is left for the caller
 * to free. */
int pt_cost_profile_unit(pt_cost_model *m, const pt_arch *a, pt_backend *be, int u, pt_err *err);
void pt_cost_model_free(pt_cost_model *m);
/* Seconds of unit u per micro-batch of n examples: forward, plus backward
 * unless frozen, plus a second forward under recompute. */
double pt_cost_time(const pt_cost_model *m, int u, int n, int frozen, int recompute);
double pt_cost_saved_bytes(const pt_cost_model *m, int u, int n);
double pt_cost_scratch_bytes(const pt_cost_model *m, int u, int n);
/* What timing unit u of `a` at n examples holds at once
 * (pt_cost_profile_unit): its segment of one unit (parameters, their
 * training state, saved activations, scratch and the two buffers of
 * activation gradients), the backend's work for the linear layers, and the
 * timing's own input, output and gradient buffers and host data. */
double pt_cost_timing_bytes(const pt_cost_model *m, const pt_arch *a, int u, int n);
/* Fills m's linear_work_bytes for `a` on `be` (pt_cost_sizes does). */
void pt_cost_set_linear_work(pt_cost_model *m, const pt_arch *a, const pt_backend *be);
/* What the backend keeps for the linear layers at micro-batches of n
 * examples: the count at the next power of two (it never shrinks as n
 * grows, so this is not less than the count at n). */
double pt_cost_linear_work(const pt_cost_model *m, int n);

/* ----------------------------------------------------------------- plans */

#define PT_MAX_STAGES 64
#define PT_PLAN_ALTS 6

/* Schedules as the planner sees them: only their activation footprint
 * differs (GPipe keeps all M micro-batches in flight, 1F1B K - s on stage s). */
enum { PT_PLAN_GPIPE = 0, PT_PLAN_1F1B = 1 };

typedef struct pt_plan_request {
    int ranks;             /* world ranks */
    const int *node_of;    /* [ranks] node index of every rank (NULL: one node) */
    int stages, replicas, micro; /* fixed, or <= 0 to search */
    int schedule;          /* PT_PLAN_GPIPE or PT_PLAN_1F1B */
    int recompute;
    int64_t batch;         /* global batch: examples per step over all replicas */
    double mem_limit;      /* bytes per rank; <= 0: unlimited */
    int cores;             /* cores of a node */
    int threads;           /* threads each rank used while profiling; ranks of a node that
                              need more than `cores` threads in all share them, and run slower */
    int frozen_units;      /* leading units that no longer train: priced forward-only and without
                              gradient or optimizer memory */
    int cached_units;      /* the first of them (<= frozen_units) whose output the activation
                              cache may serve: priced zero and placed in front of stage 0, all
                              of them, or fewer where only that fits (the plan's cached_units) */
    /* the gradient all-reduce between replicas: bytes/s within a node and
     * between nodes, seconds per message; 0 bandwidth = free */
    double bw_intra, bw_inter, latency;
    int overlap;           /* the all-reduce overlaps the last micro-batch's backward */
    /* bytes per example of the replica's share of a step that a rank
     * stages in host memory, when that is the device's (the CPU backend; 0
     * for a GPU's) */
    double staging_bytes_per_example;
    /* the gradient all-reduce among D >= 2 replicas receives the other
     * replicas' copies of the chunk a rank sums, (D - 1) / D of its stage's
     * active gradients, into buffers of its own: 1 when those are the
     * device's memory (the CPU backend; a GPU's are in host memory, or
     * NCCL's) */
    int reduce_buffers;
} pt_plan_request;

/* A candidate the planner priced, for explaining its choice. */
typedef struct pt_plan_candidate {
    int stages, replicas, micro;
    int feasible;
    double step_time;      /* when feasible */
    char why[160];         /* what made it lose */
    int short_of_examples; /* not feasible because a replica's share of the batch is smaller
                              than the micro-batch count (else: for memory) */
} pt_plan_candidate;

typedef struct pt_plan {
    int stages, replicas, micro, micro_batch;
    int bounds[PT_MAX_STAGES + 1];         /* stage s: units [bounds[s], bounds[s+1]) */
    double stage_time[PT_MAX_STAGES];      /* predicted compute seconds per step */
    double stage_mem[PT_MAX_STAGES];       /* predicted bytes */
    double stage_grad_bytes[PT_MAX_STAGES]; /* all-reduced per step (active units only) */
    double step_time;                      /* compute + bubble + transfers + exposed all-reduce */
    double compute_time;                   /* M * bottleneck micro-batch time */
    double bubble_time;                    /* (K - 1) * bottleneck */
    double transfer_time;                  /* stage-to-stage activations and gradients */
    double allreduce_time;                 /* all-reduce of the largest stage, whole */
    double exposed_time;                   /* the part of it not hidden behind compute */
    double ideal_time;                     /* total compute / K */
    double bubble;                         /* (K - 1) / (M + K - 1) */
    double imbalance;                      /* max / mean stage compute */
    int spans_nodes;                       /* replicas on more than one node */
    int cached_units;                      /* of the request's cached_units, those the cache
                                              serves in this layout: all of them, or the most
                                              that leave stage 0 room (pt_plan_make) */
    int n_alt;
    pt_plan_candidate alt[PT_PLAN_ALTS];   /* the best runners-up, fastest first */
} pt_plan;

int pt_plan_make(pt_plan *out, const pt_plan_request *req, const pt_cost_model *cm, pt_err *err);

/* What stage s of the layout (K, D, M, micro-batches of b examples, bounds)
 * holds, by the count pt_plan_make plans under (the plan's stage_mem is
 * their sum), in parts, for messages that say which is too large. */
typedef struct pt_stage_bytes {
    double weights;       /* its units' parameters, with the gradients, AdamW moments and
                             all-reduce receive buffers (req.reduce_buffers) of those that
                             train */
    double micro_batches; /* what grows with the micro-batch: each slot in flight's outputs
                             between units and what the training units save, the frozen
                             units' work area and outputs in the prefix slot, the largest
                             scratch, the two buffers of activation gradients */
    double step;          /* what grows with the replica's share of a step (M b): the stage's
                             input and output buffers and their gradients per micro-batch,
                             and the share staged in host memory */
    double linear_work;   /* what the backend keeps for the linear layers */
} pt_stage_bytes;
void pt_plan_stage_bytes(const pt_cost_model *cm, const pt_plan_request *req, int K, int D, int M,
                         int b, const int *bounds, int s, pt_stage_bytes *out);

/* The least memory any layout takes per device, by the measure
 * pt_plan_make checks (stage_memory): one example per micro-batch, the
 * unit on a stage of its own with one micro-batch in flight, the largest
 * unit's scratch beside it; the first frozen_units units hold no state and
 * save no activations. The unit that needs the most goes to *unit, its own
 * bytes to *own and the scratch to *scratch. No layout fits a memory
 * limit below *own + *scratch. Sizes only: cm's times are not read. */
void pt_plan_least_memory(const pt_cost_model *cm, int frozen_units, int *unit, double *own,
                          double *scratch);
void pt_plan_print(const pt_plan *p, const pt_arch *a, FILE *out);

#endif
