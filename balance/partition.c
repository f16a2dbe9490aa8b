/*
 * partition.c: the exact contiguous min-max partition. Units 0..n-1 with
 * costs c[i] go into K non-empty contiguous stages; the result minimises the
 * largest stage cost (the pipeline's bottleneck) among partitions in which
 * every stage fits its memory limit.
 *
 * Dynamic programming over prefixes: best[j][i] is the smallest bottleneck of
 * units [0, i) in j stages, best[j][i] = min over k of max(best[j-1][k],
 * cost(k, i)) over the k for which stage j-1 = [k, i) fits; exact, unlike
 * greedy or spread-minimising heuristics. Stage memory may depend on the
 * stage index (1F1B keeps K - s micro-batches in flight on stage s), which
 * the DP handles because it knows j. Ties keep the earliest split point, so
 * the result is deterministic.
 *
 * Scanning every k for every (j, i) is O(K n^2), which the planner (which
 * solves thousands of these for hundreds or thousands of units) cannot
 * afford. The scan is only needed when nothing is known of the row's shape,
 * so each row j is filled in one of two ways that choose the same k:
 *  - the monotone sweep, O(n) per row, when for the previous row
 *    best[j-1][k] never decreases with k (infinite, "does not fit", counting
 *    as the largest), the costs are finite and not negative, and the stage
 *    memory never shrinks as a stage grows. Then for a fixed end i the k
 *    whose stage fits are a suffix [lo, i) (a shorter stage takes less), the
 *    finite best[j-1][k] a prefix, cost(k, i) does not increase with k and
 *    best[j-1][k] does not decrease: max(best, cost) falls (it is the cost)
 *    up to the first k where best >= cost, then rises (it is best). The
 *    smallest is either the cost just before that crossing, first reached
 *    at the start of its run of equal costs, or best at the crossing. The
 *    crossing and lo only move right as i grows (cost(k, i) grows with i, a
 *    stage ending later takes more memory), so two pointers find them.
 *  - the full scan otherwise (negative or non-finite costs, prefix sums
 *    that fall, a stage of negative slots, a previous row that falls, as a
 *    stage-dependent memory limit can make it).
 * Both compare the same doubles computed by the same expressions, so the
 * sweep returns the scan's bounds and bottleneck bit for bit: a row keeps
 * the earliest k whose max(best[j-1][k], cost(k, i)) is smallest.
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

/* Whether a stage of the given index and units does not fit. */
static int too_big(const pt_partition_problem *p, int stage, int first, int end)
{
    return p->mem_limit > 0 && stage_memory(p, stage, first, end) > p->mem_limit;
}

/* Bounds under which stage_memory neither overflows nor meets inf - inf or
 * 0 * inf (a NaN compares as fitting): with every term at most this large,
 * slots (an int) times a difference of three of them stays finite. */
#define MEM_MAGNITUDE 1e290

/* Whether p's memory grows with a stage (prefix sums finite and not
 * falling), so that each row's fitting k form a suffix. A stage of negative
 * slots (its memory would fall as it grows) is left to the scan row by
 * row. */
static int memory_monotone(const pt_partition_problem *p)
{
    if (!(p->mem_limit > 0))
        return 1; /* nothing is checked */
    if (!(fabs(p->mem_slot_less) <= MEM_MAGNITUDE))
        return 0;
    for (int i = 0; i <= p->units; i++) {
        const double f = p->mem_fixed_prefix[i], s = p->mem_slot_prefix[i];
        if (!(fabs(f) <= MEM_MAGNITUDE) || !(fabs(s) <= MEM_MAGNITUDE))
            return 0;
        if (i > 0 && !(f >= p->mem_fixed_prefix[i - 1] && s >= p->mem_slot_prefix[i - 1]))
            return 0;
    }
    return 1;
}

/* Whether row j never decreases over the ends it is defined for (an
 * infinite entry, nothing fits, counts as the largest; a NaN fails). */
static int row_monotone(const double *row, int first, int last)
{
    for (int i = first; i < last; i++)
        if (!(row[i] <= row[i + 1]))
            return 0;
    return 1;
}

/* Row j by trying every split point k for every end i: the reference
 * definition. prev is row j - 1, row and from row j's entries. */
