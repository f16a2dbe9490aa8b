/*
 * freeze.c: the freeze policies.
 *
 * none: depth stays 0.
 * schedule: depth after decision t is PipeTransformer's progressive bound
 *   ceil(L (1 - (1 - alpha)^t)), capped at max_depth.
 * auto: from the per-block gradient norms accumulated between decisions (as
 *   AutoFreeze does): the change rate r_b = |G_prev - G| / G_prev of every
 *   active block, G the block's norm per step over the interval (its sum
 *   over the interval's steps, divided by their count: the first interval,
 *   freeze.start long, and the later ones, freeze.every long, may differ;
 *   intervals of one length compare their sums as they are, the same ratio
 *   without another rounding), and the median of those rates. A block has settled when its
 *   rate is at most the median and below the largest rate; the new depth is
 *   the length of the prefix of settled blocks. (AutoFreeze's strict "below
 *   the median" freezes nothing when most blocks have stopped changing
 *   altogether, since the median is then 0; uniform change still freezes
 *   nothing here.) The first decision only records the norms. The result
 *   never exceeds the schedule's bound for the same t, nor max_depth.
 */
#include "freeze/freeze.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int pt_freeze_bound(int blocks, double alpha, int t)
{
    if (t <= 0 || blocks <= 0 || !(alpha > 0))
        return 0;
    /* 1 - (1 - alpha)^t without cancellation, so that a tiny alpha still
     * gives a tiny positive x (ceil: one block), not 0 */
    const double x = -(double)blocks * expm1((double)t * log1p(-alpha));
    /* 4.0000000000001 is 4, not 5: the rounding error of log1p and expm1 is
     * a few ulps of x, so an x that close to an integer is that integer */
    const double r = nearbyint(x);
    double b = r >= 1 && fabs(x - r) <= 1e-12 * r ? r : ceil(x);
    return b < 0 ? 0 : b > blocks ? blocks : (int)b;
}

int pt_freeze_units(int depth) { return depth > 0 ? 1 + 2 * depth : 0; }

int pt_freeze_init(pt_freeze_state *s, const pt_freeze_config *cfg, int blocks, pt_err *err)
{
    memset(s, 0, sizeof *s);
    if (cfg->kind != PT_FREEZE_NONE && !(cfg->alpha > 0 && cfg->alpha < 1))
        return pt_fail(err, PT_EINPUT, "freeze.alpha is %g; it must be in (0, 1)", cfg->alpha);
    s->cfg = *cfg;
    if (s->cfg.max_depth <= 0 || s->cfg.max_depth > blocks)
        s->cfg.max_depth = blocks;
    s->blocks = blocks;
    s->acc = calloc((size_t)blocks + 1, sizeof *s->acc);
    s->prev = calloc((size_t)blocks + 1, sizeof *s->prev);
    s->rate = calloc((size_t)blocks + 1, sizeof *s->rate);
    s->sorted = calloc((size_t)blocks + 1, sizeof *s->sorted);
    s->mean = calloc((size_t)blocks + 1, sizeof *s->mean);
    if (!s->acc || !s->prev || !s->rate || !s->sorted || !s->mean) {
        pt_freeze_free(s);
        return pt_fail(err, PT_ENOMEM, "out of memory for the freeze state");
    }
    return 0;
}

void pt_freeze_free(pt_freeze_state *s)
{
    free(s->acc);
    free(s->prev);
    free(s->rate);
    free(s->sorted);
    free(s->mean);
    s->acc = s->prev = s->rate = s->sorted = s->mean = NULL;
}

