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
 */
#include "launch/run.h"

#include <stdlib.h>
#include <string.h>
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
        return pt_fail(err, PT_EINPUT,
                       "pipeline.stages is %d but rank 0's node has %d ranks (a pipeline never "
                       "crosses nodes): start at least %d ranks per node with mpirun",
                       K, candidates, K);
    if (K > units)
        return pt_fail(err, PT_EINPUT, "pipeline.stages is %d but the model has only %d units", K, units);
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
    pt_cost_model cm;
    int rc = shared_cost_model(r, &cm, small, large, err);
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
    rc = pt_plan_make(&r->plan, &q, &cm, err);
    pt_cost_model_free(&cm);
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
    if (!r->active)
        return 0;
    pt_sched_kind kind = c->pipeline.schedule == PT_PIPE_GPIPE ? PT_SCHED_GPIPE : PT_SCHED_1F1B;
    if ((rc = pt_schedule_build(&r->sched, kind, r->plan.stages, r->plan.micro, err)) ||
        (rc = pt_schedule_validate(&r->sched, err)))
        return rc;
    const int first = r->plan.bounds[r->stage], count = r->plan.bounds[r->stage + 1] - first;
    pt_segment_spec spec = {first, count, r->max_micro,
                            pt_stage_exec_slots(&r->sched, r->stage, c->pipeline.recompute)};
    if ((rc = pt_segment_create(&r->seg, &r->arch, r->be, &spec, err)))
        return rc;
    pt_stage_spec xs = {&r->sched, r->stage, r->pipe, r->seg, r->max_micro, c->pipeline.recompute};
    return pt_stage_exec_create(&r->exec, &xs, err);
}

void pt_layout_close(pt_run *r)
{
    pt_stage_exec_destroy(r->exec);
    r->exec = NULL;
    pt_segment_destroy(r->seg);
    r->seg = NULL;
    pt_schedule_free(&r->sched);
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
