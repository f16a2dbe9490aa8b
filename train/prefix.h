/*
 * prefix.h (internal to train/): the source of the first stage's input when
 * the model's frozen prefix is in front of it (see prefix.c). It plugs into
 * pipe/'s executor as a pt_stage_input_fn.
 */
#ifndef PT_TRAIN_PREFIX_H
#define PT_TRAIN_PREFIX_H

#include "cache/cache.h"
#include "nn/nn.h"

struct pt_run;
typedef struct pt_prefix pt_prefix;

/* slot: a segment slot no micro-batch uses; cache: NULL to always compute. */
int pt_prefix_create(pt_prefix **out, struct pt_run *r, int slot, pt_cache *cache, pt_err *err);
void pt_prefix_destroy(pt_prefix *p);
/* The pt_stage_input_fn. Training samples served from the cache and computed
 * are counted in the run's step_hits and step_computed (this rank's, which
 * the step's combine adds to the epoch's cache_hits and prefix_computed). */
int pt_prefix_input(void *ctx, int mb, const pt_batch *batch, int training, void *x, pt_err *err);

#endif
