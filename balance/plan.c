/*
 * plan.c: choosing the pipeline layout. For each candidate number of stages K
 * and micro-batches M (fixed by the config or searched), price every unit at
 * the micro-batch size B / M, cut the units into K stages with the exact
 * min-max partition under the per-device memory limit, and predict the step:
 * a fill-drain pipeline takes (M + K - 1) bottleneck stage-times per step
 * (GPipe and 1F1B alike; 1F1B only needs fewer activations in flight). The
 * fastest feasible (K, M) wins; ties go to fewer stages, then fewer
 * micro-batches. Every rank runs this on the same inputs and gets the same
 * plan.
 *
 * Frozen units cost their forward only (no backward, no optimizer state). When
 * the activation cache serves their output they cost nothing: only the active
 * units are partitioned, and the frozen prefix is placed in front of stage 0,
 * which is where the cache's activations enter the pipeline.
 */
#include "balance/balance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Memory of every stage for a given (K, M, b, bounds). */
static void stage_memory(const pt_cost_model *cm, const pt_plan_request *q, int K, int M, int b,
                         const int *bounds, double *mem)
{
    for (int s = 0; s < K; s++) {
        int slots = q->recompute ? 1 : (q->schedule == PT_PLAN_GPIPE ? M : (K - s < M ? K - s : M));
        double fixed = 0, per_slot = 0, scratch = 0;
        for (int u = bounds[s]; u < bounds[s + 1]; u++) {
            int frozen = u < q->frozen_units;
            fixed += cm->unit[u].param_bytes + (frozen ? 0 : cm->unit[u].state_bytes);
            per_slot += pt_cost_saved_bytes(cm, u, b);
            double w = pt_cost_scratch_bytes(cm, u, b);
            scratch = w > scratch ? w : scratch;
        }
        /* per micro-batch: input, output and the two gradients, plus stored inputs under recompute */
        double boundary = cm->boundary_bytes_per_example * b;
        mem[s] = fixed + slots * per_slot + scratch + 4.0 * M * boundary;
    }
}

/* Plans one (K, M); PT_EINPUT if no partition fits memory. */
static int plan_one(const pt_cost_model *cm, const pt_plan_request *q, int K, int M, pt_plan *p,
                    pt_err *err)
{
    const int n = cm->units;
    /* units [skip, n) are partitioned; a cached frozen prefix rides in front of stage 0 */
    const int skip = q->cached_units;
    const int b = (int)((q->batch + M - 1) / M);
    double *cost = malloc((size_t)n * sizeof *cost);
    double *fixed = malloc((size_t)(n + 1) * sizeof *fixed);
    double *slot = malloc((size_t)(n + 1) * sizeof *slot);
    int *slots = malloc((size_t)K * sizeof *slots);
    int rc = 0;
    if (!cost || !fixed || !slot || !slots) {
        rc = pt_fail(err, PT_ENOMEM, "out of memory planning");
        goto done;
    }
    double scratch = 0;
    fixed[0] = slot[0] = 0;
    const double want = (double)K * (q->threads > 0 ? q->threads : 1);
    const double slowdown = q->cores > 0 && want > q->cores ? want / q->cores : 1.0;
    for (int u = 0; u < n; u++) {
        int frozen = u < q->frozen_units;
        cost[u] = u < skip ? 0 : pt_cost_time(cm, u, b, frozen, q->recompute) * slowdown;
        fixed[u + 1] = fixed[u] + cm->unit[u].param_bytes + (frozen ? 0 : cm->unit[u].state_bytes);
        slot[u + 1] = slot[u] + pt_cost_saved_bytes(cm, u, b);
        double w = pt_cost_scratch_bytes(cm, u, b);
        scratch = w > scratch ? w : scratch;
    }
    for (int s = 0; s < K; s++)
        slots[s] = q->recompute ? 1 : (q->schedule == PT_PLAN_GPIPE ? M : (K - s < M ? K - s : M));
    double limit = q->mem_limit;
    if (limit > 0)
        limit -= scratch + 4.0 * M * cm->boundary_bytes_per_example * b;
    /* prefix sums restarted at skip; the prefix's parameters count on stage 0 */
    double prefix_fixed = fixed[skip];
    for (int u = 0; u <= n - skip; u++) {
        fixed[u] = fixed[u + skip] - prefix_fixed + (u > 0 ? prefix_fixed : 0);
        slot[u] = slot[u + skip] - slot[skip];
    }
    pt_partition_problem prob = {n - skip, K, cost + skip, fixed, slot, slots,
                                 q->mem_limit > 0 ? (limit > 0 ? limit : 1e-300) : 0};
    double bottleneck;
    memset(p, 0, sizeof *p);
    if ((rc = pt_partition_solve(&prob, p->bounds, &bottleneck, err)))
        goto done;
    for (int s = 1; s <= K; s++)
        p->bounds[s] += skip;
    p->stages = K;
    p->micro = M;
    p->micro_batch = b;
    double total = 0;
    for (int s = 0; s < K; s++) {
        p->stage_time[s] = M * pt_partition_cost(cost, p->bounds, s);
        total += p->stage_time[s];
    }
    stage_memory(cm, q, K, M, b, p->bounds, p->stage_mem);
    p->step_time = (M + K - 1) * bottleneck;
    p->ideal_time = total / K;
    p->bubble = (double)(K - 1) / (M + K - 1);
    p->imbalance = total > 0 ? M * bottleneck / (total / K) : 1.0;
done:
    free(cost);
    free(fixed);
    free(slot);
    free(slots);
    return rc;
}

