/*
 * reduce.c: the gradient all-reduce among the D replicas of one stage.
 *
 * The stage's active units' gradients are one contiguous blob (nn keeps them
 * so); it is cut into buckets of whole units, from the last unit back, since
 * backward finishes the last unit first. A bucket starts as soon as its last
 * unit's gradient is final, so its transfer overlaps the backward of the
 * units before it, as DDP does.
 *
 * Each bucket is a reduce-scatter then an all-gather, in point-to-point
 * messages: chunk j of the bucket belongs to replica j; every replica sends
 * chunk j to its owner, the owner sums the D copies in replica order
 * (0, 1, ..., D-1, always the same sequence of float additions), then sends
 * the sum to every other replica. So every replica ends with the same bits,
 * and the same layout gives the same bits run after run: MPI_Allreduce
 * promises neither. Volume per rank is 2 (D-1)/D of the bucket, as a ring's.
 *
 * Where the replicas' group has a NCCL communicator (one GPU per rank), the
 * whole blob is instead one NCCL all-reduce in pt_reducer_finish, on the
 * device's stream: NCCL's ring gives every replica the same result, and the
 * same bits for the same layout and NCCL version.
 *
 * Nothing blocks before pt_reducer_finish: pt_reducer_progress tests the
 * transfers in flight and moves a bucket to its next phase; the pipeline
 * executor calls it between actions, and the backward hook after each unit.
 * Errors met there are kept and reported by pt_reducer_finish.
 */
#include "dp/dp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { IDLE, SCATTER, GATHER, DONE };

typedef struct bucket {
    int first, end;        /* units [first, end) */
    size_t offset, count;  /* elements of the gradient blob */
    int waiting;           /* units whose gradient is not final yet */
    int phase;
    pt_req *req;           /* [2 (D - 1)] */
    float *parts;          /* [D - 1][chunk]: the other replicas' copies of our chunk */
    size_t chunk;          /* the largest chunk */
} bucket;

