/*
 * plan.c: choosing the layout: K pipeline stages, D replicas of the pipeline
 * and M micro-batches per replica and step, and which units each stage holds.
 *
 * For each candidate (K, D, M) (each fixed by the config or searched), a
 * replica gets ceil(B / D) of the global batch B and cuts it into M
 * micro-batches; every unit is priced at that micro-batch size and the units
 * are cut into K stages by the exact min-max partition under the per-device
 * memory limit. The predicted step is
 *   compute   M x bottleneck micro-batch time (the busiest stage),
 *   bubble    (K - 1) x bottleneck (a fill-drain pipeline; GPipe and 1F1B
 *             alike, 1F1B only holds fewer activations),
 *   transfers the activation and gradient each micro-batch passes between
 *             stages, on the critical path (M + K - 1) times: a message's
 *             latency and its bytes over the link within the node,
 *   exposed   the part of the gradient all-reduce among the D replicas that
 *             compute does not hide: stage s's all-reduce moves
 *             2 (D-1)/D of its active units' gradients over the slowest link
 *             it crosses (between nodes once the replicas span nodes), and
 *             can run while the stages in front of it still compute their
 *             last backward (s of them), and, with overlap, during its own
 *             last backward.
 * The fastest feasible candidate wins; a candidate must be 1% faster to be
 * worth more stages or micro-batches, or fewer replicas. Every rank runs this
 * on the same inputs and gets the same plan.
 *
 * Many candidates cut the same costs: the costs depend only on the
 * micro-batch size b and the slowdown of shared cores, and M micro-batches
 * of a share give the same b for many M. Without a memory limit the cut of
 * those costs into K stages is the same whatever else differs, so the
 * search keeps it per (K, b, slowdown); a candidate whose limit that cut
 * fits gets it as it is (pt_partition_fits says why that is exactly what
 * solving under the limit returns), and only the others are solved anew.
 *
 * Frozen units cost their forward only (no backward, no optimizer state, no
 * all-reduce). Those whose output the activation cache serves cost no time:
 * the units after them are partitioned, and the cached prefix is placed in
 * front of stage 0, which is where the cache's activations enter and which
 * holds its parameters (to compute what the cache misses). Where that does
 * not fit the memory limit, the cache serves fewer of the frozen units, the
 * most for which a layout fits (pt_plan_make), and the stages share the
 * rest as any frozen units.
 */
#include "balance/balance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Ranks of the node with the most ranks, and of node 0 (where the first
 * replicas go), from the request's topology. */
static int ranks_on(const pt_plan_request *q, int node)
{
    if (!q->node_of)
        return node == 0 ? q->ranks : 0;
    int n = 0;
    for (int r = 0; r < q->ranks; r++)
        n += q->node_of[r] == node;
    return n;
}

static int capacity(const pt_plan_request *q, int K)
{
    if (!q->node_of)
        return q->ranks / K;
    int d = 0;
    for (int node = 0;; node++) {
        int n = ranks_on(q, node);
        if (n == 0)
            break;
        d += n / K;
    }
    return d;
}

/* Buffers of stage-boundary activations per micro-batch: a stage's input
 * and output and their gradients (all four on every stage of a pipeline:
 * the first and last have fewer); a single stage has only its input, and
 * only with a frozen prefix, whose source fills it (pipe/exec.c; the
 * cached prefix's rows or the frozen units' outputs: counted either way, so
 * that the cache changes no memory estimate; what it does change is the
 * prefix's time, which is 0 when it serves the prefix, so a re-plan may
 * rightly choose another layout with the cache than without). */
static double boundary_buffers(const pt_plan_request *q, int K)
{
    return K > 1 ? 4.0 : q->frozen_units > 0 ? 1.0 : 0.0;
}

/* The micro-batch count to try after M: each up to m_hi; then, when extend
 * (under a memory limit nothing fit yet: smaller micro-batches keep less
 * for the backward), doubling up to the whole share. 0: no more. */
