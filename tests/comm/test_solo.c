/*
 * test_solo.c: a process that no launcher started is a world of one without
 * MPI (comm/comm.c): MPI is never initialised, the world and node are one
 * rank, every collective leaves the data as it is (allgather copies), a
 * group split gives a group of one or none, a transfer is refused with an
 * error naming it, and the comm closes and opens again.
 */
#include "comm/comm.h"
#include "tests/common/cunit_main.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const launcher_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",
                                            "PMI_SIZE", "PMI_FD", "SLURM_PROCID",
                                            "MPI_LOCALNRANKS", "HYDRA_CONTROL_FD"};

static void no_launcher(void)
{
    for (size_t i = 0; i < sizeof launcher_vars / sizeof *launcher_vars; i++)
        unsetenv(launcher_vars[i]);
}

static void test_world_of_one(void)
{
    no_launcher();
    CU_ASSERT_FALSE(pt_comm_launched());
    pt_comm *c = NULL;
    pt_err err = {0};
    int argc = 1;
    char *args[] = {"test_solo", NULL}, **argv = args;
    CU_ASSERT_EQUAL_FATAL(pt_comm_open(&c, &argc, &argv, 600, &err), 0);
    int inited = 1;
    MPI_Initialized(&inited);
    CU_ASSERT_EQUAL(inited, 0);
    CU_ASSERT_EQUAL(pt_comm_rank(c), 0);
    CU_ASSERT_EQUAL(pt_comm_size(c), 1);
    CU_ASSERT_EQUAL(pt_comm_local_rank(c), 0);
    CU_ASSERT_EQUAL(pt_comm_local_size(c), 1);
    CU_ASSERT_EQUAL(pt_comm_node(c), 0);
    CU_ASSERT_EQUAL(pt_comm_nodes(c), 1);
    CU_ASSERT_EQUAL(pt_comm_node_of(c, 0), 0);
    CU_ASSERT(strlen(pt_comm_host(c)) > 0);

    pt_group *w = pt_comm_world(c), *n = pt_comm_node_group(c);
    CU_ASSERT_EQUAL(pt_group_size(w), 1);
    CU_ASSERT_EQUAL(pt_group_rank(w), 0);
    CU_ASSERT_EQUAL(pt_group_size(n), 1);
    CU_ASSERT_EQUAL(pt_group_world_rank(w, 0), 0);

    /* collectives over one member: the data as it was */
    float f[5] = {1.5f, -2.0f, 0.0f, 3.25f, 1e30f};
    double d[3] = {0.1, -0.2, 1e300};
    const float f0[5] = {1.5f, -2.0f, 0.0f, 3.25f, 1e30f};
    const double d0[3] = {0.1, -0.2, 1e300};
    CU_ASSERT_EQUAL(pt_allreduce_sum(w, f, 5, PT_DT_F32, &err), 0);
    CU_ASSERT_EQUAL(pt_allreduce_sum(n, d, 3, PT_DT_F64, &err), 0);
    CU_ASSERT_EQUAL(memcmp(f, f0, sizeof f), 0);
    CU_ASSERT_EQUAL(memcmp(d, d0, sizeof d), 0);
    int64_t v = -7;
    CU_ASSERT_EQUAL(pt_allreduce_max_i64(w, &v, &err), 0);
    CU_ASSERT_EQUAL(v, -7);
    CU_ASSERT_EQUAL(pt_bcast(w, f, sizeof f, 0, &err), 0);
    CU_ASSERT_EQUAL(memcmp(f, f0, sizeof f), 0);
    float all[5] = {0};
    CU_ASSERT_EQUAL(pt_allgather(w, f, all, sizeof f, &err), 0);
    CU_ASSERT_EQUAL(memcmp(all, f0, sizeof all), 0);
    CU_ASSERT_EQUAL(pt_allgather(w, all, all, sizeof all, &err), 0); /* in place */
    CU_ASSERT_EQUAL(memcmp(all, f0, sizeof all), 0);
    CU_ASSERT_EQUAL(pt_barrier(n, &err), 0);
    CU_ASSERT_EQUAL(pt_group_agree(w, 0, &err), 0);
    CU_ASSERT_EQUAL(pt_group_agree(w, PT_EINPUT, &err), PT_EINPUT);

    /* groups: one member, or none */
    pt_group *g = NULL;
    CU_ASSERT_EQUAL(pt_group_split(c, 3, 0, &g, &err), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(pt_group_size(g), 1);
    CU_ASSERT_EQUAL(pt_group_rank(g), 0);
    CU_ASSERT_EQUAL(pt_group_world_rank(g, 0), 0);
    CU_ASSERT_EQUAL(pt_allreduce_sum(g, f, 5, PT_DT_F32, &err), 0);
    CU_ASSERT_EQUAL(memcmp(f, f0, sizeof f), 0);
    pt_group_free(g);
    g = (pt_group *)&g;
    CU_ASSERT_EQUAL(pt_group_split(c, -1, 0, &g, &err), 0);
    CU_ASSERT_PTR_NULL(g);

    /* a transfer could only be to itself: refused, named, nothing pending */
    pt_req r = {0};
    memset(&err, 0, sizeof err);
    CU_ASSERT_EQUAL(pt_isend(w, f, sizeof f, 0, 1, &r, &err), PT_EINTERNAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "world of one"));
    CU_ASSERT_EQUAL(r.active, 0);
    CU_ASSERT_EQUAL(pt_irecv(w, f, sizeof f, 0, 1, &r, &err), PT_EINTERNAL);
    CU_ASSERT_EQUAL(r.active, 0);
    CU_ASSERT_EQUAL(pt_wait(w, &r, "nothing", &err), 0);

    /* the links of a world of one: nothing to measure */
    double intra = -1, inter = -1, lat = -1;
    CU_ASSERT_EQUAL(pt_comm_measure_links(c, &intra, &inter, &lat, &err), 0);
    CU_ASSERT_EQUAL(intra, 0);
    CU_ASSERT_EQUAL(inter, 0);
    CU_ASSERT_EQUAL(lat, 0);
    pt_comm_close(c, 0);

    /* and again: nothing of MPI's was started that could not start twice */
    CU_ASSERT_EQUAL_FATAL(pt_comm_open(&c, &argc, &argv, 600, &err), 0);
    CU_ASSERT_EQUAL(pt_comm_size(c), 1);
    pt_comm_close(c, 0);
    MPI_Initialized(&inited);
    CU_ASSERT_EQUAL(inited, 0);
}

