/*
 * loop.c: the training loop around the engine's steps: epochs, evaluation
 * and checkpoints at their cadence, freeze decisions (and the re-plans they
 * cause), progress lines and metrics, and a clean stop on a signal (finish
 * the step, save, exit with status 130). Every rank runs the same loop; the
 * engine's step ends in an all-reduce over the world, so all ranks agree on
 * every decision, stop requests included.
 */
#include "cache/cache.h"
#include "checkpoint/checkpoint.h"
#include "launch/session.h"
#include "signals/signals.h"
#include "tokenize/tokenize.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Publishes what this rank does between steps (for the line above). */
__attribute__((format(printf, 1, 2))) static void loop_at(const char *fmt, ...)
{
    static pt_note note;
    va_list ap;
    va_start(ap, fmt);
    pt_note_vprintf(&note, pt_stop_signal_where(), fmt, ap);
    va_end(ap);
}

static int log_failed(const pt_session *s, char *msg, size_t n);

static int save_checkpoint(pt_session *s, pt_err *err)
{
    loop_at("step %lld: saving a checkpoint", (long long)s->run.step);
    const pt_ckpt_run c = pt_session_ckpt(s);
    int rc = pt_checkpoint_save(&c, err);
    char why[PT_PATH_MAX + 160];
    if (rc && log_failed(s, why, sizeof why)) { /* a full disk, most likely: both say so */
        const size_t at = strlen(err->msg);
        snprintf(err->msg + at, sizeof err->msg - at, " (and before it, %s)", why);
    }
    return rc;
}

static void layout_words(int K, int D, int M, char *out, size_t n)
{
    snprintf(out, n, "K = %d x D = %d, M = %d", K, D, M);
}

static void report_replan(pt_session *s, const pt_transition *t)
{
    const pt_run *r = &s->run;
    json_t *o = pt_metrics_event("replan");
    json_object_set_new(o, "step", json_integer(r->step));
    json_object_set_new(o, "epoch", json_integer(r->epoch));
    json_object_set_new(o, "frozen_units", json_integer(r->frozen_units));
    json_object_set_new(o, "cached_units", json_integer(r->plan.cached_units));
    json_object_set_new(o, "old", json_pack("{s:i, s:i, s:i}", "stages", t->old_stages, "replicas",
                                            t->old_replicas, "micro", t->old_micro));
    json_object_set_new(o, "new", json_pack("{s:i, s:i, s:i}", "stages", t->new_stages, "replicas",
                                            t->new_replicas, "micro", t->new_micro));
    json_t *bounds = json_array();
    for (int st = 0; st <= r->plan.stages; st++)
        json_array_append_new(bounds, json_integer(r->plan.bounds[st]));
    json_object_set_new(o, "bounds", bounds);
    json_object_set_new(o, "bytes_moved", json_integer((json_int_t)t->bytes));
    json_object_set_new(o, "seconds", pt_json_number(t->seconds));
    pt_progress_metrics(&s->progress, o);
    char was[64], now[64];
    layout_words(t->old_stages, t->old_replicas, t->old_micro, was, sizeof was);
    layout_words(t->new_stages, t->new_replicas, t->new_micro, now, sizeof now);
    pt_progress_note(&s->progress, "re-planned: %s -> %s, %.2f MiB moved in %.3f s", was, now,
                     (double)t->bytes / (1 << 20), t->seconds);
}

/* Makes a freeze decision, logs it with what it was based on, and re-plans
 * when the frozen prefix grew. save: a checkpoint is due at this step; it
 * is saved between the decision and the re-plan (*saved_at set), so that a
 * re-plan that fails (for memory: it holds the old stage and the new one at
 * once) loses no training, and a resume lays the new prefix out from the
 * start, without that peak. A fresh run's opening decision (freeze.start 0)
 * was made before its first layout, which is laid out for it: logged here,
 * with no re-plan. */