static int next_micro(int M, int m_hi, int64_t share, int extend)
{
    if (M < m_hi)
        return M + 1;
    if (!extend || M >= share)
        return 0;
    return 2 * (int64_t)M < share ? 2 * M : (int)share;
}

/* Activation slots stage s holds under the request's schedule. */
static int slots_of(const pt_plan_request *q, int K, int M, int s)
{
    return q->recompute ? 1 : (q->schedule == PT_PLAN_GPIPE ? M : (K - s < M ? K - s : M));
}

/* What a slot of a stage keeps of unit u for micro-batches of b examples:
 * its saved activations (none when frozen: it runs forward only and keeps
 * nothing for a backward; the frozen units' forwards share one work area,
 * counted once per stage) and its output, which the segment keeps per slot
 * for the next unit (nn/segment.c; frozen or not), all but the stage's last
 * unit's: a stage holds one output less than its units (the partition's
 * mem_slot_less). */
static double slot_bytes(const pt_cost_model *cm, const pt_plan_request *q, int u, int b)
{
    return (u < q->frozen_units ? 0 : pt_cost_saved_bytes(cm, u, b)) +
           cm->boundary_bytes_per_example * b;
}

/* What stage 0's prefix slot keeps of a frozen unit, where the prefix
 * source runs the frozen units (nn/segment.c): its output for micro-batches
 * of b examples. Counted with the unit wherever it is (a stage other than
 * 0 is counted high by it). */
static double prefix_slot_bytes(const pt_cost_model *cm, int b)
{
    return cm->boundary_bytes_per_example * b;
}

/* The segment's two buffers of activation gradients for the backward
 * (nn/segment.c): they grow with the micro-batch. */
static double gradient_buffers(const pt_cost_model *cm, int b)
{
    return 2 * cm->boundary_bytes_per_example * b;
}

/* The stage's input and output buffers and their gradients per
 * micro-batch, and the replica's share of the step staged in host memory:
 * they grow with the share, M b. */
static double step_buffers(const pt_cost_model *cm, const pt_plan_request *q, int K, int M, int b)
{
    return boundary_buffers(q, K) * M * cm->boundary_bytes_per_example * b +
           q->staging_bytes_per_example * M * b;
}

/* Memory of a stage beside its units' and the largest scratch, the same on
 * every stage of a (K, M, b): the gradient buffers, the step's buffers and
 * what the backend keeps for the linear layers (pt_plan_stage_bytes's
 * parts that do not depend on the units). */
static double stage_extra(const pt_cost_model *cm, const pt_plan_request *q, int K, int M, int b)
{
    return gradient_buffers(cm, b) + step_buffers(cm, q, K, M, b) + pt_cost_linear_work(cm, b);
}

/* What a unit that trains holds beside its parameters: gradients and AdamW
 * moments, and with D >= 2 replicas its share of the all-reduce's receive
 * buffers ((D - 1) / D of its gradients, which are as large as its
 * parameters: dp/reduce.c), where those are the device's memory. */
static double state_of(const pt_cost_model *cm, const pt_plan_request *q, int D, int u)
{
    const double reduce = q->reduce_buffers && D > 1 ? (double)(D - 1) / D : 0;
    return cm->unit[u].state_bytes + reduce * cm->unit[u].param_bytes;
}

