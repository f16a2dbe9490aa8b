/*
 * test_moves.c: the list of unit moves between two layouts (dp/moves.c), a
 * pure function, over every change of (K, D) on 4 and 8 ranks in one or two
 * nodes, with partitions of several shapes and frozen prefixes that grow:
 * every rank of the new layout gets exactly the parts of exactly the units
 * its stage holds (moments only for units that still train), each from a
 * rank that held the unit, itself when it did, a rank of its own node when
 * one did; and nothing else moves.
 */
#include "dp/dp.h"
#include "tests/common/cunit_main.h"

#include <stdlib.h>
#include <string.h>

enum { UNITS = 14 };

/* Stage bounds for K stages: even, or skewed toward the front. */
static void bounds_for(int K, int skew, int *bounds)
{
    for (int s = 0; s <= K; s++)
        bounds[s] = skew ? (s == K ? UNITS : s) : UNITS * s / K;
}

static int holds(const pt_dp_layout *l, int rank, int u)
{
    int s = l->mesh->stage_of[rank];
    return s >= 0 && u >= l->bounds[s] && u < l->bounds[s + 1];
}

static void check(int ranks, const int *node_of, int K1, int D1, int K2, int D2, int skew, int F1,
                  int F2)
{
    pt_mesh a, b;
    pt_err err;
    CU_ASSERT_FATAL(pt_mesh_build(&a, ranks, node_of, K1, D1, &err) == 0);
    CU_ASSERT_FATAL(pt_mesh_build(&b, ranks, node_of, K2, D2, &err) == 0);
    int ba[UNITS + 1], bb[UNITS + 1];
    bounds_for(K1, skew, ba);
    bounds_for(K2, !skew, bb);
    pt_dp_layout from = {&a, ba, F1}, to = {&b, bb, F2};
    pt_dp_moves m;
    CU_ASSERT_FATAL(pt_dp_plan_moves(&m, &from, &to, node_of, &err) == 0);
    /* seen[rank][unit][part] */
    static int seen[8][UNITS][4];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < m.count; i++) {
        const pt_dp_move *v = &m.move[i];
        CU_ASSERT(v->unit >= 0 && v->unit < UNITS);
        CU_ASSERT(holds(&to, v->dst, v->unit));
        CU_ASSERT(holds(&from, v->src, v->unit));
        if (holds(&from, v->dst, v->unit))
            CU_ASSERT_EQUAL(v->src, v->dst); /* keep your own copy */
        /* from another node only when no holder was on the destination's */
        if (node_of[v->src] != node_of[v->dst])
            for (int r2 = 0; r2 < a.replicas; r2++)
                for (int s = 0; s < K1; s++)
                    if (holds(&from, pt_mesh_rank(&a, r2, s), v->unit))
                        CU_ASSERT(node_of[pt_mesh_rank(&a, r2, s)] != node_of[v->dst]);
        CU_ASSERT(v->part == PT_PART_PARAM || v->unit >= F2);
        seen[v->dst][v->unit][v->part]++;
    }
    for (int r = 0; r < ranks; r++)
        for (int u = 0; u < UNITS; u++) {
            const int want = holds(&to, r, u);
            CU_ASSERT_EQUAL(seen[r][u][PT_PART_PARAM], want);
            CU_ASSERT_EQUAL(seen[r][u][PT_PART_M], want && u >= F2);
            CU_ASSERT_EQUAL(seen[r][u][PT_PART_V], want && u >= F2);
            CU_ASSERT_EQUAL(seen[r][u][PT_PART_GRAD], 0);
        }
    /* the same inputs, the same list */
    pt_dp_moves again;
    CU_ASSERT_FATAL(pt_dp_plan_moves(&again, &from, &to, node_of, &err) == 0);
    CU_ASSERT(again.count == m.count &&
              memcmp(again.move, m.move, (size_t)m.count * sizeof *m.move) == 0);
    pt_dp_moves_free(&again);
    pt_dp_moves_free(&m);
    pt_mesh_free(&a);
    pt_mesh_free(&b);
}

static void every_change_of_layout(void)
{
    const int one[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int two[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    const int *shapes[2] = {one, two};
    int cases = 0;
    for (int ranks = 4; ranks <= 8; ranks += 4)
        for (int sh = 0; sh < 2; sh++)
            for (int K1 = 1; K1 <= ranks; K1++)
                for (int K2 = 1; K2 <= ranks; K2++) {
                    int c1 = pt_mesh_capacity(ranks, shapes[sh], K1);
                    int c2 = pt_mesh_capacity(ranks, shapes[sh], K2);
                    for (int D1 = 1; D1 <= c1; D1++)
                        for (int D2 = 1; D2 <= c2; D2++)
                            for (int skew = 0; skew < 2; skew++) {
                                check(ranks, shapes[sh], K1, D1, K2, D2, skew, 0, 0);
                                check(ranks, shapes[sh], K1, D1, K2, D2, skew, 0, 5);
                                check(ranks, shapes[sh], K1, D1, K2, D2, skew, 3, 9);
                                cases += 3;
                            }
                }
    CU_ASSERT(cases > 1000);
}

static void unfreezing_is_refused(void)
{
    const int node_of[4] = {0};
    pt_mesh a;
    pt_err err;
    CU_ASSERT_FATAL(pt_mesh_build(&a, 4, node_of, 2, 2, &err) == 0);
    int bounds[3] = {0, 7, UNITS};
    pt_dp_layout from = {&a, bounds, 5}, to = {&a, bounds, 3};
    pt_dp_moves m;
    CU_ASSERT_EQUAL(pt_dp_plan_moves(&m, &from, &to, node_of, &err), PT_EINTERNAL);
    pt_mesh_free(&a);
}

static const pt_test tests[] = {{"every_change_of_layout", every_change_of_layout},
                                {"unfreezing_is_refused", unfreezing_is_refused},
                                {NULL, NULL}};
static const pt_test_suite suites[] = {{"layout changes", tests}, {NULL, NULL}};
