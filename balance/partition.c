/*
 * partition.c: the exact contiguous min-max partition. Units 0..n-1 with
 * costs c[i] go into K non-empty contiguous stages; the result minimises the
 * largest stage cost (the pipeline's bottleneck) among partitions in which
 * every stage fits its memory limit.
 *
 * Dynamic programming over prefixes: best[j][i] is the smallest bottleneck of
 * units [0, i) in j stages, best[j][i] = min over k of max(best[j-1][k],
 * cost(k, i)) over the k for which stage j-1 = [k, i) fits. O(K n^2) time,
 * O(K n) memory; exact, unlike greedy or spread-minimising heuristics. Stage
 * memory may depend on the stage index (1F1B keeps K - s micro-batches in
 * flight on stage s), which the DP handles because it knows j.
 * Ties keep the earliest split point, so the result is deterministic.
 */
#include "balance/balance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double stage_memory(const pt_partition_problem *p, int stage, int first, int end)
{
    double fixed = p->mem_fixed_prefix[end] - p->mem_fixed_prefix[first];
    double per_slot = p->mem_slot_prefix[end] - p->mem_slot_prefix[first];
    return fixed + (double)p->slots[stage] * (per_slot - p->mem_slot_less);
}

int pt_partition_solve(const pt_partition_problem *p, int *bounds, double *bottleneck, pt_err *err)
{
    const int n = p->units, K = p->stages;
    if (K < 1 || n < K)
        return pt_fail(err, PT_EINPUT, "cannot cut %d units into %d non-empty stages", n, K);
    double *best = malloc((size_t)(K + 1) * (n + 1) * sizeof *best);
    int *from = malloc((size_t)(K + 1) * (n + 1) * sizeof *from);
    double *prefix = malloc((size_t)(n + 1) * sizeof *prefix);
    if (!best || !from || !prefix) {
        free(best);
        free(from);
        free(prefix);
        return pt_fail(err, PT_ENOMEM, "out of memory partitioning %d units", n);
    }
    prefix[0] = 0;
    for (int i = 0; i < n; i++)
        prefix[i + 1] = prefix[i] + p->cost[i];
#define BEST(j, i) best[(size_t)(j) * (n + 1) + (i)]
#define FROM(j, i) from[(size_t)(j) * (n + 1) + (i)]
    for (int j = 0; j <= K; j++)
        for (int i = 0; i <= n; i++) {
            BEST(j, i) = INFINITY;
            FROM(j, i) = -1;
        }
    BEST(0, 0) = 0;
    for (int j = 1; j <= K; j++)
        for (int i = j; i <= n - (K - j); i++)
            for (int k = j - 1; k < i; k++) {
                if (!isfinite(BEST(j - 1, k)))
                    continue;
                if (p->mem_limit > 0 && stage_memory(p, j - 1, k, i) > p->mem_limit)
                    continue;
                double c = prefix[i] - prefix[k];
                double v = BEST(j - 1, k) > c ? BEST(j - 1, k) : c;
                if (v < BEST(j, i)) {
                    BEST(j, i) = v;
                    FROM(j, i) = k;
                }
            }
    int rc = 0;
    if (!isfinite(BEST(K, n))) {
        rc = pt_fail(err, PT_EINPUT,
                     "no way to cut %d units into %d stages fits their weights, optimizer state "
                     "and saved activations in %.3g bytes per device (what the limit leaves after "
                     "a unit's scratch and the stage-boundary buffers)", n, K,
                     p->mem_limit);
    } else {
        bounds[K] = n;
        for (int j = K, i = n; j > 0; j--) {
            i = FROM(j, i);
            bounds[j - 1] = i;
        }
        if (bottleneck)
            *bottleneck = BEST(K, n);
    }
#undef BEST
#undef FROM
    free(best);
    free(from);
    free(prefix);
    return rc;
}

double pt_partition_cost(const double *cost, const int *bounds, int stage)
{
    double c = 0;
    for (int i = bounds[stage]; i < bounds[stage + 1]; i++)
        c += cost[i];
    return c;
}
