/*
 * step.c: one optimizer step, and the freeze decisions between steps.
 *
 * A step: this replica's share of the step's global batch (the sampler gives
 * each replica a contiguous slice; the global batch does not depend on D, so
 * a re-plan mid-epoch neither loses nor repeats an example), cut into M
 * micro-batches; the pipeline schedule runs with the loss scaled by
 * 1 / (loss terms in the global batch), so summing over micro-batches and
 * replicas gives the global mean; the stage's gradients are all-reduced among
 * its replicas (started during the last backward, finished here); then one
 * all-reduce over the world carries every unit's gradient sum of squares
 * (replica 0's, summed afterwards in unit order, so the clipping norm does
 * not depend on the layout), the loss, and the stop flag; every rank clips
 * and applies AdamW to its units. Idle ranks add zeros to that all-reduce and
 * so learn what every rank learns.
 *
 * State that decides the next step is only in pt_run's training fields and
 * the segments' parameters and moments, all of which checkpoints carry; that
 * is what makes a resumed run bit-identical to one that never stopped.
 */
#include "train/train.h"

#include <math.h>
#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Indexes of the step's scalars after the per-unit sums of squares. */
enum { R_LOSS, R_CORRECT, R_ROWS, R_STOP, R_FAILED, R_HITS, R_COMPUTED, R_PART_HITS, R_COUNT };
_Static_assert(R_COUNT <= 8, "run.c allocates 8 values after the units and the blocks");

/* FNV-1a over the bytes of this rank's parameters, read through a buffer of
 * its own (no allocation that could fail on one replica and make its hash
 * differ from its peers'). */
static uint64_t weights_hash(pt_run *r)
{
    uint64_t h = 1469598103934665603ULL;
    unsigned char host[1 << 14];
    const size_t real = pt_backend_real_size(r->be);
    const int first = pt_segment_first(r->seg), count = pt_segment_count(r->seg);
    for (int u = first; u < first + count; u++) {
        const size_t bytes = pt_segment_unit_numel(r->seg, u) * real;
        const unsigned char *data = pt_segment_unit_data(r->seg, u, PT_PART_PARAM);
        for (size_t at = 0; at < bytes; at += sizeof host) {
            const size_t n = bytes - at < sizeof host ? bytes - at : sizeof host;
            pt_backend_download(r->be, host, data + at, n);
            for (size_t i = 0; i < n; i++)
                h = (h ^ host[i]) * 1099511628211ULL;
        }
    }
    return h;
}

/* Debug check (check_replicas): every replica of this rank's stage holds the
 * same weights. */
static int check_replicas(pt_run *r, pt_err *err)
{
    pt_group *g = r->groups.replicas;
    const int D = g ? pt_group_size(g) : 1;
    if (D < 2)
        return 0;
    uint64_t mine = weights_hash(r);
    uint64_t *all = calloc((size_t)D, sizeof *all);
    if (!all)
        return pt_fail(err, PT_ENOMEM, "out of memory checking the replicas");
    int rc = pt_allgather(g, &mine, all, sizeof mine, err);
    for (int j = 1; rc == 0 && j < D; j++)
        if (all[j] != all[0])
            rc = pt_fail(err, PT_EINTERNAL,
                         "run.check_replicas: after step %lld, stage %d of replica %d (rank %d) "
                         "holds other weights than replica 0 (rank %d): the replicas diverged",
                         (long long)r->step, r->stage, j, pt_mesh_rank(&r->mesh, j, r->stage),
                         pt_mesh_rank(&r->mesh, 0, r->stage));
    free(all);
    return rc;
}

static void log_samples(pt_run *r, const int64_t *ids, int n)
{
    FILE *f = r->spec.sample_log;
    if (!f || !pt_run_first_stage(r) || r->sample_log_errno)
        return;
    errno = 0;
    int bad = fprintf(f, "{\"step\": %lld, \"epoch\": %lld, \"replica\": %d, \"ids\": [",
                      (long long)r->step + 1, (long long)r->epoch, r->replica) < 0;
    for (int i = 0; i < n && !bad; i++)
        bad = fprintf(f, "%s%lld", i ? ", " : "", (long long)ids[i]) < 0;
    if (bad || fprintf(f, "]}\n") < 0 || fflush(f) != 0 || ferror(f))
        r->sample_log_errno = errno ? errno : EIO;
}

/* Publishes where this rank is (see pt_train_spec.where). */
__attribute__((format(printf, 2, 3))) static void at_phase(pt_run *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pt_note_vprintf(&r->where, r->spec.where, fmt, ap);
    va_end(ap);
}

