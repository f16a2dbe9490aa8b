/*
 * dp.h: the dp module's public interface: data parallelism across pipeline
 * replicas and changes of layout.
 *
 *  - moves (moves.c): the difference between two layouts as a pure list of
 *    unit transfers (which rank sends which part of which unit to which), so
 *    it can be tested without MPI; transfer.c executes such a list.
 *  - the gradient all-reduce (reduce.c) among the replicas of one stage:
 *    bucketed over the stage's active units, started as soon as a bucket's
 *    gradients are final so it overlaps the rest of the backward, and summed
 *    in replica order so every replica gets the same bits, run after run.
 */
#ifndef PT_DP_H
#define PT_DP_H

#include "comm/comm.h"
#include "nn/nn.h"

/* --------------------------------------------------------- layout changes */

/* What a layout change needs to know of a layout. */
typedef struct pt_dp_layout {
    const pt_mesh *mesh;  /* who is (replica, stage) */
    const int *bounds;    /* [stages + 1]: stage s holds units [bounds[s], bounds[s+1]) */
    int frozen_units;     /* units [0, F) are frozen: no moments */
} pt_dp_layout;

/* One transfer: `part` (PT_PART_PARAM, _M or _V) of `unit` from world rank
 * src to world rank dst; src == dst is a copy within the rank. */
typedef struct pt_dp_move {
    int unit, part, src, dst;
} pt_dp_move;

typedef struct pt_dp_moves {
    int count;
    pt_dp_move *move;
} pt_dp_moves;

/* Every transfer that gives each rank of `to` the units its stage holds:
 * parameters always, moments for units that train in `to` (frozen units only
 * grow, so they trained in `from` too). A rank that held a unit before keeps
 * its own copy; otherwise the source is a rank that held it, on the
 * destination's node when one did, spreading the sending over the holders.
 * node_of: [world ranks] node index. Deterministic: every rank computes the
 * same list. */
int pt_dp_plan_moves(pt_dp_moves *out, const pt_dp_layout *from, const pt_dp_layout *to,
                     const int *node_of, pt_err *err);
void pt_dp_moves_free(pt_dp_moves *m);

/* Carries out this rank's part of the moves over `world` (group rank = world
 * rank): local copies, sends from old_seg, receives into new_seg (either may
 * be NULL where this rank holds nothing). Collective over every rank named in
 * the moves. *bytes gets the bytes this rank sent. Backend memory goes
 * through host copies when it is not host memory. */
int pt_dp_execute_moves(const pt_dp_moves *m, pt_group *world, int me, pt_segment *old_seg,
                        pt_segment *new_seg, uint64_t *bytes, pt_err *err);

/* ------------------------------------------------- the gradient all-reduce */

typedef struct pt_reducer pt_reducer;

typedef struct pt_reducer_stats {
    uint64_t bytes;       /* gradient bytes all-reduced by this rank this step */
    double total_s;       /* from the first bucket started to the last one done */
    double exposed_s;     /* the part spent waiting in pt_reducer_finish */
} pt_reducer_stats;

/* A reducer for the active units of seg among the replicas of its stage
 * (group rank = replica index; NULL or one member: nothing to do). Buckets
 * hold at least bucket_bytes of gradient (the last one less). overlap 0:
 * nothing starts before pt_reducer_finish. */
int pt_reducer_create(pt_reducer **out, pt_group *replicas, pt_segment *seg, size_t bucket_bytes,
                      int overlap, pt_err *err);
void pt_reducer_destroy(pt_reducer *r);
/* At the start of a step. */
void pt_reducer_begin(pt_reducer *r);
/* Unit u's gradient is final for this step (called for every active unit,
 * in the order backward finishes them: last unit first). Starts the buckets
 * it completes. Errors are kept and returned by pt_reducer_finish. */
void pt_reducer_unit_done(pt_reducer *r, int unit);
/* Lets transfers in flight advance; never waits. */
void pt_reducer_progress(pt_reducer *r);
/* Starts what is left and waits for every bucket (with the group's
 * deadline): afterwards every replica holds the same summed gradients. */
int pt_reducer_finish(pt_reducer *r, pt_reducer_stats *stats, pt_err *err);

#endif