int pt_plan_make(pt_plan *out, const pt_plan_request *q, const pt_cost_model *cm, pt_err *err)
{
    const int units = cm->units - q->cached_units;
    int k_lo = q->stages > 0 ? q->stages : 1;
    int k_hi = q->stages > 0 ? q->stages : (q->ranks < units ? q->ranks : units);
    if (k_hi > PT_MAX_STAGES)
        k_hi = PT_MAX_STAGES;
    if (q->stages > units)
        return pt_fail(err, PT_EINPUT, "pipeline.stages is %d but the model has only %d %sunits",
                       q->stages, units, q->cached_units ? "uncached " : "");
    if (q->stages > q->ranks)
        return pt_fail(err, PT_EINPUT, "pipeline.stages is %d but only %d ranks are available",
                       q->stages, q->ranks);
    int found = 0;
    pt_err last = {0};
    for (int K = k_lo; K <= k_hi; K++) {
        int m_lo = q->micro > 0 ? q->micro : 1;
        int m_hi = q->micro > 0 ? q->micro : (int)(q->batch < 8 * K ? q->batch : 8 * K);
        for (int M = m_lo; M <= m_hi; M++) {
            pt_plan p;
            if (M > q->batch || plan_one(cm, q, K, M, &p, &last))
                continue;
            /* 1% better, or it is not worth more stages or micro-batches */
            if (!found || p.step_time < 0.99 * out->step_time) {
                *out = p;
                found = 1;
            }
        }
    }
    if (!found)
        return last.code ? pt_fail(err, last.code, "%s", last.msg)
                         : pt_fail(err, PT_EINPUT, "no pipeline layout fits");
    return 0;
}

void pt_plan_print(const pt_plan *p, const pt_arch *a, FILE *out)
{
    fprintf(out, "stages K = %d, micro-batches M = %d of up to %d examples\n", p->stages, p->micro,
            p->micro_batch);
    for (int s = 0; s < p->stages; s++) {
        pt_unit_info first, last;
        pt_unit_info_get(a, p->bounds[s], &first);
        pt_unit_info_get(a, p->bounds[s + 1] - 1, &last);
        fprintf(out, "  stage %d: units %2d-%2d (%s .. %s)  compute %.1f ms/step  memory %.1f MiB\n",
                s, p->bounds[s], p->bounds[s + 1] - 1, first.name, last.name, 1e3 * p->stage_time[s],
                p->stage_mem[s] / (1 << 20));
    }
    fprintf(out, "predicted step %.1f ms (ideal %.1f ms: total compute / K)\n", 1e3 * p->step_time,
            1e3 * p->ideal_time);
    fprintf(out, "bubble (K-1)/(M+K-1) = %.3f, imbalance max/mean stage compute = %.3f\n", p->bubble,
            p->imbalance);
}