/* This replica's part of the step: the pipeline and the gradient all-reduce. */
/* rc, with err marked as a failure every rank has alike (pt_err.agreed) */
static int agreed(pt_err *err, int rc)
{
    if (err)
        err->agreed = 1;
    return rc;
}

static int replica_step(pt_run *r, pt_stats *st, pt_step_result *out, pt_err *err)
{
    const int64_t *ids;
    int n, rc;
    pt_sampler_slice(&r->sampler, r->epoch_step, r->replica, r->plan.replicas, &ids, &n);
    log_samples(r, ids, n);
    int m = pt_run_stage(r, r->spec.train, ids, n, r->micro, 1);
    if (m != r->micro)
        return pt_fail(err, PT_EINTERNAL, "a share of %d examples makes %d micro-batches, not %d", n,
                       m, r->micro);
    pt_segment_zero_grads(r->seg);
    pt_segment_set_loss_scale(r->seg, 1.0 / ((double)r->spec.batch *
                                             (double)pt_arch_rows_per_example(&r->arch)));
    pt_reducer_begin(r->reducer);
    /* a frozen prefix that stage 0 runs itself, no prefix source before it
     * (the cache off, and the prefix filling stage 0): computed for every
     * example of the share (a source counts its own, train/prefix.c) */
    if (r->stage == 0 && r->frozen_units > 0 && r->source_units == 0)
        r->step_computed += n;
    pt_note_publish(r->spec.where, pt_stage_exec_where(r->exec));
    if ((rc = pt_stage_exec_step(r->exec, r->batches, st, err)))
        return pt_err_prefix(err, "%s", pt_stage_exec_where(r->exec));
    at_phase(r, "step %lld, replica %d, stage %d: the gradient all-reduce among %d replicas",
             (long long)r->step + 1, r->replica, r->stage, r->plan.replicas);
    rc = pt_reducer_finish(r->reducer, &out->allreduce, err);
    if (rc)
        return pt_err_prefix(err, "step %lld, replica %d, stage %d", (long long)r->step + 1,
                             r->replica, r->stage);
    return 0;
}

static int run_step(pt_run *r, pt_stop_query stop, void *stop_ctx, pt_step_result *out,
                    pt_err *err);

/* Every wait of a step may span other ranks' work, not one action of a
 * neighbour (an idle rank's, a frozen stage's, a replica's ahead of a
 * slower one, a first stage's for the gradient that the later stages'
 * forwards and backwards lead to): the others' progress counts in them
 * (comm.h, pt_comm_tick). */
int pt_run_step(pt_run *r, pt_stop_query stop, void *stop_ctx, pt_step_result *out,
                pt_err *err)
{
    pt_comm_ticks_count(1);
    const int rc = run_step(r, stop, stop_ctx, out, err);
    pt_comm_ticks_count(0);
    return rc;
}

