/*
 * exec.c: runs one stage's action list of a pipeline schedule for a training
 * step, with non-blocking transfers so they overlap compute.
 *
 * At the start of a step every receive of the step is posted (into its own
 * per-micro-batch buffer), so data arrives while the stage computes; a receive
 * action only waits for its transfer, a send action only posts it, and all
 * sends are completed at the end of the step. This is more permissive than
 * the rendezvous semantics the schedule was validated under, so it cannot
 * deadlock where the schedule does not.
 *
 * Device memory: when the backend's memory is not host memory (a GPU; the
 * MPI here is not CUDA-aware), transfers go through host staging buffers: a
 * send downloads first, a completed receive uploads.
 *
 * Activation memory: without recompute, micro-batch m occupies a segment slot
 * from its forward to its backward (slots = the schedule's peak in flight);
 * with recompute there is one slot, and backward first re-runs the forward
 * from the stage's stored input. Either way the step's result is the same
 * bits.
 *
 * `where` always names the action being executed, for failure messages.
 */
#include "pipe/pipe.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct pt_stage_exec {
    const pt_schedule *sched;
    int stage, K, M, slots, recompute;
    int frozen;                 /* a stage before sched->trainable: forward only */
    pt_stage_input_fn input;    /* stage 0's input source, or NULL */
    void *input_ctx;
    int from;                   /* the segment unit the input enters (0 without a source) */
    pt_group *pipe;
    pt_segment *seg;
    pt_backend *be;
    int max_micro;
    void **x_in, **y_out, **dy_in, **dx_out; /* [M]; NULL where the stage has no such edge */
    int staged;                              /* transfers go through host copies */
    void **h_x_in, **h_y_out, **h_dy_in, **h_dx_out; /* [M] host staging when staged */
    void *y_scratch;                         /* recompute's discarded output */
    pt_req *recv_act, *recv_grad, *send_act, *send_grad;
    int *slot_of, *slot_busy;
    int64_t at_step; /* the training step being run (1-based), for messages */
    /* where the stage is (the note's latest string), also published to
     * *publish_where for a signal handler */
    pt_note note;
    const char *where;
    const char *volatile *publish_where;
    pt_exec_times times;
    pt_stage_hooks hooks;
    int replica;
    int last_bwd;               /* index of the step's last backward in the action list */
    int nccl;                   /* transfers through the pipeline group's NCCL communicator */
    int in_last_bwd;            /* that backward is running: unit gradients become final */
};

__attribute__((format(printf, 2, 3))) static void set_where(pt_stage_exec *x, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    x->where = pt_note_vprintf(&x->note, x->publish_where, fmt, ap);
    va_end(ap);
}

static double wall_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int last_stage(const pt_stage_exec *x) { return x->stage == x->K - 1; }

/* The stage's input arrives in x_in[m]: from the previous stage or the source. */
static int has_input(const pt_stage_exec *x) { return x->stage > 0 || x->input; }

void pt_stage_exec_destroy(pt_stage_exec *x)
{
    if (!x)
        return;
    /* the published string must outlive the executor */
    if (pt_note_is_published(&x->note, x->publish_where))
        pt_note_publish(x->publish_where, "between pipeline layouts");
    for (int m = 0; m < x->M; m++) {
        /* the transfers first: a buffer that one may still use is left
         * allocated (the job is failing) */
        if (x->recv_act) {
            int live = pt_req_cancel(&x->recv_act[m]);
            live |= pt_req_cancel(&x->recv_grad[m]);
            live |= pt_req_cancel(&x->send_act[m]);
            live |= pt_req_cancel(&x->send_grad[m]);
            if (live)
                continue;
        }
        if (x->x_in)
            pt_backend_free(x->be, x->x_in[m]);
        if (x->y_out)
            pt_backend_free(x->be, x->y_out[m]);
        if (x->dy_in)
            pt_backend_free(x->be, x->dy_in[m]);
        if (x->dx_out)
            pt_backend_free(x->be, x->dx_out[m]);
        void **staging[4] = {x->h_x_in, x->h_y_out, x->h_dy_in, x->h_dx_out};
        for (int k = 0; k < 4; k++)
            if (staging[k])
                free(staging[k][m]);
    }
    pt_backend_free(x->be, x->y_scratch);
    free(x->h_x_in);
    free(x->h_y_out);
    free(x->h_dy_in);
    free(x->h_dx_out);
    free(x->x_in);
    free(x->y_out);
    free(x->dy_in);
    free(x->dx_out);
    free(x->recv_act);
    free(x->recv_grad);
    free(x->send_act);
    free(x->send_grad);
    free(x->slot_of);
    free(x->slot_busy);
    free(x);
}

