/*
 * layout.c: where this rank sits in the run. Measures the topology (ranks,
 * nodes, cores), plans the pipeline (stages K, micro-batches M, which units
 * each stage holds) and builds this rank's part: its pipeline group, the
 * validated schedule, its segment and the executor.
 *
 * Every rank runs the same planner on the same inputs, so all agree on the
 * layout without negotiating; the only measured input, the per-unit cost
 * model, is profiled on rank 0 and broadcast. When the config fixes K = 1 and
 * M there is nothing to choose and nothing is profiled.
 *
 * A pipeline never crosses a node: its stages are the first K ranks of rank
 * 0's node, in rank order. Ranks outside the pipeline stay idle until the end
 * (replicas that would use them come with data parallelism).
 *
 * When blocks freeze, the plan is redone with K and M fixed: frozen units cost
 * their forward only, or nothing when the activation cache serves them (then
 * they all sit in front of stage 0), and units move to their new stages. A
 * frozen prefix entirely on stage 0 is run by the prefix source (prefix.c),
 * which also consults the cache; stages holding only frozen units run forward
 * only.
 */
#include "launch/run.h"

#include "dp/dp.h"
#include "launch/prefix.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* World ranks on the node of rank 0, in rank order; returns how many. */
static int pipeline_candidates(const pt_run *r, int *ranks)
{
    int n = 0, node = pt_comm_node_of(r->comm, 0);
    for (int q = 0; q < r->ranks; q++)
        if (pt_comm_node_of(r->comm, q) == node)
            ranks[n++] = q;
    return n;
}

static double device_memory(const pt_run *r)
{
    if (r->cfg.pipeline.memory_gib > 0)
        return r->cfg.pipeline.memory_gib * (double)(1ull << 30);
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    return phys > 0 ? phys / pt_comm_local_size(r->comm) : 0;
}

/* Rank 0 profiles; everyone gets the model (or rank 0's error). */
static int shared_cost_model(pt_run *r, pt_cost_model *cm, int small, int large, pt_err *err)
{
    pt_group *world = pt_comm_world(r->comm);
    int64_t status = 0;
    memset(cm, 0, sizeof *cm);
    if (r->rank == 0 && pt_cost_profile(cm, &r->arch, r->be, small, large, err))
        status = err->code;
    int rc = pt_bcast(world, &status, sizeof status, 0, err);
    if (rc == 0 && status) {
        if (r->rank != 0)
            pt_fail(err, (int)status, "profiling on rank 0 failed (rank 0 reports why)");
        rc = (int)status;
    }
    if (rc == 0 && r->rank != 0) {
        cm->units = pt_arch_units(&r->arch);
        if (!(cm->unit = calloc((size_t)cm->units, sizeof *cm->unit)))
            rc = pt_fail(err, PT_ENOMEM, "out of memory for the cost model");
    }
    if (rc == 0)
        rc = pt_bcast(world, cm->batch, sizeof cm->batch, 0, err);
    if (rc == 0)
        rc = pt_bcast(world, &cm->boundary_bytes_per_example, sizeof(double), 0, err);
    if (rc == 0)
        rc = pt_bcast(world, cm->unit, (size_t)cm->units * sizeof *cm->unit, 0, err);
    if (rc)
        pt_cost_model_free(cm);
    return rc;
}

static int make_plan(pt_run *r, int candidates, pt_err *err)
{
    const pt_config *c = &r->cfg;
    const int K = c->pipeline.stages == PT_AUTO ? 0 : c->pipeline.stages;
    const int M = c->pipeline.microbatches == PT_AUTO ? 0 : c->pipeline.microbatches;
    const int64_t B = c->train.batch;
    const int units = pt_arch_units(&r->arch);
    if (K > candidates)
        return pt_config_key_fail(c, err, "pipeline.stages",
                                  "%d stages, but rank 0's node has %d rank%s and a pipeline never "
                                  "crosses nodes; allowed here: 1 to %d, or auto (or start at "
                                  "least %d ranks per node with mpirun)",
                                  K, candidates, candidates == 1 ? "" : "s", candidates, K);
    if (K > units)
        return pt_config_key_fail(c, err, "pipeline.stages",
                                  "%d stages, but the model has only %d units; allowed: 1 to %d, "
                                  "or auto",
                                  K, units, units);
    memset(&r->plan, 0, sizeof r->plan);
    if (K == 1 && M > 0) { /* nothing to choose */
        r->plan.stages = 1;
        r->plan.micro = M;
        r->plan.micro_batch = (int)((B + M - 1) / M);
        r->plan.bounds[1] = units;
        r->plan.imbalance = 1;
        return 0;
    }
    /* profile at the largest and smallest micro-batch the search can pick */
    const int k_min = K ? K : 1, k_max = K ? K : (candidates < units ? candidates : units);
    int large = (int)(M ? (B + M - 1) / M : (B + k_min - 1) / k_min);
    int small = M ? large : (int)(B / (8 * k_max) > 0 ? B / (8 * k_max) : 1);
    pt_cost_model *cm = &r->cost;
    int rc = shared_cost_model(r, cm, small, large, err);
    if (rc)
        return rc;
    pt_plan_request q = {
        .ranks = candidates,
        .stages = K,
        .micro = M,
        .schedule = c->pipeline.schedule == PT_PIPE_GPIPE ? PT_PLAN_GPIPE : PT_PLAN_1F1B,
        .recompute = c->pipeline.recompute,
        .batch = B,
        .mem_limit = device_memory(r),
        .cores = pt_comm_cores(r->comm),
        .threads = r->threads,
    };
    rc = pt_plan_make(&r->plan, &q, cm, err);
    if (rc != PT_EINPUT)
        return rc;
    /* K, M and the ranks were checked above: what is left is memory */
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    return pt_config_key_fail(c, err, "pipeline.memory_gib",
                              "%.3g GiB per device%s, and no pipeline layout fits in it (%s); "
                              "allowed: more memory, more stages over more ranks, or a smaller "
                              "model or batch",
                              q.mem_limit / (double)(1ull << 30),
                              c->pipeline.memory_gib > 0 ? "" : " (the node's RAM over its ranks)",
                              why);
}

