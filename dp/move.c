/*
 * move.c: moving unit state between ranks when the partition changes. Every
 * rank walks the same list of units in the same order: a unit that stays is
 * copied locally, one that leaves is sent, one that arrives is received, all
 * transfers posted at once (tag = unit and part) and then waited for. The
 * bytes are moved raw, so a moved unit is bit-identical to the one that left.
 * Device memory goes through host copies (the MPI here is not CUDA-aware).
 */
#include "dp/dp.h"

#include <stdlib.h>

static int owner(const int *bounds, int stages, int unit)
{
    for (int s = 0; s < stages; s++)
        if (unit < bounds[s + 1])
            return s;
    return stages - 1;
}

int pt_dp_move_units(pt_group *pipe, int stage, int stages, const int *old_bounds,
                     const int *new_bounds, int frozen_units, pt_segment *old_seg,
                     pt_segment *new_seg, pt_err *err)
{
    pt_backend *be = pt_segment_backend(new_seg);
    const int staged = !pt_backend_is_host(be);
    const int units = old_bounds[stages];
    const size_t real = pt_backend_real_size(be);
    static const pt_part parts[3] = {PT_PART_PARAM, PT_PART_M, PT_PART_V};
    pt_req *reqs = calloc((size_t)units * 3, sizeof *reqs);
    void **host = calloc((size_t)units * 3, sizeof *host);   /* staging, when staged */
    void **land = calloc((size_t)units * 3, sizeof *land);   /* where a staged receive goes */
    size_t *size = calloc((size_t)units * 3, sizeof *size);
    if (!reqs || !host || !land || !size) {
        free(reqs);
        free(host);
        free(land);
        free(size);
        return pt_fail(err, PT_ENOMEM, "out of memory moving units");
    }
    int rc = 0;
    for (int u = 0; u < units && rc == 0; u++) {
        const int from = owner(old_bounds, stages, u), to = owner(new_bounds, stages, u);
        if (from != stage && to != stage)
            continue;
        /* moments move only with a unit that keeps training */
        const int moved_parts = u >= frozen_units ? 3 : 1;
        const size_t bytes = pt_segment_unit_numel(from == stage ? old_seg : new_seg, u) * real;
        for (int k = 0; k < moved_parts && rc == 0; k++) {
            void *src = from == stage ? pt_segment_unit_data(old_seg, u, parts[k]) : NULL;
            void *dst = to == stage ? pt_segment_unit_data(new_seg, u, parts[k]) : NULL;
            if ((from == stage && !src) || (to == stage && !dst)) {
                rc = pt_fail(err, PT_EINTERNAL, "unit %d has no state to move (part %d)", u, k);
                break;
            }
            const int i = u * 3 + k;
            if (from == stage && to == stage) {
                pt_backend_copy(be, dst, src, bytes);
                continue;
            }
            if (staged && !(host[i] = malloc(bytes ? bytes : 1))) {
                rc = pt_fail(err, PT_ENOMEM, "out of memory moving units");
                break;
            }
            if (from == stage) {
                if (staged)
                    pt_backend_download(be, host[i], src, bytes);
                rc = pt_isend(pipe, staged ? host[i] : src, bytes, to, i, &reqs[i], err);
            } else {
                land[i] = dst;
                size[i] = bytes;
                rc = pt_irecv(pipe, staged ? host[i] : dst, bytes, from, i, &reqs[i], err);
            }
        }
    }
    for (int i = 0; i < units * 3; i++) {
        if (rc == 0 && (rc = pt_wait(pipe, &reqs[i], "a unit moving to its new stage", err)) == 0 &&
            staged && land[i])
            pt_backend_upload(be, land[i], host[i], size[i]);
        else if (rc && pt_req_cancel(&reqs[i]))
            host[i] = NULL; /* MPI may still use it: left allocated (the job is failing) */
        free(host[i]);
    }
    free(reqs);
    free(host);
    free(land);
    free(size);
    return rc;
}