static void **host_buffers(pt_stage_exec *x, int wanted, size_t bytes, int *ok)
{
    if (!wanted || !x->staged || !*ok || x->M < 1)
        return NULL;
    void **b = calloc((size_t)x->M, sizeof *b);
    for (int m = 0; b && m < x->M; m++)
        if (!(b[m] = malloc(bytes ? bytes : 1)))
            *ok = 0;
    if (!b)
        *ok = 0;
    return b;
}

static void **buffers(pt_stage_exec *x, int wanted, size_t bytes, int *ok)
{
    if (!wanted || !*ok || x->M < 1)
        return NULL;
    void **b = calloc((size_t)x->M, sizeof *b);
    for (int m = 0; b && m < x->M; m++)
        if (!(b[m] = pt_backend_alloc(x->be, bytes)))
            *ok = 0;
    if (!b)
        *ok = 0;
    return b;
}

int pt_stage_exec_slots(const pt_schedule *s, int stage, int recompute)
{
    /* a frozen stage keeps nothing after a forward */
    return recompute || stage < s->trainable ? 1 : pt_schedule_in_flight(s, stage);
}

int pt_stage_exec_create(pt_stage_exec **out, const pt_stage_spec *spec, pt_err *err)
{
    *out = NULL;
    const pt_schedule *s = spec->sched;
    if (spec->stage < 0 || spec->stage >= s->stages || (spec->pipe && pt_group_rank(spec->pipe) != spec->stage) ||
        (s->stages > 1 && !spec->pipe))
        return pt_fail(err, PT_EINTERNAL, "stage %d does not match its pipeline group", spec->stage);
    pt_stage_exec *x = calloc(1, sizeof *x);
    if (!x)
        return pt_fail(err, PT_ENOMEM, "out of memory creating a pipeline stage");
    /* micro-batch m's activations go with tag m, its gradients with M + m */
    if (s->stages > 1 && (int64_t)2 * s->micro - 1 > pt_group_tag_limit(spec->pipe)) {
        free(x);
        return pt_fail(err, PT_EINPUT, "%d micro-batches (pipeline.microbatches, or the planner's "
                       "choice) need transfer tags up to %d, past this MPI's limit of %d: use "
                       "fewer", s->micro, 2 * s->micro - 1, pt_group_tag_limit(spec->pipe));
    }
    x->sched = s;
    x->stage = spec->stage;
    x->K = s->stages;
    x->M = s->micro;
    x->pipe = spec->pipe;
    x->seg = spec->seg;
    x->be = pt_segment_backend(spec->seg);
    x->recompute = spec->recompute;
    x->max_micro = spec->max_micro;
    x->slots = pt_stage_exec_slots(s, spec->stage, spec->recompute);
    x->frozen = spec->stage < s->trainable;
    x->input = spec->stage == 0 ? spec->input : NULL;
    x->input_ctx = spec->input_ctx;
    x->from = x->input ? spec->input_unit : 0;
    if (x->from < 0 || x->from > pt_segment_frozen(spec->seg) || x->from >= pt_segment_count(spec->seg)) {
        free(x);
        return pt_fail(err, PT_EINTERNAL, "input enters unit %d of a segment with %d units, %d frozen",
                       spec->input_unit, pt_segment_count(spec->seg), pt_segment_frozen(spec->seg));
    }
    const size_t act = pt_segment_act_elems(x->seg, x->max_micro) * pt_backend_act_size(x->be);
    int ok = 1;
    x->x_in = buffers(x, has_input(x), act, &ok);
    x->dx_out = buffers(x, x->stage > 0, act, &ok);
    x->y_out = buffers(x, !last_stage(x), act, &ok);
    x->dy_in = buffers(x, !last_stage(x), act, &ok);
    x->nccl = pt_group_nccl_ready(spec->pipe);
    /* NCCL moves device memory itself; MPI needs host copies of it */
    x->staged = !pt_backend_is_host(x->be) && !x->nccl;
    x->h_x_in = host_buffers(x, x->stage > 0, act, &ok);
    x->h_dx_out = host_buffers(x, x->stage > 0, act, &ok);
    x->h_y_out = host_buffers(x, !last_stage(x), act, &ok);
    x->h_dy_in = host_buffers(x, !last_stage(x), act, &ok);
    if (ok && x->recompute && !last_stage(x) && !(x->y_scratch = pt_backend_alloc(x->be, act)))
        ok = 0;
    x->recv_act = calloc((size_t)x->M, sizeof *x->recv_act);
    x->recv_grad = calloc((size_t)x->M, sizeof *x->recv_grad);
    x->send_act = calloc((size_t)x->M, sizeof *x->send_act);
    x->send_grad = calloc((size_t)x->M, sizeof *x->send_grad);
    x->slot_of = calloc((size_t)x->M, sizeof *x->slot_of);
    x->slot_busy = calloc(x->slots > 0 ? (size_t)x->slots : 1, sizeof *x->slot_busy);
    if (!ok || !x->recv_act || !x->recv_grad || !x->send_act || !x->send_grad || !x->slot_of ||
        !x->slot_busy) {
        pt_stage_exec_destroy(x);
        return pt_fail(err, PT_ENOMEM, "out of memory for the transfer buffers of a pipeline stage");
    }
    x->hooks = spec->hooks;
    x->replica = spec->replica;
    x->last_bwd = -1;
    const pt_action *list = s->act[x->stage];
    for (int i = 0; i < s->len[x->stage]; i++)
        if (list[i].kind == PT_A_BWD)
            x->last_bwd = i;
    set_where(x, "replica %d, stage %d, before the first step", x->replica, x->stage);
    x->publish_where = spec->publish_where; /* from here on: the rank is where its stage is */
    *out = x;
    return 0;
}

