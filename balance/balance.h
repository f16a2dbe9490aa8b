/*
 * balance.h: the balance module's public interface: pricing units and
 * choosing how to lay a model out on pipeline stages. It computes plans; it
 * executes nothing.
 */
#ifndef PT_BALANCE_H
#define PT_BALANCE_H

#include "nn/nn.h"

/* ------------------------------------------------------------ partition */

/* A contiguous min-max partition problem. Costs are per unit; memory of a
 * stage covering units [a, b) is fixed(a, b) + slots[stage] * per_slot(a, b),
 * given as prefix sums (length units + 1). mem_limit <= 0: no limit. */
typedef struct pt_partition_problem {
    int units, stages;
    const double *cost;
    const double *mem_fixed_prefix, *mem_slot_prefix;
    const int *slots;
    double mem_limit;
} pt_partition_problem;

/* bounds gets stages + 1 entries: stage s holds units [bounds[s], bounds[s+1]).
 * PT_EINPUT when no partition fits. */
int pt_partition_solve(const pt_partition_problem *p, int *bounds, double *bottleneck, pt_err *err);
double pt_partition_cost(const double *cost, const int *bounds, int stage);

#endif
