/*
 * nccl.c: the NCCL half of comm.h, for device buffers. A group's NCCL
 * communicator is created from a unique id made by group rank 0 and broadcast
 * over the group's MPI communicator (MPI is the control plane), and destroyed
 * with the group. Waiting polls the stream and NCCL's asynchronous error
 * state with the group's deadline, so a lost peer ends in an error, not a
 * hang. Without NCCL (PT_HAVE_NCCL undefined) every call fails cleanly.
 */
#include "comm/comm_group.h"

#ifdef PT_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <time.h>

struct pt_nccl {
    ncclComm_t comm;
    cudaStream_t stream;
};

static int nccl_fail(pt_err *err, ncclResult_t r, const char *what)
{
    return pt_fail(err, PT_EBACKEND, "%s: %s", what, ncclGetErrorString(r));
}

int pt_comm_has_nccl(void) { return 1; }

int pt_group_nccl_open(pt_group *g, int device, void *stream, pt_err *err)
{
    if (g->nccl)
        return 0;
    cudaError_t ce = cudaSetDevice(device);
    if (ce != cudaSuccess)
        return pt_fail(err, PT_EBACKEND, "cudaSetDevice(%d): %s", device, cudaGetErrorString(ce));
    ncclUniqueId id;
    ncclResult_t r;
    if (g->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess)
        return nccl_fail(err, r, "ncclGetUniqueId");
    int rc = pt_bcast(g, &id, sizeof id, 0, err);
    if (rc)
        return rc;
    struct pt_nccl *n = calloc(1, sizeof *n);
    if (!n)
        return pt_fail(err, PT_ENOMEM, "out of memory for a NCCL communicator");
    /* it waits for every rank of the group with no deadline */
    pt_watch_begin("the group's ranks, to make a NCCL communicator", "ncclCommInitRank", NULL, g->timeout);
    r = ncclCommInitRank(&n->comm, g->size, id, g->rank);
    pt_watch_end();
    if (r != ncclSuccess) {
        free(n);
        return nccl_fail(err, r, "ncclCommInitRank");
    }
    n->stream = (cudaStream_t)stream;
    g->nccl = n;
    return 0;
}

/* ncclCommDestroy waits for the communicator's queued work, and where a
 * peer died, destroy (and in some NCCL versions abort too) can wait for it:
 * a job whose ranks stopped answering aborts instead, and either call runs
 * under the watcher's deadline, so that a hang there ends the process
 * (status 1) instead of leaving the job running. */
void pt_group_nccl_close(pt_group *g)
{
    if (!g || !g->nccl)
        return;
    const int stopped = pt_comm_is_stopped();
    pt_watch_begin("NCCL to release the group's communicator",
                   stopped ? "ncclCommAbort" : "ncclCommDestroy", NULL, g->timeout);
    if (stopped)
        ncclCommAbort(g->nccl->comm);
    else
        ncclCommDestroy(g->nccl->comm);
    pt_watch_end();
    free(g->nccl);
    g->nccl = NULL;
}

/* A communicator that failed: aborted, and gone from the group (later
 * calls say there is none, instead of using it). */
static void abort_comm(pt_group *g)
{
    ncclCommAbort(g->nccl->comm);
    free(g->nccl);
    g->nccl = NULL;
}

static int need(pt_group *g, pt_err *err)
{
    return g->nccl ? 0 : pt_fail(err, PT_EINTERNAL, "the group has no NCCL communicator");
}

/* NCCL connects a communicator's ranks at their first transfer or
 * collective, inside the call that launches it (ncclGroupEnd for a group),
 * waiting for the peer with no deadline: those calls are watched. A
 * group's limit is that of the last communicator a transfer in it used. */
static double group_limit = 600;

static void watch_connect(double limit, const char *name)
{
    pt_watch_begin("the group's ranks, to connect NCCL's transfers", name, NULL, limit);
}

int pt_nccl_group_start(pt_err *err)
{
    ncclResult_t r = ncclGroupStart();
    return r == ncclSuccess ? 0 : nccl_fail(err, r, "ncclGroupStart");
}

int pt_nccl_group_end(pt_err *err)
{
    watch_connect(group_limit, "ncclGroupEnd");
    ncclResult_t r = ncclGroupEnd();
    pt_watch_end();
    return r == ncclSuccess ? 0 : nccl_fail(err, r, "ncclGroupEnd");
}