void pt_plan_stage_bytes(const pt_cost_model *cm, const pt_plan_request *q, int K, int D, int M,
                         int b, const int *bounds, int s, pt_stage_bytes *out)
{
    double weights = 0, prefix = 0, per_slot = -cm->boundary_bytes_per_example * b, scratch = 0,
           work = 0;
    /* stage 0's segment holds a cached frozen prefix too */
    for (int u = s == 0 ? 0 : bounds[s]; u < bounds[s + 1]; u++) {
        const int frozen = u < q->frozen_units;
        weights += cm->unit[u].param_bytes + (frozen ? 0 : state_of(cm, q, D, u));
        prefix += frozen ? prefix_slot_bytes(cm, b) : 0;
        per_slot += slot_bytes(cm, q, u, b);
        double w = pt_cost_scratch_bytes(cm, u, b);
        scratch = w > scratch ? w : scratch;
        w = frozen ? pt_cost_saved_bytes(cm, u, b) : 0;
        work = w > work ? w : work;
    }
    out->weights = weights;
    out->micro_batches = prefix + slots_of(q, K, M, s) * per_slot + scratch + work +
                         gradient_buffers(cm, b);
    out->step = step_buffers(cm, q, K, M, b);
    out->linear_work = pt_cost_linear_work(cm, b);
}

/* Memory of every stage for a given (K, D, M, b, bounds). */
static void stage_memory(const pt_cost_model *cm, const pt_plan_request *q, int K, int D, int M,
                         int b, const int *bounds, double *mem)
{
    for (int s = 0; s < K; s++) {
        pt_stage_bytes sb;
        pt_plan_stage_bytes(cm, q, K, D, M, b, bounds, s, &sb);
        mem[s] = sb.weights + sb.micro_batches + sb.step + sb.linear_work;
    }
}

void pt_plan_least_memory(const pt_cost_model *cm, int frozen_units, int *unit, double *own,
                          double *scratch)
{
    *unit = 0;
    /* and the segment's two buffers of activation gradients, and what the
     * backend keeps for the linear layers */
    *own = 0;
    *scratch = gradient_buffers(cm, 1) + pt_cost_linear_work(cm, 1);
    for (int u = 0; u < cm->units; u++) {
        const int frozen = u < frozen_units;
        const double w = pt_cost_scratch_bytes(cm, u, 1) + gradient_buffers(cm, 1) +
                         pt_cost_linear_work(cm, 1);
        *scratch = w > *scratch ? w : *scratch;
        const double need = cm->unit[u].param_bytes +
                            (frozen ? 0 : cm->unit[u].state_bytes + pt_cost_saved_bytes(cm, u, 1));
        if (need > *own)
            *own = need, *unit = u;
    }
}

/* The gradient all-reduce of each stage: its bytes, its time, and the part
 * left exposed; returns the step's exposed time (the worst stage's). */
static double allreduce(const pt_cost_model *cm, const pt_plan_request *q, pt_plan *p,
                        double bwd_bottleneck, const double *own_bwd)
{
    const int K = p->stages, D = p->replicas;
    double worst = 0;
    p->allreduce_time = 0;
    for (int s = 0; s < K; s++) {
        double bytes = 0;
        for (int u = p->bounds[s]; u < p->bounds[s + 1]; u++)
            bytes += u < q->frozen_units ? 0 : cm->unit[u].param_bytes;
        p->stage_grad_bytes[s] = D > 1 ? bytes : 0;
        if (D < 2 || bytes == 0)
            continue;
        double bw = p->spans_nodes ? q->bw_inter : q->bw_intra;
        double t = (bw > 0 ? 2.0 * (D - 1) / D * bytes / bw : 0) + 2.0 * (D - 1) * q->latency;
        /* stage s finishes its last backward s backward-times before stage 0 */
        double hidden = s * bwd_bottleneck + (q->overlap ? own_bwd[s] : 0);
        double exposed = t > hidden ? t - hidden : 0;
        p->allreduce_time = t > p->allreduce_time ? t : p->allreduce_time;
        worst = exposed > worst ? exposed : worst;
    }
    return worst;
}

/* A cut of the units into stages without a memory limit, for the costs
 * of micro-batches of b examples on cores shared with the given slowdown. */
typedef struct free_cut {
    int stages, micro_batch;
    double slowdown;
    double bottleneck;
    int bounds[PT_MAX_STAGES + 1];
} free_cut;

/* The search's free cuts of one K: it tries K in increasing order, and
 * only candidates of one K share them (the runners-up, priced again at the
 * end, are few and solve without it). */
