/*
 * train.c: the training loop. One step: this step's global batch from the
 * sampler, cut into micro-batches, forward and backward of each (gradients
 * accumulate), global-norm clipping, AdamW at the scheduled learning rate.
 * Around the steps: evaluation and checkpoints at their cadence, progress and
 * metrics, and a clean stop on SIGINT/SIGTERM/SIGUSR1 (finish the step, save,
 * exit).
 *
 * State that decides the next step is only in pt_run's training fields and
 * the segment's parameters and moments, all of which checkpoints carry; that
 * is what makes a resumed run bit-identical to one that never stopped.
 */
#include "launch/checkpoint.h"
#include "launch/fault.h"
#include "launch/prefix.h"
#include "launch/run.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Signal handlers can reach nothing but globals, so these two are: the stop
 * request, and where this rank's executor is (for the line a rank prints when
 * the launcher terminates it because another rank died). */
static volatile sig_atomic_t stop_signal;
static const char *volatile current_where;

static void on_stop_signal(int sig)
{
    if (stop_signal) /* a second signal: the user means it */
        _exit(128 + sig);
    stop_signal = sig;
    const char *where = current_where;
    if (where) {
        static const char head[] = "pipetrain: signal received while at ";
        ssize_t ignored = write(STDERR_FILENO, head, sizeof head - 1);
        ignored = write(STDERR_FILENO, where, strlen(where));
        ignored = write(STDERR_FILENO, "\n", 1);
        (void)ignored;
    }
}

void pt_train_catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* Open MPI's mpirun forwards SIGUSR1 to every rank and lets them finish;
     * SIGTERM and SIGINT it turns into killing the job (ranks get a second
     * before SIGKILL, and mpirun exits 1 whatever they do). So SIGUSR1 is
     * the way to stop a job under mpirun with a checkpoint and status 130. */
    sigaction(SIGUSR1, &sa, NULL);
}

/* Indexes of the step's scalars after the per-unit sums of squares. */
enum { R_LOSS, R_CORRECT, R_ROWS, R_STOP, R_COUNT };

static int run_step(pt_run *r, double *loss, double *grad_norm, double *lr, int64_t *examples,
                    pt_err *err)
{
    const int64_t *ids;
    int n, rc;
    if ((rc = pt_test_fault("step", r->rank, r->step + 1, err)))
        return rc;
    pt_sampler_slice(&r->sampler, r->epoch_step, 0, 1, &ids, &n);
    int m = pt_run_stage(r, &r->train, ids, n, r->micro, 1);
    if (m != r->micro)
        return pt_fail(err, PT_EINTERNAL, "a batch of %d examples makes %d micro-batches, not %d", n,
                       m, r->micro);
    pt_segment_zero_grads(r->seg);
    pt_segment_set_loss_scale(r->seg, 1.0 / ((double)n * (double)pt_arch_rows_per_example(&r->arch)));
    pt_stats st = {0};
    current_where = pt_stage_exec_where(r->exec);
    if ((rc = pt_stage_exec_step(r->exec, r->batches, &st, err)))
        return pt_err_prefix(err, "%s", pt_stage_exec_where(r->exec));

    /* one reduction over the pipeline: every unit's gradient sum of squares,
     * summed below in unit order (so the norm does not depend on the
     * partition), and the loss, which only the last stage knows */
    const int units = pt_arch_units(&r->arch);
    double *v = r->reduce;
    memset(v, 0, (size_t)(units + R_COUNT) * sizeof *v);
    pt_segment_unit_grad_sumsq(r->seg, v + pt_segment_first(r->seg));
    v[units + R_LOSS] = st.loss;
    v[units + R_CORRECT] = (double)st.correct;
    v[units + R_ROWS] = (double)st.rows;
    v[units + R_STOP] = stop_signal ? 1 : 0;
    if ((rc = pt_run_reduce(r, v, units + R_COUNT, err)))
        return pt_err_prefix(err, "step %lld: combining the stages' results", (long long)r->step + 1);
    double sumsq = 0;
    for (int u = 0; u < units; u++)
        sumsq += v[u];
    if (v[units + R_STOP] > 0 && !stop_signal)
        stop_signal = SIGTERM; /* another stage was asked to stop: stop together */
    if (!isfinite(v[units + R_LOSS]))
        return pt_fail(err, PT_EINPUT,
                       "the loss became %g at step %lld: training diverged (try a lower train.lr "
                       "or a train.grad_clip)",
                       v[units + R_LOSS], (long long)r->step + 1);
    /* per-block gradient norms for the auto freeze policy: a block is its attn and mlp units */
    if (r->freeze.cfg.kind == PT_FREEZE_AUTO) {
        double *block = v + units + R_COUNT;
        for (int b = 0; b < r->arch.layers; b++)
            block[b] = sqrt(v[1 + 2 * b] + v[2 + 2 * b]);
        pt_freeze_accumulate(&r->freeze, block);
    }
    double norm = sqrt(sumsq);
    double rate = pt_lr_at(&r->lr, r->step);
    const pt_config *c = &r->cfg;
    pt_adamw opt = {rate, c->train.beta1, c->train.beta2, c->train.eps, c->train.weight_decay,
                    r->step + 1, pt_clip_coef(norm, c->train.grad_clip)};
    if ((rc = pt_segment_adamw(r->seg, &opt, err)))
        return rc;
    *loss = v[units + R_LOSS];
    *grad_norm = norm;
    *lr = rate;
    *examples = n;
    return 0;
}

