/*
 * test_partition.c: the partition solver against brute force. For random
 * cost vectors (up to 12 units, up to 5 stages) the solver's bottleneck equals
 * the best over every contiguous partition, with and without memory limits
 * (including limits that depend on the stage index), every stage it returns
 * fits, and infeasible problems are reported.
 *
 * The solver fills most rows of its DP by a monotone sweep instead of trying
 * every split point; the old O(K n^2) DP is kept here as the reference, and
 * on random problems up to 200 units (many tied costs and zero costs, costs
 * lost in the rounding of large sums, memory limits that rule out stages,
 * slot counts that rise with the stage index so that a row can fall,
 * negative costs and memory that shrinks as a stage grows, where the solver
 * must scan) the solver returns its bounds and bottleneck bit for bit. A cut
 * without the memory limit that fits it is what the limited solve returns
 * (the planner reuses such cuts).
 */
#include "balance/balance.h"
#include "tests/common/cunit_main.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int n, K;
    double cost[16], fixed[17], slot[17], limit;
    int slots[8];
} problem;

static double stage_mem(const problem *p, int s, int a, int b)
{
    return p->fixed[b] - p->fixed[a] + p->slots[s] * (p->slot[b] - p->slot[a]);
}

/* Best bottleneck over all compositions of n into K positive parts. */
static double brute(const problem *p, int stage, int first, double worst)
{
    if (stage == p->K)
        return first == p->n ? worst : INFINITY;
    double best = INFINITY;
    for (int end = first + 1; end <= p->n - (p->K - stage - 1); end++) {
        if (p->limit > 0 && stage_mem(p, stage, first, end) > p->limit)
            continue;
        double c = 0;
        for (int i = first; i < end; i++)
            c += p->cost[i];
        double v = brute(p, stage + 1, end, worst > c ? worst : c);
        best = v < best ? v : best;
    }
    return best;
}

static void random_problem(problem *p, pt_rng *rng, int with_memory)
{
    p->n = 1 + (int)pt_rng_below(rng, 12);
    p->K = 1 + (int)pt_rng_below(rng, (uint64_t)(p->n < 5 ? p->n : 5));
    p->fixed[0] = p->slot[0] = 0;
    for (int i = 0; i < p->n; i++) {
        /* integers sometimes, so ties are common and tie handling is exercised */
        p->cost[i] = pt_rng_below(rng, 2) ? (double)(1 + pt_rng_below(rng, 5)) : pt_rng_uniform(rng) * 10;
        p->fixed[i + 1] = p->fixed[i] + 1 + (double)pt_rng_below(rng, 4);
        p->slot[i + 1] = p->slot[i] + (double)pt_rng_below(rng, 3);
    }
    for (int s = 0; s < p->K; s++)
        p->slots[s] = p->K - s; /* 1F1B: the first stages hold more micro-batches */
    p->limit = with_memory ? 4 + pt_rng_uniform(rng) * 20 : 0;
}

static void check_random(int with_memory)
{
    pt_rng rng;
    pt_rng_seed(&rng, with_memory ? 11 : 7, 0);
    int solved = 0, infeasible = 0;
    for (int trial = 0; trial < 3000; trial++) {
        problem p;
        random_problem(&p, &rng, with_memory);
        pt_partition_problem q = {p.n, p.K, p.cost, p.fixed, p.slot, p.slots, p.limit, 0};
        int bounds[9];
        double got;
        pt_err err = {0};
        double want = brute(&p, 0, 0, 0);
        int rc = pt_partition_solve(&q, bounds, &got, &err);
        if (!isfinite(want)) {
            CU_ASSERT_EQUAL(rc, PT_EINPUT);
            infeasible++;
            continue;
        }
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        CU_ASSERT(fabs(got - want) <= 1e-12 * (1 + want));
        CU_ASSERT_EQUAL(bounds[0], 0);
        CU_ASSERT_EQUAL(bounds[p.K], p.n);
        double worst = 0;
        for (int s = 0; s < p.K; s++) {
            CU_ASSERT(bounds[s + 1] > bounds[s]);
            if (p.limit > 0)
                CU_ASSERT(stage_mem(&p, s, bounds[s], bounds[s + 1]) <= p.limit);
            double c = pt_partition_cost(p.cost, bounds, s);
            worst = c > worst ? c : worst;
        }
        CU_ASSERT(fabs(worst - got) <= 1e-12 * (1 + got));
        solved++;
    }
    printf(" [%d solved, %d infeasible]", solved, infeasible);
    CU_ASSERT(solved > 1000);
    if (with_memory)
        CU_ASSERT(infeasible > 50);
}

