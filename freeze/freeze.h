/*
 * freeze.h: the freeze module's public interface: policies that decide how
 * many of the bottom transformer blocks stop training, and their state.
 *
 * Depth is counted in blocks; the embedding freezes with block 0 and the
 * head never freezes, so `frozen units` = 0 for depth 0 and 1 + 2 * depth
 * otherwise (pt_freeze_units). Depth only grows. The module decides; it moves
 * no memory (nn/ releases a frozen unit's gradients and moments, cache/
 * stores activations).
 */
#ifndef PT_FREEZE_H
#define PT_FREEZE_H

#include "nn/nn.h"

#include <jansson.h>
#include <stdio.h>

typedef enum { PT_FREEZE_NONE = 0, PT_FREEZE_SCHEDULE = 1, PT_FREEZE_AUTO = 2 } pt_freeze_kind;

typedef struct pt_freeze_config {
    pt_freeze_kind kind;
    double alpha;   /* freeze ratio: depth after decision t <= ceil(L (1 - (1 - alpha)^t)) */
    int max_depth;  /* never freeze more blocks than this (<= L) */
} pt_freeze_config;

typedef struct pt_freeze_state {
    pt_freeze_config cfg;
    int blocks;        /* L */
    int depth;         /* frozen blocks */
    int decisions;     /* decisions made so far (t) */
    /* auto: per-block gradient norms summed since the last decision over
     * acc_steps steps, and the sums of the previous interval over prev_steps
     * (0: not known, from a checkpoint of a build that did not record it);
     * the change rates, the interval's means per step for the report, and
     * room to sort the rates for their median (made with the state: a
     * decision allocates nothing, so it cannot fail on one rank and differ
     * from its peers') */
    double *acc, *prev, *rate, *sorted, *mean;
    int have_prev;
    int64_t acc_steps, prev_steps;
} pt_freeze_state;

/* What a decision was based on, for the log. */
typedef struct pt_freeze_report {
    int old_depth, new_depth, bound, candidate; /* candidate: what the norms alone say (auto) */
    double threshold;                           /* auto: median change rate of the active blocks */
    const double *norms;                        /* auto: per-block norms of the interval, mean per step [L] */
    const double *rates;                        /* auto: per-block change rates [L] (0 when frozen) */
    int decision;                               /* t, 1-based */
} pt_freeze_report;

int pt_freeze_init(pt_freeze_state *s, const pt_freeze_config *cfg, int blocks, pt_err *err);
void pt_freeze_free(pt_freeze_state *s);

/* The progressive bound after t decisions: ceil(L (1 - (1 - alpha)^t)),
 * computed so that a product that is an integer in exact arithmetic is not
 * pushed to the next integer by rounding. */
int pt_freeze_bound(int blocks, double alpha, int t);

/* Adds one step's per-block gradient norms (L2 norm of the block's two units'
 * gradients; frozen blocks' entries are ignored). */
void pt_freeze_accumulate(pt_freeze_state *s, const double *block_norm);

/* Makes decision t = decisions + 1 and returns the new depth (>= the old). */
int pt_freeze_decide(pt_freeze_state *s, pt_freeze_report *report);

/* Units frozen at a depth: 0, or the embedding and 2 units per block. */
int pt_freeze_units(int depth);

/* The state as a JSON object (doubles round-trip exactly), and back; a
 * resumed run then makes the same decisions. to_json returns NULL when out
 * of memory; from_json, for a state saved at optimizer step `step`, refuses
 * anything malformed with PT_EINPUT, and counts no run of that many steps
 * reaches: more decisions than step + 1 (one before the first step, at most
 * one a step after it), more accumulated steps than step. */
json_t *pt_freeze_to_json(const pt_freeze_state *s);
int pt_freeze_from_json(pt_freeze_state *s, const json_t *j, int64_t step, pt_err *err);

#endif
