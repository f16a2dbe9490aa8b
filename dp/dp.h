/*
 * dp.h: the dp module's public interface: executing changes of layout. When
 * the plan changes (a re-partition after a freeze decision), units move to
 * their new owners with the state they need: parameters always, AdamW
 * moments while the unit still trains. (Replicas of pipelines and their
 * gradient all-reduce belong here too when data parallelism lands.)
 */
#ifndef PT_DP_H
#define PT_DP_H

#include "comm/comm.h"
#include "nn/nn.h"

/* Moves every unit's state from the old partition to the new one. Stage s
 * held units [old_bounds[s], old_bounds[s+1]) in old_seg and will hold
 * [new_bounds[s], new_bounds[s+1]) in new_seg, created with the model's first
 * `frozen_units` units frozen (which only grows, so every unit that trains in
 * the new layout trained in the old one). Collective over pipe (group rank =
 * stage; NULL for one stage). Backend memory must be host memory. */
int pt_dp_move_units(pt_group *pipe, int stage, int stages, const int *old_bounds,
                     const int *new_bounds, int frozen_units, pt_segment *old_seg,
                     pt_segment *new_seg, pt_err *err);

#endif