static int freeze_decision(pt_session *s, int save, int64_t *saved_at, pt_err *err)
{
    pt_run *r = &s->run;
    loop_at("step %lld: the freeze decision (and a re-plan)", (long long)r->step);
    pt_freeze_report rep;
    const int opening = r->opening.made;
    if (opening) {
        rep = r->opening.report;
        r->opening.made = 0;
    }
    const int moved = opening ? 0 : pt_run_freeze_decide(r, &rep);
    const int depth = rep.new_depth;
    json_t *o = pt_metrics_event("freeze");
    json_object_set_new(o, "step", json_integer(r->step));
    json_object_set_new(o, "epoch", json_integer(r->epoch));
    json_object_set_new(o, "decision", json_integer(rep.decision));
    json_object_set_new(o, "depth", json_integer(depth));
    json_object_set_new(o, "old_depth", json_integer(rep.old_depth));
    json_object_set_new(o, "bound", json_integer(rep.bound));
    json_object_set_new(o, "candidate", json_integer(rep.candidate));
    json_object_set_new(o, "threshold", pt_json_number(rep.threshold));
    if (rep.norms) {
        json_t *norms = json_array(), *rates = json_array();
        for (int b = 0; b < r->arch.layers; b++) {
            json_array_append_new(norms, pt_json_number(rep.norms[b]));
            json_array_append_new(rates, pt_json_number(rep.rates[b]));
        }
        json_object_set_new(o, "norms", norms);
        json_object_set_new(o, "rates", rates);
    }
    pt_progress_metrics(&s->progress, o);
    if (rep.norms)
        pt_progress_note(&s->progress,
                         "freeze decision %d (auto): %d -> %d of %d block%s frozen (the norms say "
                         "%d, median change rate %.3g, bound %d)",
                         rep.decision, rep.old_depth, depth, r->arch.layers,
                         r->arch.layers == 1 ? "" : "s", rep.candidate,
                         rep.threshold, rep.bound);
    else
        pt_progress_note(&s->progress,
                         "freeze decision %d (%s): %d -> %d of %d block%s frozen (bound %d)",
                         rep.decision, pt_config_word("freeze.policy", s->cfg.freeze.policy),
                         rep.old_depth, depth, r->arch.layers, r->arch.layers == 1 ? "" : "s",
                         rep.bound);
    if (!moved)
        return 0;
    int rc = 0;
    if (save) {
        if ((rc = save_checkpoint(s, err)))
            return rc;
        *saved_at = r->step;
    }
    pt_transition t;
    if ((rc = pt_layout_replan(r, &t, err)))
        return pt_err_prefix(err, "re-planning after freezing %d block%s", depth,
                             depth == 1 ? "" : "s");
    report_replan(s, &t);
    return 0;
}

/* The epochs the run reaches, as the progress lines count them out of:
 * train.epochs, or fewer where train.max_steps ends the run sooner. */
static int64_t epochs_run(const pt_run *r, const pt_config *c)
{
    const int64_t per_epoch = pt_sampler_steps(&r->sampler);
    const int64_t reached = per_epoch > 0 ? (r->total_steps + per_epoch - 1) / per_epoch : 0;
    return reached > 0 && reached < c->train.epochs ? reached : c->train.epochs;
}

static int evaluate_and_log(pt_session *s, pt_err *err)
{
    pt_run *r = &s->run;
    loop_at("step %lld: evaluating the test split", (long long)r->step);
    const pt_config *c = &s->cfg;
    pt_eval_result ev;
    int rc = pt_evaluate(r, c->train.eval_examples, 0, NULL, NULL, &ev, err);
    if (rc)
        return rc;
    /* epochs counted from 1, as the progress lines count them */
    const int ended = r->epoch_step == 0 && r->epoch > 0;
    const pt_eval_averages avg = pt_eval_means(&ev);
    char f1[64] = "";
    if (ev.confusion)
        snprintf(f1, sizeof f1, ", macro-F1 %.4f", avg.f1);
    pt_progress_note(&s->progress,
                     "eval  step %lld (%s epoch %lld of %lld): test loss %.4f, accuracy %.2f%%%s (%lld "
                     "examples)",
                     (long long)r->step, ended ? "end of" : "in", (long long)(ended ? r->epoch : r->epoch + 1),
                     (long long)epochs_run(r, c), ev.loss, 100.0 * ev.accuracy, f1, (long long)ev.examples);
    json_t *o = pt_metrics_event("eval");
    json_object_set_new(o, "step", json_integer(r->step));
    json_object_set_new(o, "epoch", json_integer(r->epoch));
    json_object_set_new(o, "test_loss", pt_json_number(ev.loss));
    json_object_set_new(o, "test_accuracy", pt_json_number(ev.accuracy));
    if (ev.confusion)
        json_object_set_new(o, "macro_f1", pt_json_number(avg.f1));
    json_object_set_new(o, "examples", json_integer(ev.examples));
    json_object_set_new(o, "cache_hits", json_integer(ev.cache_hits));
    pt_eval_result_free(&ev);
    pt_progress_metrics(&s->progress, o);
    if (r->arch.kind == PT_MODEL_GPT && c->sample.length > 0) {
        char text[4097];
        int len = c->sample.length < 4096 ? c->sample.length : 4096;
        if ((rc = pt_sample_text(r, c->sample.prompt, len, c->sample.temperature, c->sample.top_k,
                                 (uint64_t)c->run.seed + (uint64_t)r->step, text, err)))
            return rc;
        /* the model's bytes need not be UTF-8: escaped where they are not */
        char shown[4 * (sizeof c->sample.prompt + sizeof text) + 1];
        pt_session_show_sample(c->sample.prompt, text, (size_t)len, shown, sizeof shown);
        pt_progress_note(&s->progress, "sample: %s", shown);
    }
    return 0;
}

