/*
 * op_report.c: the end of a run.profile_ops run: the time of every backend op
 * over the recorded steps (nn/op_profile.c), per step, against the step's
 * wall time and the cores' FMA peak, as a table on the progress stream (rank
 * 0) and as RUN_DIR/op_profile-rank<R>.json (every rank):
 *
 *   {"format": "pipetrain-op-profile-1", "rank", "threads", "steps",
 *    "step_s" (wall seconds per recorded step), "ops_s" (seconds per step
 *    inside ops), "peak_flops", "peak_how", "ops": [{"op", "shape",
 *    "calls_per_step", "s_per_step", "flops_per_step", "bytes_per_step",
 *    "best_call_s" (the fastest call's seconds)}]}
 *
 * with ops sorted by time, longest first. Their FLOPs and bytes are nominal
 * (see nn/op_profile.c); the time outside ops is the step's own work on the
 * host (the batch, the loop) and, with several ranks, waiting for the others.
 */
#include "launch/session.h"
#include "outputs/outputs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_STATS = 1024 };

static int by_time(const void *a, const void *b)
{
    const pt_op_stat *x = a, *y = b;
    return x->seconds < y->seconds ? 1 : x->seconds > y->seconds ? -1 : strcmp(x->op, y->op);
}

int pt_op_report(pt_session *s, int64_t steps, double step_s, pt_err *err)
{
    if (steps <= 0)
        return 0;
    pt_op_stat *st = malloc(MAX_STATS * sizeof *st);
    if (!st)
        return pt_fail(err, PT_ENOMEM, "out of memory for the op profile");
    const int n = pt_op_profile_stats(s->be, st, MAX_STATS);
    qsort(st, (size_t)n, sizeof *st, by_time);
    char how[256];
    const double peak = pt_cpu_peak_flops(s->threads, how, sizeof how);
    const double per = 1.0 / (double)steps, step = step_s * per;
    double inside = 0.0;
    for (int i = 0; i < n; i++)
        inside += st[i].seconds * per;

    json_t *ops = json_array();
    for (int i = 0; ops && i < n; i++)
        json_array_append_new(ops, json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:o}", "op", st[i].op,
                                             "shape", st[i].shape, "calls_per_step",
                                             pt_json_number((double)st[i].calls * per),
                                             "s_per_step", pt_json_number(st[i].seconds * per),
                                             "flops_per_step", pt_json_number(st[i].flops * per),
                                             "bytes_per_step", pt_json_number(st[i].bytes * per),
                                             "best_call_s", pt_json_number(st[i].best)));
    json_t *o = ops ? json_pack("{s:s, s:i, s:i, s:I, s:o, s:o, s:o, s:s, s:o}", "format",
                                "pipetrain-op-profile-1", "rank", s->rank, "threads", s->threads,
                                "steps", (json_int_t)steps, "step_s", pt_json_number(step),
                                "ops_s", pt_json_number(inside), "peak_flops", pt_json_number(peak),
                                "peak_how", how, "ops", ops)
                    : NULL;
    char *text = o ? json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (!text) {
        free(st);
        return pt_fail(err, PT_ENOMEM, "out of memory writing the op profile");
    }
    char path[PT_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/op_profile-rank%d.json", s->cfg.run.dir, s->rank);
    pt_output_sweep(path); /* a killed run's temporary file: run.dir's lock is ours */
    int rc = pt_write_file_atomic(path, text, strlen(text), err);
    free(text);

    pt_progress *p = &s->progress;
    pt_progress_note(p, "op timing over %lld step%s (the run's first steps untimed; %d thread%s): "
                     "%.3f ms per step, %.3f ms (%.1f%%) inside ops; peak %.1f GFLOP/s (%s)",
                     (long long)steps, steps == 1 ? "" : "s", s->threads,
                     s->threads == 1 ? "" : "s", 1e3 * step,
                     1e3 * inside, step > 0 ? 100.0 * inside / step : 0.0, 1e-9 * peak, how);
    pt_progress_note(p, "| op | shape | calls/step | ms/step | %% of step | GFLOP/s | %% of peak | GB/s |");
    pt_progress_note(p, "| --- | --- | --- | --- | --- | --- | --- | --- |");
    for (int i = 0; i < n; i++) {
        const double t = st[i].seconds * per, f = st[i].flops * per, b = st[i].bytes * per;
        const double gf = t > 0 ? 1e-9 * f / t : 0.0;
        pt_progress_note(p, "| %s | %s | %.4g | %.3f | %.1f | %.2f | %.1f | %.2f |", st[i].op,
                         st[i].shape, (double)st[i].calls * per, 1e3 * t,
                         step > 0 ? 100.0 * t / step : 0.0, gf, peak > 0 ? 1e11 * gf / peak : 0.0,
                         t > 0 ? 1e-9 * b / t : 0.0);
    }
    pt_progress_note(p, "| (outside ops) | | | %.3f | %.1f | | | |", 1e3 * (step - inside),
                     step > 0 ? 100.0 * (step - inside) / step : 0.0);
    free(st);
    return rc;
}