typedef struct cut_cache {
    free_cut *cut;
    int n, cap;
} cut_cache;

/* prob cut as pt_partition_solve cuts it: the free cut of its costs when
 * that fits prob's limit, else prob solved under it. */
static int cut(cut_cache *cache, const pt_partition_problem *prob, int b, double slowdown,
               int *bounds, double *bottleneck, pt_err *err)
{
    const free_cut *f = NULL;
    for (int i = cache ? cache->n - 1 : -1; i >= 0 && !f; i--) {
        const free_cut *c = &cache->cut[i];
        if (c->stages == prob->stages && c->micro_batch == b && c->slowdown == slowdown)
            f = c;
    }
    if (!f && cache) {
        if (cache->n == cache->cap) {
            int cap = cache->cap ? 2 * cache->cap : 64;
            free_cut *grown = realloc(cache->cut, (size_t)cap * sizeof *grown);
            if (grown) {
                cache->cut = grown;
                cache->cap = cap;
            }
        }
        if (cache->n < cache->cap) {
            free_cut *c = &cache->cut[cache->n];
            pt_partition_problem free_prob = *prob;
            pt_err ignored;
            free_prob.mem_limit = 0;
            c->stages = prob->stages;
            c->micro_batch = b;
            c->slowdown = slowdown;
            /* it cannot fail where prob has units for its stages; if it
             * does, prob's own solve below says why */
            if (pt_partition_solve(&free_prob, c->bounds, &c->bottleneck, &ignored) == 0)
                f = &cache->cut[cache->n++];
        }
    }
    if (f && pt_partition_fits(prob, f->bounds)) {
        memcpy(bounds, f->bounds, (size_t)(prob->stages + 1) * sizeof *bounds);
        *bottleneck = f->bottleneck;
        return 0;
    }
    return pt_partition_solve(prob, bounds, bottleneck, err);
}

/* Plans one (K, D, M); PT_EINPUT if no partition fits memory. cache: free
 * cuts to reuse, or NULL. */