/* An evaluation, with the phase a timeout names set for its time (its
 * errors carry no step) and put back after it: what follows in the step
 * (a freeze decision, a save) names itself. */
static int evaluate_and_report(pt_session *s, pt_err *err)
{
    static char phase[64];
    const char *was = pt_comm_phase_now();
    snprintf(phase, sizeof phase, "at step %lld: evaluating the test split", (long long)s->run.step);
    pt_comm_phase(phase);
    const int rc = evaluate_and_log(s, err);
    pt_comm_phase(was);
    return rc;
}

void pt_session_show_sample(const char *prompt, const char *text, size_t n, char *out,
                            size_t cap)
{
    pt_utf8_printable_bytes(prompt, strlen(prompt), out, cap);
    const size_t at = strlen(out);
    pt_utf8_printable_bytes(text, n, out + at, cap - at);
}

/* The per-rank timing line (run.rank_metrics). */
static void rank_metrics(pt_session *s, const pt_step_result *res)
{
    const pt_run *r = &s->run;
    json_t *o = pt_metrics_event("step");
    json_object_set_new(o, "step", json_integer(r->step));
    json_object_set_new(o, "rank", json_integer(r->rank));
    json_object_set_new(o, "replica", json_integer(r->replica));
    json_object_set_new(o, "stage", json_integer(r->stage));
    if (r->active) {
        const pt_exec_times *t = pt_stage_exec_times(r->exec);
        json_object_set_new(o, "step_wall_s", pt_json_number(t->step_wall));
        json_object_set_new(o, "compute_wall_s", pt_json_number(t->compute_wall));
        json_object_set_new(o, "compute_cpu_s", pt_json_number(t->compute_cpu));
        json_object_set_new(o, "comm_wall_s", pt_json_number(t->comm_wall));
    }
    json_object_set_new(o, "allreduce_bytes", json_integer((json_int_t)res->allreduce.bytes));
    json_object_set_new(o, "allreduce_s", pt_json_number(res->allreduce.total_s));
    json_object_set_new(o, "allreduce_exposed_s", pt_json_number(res->allreduce.exposed_s));
    if (!s->rank_metrics_errno)
        s->rank_metrics_errno = pt_json_line(s->rank_metrics, o);
    else
        json_decref(o);
}

/* A log this rank could not write (a full disk): the first such, in msg. */
static int log_failed(const pt_session *s, char *msg, size_t n)
{
    char path[PT_PATH_MAX + 64];
    const char *which = NULL;
    int e = 0;
    if (s->progress.metrics_errno) {
        which = s->progress.metrics_path;
        e = s->progress.metrics_errno;
    } else if (s->rank_metrics_errno) {
        pt_session_rank_file(s, "metrics", path, sizeof path);
        which = path;
        e = s->rank_metrics_errno;
    } else if (s->run.sample_log_errno) {
        pt_session_rank_file(s, "samples", path, sizeof path);
        which = path;
        e = s->run.sample_log_errno;
    }
    if (which)
        snprintf(msg, n, "writing '%s' failed: %s", which, strerror(e));
    return which != NULL;
}

