/*
 * cost.c: the per-unit cost model, measured on the device that will run it.
 * Each unit is built alone in a one-unit segment on the given backend and its
 * forward and backward are timed (median of several runs, after a warm-up) at
 * two micro-batch sizes, so the planner can interpolate the cost of any
 * micro-batch size between them: per-call overheads make small micro-batches
 * cost more per example, which is what limits how many of them pay off.
 * Memory comes from nn's own accounting of the unit, not from a guess.
 */
#include "balance/balance.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median forward and backward seconds of unit u at n examples. */
static int time_unit(const pt_arch *a, pt_backend *be, int u, int n, double *fwd, double *bwd,
                     pt_err *err)
{
    pt_segment *s = NULL;
    pt_segment_spec spec = {u, 1, n, 1, 0, 0};
    int rc = pt_segment_create(&s, a, be, &spec, err);
    if (rc)
        return rc;
    const int T = pt_arch_tokens(a);
    const size_t act = pt_segment_act_elems(s, n);
    float *host = malloc((act + (size_t)n * (pt_arch_input_floats(a) + 1)) * sizeof *host);
    int32_t *ints = malloc((size_t)n * T * sizeof *ints);
    int32_t *targets = malloc((size_t)n * T * sizeof *targets);
    int64_t *ids = malloc((size_t)n * sizeof *ids); /* dropout's identity of the examples */
    void *x = pt_backend_alloc(be, act * pt_backend_act_size(be));
    void *y = pt_backend_alloc(be, act * pt_backend_act_size(be));
    void *dy = pt_backend_alloc(be, act * pt_backend_act_size(be));
    void *dx = pt_backend_alloc(be, act * pt_backend_act_size(be));
    if (!host || !ints || !targets || !ids || !x || !y || !dy || !dx) {
        rc = pt_fail(err, PT_ENOMEM, "out of memory profiling unit %d", u);
        goto done;
    }
    pt_rng rng;
    pt_rng_seed(&rng, 0x9e3779b9u, (uint64_t)u);
    for (size_t i = 0; i < act + (size_t)n * pt_arch_input_floats(a); i++)
        host[i] = (float)(pt_rng_uniform(&rng) - 0.5);
    /* tokens: a BERT's have no padding (the cost of full-length examples);
     * targets: classes of the head */
    for (int i = 0; i < n * T; i++) {
        if (a->kind == PT_MODEL_BERT) /* never the [PAD] id, which is 0 */
            ints[i] = 1 + (int32_t)pt_rng_below(&rng, (uint64_t)a->vocab - 1);
        else
            ints[i] = (int32_t)pt_rng_below(&rng, (uint64_t)(a->kind == PT_MODEL_VIT ? a->classes
                                                                                      : a->vocab));
        targets[i] = (int32_t)pt_rng_below(&rng, (uint64_t)pt_arch_out_classes(a));
    }
    pt_backend_act_from_host(be, x, host, act);
    pt_backend_act_from_host(be, dy, host, act);
    if ((rc = pt_segment_init_params(s, err)))
        goto done;
    const int first = u == 0, last = u == pt_arch_units(a) - 1;
    for (int i = 0; i < n; i++)
        ids[i] = i;
    pt_batch batch = {n, host + act, ints, targets, ids, 0}; /* dropout (bert) is timed too */
    pt_segment_set_loss_scale(s, 1.0 / n);
    enum { MAX_REPS = 9 };
    double tf[MAX_REPS], tb[MAX_REPS];
    int reps = 0;
    const double budget = now_s() + 0.25; /* per unit and size */
    for (int r = -1; r < MAX_REPS && rc == 0; r++) {
        pt_stats st = {0};
        double t0 = now_s();
        rc = pt_segment_forward(s, 0, &batch, first ? NULL : x, last ? NULL : y, 1, &st, err);
        if (rc == 0)
            rc = pt_backend_sync(be, err);
        double t1 = now_s();
        if (rc == 0)
            rc = pt_segment_backward(s, 0, &batch, last ? NULL : dy, first ? NULL : dx, err);
        if (rc == 0)
            rc = pt_backend_sync(be, err);
        double t2 = now_s();
        if (r >= 0) { /* r = -1 warms caches and lazily allocated state */
            tf[reps] = t1 - t0;
            tb[reps] = t2 - t1;
            reps++;
            if (reps >= 3 && t2 > budget)
                break;
        }
    }
    if (rc == 0) {
        qsort(tf, (size_t)reps, sizeof *tf, cmp_double);
        qsort(tb, (size_t)reps, sizeof *tb, cmp_double);
        *fwd = tf[reps / 2];
        *bwd = tb[reps / 2];
    }
done:
    free(host);
    free(ints);
    free(targets);
    free(ids);
    pt_backend_free(be, x);
    pt_backend_free(be, y);
    pt_backend_free(be, dy);
    pt_backend_free(be, dx);
    pt_segment_destroy(s);
    return rc;
}