static void matches_brute_force(void) { check_random(0); }
static void matches_brute_force_with_memory(void) { check_random(1); }

static void rejects_impossible(void)
{
    double cost[3] = {1, 2, 3}, prefix[4] = {0, 1, 2, 3};
    int slots[4] = {1, 1, 1, 1}, bounds[5];
    pt_err err = {0};
    pt_partition_problem q = {3, 4, cost, prefix, prefix, slots, 0, 0};
    CU_ASSERT_EQUAL(pt_partition_solve(&q, bounds, NULL, &err), PT_EINPUT); /* more stages than units */
    q.stages = 2;
    q.mem_limit = 1.5; /* no stage of >= 1 unit costs under 2 with one slot */
    CU_ASSERT_EQUAL(pt_partition_solve(&q, bounds, NULL, &err), PT_EINPUT);
}

/* The solver as it was before the monotone sweep: every split point of
 * every (j, i), the earliest of equal values kept. */
static int reference_solve(const pt_partition_problem *p, int *bounds, double *bottleneck)
{
    const int n = p->units, K = p->stages;
    if (K < 1 || n < K)
        return PT_EINPUT;
    double *best = malloc((size_t)(K + 1) * (n + 1) * sizeof *best);
    int *from = malloc((size_t)(K + 1) * (n + 1) * sizeof *from);
    double *prefix = malloc((size_t)(n + 1) * sizeof *prefix);
    prefix[0] = 0;
    for (int i = 0; i < n; i++)
        prefix[i + 1] = prefix[i] + p->cost[i];
    for (int j = 0; j <= K; j++)
        for (int i = 0; i <= n; i++) {
            best[j * (n + 1) + i] = INFINITY;
            from[j * (n + 1) + i] = -1;
        }
    best[0] = 0;
    for (int j = 1; j <= K; j++)
        for (int i = j; i <= n - (K - j); i++)
            for (int k = j - 1; k < i; k++) {
                const double before = best[(j - 1) * (n + 1) + k];
                if (!isfinite(before))
                    continue;
                if (p->mem_limit > 0) {
                    double fixed = p->mem_fixed_prefix[i] - p->mem_fixed_prefix[k];
                    double per_slot = p->mem_slot_prefix[i] - p->mem_slot_prefix[k];
                    if (fixed + (double)p->slots[j - 1] * (per_slot - p->mem_slot_less) > p->mem_limit)
                        continue;
                }
                double c = prefix[i] - prefix[k];
                double v = before > c ? before : c;
                if (v < best[j * (n + 1) + i]) {
                    best[j * (n + 1) + i] = v;
                    from[j * (n + 1) + i] = k;
                }
            }
    int rc = 0;
    if (!isfinite(best[K * (n + 1) + n])) {
        rc = PT_EINPUT;
    } else {
        bounds[K] = n;
        for (int j = K, i = n; j > 0; j--) {
            i = from[j * (n + 1) + i];
            bounds[j - 1] = i;
        }
        *bottleneck = best[K * (n + 1) + n];
    }
    free(best);
    free(from);
    free(prefix);
    return rc;
}

enum { BIG_UNITS = 200, BIG_STAGES = 12 };

typedef struct {
    int n, K;
    double cost[BIG_UNITS], fixed[BIG_UNITS + 1], slot[BIG_UNITS + 1], less, limit;
    int slots[BIG_STAGES];
    int odd; /* 1 negative costs, 2 memory that falls, 3 negative slots: the solver's scan */
} big_problem;

/* Memory in small integers, so that every stage's bytes are exact however
 * the compiler contracts the solver's and the reference's arithmetic; the
 * costs are what the sweep's ties and rounding are about. */