static int plan_one(const pt_cost_model *cm, const pt_plan_request *q, int K, int D, int M,
                    cut_cache *cache, pt_plan *p, pt_err *err)
{
    const int n = cm->units;
    /* units [skip, n) are partitioned; a cached frozen prefix rides in front of stage 0 */
    const int skip = q->cached_units;
    const int64_t share = (q->batch + D - 1) / D;
    const int b = (int)((share + M - 1) / M);
    double *cost = malloc((size_t)n * sizeof *cost);
    double *bwd = malloc((size_t)n * sizeof *bwd);
    double *fixed = malloc((size_t)(n + 1) * sizeof *fixed);
    double *slot = malloc((size_t)(n + 1) * sizeof *slot);
    int *slots = malloc((size_t)K * sizeof *slots);
    int rc = 0;
    if (!cost || !bwd || !fixed || !slot || !slots) {
        rc = pt_fail(err, PT_ENOMEM, "out of memory planning");
        goto done;
    }
    double scratch = 0, frozen_work = 0;
    fixed[0] = slot[0] = 0;
    /* ranks of node 0 that this layout keeps busy, sharing its cores */
    const int per_node0 = ranks_on(q, 0) / K;
    const int busy = K * (D < per_node0 ? D : per_node0);
    const double want = (double)busy * (q->threads > 0 ? q->threads : 1);
    const double slowdown = q->cores > 0 && want > q->cores ? want / q->cores : 1.0;
    for (int u = 0; u < n; u++) {
        int frozen = u < q->frozen_units;
        cost[u] = u < skip ? 0 : pt_cost_time(cm, u, b, frozen, q->recompute) * slowdown;
        bwd[u] = frozen ? 0 : (pt_cost_time(cm, u, b, 0, 0) - pt_cost_time(cm, u, b, 1, 0)) * slowdown;
        fixed[u + 1] = fixed[u] + cm->unit[u].param_bytes +
                       (frozen ? prefix_slot_bytes(cm, b) : state_of(cm, q, D, u));
        slot[u + 1] = slot[u] + slot_bytes(cm, q, u, b);
        double w = pt_cost_scratch_bytes(cm, u, b);
        scratch = w > scratch ? w : scratch;
        w = frozen ? pt_cost_saved_bytes(cm, u, b) : 0;
        frozen_work = w > frozen_work ? w : frozen_work;
    }
    for (int s = 0; s < K; s++)
        slots[s] = slots_of(q, K, M, s);
    /* (the frozen units' work area is counted on every stage, as their
     * scratch is: a stage without frozen units is counted high) */
    scratch += frozen_work;
    double limit = q->mem_limit;
    const double buffers = stage_extra(cm, q, K, M, b);
    if (limit > 0)
        limit -= scratch + buffers;
    if (q->mem_limit > 0 && !(limit > 0)) {
        rc = pt_fail(err, PT_EINPUT, "no way to cut %d units into %d stage%s fits %.3g bytes per "
                     "device: a unit's scratch and the frozen units' work area (%.3g bytes) and the "
                     "stage-boundary buffers of %d micro-batch%s of %d example%s (%.3g bytes) alone "
                     "take more", n - skip, K, K == 1 ? "" : "s", q->mem_limit, scratch, M,
                     M == 1 ? "" : "es", b, b == 1 ? "" : "s", buffers);
        goto done;
    }
    /* prefix sums restarted at skip; the prefix's parameters and the
     * outputs its units keep per slot count on stage 0 */
    double prefix_fixed = fixed[skip], prefix_slot = slot[skip];
    for (int u = 0; u <= n - skip; u++) {
        fixed[u] = fixed[u + skip] - prefix_fixed + (u > 0 ? prefix_fixed : 0);
        slot[u] = slot[u + skip] - prefix_slot + (u > 0 ? prefix_slot : 0);
    }
    pt_partition_problem prob = {n - skip, K, cost + skip, fixed, slot, slots,
                                 q->mem_limit > 0 ? (limit > 0 ? limit : 1e-300) : 0,
                                 cm->boundary_bytes_per_example * b};
    double bottleneck;
    memset(p, 0, sizeof *p);
    if ((rc = cut(cache, &prob, b, slowdown, p->bounds, &bottleneck, err)))
        goto done;
    for (int s = 1; s <= K; s++)
        p->bounds[s] += skip;
    p->stages = K;
    p->replicas = D;
    p->micro = M;
    p->micro_batch = b;
    p->spans_nodes = D > per_node0;
    double total = 0, own_bwd[PT_MAX_STAGES], bwd_bottleneck = 0;
    for (int s = 0; s < K; s++) {
        p->stage_time[s] = M * pt_partition_cost(cost, p->bounds, s);
        total += p->stage_time[s];
        own_bwd[s] = pt_partition_cost(bwd, p->bounds, s);
        bwd_bottleneck = own_bwd[s] > bwd_bottleneck ? own_bwd[s] : bwd_bottleneck;
    }
    stage_memory(cm, q, K, D, M, b, p->bounds, p->stage_mem);
    p->compute_time = M * bottleneck;
    p->bubble_time = (K - 1) * bottleneck;
    if (K > 1) {
        const double bytes = cm->boundary_bytes_per_example * b;
        const double one = q->latency + (q->bw_intra > 0 ? bytes / q->bw_intra : 0);
        p->transfer_time = (M + K - 1) * 2 * one;
    }
    p->exposed_time = allreduce(cm, q, p, bwd_bottleneck, own_bwd);
    p->step_time = p->compute_time + p->bubble_time + p->transfer_time + p->exposed_time;
    p->ideal_time = total / K;
    p->bubble = (double)(K - 1) / (M + K - 1);
    p->imbalance = total > 0 ? M * bottleneck / (total / K) : 1.0;
done:
    free(cost);
    free(bwd);
    free(fixed);
    free(slot);
    free(slots);
    return rc;
}