/* Whether a freeze decision is due now: after `step` steps, or at the end of
 * epoch `epoch` (epoch_done). */
static int decision_due(const pt_run *r, int epoch_done)
{
    const pt_config *c = &r->cfg;
    if (c->freeze.policy == PT_FREEZE_NONE)
        return 0;
    if (c->freeze.unit == PT_FREEZE_EVERY_STEP)
        return r->step >= c->freeze.start && (r->step - c->freeze.start) % c->freeze.every == 0;
    return epoch_done && r->epoch >= c->freeze.start && (r->epoch - c->freeze.start) % c->freeze.every == 0;
}

/* Makes a freeze decision, logs it with what it was based on, and re-plans
 * when the frozen prefix grew. */
static int freeze_decision(pt_run *r, pt_err *err)
{
    pt_freeze_report rep;
    int depth = pt_freeze_decide(&r->freeze, &rep);
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
    pt_progress_metrics(&r->progress, o);
    if (rep.norms)
        pt_progress_note(&r->progress,
                         "freeze decision %d (auto): %d -> %d of %d blocks frozen (the norms say %d, "
                         "median change rate %.3g, bound %d)",
                         rep.decision, rep.old_depth, depth, r->arch.layers, rep.candidate,
                         rep.threshold, rep.bound);
    else
        pt_progress_note(&r->progress, "freeze decision %d (%s): %d -> %d of %d blocks frozen (bound %d)",
                         rep.decision, pt_config_word("freeze.policy", r->cfg.freeze.policy),
                         rep.old_depth, depth, r->arch.layers, rep.bound);
    if (depth == rep.old_depth)
        return 0;
    r->frozen_units = pt_freeze_units(depth);
    int rc = pt_layout_replan(r, err);
    if (rc)
        return pt_err_prefix(err, "re-planning after freezing %d blocks", depth);
    if (r->plan.stages > 1 && r->rank == 0) {
        char desc[256] = "";
        size_t n = 0;
        for (int s = 0; s < r->plan.stages && n < sizeof desc; s++)
            n += (size_t)snprintf(desc + n, sizeof desc - n, "%s[%d, %d)", s ? " " : "",
                                  r->plan.bounds[s], r->plan.bounds[s + 1]);
        pt_progress_note(&r->progress, "re-planned: stage units %s, predicted imbalance %.3f", desc,
                         r->plan.imbalance);
    }
    return 0;
}

static int evaluate_and_report(pt_run *r, pt_err *err)
{
    pt_eval_result ev;
    int rc = pt_evaluate(r, r->cfg.train.eval_examples, 0, NULL, &ev, err);
    if (rc)
        return rc;
    pt_progress_note(&r->progress, "eval  epoch %lld step %lld: test loss %.4f, accuracy %.2f%% (%lld examples)",
                     (long long)r->epoch, (long long)r->step, ev.loss, 100.0 * ev.accuracy,
                     (long long)ev.examples);
    json_t *o = pt_metrics_event("eval");
    json_object_set_new(o, "step", json_integer(r->step));
    json_object_set_new(o, "epoch", json_integer(r->epoch));
    json_object_set_new(o, "test_loss", pt_json_number(ev.loss));
    json_object_set_new(o, "test_accuracy", pt_json_number(ev.accuracy));
    json_object_set_new(o, "examples", json_integer(ev.examples));
    pt_progress_metrics(&r->progress, o);
    if (r->arch.kind == PT_MODEL_GPT && r->cfg.sample.length > 0) {
        char text[4097];
        int len = r->cfg.sample.length < 4096 ? r->cfg.sample.length : 4096;
        if ((rc = pt_sample_text(r, r->cfg.sample.prompt, len, r->cfg.sample.temperature,
                                 r->cfg.sample.top_k, (uint64_t)r->cfg.run.seed + (uint64_t)r->step,
                                 text, err)))
            return rc;
        pt_progress_note(&r->progress, "sample: %s%s", r->cfg.sample.prompt, text);
    }
    return 0;
}