static int run_step(pt_run *r, pt_stop_query stop, void *stop_ctx, pt_step_result *out,
                    pt_err *err)
{
    int rc;
    memset(out, 0, sizeof *out);
    at_phase(r, "step %lld: starting", (long long)r->step + 1);
    if ((rc = pt_test_fault("step", r->rank, r->step + 1, err)))
        return rc;
    pt_stats st = {0};
    if (r->active && (rc = replica_step(r, &st, out, err)))
        return rc;
    const int units = pt_arch_units(&r->arch);
    double *v = r->reduce;
    memset(v, 0, (size_t)(units + R_COUNT) * sizeof *v);
    if (r->active && r->replica == 0)
        pt_segment_unit_grad_sumsq(r->seg, v + pt_segment_first(r->seg));
    v[units + R_LOSS] = st.loss;
    v[units + R_CORRECT] = (double)st.correct;
    v[units + R_ROWS] = (double)st.rows;
    /* asked now, not when the step began: a signal during the step's work
     * stops the run after this step, as the README promises */
    const int stop_requested = stop ? stop(stop_ctx) : 0;
    v[units + R_STOP] = stop_requested ? 1 : 0;
    v[units + R_FAILED] = stop_requested & PT_STOP_FAILED ? 1 : 0;
    /* the frozen prefix's samples of every replica, for the epoch's counts */
    v[units + R_HITS] = (double)r->step_hits;
    v[units + R_COMPUTED] = (double)r->step_computed;
    v[units + R_PART_HITS] = (double)r->step_part_hits;
    r->step_hits = r->step_computed = r->step_part_hits = 0;
    if (r->active)
        at_phase(r, "step %lld, replica %d, stage %d: combining the step's results over all ranks",
                 (long long)r->step + 1, r->replica, r->stage);
    else
        at_phase(r, "step %lld, an idle rank: waiting for the step's results", (long long)r->step + 1);
    rc = pt_allreduce_sum(pt_comm_world(r->comm), v, (size_t)(units + R_COUNT), PT_DT_F64, err);
    if (rc)
        return pt_err_prefix(err, "step %lld: combining the ranks' results", (long long)r->step + 1);
    if ((rc = pt_test_fault("combined", r->rank, r->step + 1, err)))
        return rc;
    double sumsq = 0;
    for (int u = 0; u < units; u++)
        sumsq += v[u];
    /* every rank reads the same combined values, so the checks below fail
     * on all ranks alike, with none waiting on another: agreed (the job
     * then ends without an abort) */
    if (!isfinite(v[units + R_LOSS]))
        return agreed(err, pt_fail(err, PT_EINPUT,
                       "the loss became %s at step %lld: training diverged; the weights after "
                       "step %lld give it, and so does a checkpoint of that step (resume an "
                       "earlier one, with a lower train.lr or a train.grad_clip)",
                       isnan(v[units + R_LOSS]) ? "NaN" : v[units + R_LOSS] > 0 ? "Inf" : "-Inf",
                       (long long)r->step + 1, (long long)r->step));
    /* before the update: weights that a NaN or Inf gradient reached would be
     * saved at the next checkpoint (and every step after would be NaN) */
    if (!isfinite(sumsq))
        return agreed(err, pt_fail(err, PT_EINPUT,
                       "the gradient became %s at step %lld (the loss was %.6g): training "
                       "diverged, and the step was not applied (try a lower train.lr or a "
                       "train.grad_clip)",
                       isnan(sumsq) ? "NaN" : "Inf", (long long)r->step + 1, v[units + R_LOSS]));
    /* per-block gradient norms for the auto freeze policy: a block is its attn and mlp units */
    if (r->freeze.cfg.kind == PT_FREEZE_AUTO) {
        double *block = v + units + R_COUNT;
        for (int b = 0; b < r->arch.layers; b++)
            block[b] = sqrt(v[1 + 2 * b] + v[2 + 2 * b]);
        pt_freeze_accumulate(&r->freeze, block);
    }
    const double norm = sqrt(sumsq), rate = pt_lr_at(&r->lr, r->step);
    const pt_train_spec *s = &r->spec;
    pt_adamw opt = {rate, s->beta1, s->beta2, s->eps, s->weight_decay, r->step + 1,
                    pt_clip_coef(norm, s->grad_clip)};
    if (r->active && (rc = pt_segment_adamw(r->seg, &opt, err)))
        return rc;
    r->step++;
    r->epoch_step++;
    if (s->check_replicas > 0 && r->step % s->check_replicas == 0 &&
        (rc = pt_run_agree(r, r->active ? check_replicas(r, err) : 0, err)))
        return rc;
    out->loss = v[units + R_LOSS];
    out->grad_norm = norm;
    out->lr = rate;
    out->examples = s->batch;
    out->rows = (int64_t)v[units + R_ROWS];
    out->correct = (int64_t)v[units + R_CORRECT];
    out->stop = v[units + R_STOP] > 0;
    out->failed = v[units + R_FAILED] > 0;
    r->cache_hits += (int64_t)v[units + R_HITS];
    r->prefix_computed += (int64_t)v[units + R_COMPUTED];
    r->cache_part_hits += (int64_t)v[units + R_PART_HITS];
    return 0;
}

int pt_freeze_due(const pt_run *r, int epoch_done)
{
    const pt_train_spec *s = &r->spec;
    if (s->freeze.kind == PT_FREEZE_NONE)
        return 0;
    if (r->step == 0) /* before the first step: only a start of 0 decides here */
        return s->freeze_start == 0;
    if (s->freeze_every_step)
        return r->step >= s->freeze_start && (r->step - s->freeze_start) % s->freeze_every == 0;
    return epoch_done && r->epoch >= s->freeze_start && (r->epoch - s->freeze_start) % s->freeze_every == 0;
}

int pt_run_freeze_decide(pt_run *r, pt_freeze_report *rep)
{
    const int depth = pt_freeze_decide(&r->freeze, rep);
    if (depth == rep->old_depth)
        return 0;
    r->frozen_units = pt_freeze_units(depth);
    return 1;
}