/* Keeps the PT_PLAN_ALTS best losing candidates of distinct (K, D), fastest
 * first, infeasible ones after them. */
static void remember(pt_plan_candidate *alt, int *n, const pt_plan_candidate *c)
{
    for (int i = 0; i < *n; i++)
        if (alt[i].stages == c->stages && alt[i].replicas == c->replicas) {
            if (alt[i].feasible && (!c->feasible || alt[i].step_time <= c->step_time))
                return;
            alt[i] = *c;
            goto sort;
        }
    if (*n < PT_PLAN_ALTS)
        alt[(*n)++] = *c;
    else if (c->feasible && (!alt[*n - 1].feasible || c->step_time < alt[*n - 1].step_time))
        alt[*n - 1] = *c;
    else
        return;
sort:
    for (int i = 1; i < *n; i++)
        for (int j = i; j > 0; j--) {
            const pt_plan_candidate *x = &alt[j - 1], *y = &alt[j];
            int swap = (!x->feasible && y->feasible) ||
                       (x->feasible && y->feasible && y->step_time < x->step_time);
            if (!swap)
                break;
            pt_plan_candidate t = alt[j - 1];
            alt[j - 1] = alt[j];
            alt[j] = t;
        }
}

/* Why a feasible candidate lost to the winner, in a few words. */
static void explain(const pt_plan *won, const pt_plan *lost, char *out, size_t n)
{
    /* a profile of zero costs (units too fast for the clock) prices the
     * winner at 0: no ratio then, and no share of a step of 0 */
    const double slower = won->step_time > 0 ? lost->step_time / won->step_time
                          : lost->step_time > 0 ? INFINITY : 1;
    const char *what = "compute";
    double worst = lost->compute_time - won->compute_time;
    if (lost->bubble_time - won->bubble_time > worst) {
        worst = lost->bubble_time - won->bubble_time;
        what = "pipeline bubble";
    }
    if (lost->transfer_time - won->transfer_time > worst) {
        worst = lost->transfer_time - won->transfer_time;
        what = "stage-to-stage transfers";
    }
    if (lost->exposed_time - won->exposed_time > worst)
        what = "exposed all-reduce";
    if (slower < 1.01)
        snprintf(out, n, "within 1%% of the chosen layout, which uses fewer stages or micro-batches "
                 "or more replicas");
    else if (isinf(slower))
        snprintf(out, n, "slower, mostly %s (all-reduce %.1f ms exposed)", what,
                 1e3 * lost->exposed_time);
    else
        snprintf(out, n, "%.2fx slower, mostly %s (bubble %.0f%%, all-reduce %.1f ms exposed)", slower,
                 what, 100 * lost->bubble, 1e3 * lost->exposed_time);
}

