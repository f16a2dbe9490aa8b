/*
 * test_nccl.c (label gpu): comm's NCCL path on a real device. A world of one
 * rank makes a NCCL communicator and checks all-reduce, broadcast and a
 * send/receive to itself inside one group, and that waiting works. Run by
 * hand, as ctest runs it, that world has no MPI (comm.h), so the
 * communicator's id is not sent anywhere; the id's broadcast over MPI runs
 * only under a launcher. Without a GPU (or without NCCL in the build) it
 * prints "skipped: ..." and passes. Several ranks would need one GPU each:
 * NCCL refuses two ranks on one device.
 */
#include "comm/comm.h"
#include "tests/common/cunit_main.h"

#include <cuda_runtime.h>
#include <stdlib.h>

static pt_comm *comm;

static int have_gpu(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

static void nccl_single_rank(void)
{
    if (!pt_comm_has_nccl() || !have_gpu()) {
        printf("skipped: no GPU or no NCCL in this build ");
        return;
    }
    pt_err err = {0};
    cudaStream_t stream;
    CU_ASSERT_EQUAL_FATAL(cudaStreamCreate(&stream), cudaSuccess);
    pt_group *g = pt_comm_world(comm);
    CU_ASSERT_EQUAL_FATAL(pt_group_nccl_open(g, 0, stream, &err), 0);
    enum { N = 1 << 20 };
    float *host = malloc(N * sizeof *host), *back = malloc(N * sizeof *back);
    for (int i = 0; i < N; i++)
        host[i] = (float)(i % 977) * 0.25f;
    float *a, *b;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&a, N * sizeof *a), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&b, N * sizeof *b), cudaSuccess);
    cudaMemcpy(a, host, N * sizeof *a, cudaMemcpyHostToDevice);
    /* one rank: the sum is the input */
    CU_ASSERT_EQUAL(pt_nccl_allreduce_sum(g, a, N, PT_DT_F32, &err), 0);
    CU_ASSERT_EQUAL(pt_nccl_bcast(g, a, N * sizeof *a, 0, &err), 0);
    /* a transfer to itself, both halves in one group */
    CU_ASSERT_EQUAL(pt_nccl_group_start(&err), 0);
    CU_ASSERT_EQUAL(pt_nccl_send(g, a, N * sizeof *a, 0, &err), 0);
    CU_ASSERT_EQUAL(pt_nccl_recv(g, b, N * sizeof *b, 0, &err), 0);
    CU_ASSERT_EQUAL(pt_nccl_group_end(&err), 0);
    CU_ASSERT_EQUAL(pt_nccl_wait(g, &err), 0);
    cudaMemcpy(back, b, N * sizeof *back, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += back[i] != host[i];
    CU_ASSERT_EQUAL(bad, 0);
    pt_group_nccl_close(g);
    cudaFree(a);
    cudaFree(b);
    cudaStreamDestroy(stream);
    free(host);
    free(back);
}

static void without_a_communicator(void)
{
    pt_err err = {0};
    char x[4];
    /* every call is refused cleanly before a communicator exists */
    CU_ASSERT_NOT_EQUAL(pt_nccl_send(pt_comm_world(comm), x, 4, 0, &err), 0);
    CU_ASSERT_NOT_EQUAL(pt_nccl_wait(pt_comm_world(comm), &err), 0);
}

static const pt_test tests[] = {{"nccl_single_rank", nccl_single_rank},
                                {"without_a_communicator", without_a_communicator},
                                {NULL, NULL}};
static const pt_test_suite suites[] = {{"NCCL", tests}, {NULL, NULL}};

/* MPI must be up around the CUnit run: a constructor/destructor pair keeps
 * the shared main() of cunit_main.h unchanged. */
__attribute__((constructor)) static void start_mpi(void)
{
    pt_err err;
    int argc = 0;
    char **argv = NULL;
    if (pt_comm_open(&comm, &argc, &argv, 600, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
}

__attribute__((destructor)) static void stop_mpi(void) { pt_comm_close(comm, 0); }