/* Frozen units whose output the cache serves: all of them, but never so many
 * that fewer than K units are left to make K stages. */
static int cached_units(const pt_run *r)
{
    if (!r->cfg.cache.enabled || r->freeze.depth < r->cfg.cache.min_depth)
        return 0;
    const int limit = pt_arch_units(&r->arch) - r->plan.stages;
    return r->frozen_units < limit ? r->frozen_units : limit;
}

/* The plan again for the current frozen prefix, with K and M as they are. */
static int replan(pt_run *r, pt_err *err)
{
    const int units = pt_arch_units(&r->arch);
    if (r->plan.stages == 1) { /* one stage: nothing moves */
        r->plan.bounds[0] = 0;
        r->plan.bounds[1] = units;
        return 0;
    }
    const pt_config *c = &r->cfg;
    pt_plan_request q = {
        .ranks = r->plan.stages,
        .stages = r->plan.stages,
        .micro = r->plan.micro,
        .schedule = c->pipeline.schedule == PT_PIPE_GPIPE ? PT_PLAN_GPIPE : PT_PLAN_1F1B,
        .recompute = c->pipeline.recompute,
        .batch = c->train.batch,
        .mem_limit = device_memory(r),
        .cores = pt_comm_cores(r->comm),
        .threads = r->threads,
        .frozen_units = r->frozen_units,
        .cached_units = cached_units(r),
    };
    return pt_plan_make(&r->plan, &q, &r->cost, err);
}

/* A name for this job's node-local resources, the same on every rank. */
static int job_name(pt_run *r, pt_err *err)
{
    if (r->rank == 0)
        snprintf(r->job, sizeof r->job, "%d-%llx", (int)getpid(), (unsigned long long)time(NULL));
    return pt_bcast(pt_comm_world(r->comm), r->job, sizeof r->job, 0, err);
}

/* This rank's stage for the current plan: schedule, segment (its units taken
 * from old_seg laid out by old_bounds, or left to be initialised when old_seg
 * is NULL), prefix source and executor. */
static int build_stage(pt_run *r, pt_segment *old_seg, const int *old_bounds, pt_err *err)
{
    const pt_config *c = &r->cfg;
    const int K = r->plan.stages, F = r->frozen_units;
    int trainable = 0;
    while (trainable < K - 1 && r->plan.bounds[trainable + 1] <= F)
        trainable++;
    pt_sched_kind kind = c->pipeline.schedule == PT_PIPE_GPIPE ? PT_SCHED_GPIPE : PT_SCHED_1F1B;
    int rc;
    if ((rc = pt_schedule_build(&r->sched, kind, K, r->plan.micro, trainable, err)) ||
        (rc = pt_schedule_validate(&r->sched, err)))
        return rc;
    const int first = r->plan.bounds[r->stage], count = r->plan.bounds[r->stage + 1] - first;
    int frozen_here = F - first < 0 ? 0 : F - first > count ? count : F - first;
    /* Stage 0's first units come from the prefix source: the cached ones, or,
     * without the cache, a frozen prefix that fits on stage 0 with something
     * after it; the other frozen units run forward only where they are. */
    const int C = cached_units(r);
    r->source_units = C > 0 ? C : (F > 0 && F < r->plan.bounds[1] ? F : 0);
    const int prefix = r->stage == 0 && r->source_units > 0;
    const int slots = pt_stage_exec_slots(&r->sched, r->stage, c->pipeline.recompute) + prefix;
    pt_segment_spec spec = {first, count, r->max_micro, slots};
    if ((rc = pt_segment_create(&r->seg, &r->arch, r->be, &spec, err)) ||
        (rc = pt_segment_freeze(r->seg, frozen_here, err)))
        return rc;
    if (old_seg && (rc = pt_dp_move_units(r->pipe, r->stage, K, old_bounds, r->plan.bounds, F, old_seg,
                                          r->seg, err)))
        return rc;
    if (prefix && C > 0 && !r->cache) {
        pt_cache_spec cs = {r->job, r->train.count, pt_segment_act_elems(r->seg, 1) * pt_backend_act_size(r->be),
                            (uint64_t)(c->cache.memory_gib * (double)(1ull << 30)), c->cache.disk_dir,
                            (uint64_t)(c->cache.disk_gib * (double)(1ull << 30))};
        if ((rc = pt_cache_create(&r->cache, &cs, err)))
            return rc;
    }
    if (prefix && (rc = pt_prefix_create(&r->prefix, r, slots - 1, C > 0 ? r->cache : NULL, err)))
        return rc;
    pt_stage_spec xs = {&r->sched, r->stage, r->pipe, r->seg, r->max_micro, c->pipeline.recompute,
                        prefix ? pt_prefix_input : NULL, r->prefix, prefix ? r->source_units : 0};
    return pt_stage_exec_create(&r->exec, &xs, err);
}