/* The segment's backward hook: only the last backward makes gradients final. */
static void unit_backward_done(void *ctx, int unit)
{
    pt_stage_exec *x = ctx;
    if (x->in_last_bwd && x->hooks.unit_done)
        x->hooks.unit_done(x->hooks.ctx, unit);
}

const char *pt_stage_exec_where(const pt_stage_exec *x) { return x->where; }
const pt_exec_times *pt_stage_exec_times(const pt_stage_exec *x) { return &x->times; }

static void describe(pt_stage_exec *x, int i, int len, pt_action a)
{
    const char *peer = "";
    char buf[32] = "";
    if (a.kind == PT_A_RECV_ACT || a.kind == PT_A_SEND_GRAD)
        snprintf(buf, sizeof buf, " (stage %d)", x->stage - 1), peer = buf;
    else if (a.kind == PT_A_SEND_ACT || a.kind == PT_A_RECV_GRAD)
        snprintf(buf, sizeof buf, " (stage %d)", x->stage + 1), peer = buf;
    set_where(x, "step %lld, replica %d, stage %d, action %d of %d: %s of micro-batch %d%s",
             (long long)x->at_step, x->replica, x->stage, i + 1, len, pt_action_name(a.kind), a.mb, peer);
}

static size_t act_bytes(const pt_stage_exec *x, int n)
{
    return pt_segment_act_elems(x->seg, n) * pt_backend_act_size(x->be);
}

static int take_slot(pt_stage_exec *x, int m, pt_err *err)
{
    for (int k = 0; k < x->slots; k++)
        if (!x->slot_busy[k] || x->recompute) {
            x->slot_busy[k] = 1;
            x->slot_of[m] = k;
            return 0;
        }
    return pt_fail(err, PT_EINTERNAL, "no free activation slot for micro-batch %d", m);
}