static int search(pt_plan *out, const pt_plan_request *q, const pt_cost_model *cm, pt_err *err)
{
    const int units = cm->units - q->cached_units;
    int k_lo = q->stages > 0 ? q->stages : 1;
    int k_hi = q->stages > 0 ? q->stages : (q->ranks < units ? q->ranks : units);
    if (k_hi > PT_MAX_STAGES)
        k_hi = PT_MAX_STAGES;
    if (q->stages > units)
        return pt_fail(err, PT_EINPUT, "pipeline.stages is %d but the model has only %d %sunits",
                       q->stages, units, q->cached_units ? "uncached " : "");
    if (q->stages > 0 && capacity(q, q->stages) < 1)
        return pt_fail(err, PT_EINPUT, "pipeline.stages is %d but no node has that many ranks "
                       "(%d on rank 0's node; a pipeline never crosses nodes)",
                       q->stages, ranks_on(q, 0));
    if (q->stages > 0 && q->replicas > 0 && capacity(q, q->stages) < q->replicas)
        return pt_fail(err, PT_EINPUT, "pipeline.replicas is %d but the ranks hold at most %d "
                       "pipeline%s of %d stage%s", q->replicas, capacity(q, q->stages),
                       capacity(q, q->stages) == 1 ? "" : "s", q->stages, q->stages == 1 ? "" : "s");
    if (q->replicas > q->batch)
        return pt_fail(err, PT_EINPUT, "pipeline.replicas is %d but a step has only %lld example%s",
                       q->replicas, (long long)q->batch, q->batch == 1 ? "" : "s");
    int found = 0, n_alt = 0;
    pt_plan_candidate alt[PT_PLAN_ALTS + 1];
    pt_plan best;
    pt_err last = {0};
    cut_cache cache = {0};
    for (int K = k_lo; K <= k_hi; K++) {
        const int cap = capacity(q, K);
        cache.n = 0; /* a new K cuts nothing the last one did */
        int d_hi = q->replicas > 0 ? q->replicas : cap;
        int d_lo = q->replicas > 0 ? q->replicas : 1;
        if (d_hi > cap || d_hi > q->batch)
            d_hi = cap < q->batch ? cap : (int)q->batch;
        /* more replicas first: on a tie they win, using the ranks the job was given */
        for (int D = d_hi; D >= d_lo; D--) {
            const int64_t share = q->batch / D; /* the smallest replica's share */
            int m_lo = q->micro > 0 ? q->micro : 1;
            int m_hi = q->micro > 0 ? q->micro : (int)(share < 8 * K ? share : 8 * K);
            pt_plan_candidate c = {K, D, 0, 0, 0, "", 0};
            pt_plan kd;
            int kd_found = 0;
            const int extend = q->micro == 0 && q->mem_limit > 0;
            for (int M = m_lo; M > 0; M = next_micro(M, m_hi, share, extend && !kd_found)) {
                pt_plan p;
                if (M > share) {
                    snprintf(c.why, sizeof c.why, "%d micro-batches do not fit a replica's %lld "
                             "example%s", M, (long long)share, share == 1 ? "" : "s");
                    c.short_of_examples = 1;
                    continue;
                }
                if (plan_one(cm, q, K, D, M, &cache, &p, &last)) {
                    if (!kd_found) {
                        snprintf(c.why, sizeof c.why, "does not fit: %.140s", last.msg);
                        c.short_of_examples = 0;
                    }
                    continue;
                }
                if (!kd_found || p.step_time < 0.99 * kd.step_time) {
                    kd = p;
                    kd_found = 1;
                }
            }
            if (kd_found && (!found || kd.step_time < 0.99 * best.step_time)) {
                if (found) { /* the old winner becomes a runner-up */
                    pt_plan_candidate o = {best.stages, best.replicas, best.micro, 1,
                                           best.step_time, "", 0};
                    remember(alt, &n_alt, &o);
                }
                best = kd;
                found = 1;
                continue;
            }
            c.micro = kd_found ? kd.micro : 0;
            c.feasible = kd_found;
            c.step_time = kd_found ? kd.step_time : 0;
            remember(alt, &n_alt, &c);
        }
    }
    free(cache.cut);
    if (!found)
        return last.code ? pt_fail(err, last.code, "%s", last.msg)
                         : pt_fail(err, PT_EINPUT, "no layout fits");
    /* explain the runners-up against the winner, once it is known */
    best.n_alt = 0;
    for (int i = 0; i < n_alt; i++) {
        pt_plan_candidate c = alt[i];
        if (c.stages == best.stages && c.replicas == best.replicas)
            continue;
        if (c.feasible) {
            pt_plan p;
            pt_err ignored;
            if (plan_one(cm, q, c.stages, c.replicas, c.micro, NULL, &p, &ignored) == 0)
                explain(&best, &p, c.why, sizeof c.why);
        }
        best.alt[best.n_alt++] = c;
    }
    *out = best;
    out->cached_units = q->cached_units;
    return 0;
}