/* A launcher is recognised by one of its variables, by the whole name:
 * a longer name that begins with one (PMI_RANKS, SLURM_PROCID_LIST), a name
 * without '=', or one inside another is not a launcher, so a command run by
 * hand beside such variables stays a world of one without MPI's start. */
static void test_launcher_names_whole(void)
{
    for (size_t i = 0; i < sizeof launcher_vars / sizeof *launcher_vars; i++) {
        char set[64], longer[64], inside[64], bare[64];
        snprintf(set, sizeof set, "%s=0", launcher_vars[i]);
        snprintf(longer, sizeof longer, "%sX=0", launcher_vars[i]);
        snprintf(inside, sizeof inside, "X%s=0", launcher_vars[i]);
        snprintf(bare, sizeof bare, "%s", launcher_vars[i]);
        char *yes[] = {"HOME=/", set, NULL};
        char *no[] = {longer, inside, bare, "PATH=/bin", NULL};
        CU_ASSERT_TRUE(pt_comm_launched_in(yes));
        CU_ASSERT_FALSE(pt_comm_launched_in(no));
    }
    char *empty[] = {NULL};
    CU_ASSERT_FALSE(pt_comm_launched_in(empty));
    CU_ASSERT_FALSE(pt_comm_launched_in(NULL));
}

static const pt_test solo_tests[] = {{"world_of_one", test_world_of_one},
                                     {"launcher_names_whole", test_launcher_names_whole},
                                     {NULL, NULL}};
static const pt_test_suite suites[] = {{"solo", solo_tests}, {NULL, NULL}};