/* Frees the stage's executor, prefix source, schedule and (unless kept) segment. */
static void release_stage(pt_run *r, int keep_segment)
{
    pt_stage_exec_destroy(r->exec);
    r->exec = NULL;
    pt_prefix_destroy(r->prefix);
    r->prefix = NULL;
    pt_schedule_free(&r->sched);
    if (!keep_segment)
        pt_segment_destroy(r->seg);
    r->seg = NULL;
}

int pt_layout_replan(pt_run *r, pt_err *err)
{
    if (!r->active)
        return 0;
    int old_bounds[PT_MAX_STAGES + 1];
    memcpy(old_bounds, r->plan.bounds, sizeof old_bounds);
    int rc = replan(r, err);
    if (rc)
        return rc;
    pt_segment *old_seg = r->seg;
    release_stage(r, 1);
    rc = build_stage(r, old_seg, old_bounds, err);
    pt_segment_destroy(old_seg);
    return rc;
}

int pt_layout_open(pt_run *r, pt_err *err)
{
    const pt_config *c = &r->cfg;
    pt_group_set_timeout(pt_comm_world(r->comm), c->run.timeout_s);
    int *candidates = malloc((size_t)r->ranks * sizeof *candidates);
    if (!candidates)
        return pt_fail(err, PT_ENOMEM, "out of memory planning the layout");
    int n = pipeline_candidates(r, candidates);
    int rc = make_plan(r, n, err);
    r->active = 0;
    for (int s = 0; rc == 0 && s < r->plan.stages; s++)
        if (candidates[s] == r->rank) {
            r->active = 1;
            r->stage = s;
        }
    free(candidates);
    if (rc)
        return rc;
    r->micro = r->plan.micro;
    r->max_micro = r->plan.micro_batch;
    if (r->plan.stages > 1) {
        if ((rc = pt_group_split(r->comm, r->active ? 0 : -1, r->stage, &r->pipe, err)))
            return rc;
        if (r->pipe)
            pt_group_set_timeout(r->pipe, c->run.timeout_s);
    }
    if ((rc = job_name(r, err)))
        return rc;
    return r->active ? build_stage(r, NULL, NULL, err) : 0;
}

void pt_layout_close(pt_run *r)
{
    release_stage(r, 0);
    pt_cache_close(r->cache); /* the creator removes the segment */
    r->cache = NULL;
    pt_cost_model_free(&r->cost);
    pt_group_free(r->pipe);
    r->pipe = NULL;
}

void pt_layout_print(const pt_run *r, FILE *out)
{
    const int nodes = pt_comm_nodes(r->comm);
    const char *mode = r->ranks == 1 ? "single-device" : nodes == 1 ? "multi-device" : "multi-node";
    fprintf(out, "topology: %d rank%s on %d node%s, %d cores on rank 0's node (%s)\n", r->ranks,
            r->ranks == 1 ? "" : "s", nodes, nodes == 1 ? "" : "s", pt_comm_cores(r->comm),
            pt_comm_host(r->comm));
    fprintf(out, "rank 0: %s\n", r->binding);
    fprintf(out, "mode: %s, device %s (%d threads per rank)\n", mode, pt_backend_name(r->be), r->threads);
    fprintf(out, "model: %s, %d units, batch %lld, schedule %s%s\n",
            pt_config_word("model.kind", r->cfg.model.kind), pt_arch_units(&r->arch),
            r->cfg.train.batch, pt_config_word("pipeline.schedule", r->cfg.pipeline.schedule),
            r->cfg.pipeline.recompute ? " with recompute" : "");
    if (r->plan.step_time > 0)
        pt_plan_print(&r->plan, &r->arch, out);
    else
        fprintf(out, "stages K = 1, micro-batches M = %d of up to %d examples (fixed by the config; "
                     "nothing profiled)\n", r->plan.micro, r->plan.micro_batch);
    if (r->plan.stages < r->ranks)
        fprintf(out, "ranks %d..%d are idle: data-parallel replicas are not implemented yet\n",
                r->plan.stages, r->ranks - 1);
    if (r->sched.stages > 0 && r->plan.micro <= 16) {
        fprintf(out, "schedule (compute order per stage):\n");
        pt_schedule_print(&r->sched, out);
    }
}