struct pt_reducer {
    pt_group *g;
    int D, me, overlap;
    int nccl;              /* one NCCL all-reduce of the blob at finish */
    size_t total;          /* gradient elements of the blob */
    pt_segment *seg;
    pt_backend *be;
    int staged;            /* gradients in device memory: work on a host copy */
    float *grads;          /* the blob, or its host copy */
    void *device;          /* the blob in backend memory, when staged */
    int nb;
    bucket *b;
    int first_unit;        /* of the segment */
    int *bucket_of;        /* [segment units] bucket of each active unit, -1 for frozen */
    int failed;
    pt_err err;
    double t_first, t_last;
    uint64_t bytes;
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static size_t chunk_lo(size_t count, int D, int j) { return count * (size_t)j / (size_t)D; }

void pt_reducer_destroy(pt_reducer *r)
{
    if (!r)
        return;
    int live = 0;
    for (int i = 0; i < r->nb; i++) {
        if (r->b[i].req)
            for (int k = 0; k < 2 * (r->D - 1); k++)
                live |= pt_req_cancel(&r->b[i].req[k]);
        free(r->b[i].req);
    }
    /* what MPI may still use is left allocated (the job is failing); the
     * gradients without staging are the segment's, which its owner frees:
     * then no later MPI call may move data through them */
    if (live && !r->staged)
        pt_comm_stop();
    for (int i = 0; i < r->nb && !live; i++)
        free(r->b[i].parts);
    free(r->b);
    free(r->bucket_of);
    if (r->staged && !live)
        free(r->grads);
    free(r);
}

int pt_reducer_create(pt_reducer **out, pt_group *replicas, pt_segment *seg, size_t bucket_bytes,
                      int overlap, pt_err *err)
{
    *out = NULL;
    pt_reducer *r = calloc(1, sizeof *r);
    if (!r)
        return pt_fail(err, PT_ENOMEM, "out of memory for the gradient all-reduce");
    r->g = replicas;
    r->D = replicas ? pt_group_size(replicas) : 1;
    r->me = replicas ? pt_group_rank(replicas) : 0;
    r->overlap = overlap;
    r->seg = seg;
    r->be = pt_segment_backend(seg);
    *out = r;
    if (r->D < 2)
        return 0;
    if (pt_backend_real_size(r->be) != sizeof(float)) {
        pt_reducer_destroy(r);
        *out = NULL;
        return pt_fail(err, PT_EINTERNAL, "the gradient all-reduce works on float32 gradients");
    }
    size_t total;
    void *blob = pt_segment_grads(seg, &total);
    r->total = total;
    r->nccl = pt_group_nccl_ready(replicas);
    if (r->nccl) {
        r->device = blob;
        return 0;
    }
    r->staged = !pt_backend_is_host(r->be);
    r->device = blob;
    r->grads = r->staged ? malloc((total ? total : 1) * sizeof(float)) : blob;
    const int first = pt_segment_first(seg), count = pt_segment_count(seg);
    const int frozen = pt_segment_frozen(seg);
    r->first_unit = first;
    r->bucket_of = malloc((size_t)count * sizeof *r->bucket_of);
    r->b = calloc((size_t)count + 1, sizeof *r->b);
    if (!r->grads || !r->bucket_of || !r->b) {
        pt_reducer_destroy(r);
        *out = NULL;
        return pt_fail(err, PT_ENOMEM, "out of memory for the gradient all-reduce");
    }
    for (int i = 0; i < count; i++)
        r->bucket_of[i] = -1;
    /* element offset of every unit in the blob: active units back to back */
    size_t *off = calloc((size_t)count + 1, sizeof *off);
    if (!off) {
        pt_reducer_destroy(r);
        *out = NULL;
        return pt_fail(err, PT_ENOMEM, "out of memory for the gradient all-reduce");
    }
    for (int i = frozen; i < count; i++)
        off[i + 1] = off[i] + pt_segment_unit_numel(seg, first + i);
    for (int i = 0; i < frozen; i++)
        off[i + 1] = 0;
    /* buckets from the last unit back, each at least bucket_bytes */
    int end = count;
    while (end > frozen) {
        int start = end - 1;
        while (start > frozen && (off[end] - off[start]) * sizeof(float) < bucket_bytes)
            start--;
        bucket *b = &r->b[r->nb];
        b->first = first + start;
        b->end = first + end;
        b->offset = off[start];
        b->count = off[end] - off[start];
        b->chunk = (b->count + (size_t)r->D - 1) / (size_t)r->D;
        b->req = calloc((size_t)2 * (r->D - 1), sizeof *b->req);
        b->parts = malloc(((size_t)(r->D - 1) * b->chunk + 1) * sizeof(float));
        for (int i = start; i < end; i++)
            r->bucket_of[i] = r->nb;
        r->nb++;
        if (!b->req || !b->parts) {
            free(off);
            pt_reducer_destroy(r);
            *out = NULL;
            return pt_fail(err, PT_ENOMEM, "out of memory for the gradient all-reduce");
        }
        end = start;
    }
    free(off);
    return 0;
}

void pt_reducer_begin(pt_reducer *r)
{
    r->failed = 0;
    r->bytes = 0;
    r->t_first = r->t_last = 0;
    for (int i = 0; i < r->nb; i++) {
        r->b[i].phase = IDLE;
        r->b[i].waiting = r->b[i].end - r->b[i].first;
    }
}

static void fail(pt_reducer *r, int rc, const pt_err *e)
{
    if (!r->failed) {
        r->failed = rc ? rc : PT_EINTERNAL;
        r->err = *e;
    }
}

/* Phase 1: every other replica's chunk goes to its owner; ours comes in. */
static void start_scatter(pt_reducer *r, int bi)
{
    bucket *b = &r->b[bi];
    pt_err e = {0};
    int rc = 0, k = 0;
    if (r->t_first == 0)
        r->t_first = now_s();
    float *data = r->grads + b->offset;
    if (r->staged)
        pt_backend_download(r->be, data, (const float *)r->device + b->offset, b->count * sizeof(float));
    const size_t mine = chunk_lo(b->count, r->D, r->me);
    const size_t mine_n = chunk_lo(b->count, r->D, r->me + 1) - mine;
    for (int j = 0; j < r->D && rc == 0; j++) {
        if (j == r->me)
            continue;
        const size_t lo = chunk_lo(b->count, r->D, j), n = chunk_lo(b->count, r->D, j + 1) - lo;
        const int slot = j < r->me ? j : j - 1;
        rc = pt_isend(r->g, data + lo, n * sizeof(float), j, 2 * bi, &b->req[k++], &e);
        if (rc == 0)
            rc = pt_irecv(r->g, b->parts + (size_t)slot * b->chunk, mine_n * sizeof(float), j, 2 * bi,
                          &b->req[k++], &e);
        r->bytes += n * sizeof(float);
    }
    b->phase = SCATTER;
    if (rc)
        fail(r, rc, &e);
}

/* The owner's sum, in replica order, then phase 2: it goes to every replica. */
static void start_gather(pt_reducer *r, int bi)
{
    bucket *b = &r->b[bi];
    float *data = r->grads + b->offset;
    const size_t mine = chunk_lo(b->count, r->D, r->me);
    const size_t mine_n = chunk_lo(b->count, r->D, r->me + 1) - mine;
    float *own = data + mine;
    for (size_t e = 0; e < mine_n; e++) {
        float acc = 0;
        for (int i = 0; i < r->D; i++) {
            const float x = i == r->me ? own[e] : b->parts[(size_t)(i < r->me ? i : i - 1) * b->chunk + e];
            acc = i == 0 ? x : acc + x;
        }
        own[e] = acc;
    }
    pt_err e = {0};
    int rc = 0, k = 0;
    for (int j = 0; j < r->D && rc == 0; j++) {
        if (j == r->me)
            continue;
        const size_t lo = chunk_lo(b->count, r->D, j), n = chunk_lo(b->count, r->D, j + 1) - lo;
        rc = pt_isend(r->g, own, mine_n * sizeof(float), j, 2 * bi + 1, &b->req[k++], &e);
        if (rc == 0)
            rc = pt_irecv(r->g, data + lo, n * sizeof(float), j, 2 * bi + 1, &b->req[k++], &e);
        r->bytes += mine_n * sizeof(float);
    }
    b->phase = GATHER;
    if (rc)
        fail(r, rc, &e);
}

/* Whether every transfer of bucket b's current phase is done. */
static int phase_done(pt_reducer *r, bucket *b)
{
    for (int k = 0; k < 2 * (r->D - 1); k++) {
        int done = 1;
        pt_err e = {0};
        int rc = pt_req_test(&b->req[k], &done, &e);
        if (rc) {
            fail(r, rc, &e);
            return 0;
        }
        if (!done)
            return 0;
    }
    return 1;
}

void pt_reducer_progress(pt_reducer *r)
{
    if (r->D < 2 || r->failed || r->nccl)
        return;
    for (int i = 0; i < r->nb && !r->failed; i++) {
        bucket *b = &r->b[i];
        if (b->phase == SCATTER && phase_done(r, b))
            start_gather(r, i);
        if (b->phase == GATHER && phase_done(r, b)) {
            if (r->staged)
                pt_backend_upload(r->be, (float *)r->device + b->offset, r->grads + b->offset,
                                  b->count * sizeof(float));
            b->phase = DONE;
            r->t_last = now_s();
        }
    }
}

void pt_reducer_unit_done(pt_reducer *r, int unit)
{
    if (r->D < 2 || r->failed || r->nccl)
        return;
    const int i = unit - r->first_unit;
    if (i < 0 || i >= pt_segment_count(r->seg) || r->bucket_of[i] < 0)
        return;
    bucket *b = &r->b[r->bucket_of[i]];
    if (--b->waiting == 0 && r->overlap)
        start_scatter(r, r->bucket_of[i]);
    pt_reducer_progress(r);
}

int pt_reducer_finish(pt_reducer *r, pt_reducer_stats *stats, pt_err *err)
{
    memset(stats, 0, sizeof *stats);
    if (r->D < 2)
        return 0;
    const double t0 = now_s();
    if (r->nccl) {
        int rc = r->total ? pt_nccl_allreduce_sum(r->g, r->device, r->total, PT_DT_F32, err) : 0;
        if (rc == 0 && r->total)
            rc = pt_nccl_wait(r->g, err);
        stats->bytes = (uint64_t)(2.0 * (r->D - 1) / r->D * (double)r->total * sizeof(float));
        stats->exposed_s = stats->total_s = now_s() - t0;
        return rc ? pt_err_prefix(err, "gradient all-reduce over NCCL (replica %d of %d)", r->me, r->D)
                  : 0;
    }
    for (int i = 0; i < r->nb && !r->failed; i++)
        if (r->b[i].phase == IDLE)
            start_scatter(r, i);
    /* the limit is on a wait without progress: every bucket's phase change
     * (a part scattered, summed, gathered) starts it again, so a long
     * reduction that keeps moving is not taken for a dead replica */
    pt_patience p;
    pt_patience_start(&p, r->g, "the gradient all-reduce");
    char others[1024];
    long moved = -1;
    while (!r->failed) {
        pt_reducer_progress(r);
        int left = 0;
        long phases = 0;
        for (int i = 0; i < r->nb; i++) {
            left += r->b[i].phase != DONE;
            phases += r->b[i].phase;
        }
        if (!left)
            break;
        if (phases != moved) {
            moved = phases;
            pt_patience_moved(&p);
        }
        if (pt_patience_spent(&p, others, sizeof others)) { /* its sends and receives stay posted */
            pt_err e;
            pt_fail(&e, PT_EPEER, "no progress for %.3g s in the gradient all-reduce among %d "
                    "replicas: another replica has stopped answering (run.timeout_s sets this "
                    "limit)%s", p.limit, r->D, others);
            fail(r, PT_EPEER, &e);
        }
    }
    const double t1 = now_s();
    stats->bytes = r->bytes;
    stats->exposed_s = t1 - t0;
    stats->total_s = r->t_first > 0 ? t1 - r->t_first : t1 - t0;
    if (r->failed) {
        *err = r->err;
        return pt_err_prefix(err, "gradient all-reduce (replica %d of %d)", r->me, r->D);
    }
    return 0;
}