int pt_nccl_send(pt_group *g, const void *buf, size_t bytes, int peer, pt_err *err)
{
    int rc = need(g, err);
    if (rc == 0) {
        group_limit = g->timeout;
        watch_connect(group_limit, "ncclSend");
        ncclResult_t r = ncclSend(buf, bytes, ncclUint8, peer, g->nccl->comm, g->nccl->stream);
        pt_watch_end();
        if (r != ncclSuccess)
            rc = nccl_fail(err, r, "ncclSend");
    }
    return rc;
}

int pt_nccl_recv(pt_group *g, void *buf, size_t bytes, int peer, pt_err *err)
{
    int rc = need(g, err);
    if (rc == 0) {
        group_limit = g->timeout;
        watch_connect(group_limit, "ncclRecv");
        ncclResult_t r = ncclRecv(buf, bytes, ncclUint8, peer, g->nccl->comm, g->nccl->stream);
        pt_watch_end();
        if (r != ncclSuccess)
            rc = nccl_fail(err, r, "ncclRecv");
    }
    return rc;
}

static ncclDataType_t nccl_type(pt_dtype t)
{
    return t == PT_DT_F32 ? ncclFloat32 : t == PT_DT_F64 ? ncclFloat64 : ncclInt64;
}

int pt_nccl_allreduce_sum(pt_group *g, void *buf, size_t count, pt_dtype t, pt_err *err)
{
    int rc = need(g, err);
    if (rc == 0) {
        watch_connect(g->timeout, "ncclAllReduce");
        ncclResult_t r = ncclAllReduce(buf, buf, count, nccl_type(t), ncclSum, g->nccl->comm, g->nccl->stream);
        pt_watch_end();
        if (r != ncclSuccess)
            rc = nccl_fail(err, r, "ncclAllReduce");
    }
    return rc;
}

int pt_nccl_bcast(pt_group *g, void *buf, size_t bytes, int root, pt_err *err)
{
    int rc = need(g, err);
    if (rc == 0) {
        watch_connect(g->timeout, "ncclBroadcast");
        ncclResult_t r = ncclBroadcast(buf, buf, bytes, ncclUint8, root, g->nccl->comm, g->nccl->stream);
        pt_watch_end();
        if (r != ncclSuccess)
            rc = nccl_fail(err, r, "ncclBroadcast");
    }
    return rc;
}

int pt_nccl_wait(pt_group *g, pt_err *err)
{
    int rc = need(g, err);
    if (rc)
        return rc;
    pt_patience p;
    pt_patience_start(&p, g, "NCCL");
    char others[1024];
    for (;;) {
        cudaError_t ce = cudaStreamQuery(g->nccl->stream);
        if (ce == cudaSuccess)
            return 0;
        if (ce != cudaErrorNotReady)
            return pt_fail(err, PT_EBACKEND, "waiting for NCCL: %s", cudaGetErrorString(ce));
        ncclResult_t async;
        if (ncclCommGetAsyncError(g->nccl->comm, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress) {
            abort_comm(g);
            return nccl_fail(err, async, "NCCL reported an asynchronous error");
        }
        if (pt_patience_spent(&p, others, sizeof others)) {
            abort_comm(g);
            const char *at = pt_comm_phase_now();
            return pt_fail(err, PT_EPEER, "no progress for %.3g s waiting for NCCL%s%s ("
                           "run.timeout_s sets this limit)%s", g->timeout,
                           at ? " while " : "", at ? at : "", others);
        }
    }
}

#else /* no NCCL */

static int without(pt_err *err)
{
    return pt_fail(err, PT_EBACKEND, "this pipetrain was built without NCCL");
}

int pt_comm_has_nccl(void) { return 0; }
int pt_group_nccl_open(pt_group *g, int device, void *stream, pt_err *err) { return without(err); }
void pt_group_nccl_close(pt_group *g) { (void)g; }
int pt_nccl_group_start(pt_err *err) { return without(err); }
int pt_nccl_group_end(pt_err *err) { return without(err); }
int pt_nccl_send(pt_group *g, const void *buf, size_t bytes, int peer, pt_err *err) { return without(err); }
int pt_nccl_recv(pt_group *g, void *buf, size_t bytes, int peer, pt_err *err) { return without(err); }
int pt_nccl_allreduce_sum(pt_group *g, void *buf, size_t count, pt_dtype t, pt_err *err) { return without(err); }
int pt_nccl_bcast(pt_group *g, void *buf, size_t bytes, int root, pt_err *err) { return without(err); }
int pt_nccl_wait(pt_group *g, pt_err *err) { return without(err); }

#endif