static int post_receives(pt_stage_exec *x, const pt_batch *batches, pt_err *err)
{
    int rc = 0;
    for (int m = 0; m < x->M && rc == 0; m++) {
        size_t bytes = act_bytes(x, batches[m].n);
        if (x->stage > 0)
            rc = pt_irecv(x->pipe, x->staged ? x->h_x_in[m] : x->x_in[m], bytes, x->stage - 1, m,
                          &x->recv_act[m], err);
        if (rc == 0 && !last_stage(x) && !x->frozen)
            rc = pt_irecv(x->pipe, x->staged ? x->h_dy_in[m] : x->dy_in[m], bytes, x->stage + 1,
                          x->M + m, &x->recv_grad[m], err);
    }
    return rc;
}

/* With NCCL: the transfers of actions list[i..] that complete together (a
 * fused send and receive), issued as one NCCL group on the backend's stream
 * and waited for at once. The schedule's rendezvous validation is what keeps
 * this free of deadlock: it checks the schedule with transfers that complete
 * only when the peer is at the matching action, which is how these behave.
 * Returns how many actions were done in *count. */
static int nccl_transfers(pt_stage_exec *x, const pt_action *list, int i, int len,
                          const pt_batch *batches, int *count, pt_err *err)
{
    int n = 1;
    while (i + n - 1 < len - 1 && list[i + n - 1].fused)
        n++;
    int rc = pt_nccl_group_start(err);
    const int started = rc == 0;
    for (int k = 0; rc == 0 && k < n; k++) {
        const pt_action a = list[i + k];
        const size_t bytes = act_bytes(x, batches[a.mb].n);
        switch (a.kind) {
        case PT_A_SEND_ACT:
            rc = pt_nccl_send(x->pipe, x->y_out[a.mb], bytes, x->stage + 1, err);
            break;
        case PT_A_SEND_GRAD:
            rc = pt_nccl_send(x->pipe, x->dx_out[a.mb], bytes, x->stage - 1, err);
            break;
        case PT_A_RECV_ACT:
            rc = pt_nccl_recv(x->pipe, x->x_in[a.mb], bytes, x->stage - 1, err);
            break;
        case PT_A_RECV_GRAD:
            rc = pt_nccl_recv(x->pipe, x->dy_in[a.mb], bytes, x->stage + 1, err);
            break;
        default:
            rc = pt_fail(err, PT_EINTERNAL, "action %d is not a transfer", (int)a.kind);
        }
    }
    /* a group once started is ended, failed or not (NCCL would defer this
     * thread's later calls) */
    if (started) {
        pt_err ignore;
        const int end = pt_nccl_group_end(rc ? &ignore : err);
        if (rc == 0)
            rc = end;
    }
    if (rc == 0)
        rc = pt_nccl_wait(x->pipe, err);
    *count = n;
    return rc;
}

static int is_transfer(pt_action_kind k) { return k != PT_A_FWD && k != PT_A_BWD; }