/* What this rank asks of a step's combine (pt_stop_query): to stop, for a
 * signal, or for a log it could not write. ctx: the session. */
static int stop_query(void *ctx)
{
    char why[PT_PATH_MAX + 160];
    return (pt_stop_signal_pending() ? PT_STOP_SIGNAL : 0) |
           (log_failed(ctx, why, sizeof why) ? PT_STOP_FAILED : 0);
}

/* The op profile of a run.profile_ops run, written as the run ends: a log,
 * like metrics.jsonl, so failing to write it (a full disk) neither keeps the
 * run from its last evaluation and checkpoint nor hides why it stopped.
 * 1, with the reason in msg, when it failed. */
static int op_report_failed(pt_session *s, int64_t steps, double secs, char *msg, size_t n)
{
    pt_err e = {0};
    if (steps <= 0 || pt_op_report(s, steps, secs, &e) == 0)
        return 0;
    snprintf(msg, n, "%s", e.msg);
    return 1;
}

/* since: the step after which the time and counts began (the epoch's start,
 * or a mid-epoch resume's step: its first epoch line covers the part this
 * run trained, which the line says) */
static void epoch_metrics(pt_session *s, double took, int64_t since)
{
    pt_run *r = &s->run;
    /* the counts live in the run, not in the prefix source, which every
     * re-plan replaces: a mid-epoch decision loses nothing */
    json_t *o = pt_metrics_event("epoch");
    json_object_set_new(o, "epoch", json_integer(r->epoch));
    json_object_set_new(o, "step", json_integer(r->step));
    json_object_set_new(o, "since_step", json_integer(since));
    json_object_set_new(o, "epoch_time_s", pt_json_number(took));
    json_object_set_new(o, "frozen_blocks", json_integer(r->freeze.depth));
    json_object_set_new(o, "stages", json_integer(r->plan.stages));
    json_object_set_new(o, "replicas", json_integer(r->plan.replicas));
    json_object_set_new(o, "cache_hits", json_integer(r->cache_hits));
    json_object_set_new(o, "prefix_computed", json_integer(r->prefix_computed));
    json_object_set_new(o, "cache_part_hits", json_integer(r->cache_part_hits));
    pt_progress_metrics(&s->progress, o);
    r->cache_hits = r->prefix_computed = r->cache_part_hits = 0;
}

/* The first line of each run of a job (fresh or resumed): where it starts,
 * from what, when, and on what. A resume's lines for steps after its step
 * follow it; the lines before it for those steps are the history it left. */
static void start_metrics(pt_session *s, size_t params)
{
    const pt_run *r = &s->run;
    json_t *o = pt_metrics_event("start");
    json_object_set_new(o, "step", json_integer(r->step));
    json_object_set_new(o, "epoch", json_integer(r->epoch));
    json_object_set_new(o, "epoch_step", json_integer(r->epoch_step));
    json_object_set_new(o, "total_steps", json_integer(r->total_steps));
    json_object_set_new(o, "resumed_from",
                        *s->resumed_from ? json_string(s->resumed_from) : json_null());
    json_object_set_new(o, "abandoned_to",
                        *s->abandoned_to ? json_string(s->abandoned_to) : json_null());
    json_object_set_new(o, "unix_time", pt_json_number(pt_unix_time()));
    json_object_set_new(o, "time_s", pt_json_number(pt_now() - s->progress.start));
    json_object_set_new(o, "version", json_string(PT_VERSION));
    json_object_set_new(o, "model", json_string(pt_config_word("model.kind", s->cfg.model.kind)));
    json_object_set_new(o, "parameters", json_integer((json_int_t)params));
    json_object_set_new(o, "ranks", json_integer(r->ranks));
    json_object_set_new(o, "backend", json_string(pt_backend_name(s->be)));
    json_object_set_new(o, "threads", json_integer(s->threads));
    json_object_set_new(o, "stages", json_integer(r->plan.stages));
    json_object_set_new(o, "replicas", json_integer(r->plan.replicas));
    json_object_set_new(o, "microbatches", json_integer(r->plan.micro));
    json_object_set_new(o, "frozen_blocks", json_integer(r->freeze.depth));
    pt_progress_metrics(&s->progress, o);
}

