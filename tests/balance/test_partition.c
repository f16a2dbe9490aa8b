/*
 * test_partition.c: the partition solver against brute force. For random
 * cost vectors (up to 12 units, up to 5 stages) the solver's bottleneck equals
 * the best over every contiguous partition, with and without memory limits
 * (including limits that depend on the stage index), every stage it returns
 * fits, and infeasible problems are reported.
 */
#include "balance/balance.h"
#include "tests/common/cunit_main.h"

#include <math.h>
#include <stdlib.h>

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

static const pt_test tests[] = {{"matches_brute_force", matches_brute_force},
                                {"matches_brute_force_with_memory", matches_brute_force_with_memory},
                                {"rejects_impossible", rejects_impossible},
                                {NULL, NULL}};
static const pt_test_suite suites[] = {{"partition", tests}, {NULL, NULL}};