int pt_train(pt_run *r, pt_err *err)
{
    const pt_config *c = &r->cfg;
    const int64_t per_epoch = pt_sampler_steps(&r->sampler);
    size_t params = 0;
    for (int u = 0; u < pt_arch_units(&r->arch); u++) {
        pt_unit_info info;
        pt_unit_info_get(&r->arch, u, &info);
        params += info.numel;
    }
    pt_progress_note(&r->progress,
                     "pipetrain: %s, %zu parameters, %lld training / %lld test examples, batch %lld "
                     "(%d micro-batches), %lld steps, %d stage%s, %s backend with %d threads per rank",
                     pt_config_word("model.kind", c->model.kind), params,
                     (long long)r->train.count, (long long)r->test.count, c->train.batch, r->micro,
                     (long long)r->total_steps, r->plan.stages, r->plan.stages == 1 ? "" : "s",
                     pt_backend_name(r->be), pt_backend_threads(r->be));
    if (r->step > 0)
        pt_progress_note(&r->progress, "resumed at step %lld (epoch %lld, batch %lld of it)",
                         (long long)r->step, (long long)r->epoch, (long long)r->epoch_step);
    int rc = 0;
    int64_t saved_at = r->step, evaluated_at = -1;
    double epoch_started = pt_now();
    while (rc == 0 && r->step < r->total_steps) {
        if (r->epoch_step == 0 || r->sampler.epoch != r->epoch)
            pt_sampler_set_epoch(&r->sampler, r->epoch);
        double loss = 0, norm = 0, lr = 0;
        int64_t examples = 0;
        if ((rc = run_step(r, &loss, &norm, &lr, &examples, err)))
            break;
        r->step++;
        r->epoch_step++;
        pt_step_report rep = {r->step, r->total_steps, r->epoch, c->train.epochs, r->epoch_step,
                              per_epoch, loss, lr, norm, examples};
        pt_progress_step(&r->progress, &rep);
        if (r->rank_metrics) {
            const pt_exec_times *t = pt_stage_exec_times(r->exec);
            json_t *o = pt_metrics_event("step");
            json_object_set_new(o, "step", json_integer(r->step));
            json_object_set_new(o, "rank", json_integer(r->rank));
            json_object_set_new(o, "stage", json_integer(r->stage));
            json_object_set_new(o, "step_wall_s", pt_json_number(t->step_wall));
            json_object_set_new(o, "compute_wall_s", pt_json_number(t->compute_wall));
            json_object_set_new(o, "compute_cpu_s", pt_json_number(t->compute_cpu));
            json_object_set_new(o, "comm_wall_s", pt_json_number(t->comm_wall));
            pt_json_line(r->rank_metrics, o);
        }
        int epoch_done = r->epoch_step == per_epoch;
        if (epoch_done) {
            r->epoch++;
            r->epoch_step = 0;
            double took = pt_now() - epoch_started;
            /* the counts live in the run, not in the prefix source, which
             * every re-plan replaces: a mid-epoch decision loses nothing */
            json_t *o = pt_metrics_event("epoch");
            json_object_set_new(o, "epoch", json_integer(r->epoch));
            json_object_set_new(o, "step", json_integer(r->step));
            json_object_set_new(o, "epoch_time_s", pt_json_number(took));
            json_object_set_new(o, "frozen_blocks", json_integer(r->freeze.depth));
            json_object_set_new(o, "cache_hits", json_integer(r->cache_hits));
            json_object_set_new(o, "prefix_computed", json_integer(r->prefix_computed));
            pt_progress_metrics(&r->progress, o);
            r->cache_hits = r->prefix_computed = 0;
            if (c->train.eval_every > 0 && r->epoch % c->train.eval_every == 0) {
                if ((rc = evaluate_and_report(r, err)))
                    break;
                evaluated_at = r->step;
            }
        }
        if (decision_due(r, epoch_done) && (rc = freeze_decision(r, err)))
            break;
        if (epoch_done)
            epoch_started = pt_now();
        int due = c->train.checkpoint_every > 0 ? r->step % c->train.checkpoint_every == 0 : epoch_done;
        if (due || stop_signal) {
            if ((rc = pt_checkpoint_save(r, err)))
                break;
            saved_at = r->step;
        }
        if (stop_signal) {
            pt_progress_note(&r->progress, "stopped by signal %d after step %lld; resume with "
                             "--set train.resume=auto", (int)stop_signal, (long long)r->step);
            return pt_fail(err, PT_ESTOPPED, "stopped by signal %d", (int)stop_signal);
        }
    }
    if (rc)
        return rc;
    if (evaluated_at != r->step && (rc = evaluate_and_report(r, err)))
        return rc;
    if (saved_at != r->step && (rc = pt_checkpoint_save(r, err)))
        return rc;
    pt_progress_note(&r->progress, "done: %lld steps; checkpoints in %s/checkpoints",
                     (long long)r->step, c->run.dir);
    return 0;
}