static int run_action(pt_stage_exec *x, pt_action a, const pt_batch *batches, pt_stats *stats,
                      pt_err *err)
{
    char peer[32];
    snprintf(peer, sizeof peer, "stage %d", a.kind == PT_A_RECV_ACT ? x->stage - 1 : x->stage + 1);
    const int m = a.mb;
    const pt_batch *b = &batches[m];
    const size_t bytes = act_bytes(x, b->n);
    const void *x_in = has_input(x) ? x->x_in[m] : NULL;
    switch (a.kind) {
    case PT_A_RECV_ACT: {
        int rc = pt_wait(x->pipe, &x->recv_act[m], peer, err);
        if (rc == 0 && x->staged)
            pt_backend_upload(x->be, x->x_in[m], x->h_x_in[m], bytes);
        return rc;
    }
    case PT_A_RECV_GRAD: {
        int rc = pt_wait(x->pipe, &x->recv_grad[m], peer, err);
        if (rc == 0 && x->staged)
            pt_backend_upload(x->be, x->dy_in[m], x->h_dy_in[m], bytes);
        return rc;
    }
    case PT_A_SEND_ACT:
        if (x->staged)
            pt_backend_download(x->be, x->h_y_out[m], x->y_out[m], bytes);
        return pt_isend(x->pipe, x->staged ? x->h_y_out[m] : x->y_out[m], bytes, x->stage + 1, m,
                        &x->send_act[m], err);
    case PT_A_SEND_GRAD:
        if (x->staged)
            pt_backend_download(x->be, x->h_dx_out[m], x->dx_out[m], bytes);
        return pt_isend(x->pipe, x->staged ? x->h_dx_out[m] : x->dx_out[m], bytes, x->stage - 1,
                        x->M + m, &x->send_grad[m], err);
    case PT_A_FWD: {
        const int count = pt_segment_count(x->seg);
        int rc = x->input ? x->input(x->input_ctx, m, b, 1, x->x_in[m], err) : 0;
        if (rc == 0 && x->frozen) /* nothing to keep for a backward that never comes */
            return pt_segment_forward_range(x->seg, 0, x->from, count, b, x_in, x->y_out[m], 0, NULL,
                                            err);
        if (rc == 0)
            rc = take_slot(x, m, err);
        return rc ? rc
                  : pt_segment_forward_range(x->seg, x->slot_of[m], x->from, count, b, x_in,
                                             last_stage(x) ? NULL : x->y_out[m], 1,
                                             last_stage(x) ? stats : NULL, err);
    }
    case PT_A_BWD: {
        int rc = 0, slot = x->slot_of[m];
        if (x->recompute)
            rc = pt_segment_forward_range(x->seg, slot, x->from, pt_segment_count(x->seg), b, x_in,
                                          last_stage(x) ? NULL : x->y_scratch, 1, NULL, err);
        /* the first trainable stage sends no gradient back: the stages before it are frozen */
        if (rc == 0)
            rc = pt_segment_backward(x->seg, slot, b, last_stage(x) ? NULL : x->dy_in[m],
                                     x->stage > x->sched->trainable ? x->dx_out[m] : NULL, err);
        x->slot_busy[slot] = 0;
        return rc;
    }
    }
    return pt_fail(err, PT_EINTERNAL, "unknown action %d", (int)a.kind);
}

static int finish_sends(pt_stage_exec *x, pt_err *err)
{
    int rc = 0;
    for (int m = 0; m < x->M && rc == 0; m++) {
        set_where(x, "step %lld, replica %d, stage %d: completing the sends of micro-batch %d",
                 (long long)x->at_step, x->replica, x->stage, m);
        if ((rc = pt_wait(x->pipe, &x->send_act[m], "the next stage", err)) == 0)
            rc = pt_wait(x->pipe, &x->send_grad[m], "the previous stage", err);
    }
    return rc;
}

int pt_stage_exec_step(pt_stage_exec *x, const pt_batch *batches, pt_stats *stats, pt_err *err)
{
    /* the run's step (the batches carry it for dropout), not this
     * executor's count, which starts again at every re-plan */
    x->at_step = batches[0].step + 1;
    memset(&x->times, 0, sizeof x->times);
    const double t0 = wall_s();
    memset(x->slot_busy, 0, (size_t)x->slots * sizeof *x->slot_busy);
    int rc = x->nccl ? 0 : post_receives(x, batches, err);
    const pt_action *list = x->sched->act[x->stage];
    const int len = x->sched->len[x->stage];
    pt_segment_set_backward_hook(x->seg, x->hooks.unit_done ? unit_backward_done : NULL, x);
    /* for the ranks whose wait spans this step's work (comm.h): the work
     * since the last step's actions (its update, this step's batch) ends */
    pt_comm_tick(pt_group_timeout(x->pipe));
    for (int i = 0; i < len && rc == 0; i++) {
        describe(x, i, len, list[i]);
        const int compute = list[i].kind == PT_A_FWD || list[i].kind == PT_A_BWD;
        const double w = wall_s(), c = compute ? cpu_s() : 0;
        x->in_last_bwd = i == x->last_bwd;
        if (x->nccl && is_transfer(list[i].kind)) {
            int done = 1;
            rc = nccl_transfers(x, list, i, len, batches, &done, err);
            i += done - 1;
        } else {
            rc = run_action(x, list[i], batches, stats, err);
        }
        x->in_last_bwd = 0;
        if (compute) {
            x->times.compute_wall += wall_s() - w;
            x->times.compute_cpu += cpu_s() - c;
        } else {
            x->times.comm_wall += wall_s() - w;
        }
        if (x->hooks.progress)
            x->hooks.progress(x->hooks.ctx);
        /* for the ranks whose wait spans this step's work */
        pt_comm_tick(pt_group_timeout(x->pipe));
    }
    pt_segment_set_backward_hook(x->seg, NULL, NULL);
    if (rc == 0 && !x->nccl)
        rc = finish_sends(x, err);
    x->times.step_wall = wall_s() - t0;
    if (rc == 0)
        set_where(x, "replica %d, stage %d, between steps (after step %lld)", x->replica,
                  x->stage, (long long)x->at_step);
    return rc;
}