static void random_big(big_problem *p, pt_rng *rng)
{
    const int small = pt_rng_below(rng, 2);
    p->n = 1 + (int)pt_rng_below(rng, small ? 24 : BIG_UNITS);
    const int k_max = p->n < BIG_STAGES ? p->n : BIG_STAGES;
    p->K = 1 + (int)pt_rng_below(rng, (uint64_t)k_max);
    const int cost_kind = (int)pt_rng_below(rng, 5);
    const int odd = pt_rng_below(rng, 4) == 0 ? 1 + (int)pt_rng_below(rng, 3) : 0;
    p->odd = odd;
    for (int i = 0; i < p->n; i++) {
        double c;
        switch (cost_kind) {
        case 0: c = (double)pt_rng_below(rng, 3); break;            /* ties and zeros */
        case 1: c = pt_rng_uniform(rng); break;
        case 2: c = pt_rng_below(rng, 4) ? 1.0 : 0.0; break;        /* runs of zeros */
        case 3: /* a huge unit in front: later costs vanish in the sums' rounding */
            c = i == 0 ? 1e17 : (double)pt_rng_below(rng, 5);
            break;
        default: c = pt_rng_below(rng, 3) ? pt_rng_uniform(rng) : 1e16 * pt_rng_uniform(rng); break;
        }
        if (odd == 1 && pt_rng_below(rng, 6) == 0)
            c = -c - 1;
        p->cost[i] = c;
    }
    p->fixed[0] = p->slot[0] = 0;
    for (int i = 0; i < p->n; i++) {
        double f = (double)pt_rng_below(rng, 4), s = (double)pt_rng_below(rng, 3);
        if (odd == 2 && pt_rng_below(rng, 3) == 0)
            f = -4;
        p->fixed[i + 1] = p->fixed[i] + f;
        p->slot[i + 1] = p->slot[i] + s;
    }
    p->less = (double)pt_rng_below(rng, 3);
    const int slots_kind = (int)pt_rng_below(rng, 4);
    for (int s = 0; s < p->K; s++) {
        switch (slots_kind) {
        case 0: p->slots[s] = p->K - s; break;                     /* 1F1B */
        case 1: p->slots[s] = 3; break;                            /* GPipe, recompute */
        case 2: p->slots[s] = 1 + s; break;                        /* rising: rows may fall */
        default: p->slots[s] = (int)pt_rng_below(rng, 5); break;
        }
        if (odd == 3 && pt_rng_below(rng, 2) == 0)
            p->slots[s] = -1 - (int)pt_rng_below(rng, 2);
    }
    /* no limit, or one around what a stage of n / K units takes */
    if (pt_rng_below(rng, 4) == 0) {
        p->limit = 0;
    } else {
        const double typical = (p->fixed[p->n] + 2 * p->slot[p->n]) / p->K;
        p->limit = (0.3 + 1.5 * pt_rng_uniform(rng)) * (typical > 1 ? typical : 1);
    }
}

static pt_partition_problem as_problem(const big_problem *p)
{
    pt_partition_problem q = {p->n, p->K, p->cost, p->fixed, p->slot, p->slots, p->limit, p->less};
    return q;
}

/* Bounds and bottleneck equal bit for bit; both failing counts as equal. */
static int same_solution(const pt_partition_problem *q, int *got_rc)
{
    int want[BIG_STAGES + 1], got[BIG_STAGES + 1];
    double want_b = -1, got_b = -1;
    pt_err err = {0};
    const int want_rc = reference_solve(q, want, &want_b);
    *got_rc = pt_partition_solve(q, got, &got_b, &err);
    if (want_rc != 0 || *got_rc != 0)
        return want_rc == *got_rc;
    return memcmp(want, got, (size_t)(q->stages + 1) * sizeof *got) == 0 &&
           memcmp(&want_b, &got_b, sizeof got_b) == 0;
}

static void matches_the_reference_dp(void)
{
    pt_rng rng;
    pt_rng_seed(&rng, 23, 0);
    int same = 0, differ = 0, infeasible = 0, odd = 0, limited = 0;
    for (int trial = 0; trial < 4000; trial++) {
        big_problem p;
        random_big(&p, &rng);
        pt_partition_problem q = as_problem(&p);
        int rc;
        if (same_solution(&q, &rc)) {
            same++;
        } else {
            if (differ++ < 5) {
                printf("\n  differs: trial %d, %d units in %d stages, limit %g", trial, p.n, p.K,
                       p.limit);
            }
        }
        infeasible += rc != 0;
        odd += p.odd != 0;
        limited += p.limit > 0 && rc == 0;
    }
    printf(" [%d the same, %d infeasible, %d with a limit, %d odd]", same, infeasible, limited, odd);
    CU_ASSERT_EQUAL(differ, 0);
    CU_ASSERT(infeasible > 100);
    CU_ASSERT(limited > 1000);
    CU_ASSERT(odd > 100);
}