int pt_cost_sizes(pt_cost_model *m, const pt_arch *a, const pt_backend *be, int small, int large,
                  pt_err *err)
{
    const int units = pt_arch_units(a);
    memset(m, 0, sizeof *m);
    if (small < 1 || large < small)
        return pt_fail(err, PT_EINTERNAL, "profiling sizes %d and %d", small, large);
    m->unit = calloc((size_t)units, sizeof *m->unit);
    if (!m->unit)
        return pt_fail(err, PT_ENOMEM, "out of memory for the cost model");
    m->units = units;
    m->batch[0] = small;
    m->batch[1] = large;
    m->boundary_bytes_per_example = (double)pt_arch_tokens(a) * a->dim * (double)pt_backend_act_size(be);
    pt_cost_set_linear_work(m, a, be);
    for (int u = 0; u < units; u++) {
        pt_unit_cost *c = &m->unit[u];
        pt_unit_info info;
        pt_unit_info_get(a, u, &info);
        c->param_bytes = (double)info.numel * (double)pt_backend_real_size(be);
        c->state_bytes = 3 * c->param_bytes;
        /* at each size, or where that passes what a size_t holds (a long
         * sequence's attention times a large micro-batch) one example's
         * times the size, in double: sizes that wrap would pass any limit */
        const double one_saved = (double)pt_unit_saved_bytes(a, be, u, 1);
        const double one_scratch = (double)pt_unit_scratch_bytes(a, be, u, 1);
        for (int k = 0; k < 2; k++) {
            const double n = m->batch[k];
            const int exact = (one_saved + one_scratch) * n < 0x1p60;
            c->saved_bytes[k] = exact ? (double)pt_unit_saved_bytes(a, be, u, m->batch[k]) : one_saved * n;
            c->scratch_bytes[k] = exact ? (double)pt_unit_scratch_bytes(a, be, u, m->batch[k])
                                        : one_scratch * n;
        }
    }
    return 0;
}

int pt_cost_profile_unit(pt_cost_model *m, const pt_arch *a, pt_backend *be, int u, pt_err *err)
{
    pt_unit_cost *c = &m->unit[u];
    for (int k = 0; k < 2; k++) {
        int rc = time_unit(a, be, u, m->batch[k], &c->fwd[k], &c->bwd[k], err);
        if (rc) {
            pt_unit_info info;
            pt_unit_info_get(a, u, &info);
            return pt_err_prefix(err, "profiling %s", info.name);
        }
        if (m->batch[0] == m->batch[1]) {
            c->fwd[1] = c->fwd[0];
            c->bwd[1] = c->bwd[0];
            break;
        }
    }
    return 0;
}

int pt_cost_profile(pt_cost_model *m, const pt_arch *a, pt_backend *be, int small, int large,
                    pt_err *err)
{
    int rc = pt_cost_sizes(m, a, be, small, large, err);
    for (int u = 0; rc == 0 && u < m->units; u++)
        if ((rc = pt_cost_profile_unit(m, a, be, u, err)))
            pt_cost_model_free(m);
    return rc;
}