int pt_stage_exec_forward(pt_stage_exec *x, const pt_batch *batches, int n_micro, pt_stats *stats,
                          pt_err *err)
{
    if (n_micro > x->M)
        return pt_fail(err, PT_EINTERNAL, "%d micro-batches in one forward pass; the stage holds %d",
                       n_micro, x->M);
    int rc = 0;
    for (int m = 0; m < n_micro && rc == 0; m++) {
        const size_t bytes = act_bytes(x, batches[m].n);
        set_where(x, "evaluation, replica %d, stage %d: forward of micro-batch %d", x->replica,
                  x->stage, m);
        pt_comm_tick(pt_group_timeout(x->pipe)); /* for the ranks whose wait spans this work */
        if (x->nccl) { /* one micro-batch at a time along the pipeline */
            if (x->stage > 0 && ((rc = pt_nccl_recv(x->pipe, x->x_in[m], bytes, x->stage - 1, err)) ||
                                 (rc = pt_nccl_wait(x->pipe, err))))
                break;
            if (x->input && (rc = x->input(x->input_ctx, m, &batches[m], 0, x->x_in[m], err)))
                break;
            if ((rc = pt_segment_forward_range(x->seg, 0, x->from, pt_segment_count(x->seg), &batches[m],
                                               has_input(x) ? x->x_in[m] : NULL,
                                               last_stage(x) ? NULL : x->y_out[m], 0,
                                               last_stage(x) ? stats : NULL, err)))
                break;
            if (!last_stage(x) && ((rc = pt_nccl_send(x->pipe, x->y_out[m], bytes, x->stage + 1, err)) ||
                                   (rc = pt_nccl_wait(x->pipe, err))))
                break;
            continue;
        }
        if (x->stage > 0 && (rc = pt_irecv(x->pipe, x->staged ? x->h_x_in[m] : x->x_in[m], bytes,
                                           x->stage - 1, m, &x->recv_act[m], err)) == 0 &&
            (rc = pt_wait(x->pipe, &x->recv_act[m], "the previous stage", err)) == 0 && x->staged)
            pt_backend_upload(x->be, x->x_in[m], x->h_x_in[m], bytes);
        if (rc == 0 && x->input)
            rc = x->input(x->input_ctx, m, &batches[m], 0, x->x_in[m], err);
        if (rc == 0)
            rc = pt_segment_forward_range(x->seg, 0, x->from, pt_segment_count(x->seg), &batches[m],
                                          has_input(x) ? x->x_in[m] : NULL,
                                          last_stage(x) ? NULL : x->y_out[m], 0,
                                          last_stage(x) ? stats : NULL, err);
        if (rc == 0 && !last_stage(x)) {
            if (x->staged)
                pt_backend_download(x->be, x->h_y_out[m], x->y_out[m], bytes);
            rc = pt_isend(x->pipe, x->staged ? x->h_y_out[m] : x->y_out[m], bytes, x->stage + 1, m,
                          &x->send_act[m], err);
        }
    }
    for (int m = 0; m < n_micro && rc == 0 && !x->nccl; m++)
        rc = pt_wait(x->pipe, &x->send_act[m], "the next stage", err);
    return rc ? pt_err_prefix(err, "%s", x->where) : 0;
}