void pt_freeze_accumulate(pt_freeze_state *s, const double *block_norm)
{
    for (int b = s->depth; b < s->blocks; b++)
        s->acc[b] += block_norm[b];
    s->acc_steps++;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Block b's change rate: of its norm per step, from the previous interval
 * to this one; 0 where the previous norm was 0. Intervals of the same
 * length (or a previous one of unknown length, as a checkpoint of an
 * earlier build restores it, which compared the sums) compare the sums. */
static double change_rate(const pt_freeze_state *s, int b)
{
    const double was = s->prev[b], now = s->acc[b];
    if (!(was > 0))
        return 0.0;
    if (s->prev_steps == 0 || s->prev_steps == s->acc_steps)
        return fabs(was - now) / was;
    const double per_was = was / (double)s->prev_steps, per_now = now / (double)s->acc_steps;
    return fabs(per_was - per_now) / per_was;
}

/* Median of the change rates of blocks [from, L). */
static double median_rate(const pt_freeze_state *s, double *rate)
{
    int n = 0;
    double *sorted = s->sorted;
    for (int b = s->depth; b < s->blocks; b++) {
        rate[b] = change_rate(s, b);
        sorted[n++] = rate[b];
    }
    if (n == 0)
        return 0;
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
    return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

int pt_freeze_decide(pt_freeze_state *s, pt_freeze_report *r)
{
    const int t = ++s->decisions;
    const int bound = pt_freeze_bound(s->blocks, s->cfg.alpha, t);
    memset(r, 0, sizeof *r);
    r->decision = t;
    r->old_depth = s->depth;
    r->bound = bound;
    int want = s->depth;
    if (s->cfg.kind == PT_FREEZE_SCHEDULE) {
        want = bound;
        r->candidate = bound;
    } else if (s->cfg.kind == PT_FREEZE_AUTO) {
        double *rate = s->rate;
        memset(rate, 0, (size_t)s->blocks * sizeof *rate);
        r->candidate = s->depth;
        if (s->have_prev && s->acc_steps > 0) {
            r->threshold = median_rate(s, rate);
            double most = 0;
            for (int b = s->depth; b < s->blocks; b++)
                most = rate[b] > most ? rate[b] : most;
            /* rounding-level differences between equal rates must not decide */
            const double tie = 1e-6 * most;
            int b = s->depth;
            while (b < s->blocks && rate[b] <= r->threshold + tie && rate[b] < most - tie)
                b++;
            r->candidate = b;
            want = b < bound ? b : bound;
        }
        r->rates = rate;
        /* the report's norms: this interval's, per step */
        for (int b = 0; b < s->blocks; b++)
            s->mean[b] = s->acc_steps > 0 ? s->acc[b] / (double)s->acc_steps : 0.0;
        r->norms = s->mean;
        /* this interval's sums become the reference of the next decision */
        memcpy(s->prev, s->acc, (size_t)s->blocks * sizeof *s->prev);
        memset(s->acc, 0, (size_t)s->blocks * sizeof *s->acc);
        s->have_prev = s->acc_steps > 0;
        s->prev_steps = s->acc_steps;
        s->acc_steps = 0;
    }
    if (want > s->cfg.max_depth)
        want = s->cfg.max_depth;
    if (want > s->depth)
        s->depth = want;
    r->new_depth = s->depth;
    return s->depth;
}

json_t *pt_freeze_to_json(const pt_freeze_state *s)
{
    json_t *acc = json_array(), *prev = json_array();
    for (int b = 0; b < s->blocks && acc && prev; b++) {
        /* a non-finite sum has no JSON form; the load refuses the null */
        json_array_append_new(acc, isfinite(s->acc[b]) ? json_real(s->acc[b]) : json_null());
        json_array_append_new(prev, isfinite(s->prev[b]) ? json_real(s->prev[b]) : json_null());
    }
    return json_pack("{s:i, s:i, s:b, s:I, s:I, s:o, s:o}", "depth", s->depth, "decisions",
                     s->decisions, "have_prev", s->have_prev, "acc_steps", (json_int_t)s->acc_steps,
                     "prev_steps", (json_int_t)s->prev_steps, "acc", acc, "prev", prev);
}

/* Array of `blocks` finite numbers into out. */
static int numbers(const json_t *arr, int blocks, double *out)
{
    if (!json_is_array(arr) || json_array_size(arr) != (size_t)blocks)
        return -1;
    for (int b = 0; b < blocks; b++) {
        const json_t *v = json_array_get(arr, (size_t)b);
        if (!json_is_number(v) || !isfinite(json_number_value(v)))
            return -1;
        out[b] = json_number_value(v);
    }
    return 0;
}

int pt_freeze_from_json(pt_freeze_state *s, const json_t *j, int64_t step, pt_err *err)
{
    const json_t *depth = json_object_get(j, "depth"), *decisions = json_object_get(j, "decisions"),
                 *have_prev = json_object_get(j, "have_prev"), *steps = json_object_get(j, "acc_steps"),
                 *prev_steps = json_object_get(j, "prev_steps");
    /* prev_steps may be absent (a checkpoint of a build that did not record
     * it: 0, the sums compared as that build compared them) */
    if (!json_is_integer(depth) || !json_is_integer(decisions) || !json_is_boolean(have_prev) ||
        !json_is_integer(steps) || (prev_steps && !json_is_integer(prev_steps)) ||
        (prev_steps && json_integer_value(prev_steps) < 0) || json_integer_value(depth) < 0 ||
        json_integer_value(depth) > s->blocks || json_integer_value(decisions) < 0 ||
        json_integer_value(decisions) > INT32_MAX || json_integer_value(steps) < 0 ||
        numbers(json_object_get(j, "acc"), s->blocks, s->acc) ||
        numbers(json_object_get(j, "prev"), s->blocks, s->prev))
        return pt_fail(err, PT_EINPUT, "the freeze state is missing or malformed (it needs depth "
                       "0..%d, decisions, have_prev, acc_steps, prev_steps (if any) not negative, "
                       "and %d finite acc and prev sums)",
                       s->blocks, s->blocks);
    /* counts of what happened up to the step: larger ones were edited in,
     * and would overflow as the run goes on */
    if (step < 0 || json_integer_value(decisions) > step + 1 || json_integer_value(steps) > step ||
        (prev_steps && json_integer_value(prev_steps) > step))
        return pt_fail(err, PT_EINPUT, "the freeze state counts more than %" PRId64 " steps "
                       "allow (decisions %" JSON_INTEGER_FORMAT ", at most %" PRId64 "; acc_steps %"
                       JSON_INTEGER_FORMAT " and prev_steps %" JSON_INTEGER_FORMAT ", at most %"
                       PRId64 ")", step, json_integer_value(decisions), step + 1,
                       json_integer_value(steps),
                       prev_steps ? json_integer_value(prev_steps) : (json_int_t)0, step);
    s->depth = (int)json_integer_value(depth);
    s->decisions = (int)json_integer_value(decisions);
    s->have_prev = json_is_true(have_prev);
    s->acc_steps = (int64_t)json_integer_value(steps);
    s->prev_steps = prev_steps ? (int64_t)json_integer_value(prev_steps) : 0;
    return 0;
}
