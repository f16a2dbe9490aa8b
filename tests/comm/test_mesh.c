/*
 * test_mesh.c: the process mesh (comm/mesh.c) as a pure function: pipelines
 * stay inside a node, replicas are numbered node by node, leftover ranks are
 * idle, and rank_of / replica_of / stage_of are inverse to each other, over a
 * sweep of node shapes (including ranks of one node that are not contiguous
 * in world order, as with mpirun --map-by node).
 */
#include "comm/comm.h"

#include <math.h>
#include "tests/common/cunit_main.h"

#include <stdlib.h>

static void check_mesh(int ranks, const int *node_of, int K, int D)
{
    pt_mesh m;
    pt_err err;
    CU_ASSERT_EQUAL_FATAL(pt_mesh_build(&m, ranks, node_of, K, D, &err), 0);
    int active = 0;
    for (int r = 0; r < ranks; r++)
        if (m.replica_of[r] >= 0) {
            active++;
            CU_ASSERT_EQUAL(pt_mesh_rank(&m, m.replica_of[r], m.stage_of[r]), r);
        } else {
            CU_ASSERT_EQUAL(m.stage_of[r], -1);
        }
    CU_ASSERT_EQUAL(active, K * D);
    for (int rep = 0; rep < D; rep++) {
        const int node = node_of[pt_mesh_rank(&m, rep, 0)];
        for (int s = 0; s < K; s++) {
            const int w = pt_mesh_rank(&m, rep, s);
            CU_ASSERT_EQUAL(node_of[w], node); /* a pipeline never crosses a node */
            CU_ASSERT(s == 0 || w > pt_mesh_rank(&m, rep, s - 1)); /* stages in rank order */
        }
        /* replicas fill node by node */
        if (rep > 0)
            CU_ASSERT(node >= node_of[pt_mesh_rank(&m, rep - 1, 0)]);
    }
    pt_mesh_free(&m);
}

static void one_node(void)
{
    int node_of[8] = {0};
    for (int K = 1; K <= 8; K++)
        for (int D = 1; D * K <= 8; D++)
            check_mesh(8, node_of, K, D);
    CU_ASSERT_EQUAL(pt_mesh_capacity(8, node_of, 3), 2);
    pt_mesh m;
    pt_err err;
    CU_ASSERT_EQUAL(pt_mesh_build(&m, 8, node_of, 3, 3, &err), PT_EINPUT);
    CU_ASSERT_EQUAL(pt_mesh_build(&m, 8, node_of, 9, 1, &err), PT_EINPUT);
    /* the layout the elastic test walks through: (4,1) -> (2,2) -> (1,4) */
    const int want[3][4] = {{0, 0, 0, 0}, {0, 0, 1, 1}, {0, 1, 2, 3}};
    for (int i = 0; i < 3; i++) {
        int K = 4 >> i, D = 1 << i;
        CU_ASSERT_EQUAL_FATAL(pt_mesh_build(&m, 4, node_of, K, D, &err), 0);
        for (int r = 0; r < 4; r++) {
            CU_ASSERT_EQUAL(m.replica_of[r], want[i][r]);
            CU_ASSERT_EQUAL(m.stage_of[r], r % K);
        }
        pt_mesh_free(&m);
    }
}

