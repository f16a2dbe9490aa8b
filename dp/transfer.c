/*
 * transfer.c: carrying out a list of unit moves (moves.c). Every rank walks
 * the same list: a move to itself from itself is a copy, a move away is a
 * send, a move in is a receive; all are posted at once (the tag names the
 * unit and part, unique between any two ranks) and then waited for. Bytes
 * move raw, so a moved unit is bit-identical to the one that left. Device
 * memory goes through host copies (the MPI here is not CUDA-aware).
 */
#include "dp/dp.h"

#include <stdlib.h>

/* Bytes of one part of unit u (any segment of the model tells). */
static size_t unit_bytes(const pt_segment *any, int u)
{
    pt_unit_info info;
    pt_unit_info_get(pt_segment_arch(any), u, &info);
    return info.numel * pt_backend_real_size(pt_segment_backend(any));
}

int pt_dp_execute_moves(const pt_dp_moves *m, pt_group *world, int me, pt_segment *old_seg,
                        pt_segment *new_seg, uint64_t *bytes, pt_err *err)
{
    *bytes = 0;
    pt_segment *any = new_seg ? new_seg : old_seg;
    if (!any)
        return 0; /* this rank holds nothing before or after */
    pt_backend *be = pt_segment_backend(any);
    const int staged = !pt_backend_is_host(be);
    const int n = m->count;
    pt_req *reqs = calloc((size_t)n + 1, sizeof *reqs);
    void **host = calloc((size_t)n + 1, sizeof *host);
    if (!reqs || !host) {
        free(reqs);
        free(host);
        return pt_fail(err, PT_ENOMEM, "out of memory moving units");
    }
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const pt_dp_move *v = &m->move[i];
        if (v->src != me && v->dst != me)
            continue;
        void *src = v->src == me && old_seg ? pt_segment_unit_data(old_seg, v->unit, (pt_part)v->part) : NULL;
        void *dst = v->dst == me && new_seg ? pt_segment_unit_data(new_seg, v->unit, (pt_part)v->part) : NULL;
        if ((v->src == me && !src) || (v->dst == me && !dst)) {
            rc = pt_fail(err, PT_EINTERNAL, "unit %d has no part %d to move (rank %d to %d)",
                         v->unit, v->part, v->src, v->dst);
            break;
        }
        const size_t size = unit_bytes(any, v->unit);
        const int tag = v->unit * 4 + v->part;
        if (v->src == me && v->dst == me) {
            pt_backend_copy(be, dst, src, size);
            continue;
        }
        if (staged && !(host[i] = malloc(size ? size : 1))) {
            rc = pt_fail(err, PT_ENOMEM, "out of memory moving units");
            break;
        }
        if (v->src == me) {
            if (staged)
                pt_backend_download(be, host[i], src, size);
            rc = pt_isend(world, staged ? host[i] : src, size, v->dst, tag, &reqs[i], err);
            *bytes += size;
        } else {
            rc = pt_irecv(world, staged ? host[i] : dst, size, v->src, tag, &reqs[i], err);
        }
    }
    for (int i = 0; i < n; i++) {
        const pt_dp_move *v = &m->move[i];
        if (rc == 0 && reqs[i].active &&
            (rc = pt_wait(world, &reqs[i], "a unit moving to its new owner", err)) == 0 && staged &&
            v->dst == me)
            pt_backend_upload(be, pt_segment_unit_data(new_seg, v->unit, (pt_part)v->part), host[i],
                              unit_bytes(any, v->unit));
        else if (rc && pt_req_cancel(&reqs[i])) {
            host[i] = NULL; /* MPI may still use it: left allocated (the job is failing) */
            /* without staging its buffer is a segment's, which the caller
             * frees: no later MPI call may move data through it (the rank
             * reports its failure and the job is aborted at close) */
            if (!staged)
                pt_comm_stop();
        }
        free(host[i]);
    }
    free(reqs);
    free(host);
    return rc;
}