int pt_plan_make(pt_plan *out, const pt_plan_request *q, const pt_cost_model *cm, pt_err *err)
{
    int rc = search(out, q, cm, err);
    if (rc != PT_EINPUT || q->cached_units == 0 || !(q->mem_limit > 0))
        return rc;
    /* The cached prefix rides in front of stage 0 whole, its parameters
     * there (stage 0 computes what the cache misses): on many stages that
     * can be more than a stage may hold. Then the cache serves fewer of the
     * frozen units and the stages share the rest as any others, the most
     * that fit. Fewer never fit worse (a partition for c cached units that
     * puts unit c - 1 on stage 0 is one for c - 1 with the same memory), so
     * the most is found by bisection; if none fits, the first refusal
     * stands, as said for the layout the cache would serve. */
    const pt_err first = *err;
    pt_plan_request fewer = *q;
    fewer.cached_units = 0;
    pt_plan fits;
    if ((rc = search(&fits, &fewer, cm, err))) {
        if (rc == PT_EINPUT)
            *err = first;
        return rc;
    }
    int lo = 0, hi = q->cached_units; /* lo fits, hi does not */
    while (hi - lo > 1) {
        fewer.cached_units = lo + (hi - lo) / 2;
        pt_plan p;
        pt_err ignored;
        if ((rc = search(&p, &fewer, cm, &ignored)) == 0) {
            fits = p;
            lo = fewer.cached_units;
        } else if (rc == PT_EINPUT) {
            hi = fewer.cached_units;
        } else {
            *err = ignored;
            return rc;
        }
    }
    *out = fits;
    return 0;
}

void pt_plan_print(const pt_plan *p, const pt_arch *a, FILE *out)
{
    fprintf(out, "layout: K = %d stage%s x D = %d replica%s, M = %d micro-batch%s of up to %d "
            "example%s per replica\n", p->stages, p->stages == 1 ? "" : "s", p->replicas,
            p->replicas == 1 ? "" : "s", p->micro, p->micro == 1 ? "" : "es", p->micro_batch,
            p->micro_batch == 1 ? "" : "s");
    for (int s = 0; s < p->stages; s++) {
        pt_unit_info first, last;
        pt_unit_info_get(a, p->bounds[s], &first);
        pt_unit_info_get(a, p->bounds[s + 1] - 1, &last);
        fprintf(out, "  stage %d: units %2d-%2d (%s .. %s)  compute %.1f ms/step  memory %.1f MiB"
                "  all-reduce %.2f MiB/step\n", s, p->bounds[s], p->bounds[s + 1] - 1, first.name,
                last.name, 1e3 * p->stage_time[s], p->stage_mem[s] / (1 << 20),
                p->stage_grad_bytes[s] / (1 << 20));
    }
    fprintf(out, "predicted step %.1f ms = compute %.1f + bubble %.1f + transfers %.1f + exposed "
            "all-reduce %.1f (of %.1f)%s\n", 1e3 * p->step_time, 1e3 * p->compute_time,
            1e3 * p->bubble_time, 1e3 * p->transfer_time, 1e3 * p->exposed_time,
            1e3 * p->allreduce_time,
            p->replicas > 1 ? (p->spans_nodes ? ", replicas across nodes" : ", replicas within a node")
                            : "");
    fprintf(out, "bubble (K-1)/(M+K-1) = %.3f, imbalance max/mean stage compute = %.3f\n", p->bubble,
            p->imbalance);
    if (p->n_alt > 0)
        fprintf(out, "runners-up:\n");
    for (int i = 0; i < p->n_alt; i++) {
        const pt_plan_candidate *c = &p->alt[i];
        if (c->feasible)
            fprintf(out, "  K = %d x D = %d, M = %d: %.1f ms: %s\n", c->stages, c->replicas,
                    c->micro, 1e3 * c->step_time, c->why);
        else
            fprintf(out, "  K = %d x D = %d: %s\n", c->stages, c->replicas, c->why);
    }
}