int pt_session_train(pt_session *s, pt_err *err)
{
    pt_run *r = &s->run;
    const pt_config *c = &s->cfg;
    const int64_t per_epoch = pt_sampler_steps(&r->sampler);
    size_t params = 0;
    for (int u = 0; u < pt_arch_units(&r->arch); u++) {
        pt_unit_info info;
        pt_unit_info_get(&r->arch, u, &info);
        params += info.numel;
    }
    pt_progress_note(&s->progress,
                     "pipetrain: %s, %zu parameters, %lld training / %lld test examples, batch %lld, "
                     "%lld step%s, %s: K = %d stage%s x D = %d replica%s, M = %d, %s backend with %d "
                     "thread%s per rank",
                     pt_config_word("model.kind", c->model.kind), params, (long long)s->train.count,
                     (long long)s->test.count, c->train.batch, (long long)r->total_steps,
                     r->total_steps == 1 ? "" : "s", pt_layout_mode(r), r->plan.stages,
                     r->plan.stages == 1 ? "" : "s",
                     r->plan.replicas, r->plan.replicas == 1 ? "" : "s", r->plan.micro,
                     pt_backend_name(s->be), s->threads, s->threads == 1 ? "" : "s");
    /* (a warm-up of 1 step is no warm-up: update 0 uses train.lr) */
    if (r->step == 0 && c->train.warmup_steps > 1 && c->train.warmup_steps >= r->total_steps &&
        r->total_steps > 0)
        pt_progress_note(&s->progress,
                         "pipetrain: note: train.warmup_steps = %lld is not below the run's "
                         "%lld step%s: the learning rate never reaches train.lr",
                         c->train.warmup_steps, (long long)r->total_steps,
                         r->total_steps == 1 ? "" : "s");
    /* a first freeze decision at or after the last step freezes nothing
     * that trains (the schedule's, auto's alike) */
    const int by_step = c->freeze.unit == PT_FREEZE_EVERY_STEP;
    const int64_t first_decision = (int64_t)c->freeze.start * (by_step ? 1 : per_epoch);
    if (r->step == 0 && c->freeze.policy != PT_FREEZE_NONE && c->freeze.start > 0 &&
        r->total_steps > 0 && first_decision >= r->total_steps)
        pt_progress_note(&s->progress,
                         "pipetrain: note: freeze.start = %d (%s) puts the first freeze decision at step %lld, "
                         "not before the run's last step %lld: no block freezes while it trains",
                         c->freeze.start, by_step ? "steps" : "epochs",
                         (long long)first_decision, (long long)r->total_steps);
    if (r->step > 0 && r->step >= r->total_steps)
        /* a finished run: no next step, so no epoch it is in */
        pt_progress_note(&s->progress, "resumed at step %lld, this run's last (no step left to train)",
                         (long long)r->step);
    else if (r->step > 0)
        /* (the epoch the next step trains, counted from 1 as the progress
         * lines count it, and how many of its batches are done) */
        pt_progress_note(&s->progress, "resumed at step %lld (epoch %lld, %lld of its batches done)",
                         (long long)r->step, (long long)r->epoch + 1, (long long)r->epoch_step);
    start_metrics(s, params);
    int rc = 0;
    /* freeze.start 0: the first decision comes before any training (the
     * schedule's first bound; auto has no gradient norms yet and keeps 0) */
    int64_t saved_at = -1, evaluated_at = -1;
    if (r->step == 0 && pt_freeze_due(r, 0) && (rc = freeze_decision(s, 0, &saved_at, err)))
        return rc;
    /* the step this run.dir holds a checkpoint of: the one resumed, when it
     * lies here; rank 0 looks, all agree */
    const int64_t first_step = r->step;
    if (r->step > 0) {
        char here[PT_CKPT_PATH];
        pt_step_dir(c->run.dir, r->step, here, sizeof here);
        /* complete as auto counts it (a step directory whose manifest is a
         * directory, or that is a link, is not: the save replaces it) */
        saved_at = s->rank == 0 && pt_checkpoint_complete(here) ? r->step : -1;
        if ((rc = pt_bcast(pt_comm_world(s->comm), &saved_at, sizeof saved_at, 0, err)))
            return rc;
        /* another directory's checkpoint (run.dir's own step of that number,
         * if any, went to abandoned/): saved here before anything trains, so
         * that a run that dies before its next save leaves run.dir's newest
         * checkpoint in the history it continues, not an older one of its own */
        if (saved_at != r->step) {
            if ((rc = save_checkpoint(s, err)))
                return rc;
            saved_at = r->step;
            /* saved: auto needs no pointer to it any more (main.c) */
            /* a file left is stale now, passed over, unless it still says
             * `moving` (its rewrite failed): that would take every later
             * `auto` back to the checkpoint this save replaces */
            rc = pt_comm_rank(s->comm) == 0 ? pt_rundir_resuming_clear(s->cfg.run.dir, err) : 0;
            char named[PT_CKPT_PATH];
            pt_err quiet;
            if (rc && pt_rundir_resuming_get(s->cfg.run.dir, named, sizeof named, &quiet) == 0 &&
                !*named)
                rc = 0;
            if ((rc = pt_run_agree(r, rc, err)))
                return rc;
        }
    }
    double epoch_started = pt_now();
    int64_t epoch_since = r->step;
    /* run.profile_ops: the steps after this run's first 3 (first touches of
     * memory, the BLAS's buffers) are timed; with fewer, all but the first */
    const int64_t left = r->total_steps - r->step;
    const int64_t profile_from = r->step + (left > 3 ? 3 : left > 1 ? 1 : 0);
    int64_t profiled = 0;
    double profiled_s = 0.0;
    while (rc == 0 && r->step < r->total_steps) {
        if (r->epoch_step == 0 || r->sampler.epoch != r->epoch)
            pt_sampler_set_epoch(&r->sampler, r->epoch);
        pt_step_result res;
        const int timed = c->run.profile_ops && r->step >= profile_from;
        const double step_start = pt_now();
        pt_op_profile_record(s->be, timed);
        /* a log that cannot be written (a full disk) stops the run as a
         * signal does, with a checkpoint, rather than train on without it */
        char why[PT_PATH_MAX + 160];
        pt_comm_phase(NULL); /* a step's errors name the step and stage */
        rc = pt_run_step(r, stop_query, s, &res, err);
        pt_op_profile_record(s->be, 0);
        if (rc)
            break;
        const double step_s = pt_now() - step_start;
        if (timed) {
            profiled_s += step_s;
            profiled++;
        }
        /* Every rank stops after the same step: the one whose combine first
         * carried a stop (res.stop, agreed over all ranks). A signal that
         * came after this rank's part of the combine is not looked at here,
         * or this rank would save and leave while the others go on to the
         * next step and wait for it; it is in the next step's combine, or
         * in the agreement after this step's evaluation, freeze decision or
         * save (below). */
        /* A rank that stops because another was asked (not signalled) leaves
         * stop_signal to the handler: its own signal, coming during the
         * stop's save (a kill sent to each rank in turn), is then a first
         * request, not a second one that would end it before the save. */
        int stopping = res.stop, got = pt_stop_signal_pending();
        pt_step_report rep = {r->step, r->total_steps, r->epoch, epochs_run(r, c), r->epoch_step,
                              per_epoch, res.loss, res.lr, res.grad_norm,
                              res.rows > 0 ? (double)res.correct / (double)res.rows : NAN,
                              res.examples,
                              step_s, (int64_t)res.allreduce.bytes, res.allreduce.total_s,
                              res.allreduce.exposed_s};
        pt_progress_step(&s->progress, &rep);
        if (s->rank_metrics)
            rank_metrics(s, &res);
        const int epoch_done = r->epoch_step == per_epoch;
        if (epoch_done) {
            r->epoch++;
            r->epoch_step = 0;
            epoch_metrics(s, pt_now() - epoch_started, epoch_since);
            if (c->train.eval_every > 0 && r->epoch % c->train.eval_every == 0) {
                if ((rc = evaluate_and_report(s, err)))
                    break;
                evaluated_at = r->step;
            }
        }
        if (c->train.eval_every_steps > 0 && r->step % c->train.eval_every_steps == 0 &&
            evaluated_at != r->step) {
            if ((rc = evaluate_and_report(s, err)))
                break;
            evaluated_at = r->step;
        }
        const int due = c->train.checkpoint_every > 0 ? r->step % c->train.checkpoint_every == 0
                                                      : epoch_done;
        const int deciding = pt_freeze_due(r, epoch_done);
        if (deciding && (rc = freeze_decision(s, due || stopping, &saved_at, err)))
            break;
        if (epoch_done) {
            epoch_started = pt_now();
            epoch_since = r->step;
        }
        if ((due || stopping) && saved_at != r->step) {
            if ((rc = save_checkpoint(s, err)))
                break;
            saved_at = r->step;
        }
        /* A stop signal that came after the step's combine, while this step
         * evaluated, decided what to freeze or saved (the slow parts, where a
         * launcher's grace period runs out), stops here rather than after
         * another step and a second save: every rank made the same calls,
         * so every rank asks the others, and a save just made is the stop's
         * checkpoint. After the run's last step there is nothing left to stop:
         * the run ends as it would have (its last evaluation too), status 0. */
        if (!stopping && r->step < r->total_steps &&
            (evaluated_at == r->step || deciding || saved_at == r->step)) {
            int64_t late = pt_stop_signal_pending() != 0;
            if ((rc = pt_allreduce_max_i64(pt_comm_world(s->comm), &late, err)))
                break;
            stopping = late != 0;
            got = pt_stop_signal_pending();
            if (stopping && saved_at != r->step) {
                if ((rc = save_checkpoint(s, err)))
                    break;
                saved_at = r->step;
            }
        }
        const int signalled = got != 0;
        const int stopped_by = signalled ? got : SIGTERM;
        if (stopping) {
            char op_why[sizeof err->msg];
            const int op_failed = op_report_failed(s, profiled, profiled_s, op_why, sizeof op_why);
            const int logs = log_failed(s, why, sizeof why);
            if (logs || op_failed)
                return pt_fail(err, PT_ESYS, "%s%s%s; the run stopped after step %lld with a "
                               "checkpoint (resume with --set train.resume=auto once there is "
                               "room)", logs ? why : "", logs && op_failed ? "; and " : "",
                               op_failed ? op_why : "", (long long)r->step);
            if (res.failed && !signalled) { /* that rank says why, and the job exits 1 */
                rc = pt_fail(err, PT_ESYS, "another rank failed after step %lld",
                             (long long)r->step);
                err->relayed = 1;
                return rc;
            }
            if (signalled)
                pt_progress_note(&s->progress, "stopped by signal %d after step %lld; resume "
                                 "with --set train.resume=auto", stopped_by,
                                 (long long)r->step);
            else
                pt_progress_note(&s->progress, "stopped after step %lld: another rank was told "
                                 "to stop; resume with --set train.resume=auto",
                                 (long long)r->step);
            return pt_fail(err, PT_ESTOPPED, "stopped by signal %d", stopped_by);
        }
    }
    if (rc)
        return rc;
    pt_comm_phase("finishing the run (its last evaluation, checkpoint and logs)");
    loop_at("step %lld: finishing the run (its last evaluation, checkpoint and logs)",
            (long long)r->step);
    if ((rc = pt_test_fault("finished", s->rank, r->step, err)))
        return rc;
    if (evaluated_at != r->step && (rc = evaluate_and_report(s, err)))
        return rc;
    pt_comm_phase("finishing the run (its last checkpoint and logs)");
    if (saved_at != r->step && (rc = save_checkpoint(s, err)))
        return rc;
    char why[PT_PATH_MAX + 160], op_why[sizeof err->msg];
    const int op_failed = op_report_failed(s, profiled, profiled_s, op_why, sizeof op_why);
    const int logs = log_failed(s, why, sizeof why);
    if (logs || op_failed)
        return pt_fail(err, PT_ESYS, "%s%s%s; the run trained to step %lld and saved its "
                       "checkpoint%s", logs ? why : "", logs && op_failed ? "; and " : "",
                       op_failed ? op_why : "", (long long)r->step,
                       logs ? ", but that log is incomplete" : "");
    if (r->step == first_step && r->step >= r->total_steps)
        pt_progress_note(&s->progress, "nothing left to train: the checkpoint is at step %lld, and "
                         "this run's settings end it at step %lld", (long long)r->step,
                         (long long)r->total_steps);
    char ckpts[PT_CKPT_PATH];
    pt_progress_note(&s->progress, "done: %lld step%s; checkpoints in %s", (long long)r->step,
                     r->step == 1 ? "" : "s", pt_path_join(ckpts, c->run.dir, "checkpoints"));
    return 0;
}