/* Long runs of equal costs and equal values: every unit costs 1 or 0, so
 * nearly every (j, i) has several split points of the same value. */
static void ties_keep_the_earliest_split(void)
{
    pt_rng rng;
    pt_rng_seed(&rng, 29, 0);
    int differ = 0;
    for (int trial = 0; trial < 500; trial++) {
        big_problem p;
        random_big(&p, &rng);
        for (int i = 0; i < p.n; i++)
            p.cost[i] = pt_rng_below(&rng, 3) == 0 ? 0 : 1;
        p.odd = 0;
        pt_partition_problem q = as_problem(&p);
        int rc;
        differ += !same_solution(&q, &rc);
    }
    CU_ASSERT_EQUAL(differ, 0);
    /* all costs equal, no limit: the earliest of the many optimal cuts */
    double cost[10], prefix[11] = {0};
    int slots[3] = {1, 1, 1}, want[4], got[4];
    for (int i = 0; i < 10; i++) {
        cost[i] = 1;
        prefix[i + 1] = prefix[i] + 1;
    }
    pt_partition_problem q = {10, 3, cost, prefix, prefix, slots, 0, 0};
    double want_b, got_b;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(reference_solve(&q, want, &want_b), 0);
    CU_ASSERT_EQUAL_FATAL(pt_partition_solve(&q, got, &got_b, &err), 0);
    CU_ASSERT(memcmp(want, got, sizeof got) == 0 && want_b == got_b);
    CU_ASSERT_EQUAL(got_b, 4);
}

/* A cut made without the limit that fits the limit is the limited cut. */
static void free_cut_that_fits_is_the_limited_cut(void)
{
    pt_rng rng;
    pt_rng_seed(&rng, 31, 0);
    int fits = 0, not_fits = 0;
    for (int trial = 0; trial < 2000; trial++) {
        big_problem p;
        random_big(&p, &rng);
        if (!(p.limit > 0))
            continue;
        pt_partition_problem q = as_problem(&p), free_q = q;
        free_q.mem_limit = 0;
        int free_bounds[BIG_STAGES + 1], bounds[BIG_STAGES + 1];
        double free_b, b;
        pt_err err = {0};
        CU_ASSERT_EQUAL_FATAL(pt_partition_solve(&free_q, free_bounds, &free_b, &err), 0);
        if (!pt_partition_fits(&q, free_bounds)) {
            not_fits++;
            continue;
        }
        fits++;
        CU_ASSERT_EQUAL_FATAL(pt_partition_solve(&q, bounds, &b, &err), 0);
        CU_ASSERT(memcmp(bounds, free_bounds, (size_t)(p.K + 1) * sizeof *bounds) == 0);
        CU_ASSERT(memcmp(&b, &free_b, sizeof b) == 0);
    }
    printf(" [%d fit, %d do not]", fits, not_fits);
    CU_ASSERT(fits > 100 && not_fits > 100);
    /* and fits says no where a stage is over the limit */
    double cost[2] = {1, 1}, prefix[3] = {0, 1, 3};
    int slots[2] = {1, 1}, two[3] = {0, 1, 2};
    pt_partition_problem q = {2, 2, cost, prefix, prefix, slots, 4.5, 0};
    CU_ASSERT(pt_partition_fits(&q, two));
    q.mem_limit = 3.5; /* stage 1 = unit 1 takes 2 + 2 */
    CU_ASSERT(!pt_partition_fits(&q, two));
    q.mem_limit = 0;
    CU_ASSERT(pt_partition_fits(&q, two));
}

static const pt_test tests[] = {{"matches_brute_force", matches_brute_force},
                                {"matches_the_reference_dp", matches_the_reference_dp},
                                {"ties_keep_the_earliest_split", ties_keep_the_earliest_split},
                                {"free_cut_that_fits_is_the_limited_cut", free_cut_that_fits_is_the_limited_cut},
                                {"matches_brute_force_with_memory", matches_brute_force_with_memory},
                                {"rejects_impossible", rejects_impossible},
                                {NULL, NULL}};
static const pt_test_suite suites[] = {{"partition", tests}, {NULL, NULL}};