void pt_cost_model_free(pt_cost_model *m)
{
    free(m->unit);
    memset(m, 0, sizeof *m);
}

/* Linear in the micro-batch size through the two profiled points, never
 * below n times the per-example rate measured at the larger size (the line
 * through the two points can fall below that, to 0 or less, away from
 * them). */
static double at(const double v[2], const int b[2], double n)
{
    if (b[1] == b[0])
        return v[0] * n / b[0];
    double slope = (v[1] - v[0]) / (b[1] - b[0]);
    double y = v[0] + slope * (n - b[0]);
    double floor = v[1] / b[1] * n;
    return y > floor ? y : floor;
}

double pt_cost_time(const pt_cost_model *m, int u, int n, int frozen, int recompute)
{
    const pt_unit_cost *c = &m->unit[u];
    double f = at(c->fwd, m->batch, n);
    if (frozen)
        return f;
    return f + at(c->bwd, m->batch, n) + (recompute ? f : 0);
}

void pt_cost_timed_sizes(const pt_arch *a, const pt_backend *be, int64_t batch, int ranks,
                         double mem_limit, int *small, int *large)
{
    const int units = pt_arch_units(a);
    const int k_max = ranks < units ? ranks : units;
    *large = (int)(batch < 512 ? batch : 512);
    *small = (int)(batch / (8 * k_max) > 0 ? batch / (8 * k_max) : 1);
    if (*small > *large)
        *small = *large;
    pt_cost_model m;
    pt_err ignored;
    if (mem_limit > 0 && pt_cost_sizes(&m, a, be, 1, *large, &ignored) == 0) {
        int fits = *large;
        for (; fits > 1; fits = fits * 3 / 4) {
            int all = 1;
            for (int u = 0; all && u < m.units; u++)
                all = pt_cost_timing_bytes(&m, a, u, fits) <= mem_limit;
            if (all)
                break;
        }
        *large = fits;
        pt_cost_model_free(&m);
    }
    if (*small > *large)
        *small = *large;
}

double pt_cost_saved_bytes(const pt_cost_model *m, int u, int n)
{
    return at(m->unit[u].saved_bytes, m->batch, n);
}

void pt_cost_set_linear_work(pt_cost_model *m, const pt_arch *a, const pt_backend *be)
{
    for (int i = 0; i < PT_COST_WORK_STEPS; i++)
        m->linear_work_bytes[i] =
            (double)pt_arch_linear_work_bytes(a, be, i < 31 ? 1 << i : INT_MAX);
}

double pt_cost_linear_work(const pt_cost_model *m, int n)
{
    int i = 0;
    while (i < PT_COST_WORK_STEPS - 1 && (1LL << i) < (long long)n)
        i++;
    return m->linear_work_bytes[i];
}

double pt_cost_timing_bytes(const pt_cost_model *m, const pt_arch *a, int u, int n)
{
    const pt_unit_cost *c = &m->unit[u];
    const double act = (double)n * m->boundary_bytes_per_example;
    /* time_unit's host copies: floats of the activations and the inputs,
     * tokens and targets, ids */
    const double elems = (double)n * pt_arch_tokens(a) * a->dim;
    const double host = 4.0 * (elems + (double)n * (pt_arch_input_floats(a) + 1)) +
                        8.0 * (double)n * pt_arch_tokens(a) + 8.0 * n;
    return c->param_bytes + c->state_bytes + pt_cost_saved_bytes(m, u, n) +
           pt_cost_scratch_bytes(m, u, n) + pt_cost_linear_work(m, n) + (2 + 4) * act + host;
}

double pt_cost_scratch_bytes(const pt_cost_model *m, int u, int n)
{
    return at(m->unit[u].scratch_bytes, m->batch, n);
}