static void several_nodes(void)
{
    /* block placement, 2 x 2 */
    const int block[4] = {0, 0, 1, 1};
    /* round-robin placement (--map-by node), 2 x 2 and 3 x 3 */
    const int rr[4] = {0, 1, 0, 1};
    const int rr9[9] = {0, 1, 2, 0, 1, 2, 0, 1, 2};
    /* uneven nodes: 3, 1 and 4 ranks */
    const int uneven[8] = {0, 0, 0, 1, 2, 2, 2, 2};
    const struct { int ranks; const int *node_of; } shapes[] = {
        {4, block}, {4, rr}, {9, rr9}, {8, uneven}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int K = 1; K <= shapes[i].ranks; K++) {
            int cap = pt_mesh_capacity(shapes[i].ranks, shapes[i].node_of, K);
            for (int D = 1; D <= cap; D++)
                check_mesh(shapes[i].ranks, shapes[i].node_of, K, D);
            pt_mesh m;
            pt_err err;
            CU_ASSERT_EQUAL(pt_mesh_build(&m, shapes[i].ranks, shapes[i].node_of, K, cap + 1, &err),
                            PT_EINPUT);
        }
    CU_ASSERT_EQUAL(pt_mesh_capacity(4, block, 2), 2);
    CU_ASSERT_EQUAL(pt_mesh_capacity(4, block, 3), 0); /* no node has 3 ranks */
    CU_ASSERT_EQUAL(pt_mesh_capacity(8, uneven, 2), 3); /* 1 + 0 + 2 */
    CU_ASSERT_EQUAL(pt_mesh_capacity(8, uneven, 4), 1);
    /* round-robin: the pipeline of node 0 is ranks 0 and 2 */
    pt_mesh m;
    pt_err err;
    CU_ASSERT_EQUAL_FATAL(pt_mesh_build(&m, 4, rr, 2, 2, &err), 0);
    CU_ASSERT_EQUAL(pt_mesh_rank(&m, 0, 0), 0);
    CU_ASSERT_EQUAL(pt_mesh_rank(&m, 0, 1), 2);
    CU_ASSERT_EQUAL(pt_mesh_rank(&m, 1, 0), 1);
    CU_ASSERT_EQUAL(pt_mesh_rank(&m, 1, 1), 3);
    pt_mesh_free(&m);
    /* uneven, K = 2, D = 3: node 0 gives one pipeline (rank 2 idle), node 1 none */
    CU_ASSERT_EQUAL_FATAL(pt_mesh_build(&m, 8, uneven, 2, 3, &err), 0);
    CU_ASSERT_EQUAL(m.replica_of[2], -1);
    CU_ASSERT_EQUAL(m.replica_of[3], -1);
    CU_ASSERT_EQUAL(pt_mesh_rank(&m, 1, 0), 4);
    CU_ASSERT_EQUAL(pt_mesh_rank(&m, 2, 1), 7);
    pt_mesh_free(&m);
}

/* A link's bandwidth from its ping-pong timings is positive whatever they
 * are: a loaded machine once made 20 small messages slower than 3 big ones,
 * the bandwidth came out 0, and profile.json then said the link was not
 * there (pipeline.profile and resumes refused it). */
static void link_bandwidth(void)
{
    const double big = 4 << 20;
    CU_ASSERT_DOUBLE_EQUAL(pt_link_bandwidth(big, 1e-5, 1e-3), big / (1e-3 - 1e-5), 1e-3);
    const double t[][2] = {{6.3e-3, 1e-3}, {1e-3, 1e-3}, {0, 0}, {1e-3, 0}, {9.9e-4, 1e-3}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        const double bw = pt_link_bandwidth(big, t[i][0], t[i][1]);
        CU_ASSERT(bw > 0 && isfinite(bw));
        if (t[i][1] > 0) /* at most 10 times the big messages' own rate */
            CU_ASSERT(bw <= big / (0.1 * t[i][1]) * 1.0001);
        CU_ASSERT(bw <= 1e15); /* what a profile may hold */
    }
    /* no jump as the small messages' time nears the big ones' (a 94% and a
     * 96% latency were 17x apart): monotone and within 1% per 1% step */
    double last = pt_link_bandwidth(big, 0, 1e-3);
    for (int pct = 1; pct <= 120; pct++) {
        const double bw = pt_link_bandwidth(big, pct * 1e-5, 1e-3);
        CU_ASSERT(bw >= last * 0.999999);
        CU_ASSERT(bw <= last * 1.12);
        last = bw;
    }
    CU_ASSERT(pt_link_bandwidth(1e9, 1e-9, 1e-9) <= 1e15);
}

static const pt_test tests[] = {{"one_node", one_node}, {"several_nodes", several_nodes},
                                {"link_bandwidth", link_bandwidth}, {NULL, NULL}};
static const pt_test_suite suites[] = {{"process mesh", tests}, {NULL, NULL}};