static void fill_row_scan(const pt_partition_problem *p, const double *prefix, const double *prev,
                          double *row, int *from, int j)
{
    const int n = p->units, K = p->stages;
    for (int i = j; i <= n - (K - j); i++)
        for (int k = j - 1; k < i; k++) {
            if (!isfinite(prev[k]))
                continue;
            if (too_big(p, j - 1, k, i))
                continue;
            double c = prefix[i] - prefix[k];
            double v = prev[k] > c ? prev[k] : c;
            if (v < row[i]) {
                row[i] = v;
                from[i] = k;
            }
        }
}

/* Row j by the monotone sweep (see the top of the file); the preconditions
 * are the caller's to check. */
static void fill_row_sweep(const pt_partition_problem *p, const double *prefix, const double *prev,
                           double *row, int *from, int j)
{
    const int n = p->units, K = p->stages;
    /* prev is defined up to n - (K - j + 1) = the largest k any i uses; its
     * finite entries are a prefix ending at last_finite */
    int last_finite = j - 2;
    while (last_finite + 1 <= n - (K - j + 1) && isfinite(prev[last_finite + 1]))
        last_finite++;
    int lo = j - 1;    /* every k < lo makes a stage that does not fit */
    int cross = j - 1; /* every k in [lo, cross) has prev[k] < cost(k, i) */
    for (int i = j; i <= n - (K - j); i++) {
        const int hi = i - 1 < last_finite ? i - 1 : last_finite;
        while (lo <= hi && too_big(p, j - 1, lo, i))
            lo++;
        if (lo > hi)
            continue; /* nothing fits: stays infinite, from -1 */
        if (cross < lo)
            cross = lo;
        while (cross <= hi && !(prev[cross] >= prefix[i] - prefix[cross]))
            cross++;
        int k;
        /* the falling part [lo, cross) is smallest at cross - 1; the rising
         * part [cross, hi] at cross; an equal value keeps the earlier k */
        if (cross <= hi && (cross == lo || prefix[i] - prefix[cross - 1] > prev[cross])) {
            k = cross;
        } else {
            /* the first k in [lo, cross) whose cost equals cost(cross - 1, i):
             * usually cross - 1 itself, unless units cost nothing or their
             * cost is lost in the sum's rounding */
            const double least = prefix[i] - prefix[cross - 1];
            k = cross - 1;
            if (k > lo && !(prefix[i] - prefix[k - 1] > least)) {
                int a = lo, b = k - 1; /* the answer is in [a, b] */
                while (a < b) {
                    const int mid = a + (b - a) / 2;
                    if (prefix[i] - prefix[mid] > least)
                        a = mid + 1;
                    else
                        b = mid;
                }
                k = a;
            }
        }
        const double c = prefix[i] - prefix[k];
        row[i] = prev[k] > c ? prev[k] : c;
        from[i] = k;
    }
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
    /* costs that never make a longer stage cheaper (finite prefix sums that
     * do not fall; rounding is monotone, so differences of them keep that) */
    int sweep = memory_monotone(p);
    for (int i = 0; i < n && sweep; i++)
        sweep = isfinite(prefix[i + 1]) && prefix[i + 1] >= prefix[i];
    for (int j = 1; j <= K; j++) {
        const int rows_ok = sweep && (!(p->mem_limit > 0) || p->slots[j - 1] >= 0) &&
                            row_monotone(&BEST(j - 1, 0), j - 1, n - (K - j + 1));
        if (rows_ok)
            fill_row_sweep(p, prefix, &BEST(j - 1, 0), &BEST(j, 0), &FROM(j, 0), j);
        else
            fill_row_scan(p, prefix, &BEST(j - 1, 0), &BEST(j, 0), &FROM(j, 0), j);
    }
    int rc = 0;
    if (!isfinite(BEST(K, n))) {
        rc = pt_fail(err, PT_EINPUT,
                     "no way to cut %d units into %d stage%s fits their weights, optimizer state "
                     "and saved activations in %.3g bytes per device (what the limit leaves after "
                     "a unit's scratch and the stage-boundary buffers)", n, K, K == 1 ? "" : "s",
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

int pt_partition_fits(const pt_partition_problem *p, const int *bounds)
{
    for (int s = 0; s < p->stages; s++)
        if (too_big(p, s, bounds[s], bounds[s + 1]))
            return 0;
    return 1;
}

double pt_partition_cost(const double *cost, const int *bounds, int stage)
{
    double c = 0;
    for (int i = bounds[stage]; i < bounds[stage + 1]; i++)
        c += cost[i];
    return c;
}
