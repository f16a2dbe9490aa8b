/*
 * layout.c: where this rank sits in the run, and changing it.
 *
 * At the start: measure the topology (nodes, cores, the links the gradient
 * all-reduce will use), profile the per-unit costs on rank 0 when something
 * is left to choose (or take both from a given pt_profile that fits this
 * world: a resumed checkpoint's, pipeline.profile's), plan (K, D, M) and the
 * partition (balance/), lay the
 * mesh over the world (comm/), split the groups, and build this rank's part:
 * schedule, segment, executor, the all-reduce of its stage and, on stage 0
 * with a frozen prefix, the prefix source. Every rank runs the same planner
 * on the same inputs, so all agree on the layout without negotiating; the
 * measured inputs (costs, links) come from rank 0.
 *
 * At a freeze decision the plan is made again with the frozen units priced
 * forward-only (nothing when the cache serves them, then they sit in front
 * of stage 0) and without gradient or optimizer memory. Elastic runs search
 * again over whatever the config left to the planner (K, D, M); the others
 * keep K, D and M and re-partition. The change is carried out as a list of
 * unit moves (dp/): every rank builds its new segment, receives the units it
 * did not hold (with their moments while they train) from a rank that held
 * them, and the old one is dropped. Idle ranks take part: they may become
 * replicas.
 */
#include "train/train.h"

#include "train/prefix.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The memory this rank's device has for a run: a GPU's as its backend
 * counts it (nn.h pt_device_info), else the node's RAM over its ranks. */
static double local_memory_per_rank(const pt_run *r)
{
    pt_device_info dev;
    if (pt_backend_device_info(r->be, &dev))
        return dev.memory;
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    return phys > 0 ? phys / pt_comm_local_size(r->comm) : 0;
}

/* The least memory of any rank's device, as the planner prices it on every
 * rank (shared_node_inputs): a layout must fit every rank's memory. */
static double memory_per_rank(const pt_run *r) { return r->least_memory_per_rank; }

/* Where memory_per_rank comes from, in words. */
static const char *memory_source(const pt_run *r)
{
    return pt_backend_is_host(r->be) ? "the node's RAM over its ranks"
                                     : "the GPU's memory less the CUDA backend's reserve";
}

/* Every rank plans from the same machine figures: rank 0's node's cores
 * and threads per rank (the node the planner prices the sharing of cores
 * on), and the least memory of any rank (RAM per rank, or a GPU's). Each
 * rank plans the layout by itself, so a rank of a node with fewer cores (or
 * less memory, or more ranks on it) that planned from its own figures would
 * choose another
 * layout than its peers, and the job would run two meshes at once: ranks
 * idle that their peers count as replicas, shares of the batch that no
 * rank trains. */
static int shared_node_inputs(pt_run *r, pt_err *err)
{
    int v[2] = {pt_comm_cores(r->comm), r->spec.threads};
    int rc = pt_bcast(pt_comm_world(r->comm), v, sizeof v, 0, err);
    r->node0_cores = v[0];
    r->node0_threads = v[1];
    int64_t least = -(int64_t)local_memory_per_rank(r); /* the largest of these is the least */
    if (rc == 0)
        rc = pt_allreduce_max_i64(pt_comm_world(r->comm), &least, err);
    r->least_memory_per_rank = (double)-least;
    return rc;
}

/* The limit a stage plans under: pipeline.memory_gib, else a GPU's memory
 * as its backend counts it, else what the node's RAM over its ranks leaves
 * beside the data set each rank holds (at least a byte: a data set that
 * takes it all leaves no layout room). */
static double device_memory(const pt_run *r)
{
    if (r->spec.mem_limit > 0)
        return r->spec.mem_limit;
    const double have = memory_per_rank(r);
    if (!pt_backend_is_host(r->be))
        return have;
    return have > 0 ? (have - r->spec.data_bytes > 1 ? have - r->spec.data_bytes : 1) : 0;
}

/* Bytes per example a rank stages of its replica's share of a step: device
 * memory only on a host backend. */
static double staging_bytes_per_example(const pt_run *r)
{
    return pt_backend_is_host(r->be) ? pt_run_staging_bytes(&r->arch) : 0;
}

double pt_run_staging_bytes(const pt_arch *a)
{
    return (double)pt_arch_input_floats(a) * sizeof(float) + 2.0 * pt_arch_tokens(a) * sizeof(int32_t) +
           64;
}

/* The cores of a node as the planner prices them. */
static int planner_cores(const pt_run *r)
{
    return r->spec.cores > 0 ? r->spec.cores : r->node0_cores;
}

/* The micro-batch sizes the units are timed at: the largest and the smallest
 * a search can pick. */
static void profiled_sizes(const pt_run *r, int *small, int *large)
{
    pt_cost_timed_sizes(&r->arch, r->be, r->spec.batch, r->ranks, 0, small, large);
}

/* The sizes a unit is timed at here: profiled_sizes', but under a memory
 * limit (pipeline.memory_gib, the same on every rank) no larger micro-batch
 * than the timing of one unit alone fits in (pt_cost_timing_bytes): no
 * layout can use one, and timing a unit at it would take more than the
 * limit (a profile timed at either pair serves: profile_fits). */
static void measured_sizes(const pt_run *r, int *small, int *large)
{
    pt_cost_timed_sizes(&r->arch, r->be, r->spec.batch, r->ranks, r->spec.mem_limit, small, large);
}

/* Whether profile p was measured on this world for what this run plans:
 * 1, or 0 with the first difference in why. */
static int profile_fits(const pt_run *r, const pt_profile *p, int costs, int small, int large,
                        char *why, size_t n)
{
    int ms, ml; /* what this run would time them at */
    measured_sizes(r, &ms, &ml);
    const int *node_of = pt_comm_node_map(r->comm);
    const int units = pt_arch_units(&r->arch);
    if (p->ranks != r->ranks) {
        snprintf(why, n, "it was measured with %d rank%s, this run has %d", p->ranks,
                 p->ranks == 1 ? "" : "s", r->ranks);
        return 0;
    }
    for (int q = 0; q < r->ranks; q++)
        if ((node_of ? node_of[q] : 0) != p->node_of[q]) {
            snprintf(why, n, "rank %d was on node %d there and is on node %d here", q, p->node_of[q],
                     node_of ? node_of[q] : 0);
            return 0;
        }
    int local0 = 0, nodes = 1;
    for (int q = 0; q < r->ranks; q++) {
        local0 += p->node_of[q] == p->node_of[0];
        nodes = p->node_of[q] + 1 > nodes ? p->node_of[q] + 1 : nodes;
    }
    if (p->cores != planner_cores(r))
        snprintf(why, n, "it priced %d cores per node, this run %d (pipeline.cores, else the "
                 "node's)", p->cores, planner_cores(r));
    else if ((local0 > 1 && !(p->bw_intra > 0)) || (nodes > 1 && !(p->bw_inter > 0)))
        snprintf(why, n, "it has no measurement of a link this world uses");
    else if (r->spec.mem_limit <= 0 && p->memory_per_rank != memory_per_rank(r))
        snprintf(why, n, "it planned with %.3g GiB per rank, this run has %.3g (%s; "
                 "pipeline.memory_gib sets the limit instead)",
                 p->memory_per_rank / (1u << 30), memory_per_rank(r) / (1u << 30),
                 memory_source(r));
    else if (p->threads != r->node0_threads)
        snprintf(why, n, "it was timed with %d threads per rank, this run uses %d", p->threads,
                 r->node0_threads);
    else if (strcmp(p->backend, pt_backend_name(r->be)) != 0)
        snprintf(why, n, "it was timed on the %s backend, this run uses %s", p->backend,
                 pt_backend_name(r->be));
    else if (costs && p->cost.units == 0)
        snprintf(why, n, "it holds no unit costs (that run had nothing to choose), this run needs them");
    else if (costs && p->cost.units != units)
        snprintf(why, n, "it holds the costs of %d units, this model has %d", p->cost.units, units);
    else if (costs && !(p->cost.batch[0] == small && p->cost.batch[1] == large) &&
             !(p->cost.batch[0] == ms && p->cost.batch[1] == ml))
        snprintf(why, n, "it timed micro-batches of %d and %d examples, this run needs %d and %d "
                 "(train.batch or the ranks differ)", p->cost.batch[0], p->cost.batch[1], ms, ml);
    else
        return 1;
    return 0;
}

/* Rank 0 profiles, or copies the given profile's costs; everyone gets the
 * model (or rank 0's error). Profiling takes minutes for a large model,
 * longer than run.timeout_s, which bounds every wait for another rank: so
 * rank 0 tells the others after each unit it timed, and a wait is as long
 * as one unit's timing (given: the same on every rank). */
static int shared_cost_model(pt_run *r, int small, int large, int use, pt_err *err)
{
    const pt_profile *given = use ? r->spec.profile : NULL; /* rank 0's is the one read */
    pt_cost_model *cm = &r->cost;
    pt_group *world = pt_comm_world(r->comm);
    int64_t status = 0;
    memset(cm, 0, sizeof *cm);
    if (r->rank == 0 && given) {
        cm->units = given->cost.units;
        cm->batch[0] = given->cost.batch[0];
        cm->batch[1] = given->cost.batch[1];
        cm->boundary_bytes_per_example = given->cost.boundary_bytes_per_example;
        if (!(cm->unit = malloc((size_t)cm->units * sizeof *cm->unit)))
            status = pt_fail(err, PT_ENOMEM, "out of memory for the cost model");
        else
            memcpy(cm->unit, given->cost.unit, (size_t)cm->units * sizeof *cm->unit);
    } else if (r->rank == 0 && pt_cost_sizes(cm, &r->arch, r->be, small, large, err)) {
        status = err->code;
    }
    /* as many broadcasts on every rank: `use` is agreed, and each carries
     * the status that ends the loop */
    int rc = 0;
    const int steps = use ? 1 : pt_arch_units(&r->arch);
    for (int u = 0; rc == 0 && u < steps; u++) {
        if (!use && r->rank == 0 && status == 0 && pt_cost_profile_unit(cm, &r->arch, r->be, u, err))
            status = err->code;
        if ((rc = pt_bcast(world, &status, sizeof status, 0, err)) == 0 && status)
            break;
    }
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
    /* not a measurement: the same on every rank (one backend for the job) */
    pt_cost_set_linear_work(cm, &r->arch, r->be);
    if (rc)
        pt_cost_model_free(cm);
    return rc;
}

/* Before measuring, which runs every unit on micro-batches of `small` and
 * `large` examples (minutes, and that much memory, for a long context):
 * whether any layout can fit the memory at all: the planner's least
 * (pt_plan_least_memory), the units of the prefix the resumed checkpoint
 * froze (rank 0's reading) holding no state or activations. A unit that
 * does not fit even so fits no layout: PT_EINPUT, which the
 * caller reports under pipeline.memory_gib. Sizes only, nothing runs;
 * rank 0 decides for every rank. */
static int memory_can_fit(pt_run *r, int small, int large, pt_err *err)
{
    const double GIB = (double)(1ull << 30);
    int64_t status = 0;
    const double limit = device_memory(r);
    if (r->rank == 0 && limit > 0) {
        pt_cost_model m;
        if (pt_cost_sizes(&m, &r->arch, r->be, small, large, err)) {
            status = err->code;
        } else {
            /* a resume's frozen blocks, or a fresh run's opening decision's (run.c) */
            const int depth = r->spec.resume_depth > 0 ? r->spec.resume_depth : r->freeze.depth;
            const int frozen = depth > 0 ? pt_freeze_units(depth) : 0;
            double worst, scratch;
            int at;
            pt_plan_least_memory(&m, frozen, &at, &worst, &scratch);
            if (scratch + worst > limit) {
                pt_unit_info info;
                pt_unit_info_get(&r->arch, at, &info);
                status = pt_fail(err, PT_EINPUT,
                                 "no layout fits: with one example per micro-batch, %s on a stage "
                                 "of its own takes %.3g GiB (its parameters, their gradients "
                                 "and moments, and one example's activations) and the largest "
                                 "unit's scratch %.3g GiB more, against %.3g GiB per device",
                                 info.name, worst / GIB, scratch / GIB, limit / GIB);
            }
            pt_cost_model_free(&m);
        }
    }
    int rc = pt_bcast(pt_comm_world(r->comm), &status, sizeof status, 0, err);
    if (rc == 0 && status) {
        if (r->rank != 0)
            pt_fail(err, (int)status, "rank 0 found that no layout fits (rank 0 reports why)");
        rc = (int)status;
    }
    return rc;
}

/* Rank 0 decides whether the spec's profile is used: 1 yes, 0 measure, or
 * an error when a strict one does not fit. The same answer on every rank. */
static int use_given_profile(pt_run *r, int costs, int small, int large, pt_err *err)
{
    const pt_profile *p = r->spec.profile;
    char why[256] = "";
    int64_t use = 0;
    if (r->rank == 0 && p && (costs || r->ranks > 1)) { /* else nothing is measured */
        use = profile_fits(r, p, costs, small, large, why, sizeof why);
        if (!use && !r->spec.profile_strict && r->spec.profile_fallback) {
            fprintf(stderr, "pipetrain: note: the checkpoint's measurements of unit costs and links "
                    "do not apply here (%s); planning from pipeline.profile's\n", why);
            r->spec.profile = r->spec.profile_fallback; /* rank 0's: the one that is read */
            r->spec.profile_strict = 1;
            use = profile_fits(r, r->spec.profile, costs, small, large, why, sizeof why);
        }
        if (!use && r->spec.profile_strict)
            use = -pt_fail(err, PT_EINPUT, "measured on another world: %s", why);
        else if (!use)
            fprintf(stderr, "pipetrain: note: the checkpoint's measurements of unit costs and links "
                    "do not apply here (%s); measuring again, so the layout may differ from the "
                    "saved run's and the results agree with it only up to the order of "
                    "floating-point sums\n", why);
    }
    int rc = pt_bcast(pt_comm_world(r->comm), &use, sizeof use, 0, err);
    if (rc == 0 && use < 0 && r->rank != 0)
        rc = pt_fail(err, (int)-use, "rank 0 refused the given profile (rank 0 reports why)");
    else if (rc == 0 && use < 0)
        rc = (int)-use;
    return rc ? -rc : (int)use;
}

/* Frozen units whose output the cache may serve: all of them, but never so
 * many that fewer than min_stages units are left (the planner serves fewer
 * where stage 0 cannot hold them all: the plan's cached_units). */
static int cached_units(const pt_run *r, int min_stages)
{
    if (!r->spec.cache || r->freeze.depth < r->spec.cache_min_depth)
        return 0;
    const int limit = pt_arch_units(&r->arch) - min_stages;
    return r->frozen_units < limit ? r->frozen_units : limit;
}

/* Whether the per-unit costs are needed: to choose something now or at a
 * later decision, or to partition the units into more than one stage. One
 * process, or one stage with D and M fixed, needs none. */
static int needs_costs(const pt_run *r)
{
    const pt_train_spec *s = &r->spec;
    if (r->ranks == 1)
        return s->micro == PT_TRAIN_AUTO && s->mem_limit > 0;
    return s->stages != 1 || s->replicas == PT_TRAIN_AUTO || s->micro == PT_TRAIN_AUTO;
}

/* The plan for the current frozen prefix. fixed: keep K, D and M as they are
 * (a re-partition); otherwise the spec's fixed values and a search over the
 * rest. */
static int plan_with(pt_run *r, int fixed, const pt_cost_model *cost, pt_plan *out, pt_err *err);

static int make_plan(pt_run *r, int fixed, pt_plan *out, pt_err *err)
{
    return plan_with(r, fixed, &r->cost, out, err);
}

/* make_plan with another cost model (r->cost's units, other sizes). */
static int plan_with(pt_run *r, int fixed, const pt_cost_model *cost, pt_plan *out, pt_err *err)
{
    const pt_train_spec *s = &r->spec;
    const int units = pt_arch_units(&r->arch);
    int K = fixed ? r->plan.stages : s->stages == PT_TRAIN_AUTO ? 0 : s->stages;
    int D = fixed ? r->plan.replicas : s->replicas == PT_TRAIN_AUTO ? 0 : s->replicas;
    int M = fixed ? r->plan.micro : s->micro == PT_TRAIN_AUTO ? 0 : s->micro;
    if (r->ranks == 1) {
        K = D = 1;
        M = M ? M : (r->cost.units ? 0 : 1);
    }
    if (!r->cost.units) { /* nothing was profiled: one stage, the whole model */
        memset(out, 0, sizeof *out);
        out->stages = 1;
        out->replicas = D ? D : r->ranks;
        out->micro = M ? M : 1;
        const int64_t share = (s->batch + out->replicas - 1) / out->replicas;
        out->micro_batch = (int)((share + out->micro - 1) / out->micro);
        out->bounds[1] = units;
        out->imbalance = 1;
        out->cached_units = cached_units(r, 1);
        return 0;
    }
    pt_plan_request q = {
        .ranks = r->ranks,
        .node_of = pt_comm_node_map(r->comm),
        .stages = K,
        .replicas = D,
        .micro = M,
        .schedule = s->gpipe ? PT_PLAN_GPIPE : PT_PLAN_1F1B,
        .recompute = s->recompute,
        .batch = s->batch,
        .mem_limit = device_memory(r),
        .cores = planner_cores(r),
        .threads = r->node0_threads,
        .frozen_units = r->frozen_units,
        .cached_units = cached_units(r, K ? K : 1),
        .bw_intra = r->bw_intra,
        .bw_inter = r->bw_inter,
        .latency = r->latency,
        .overlap = s->overlap,
        .staging_bytes_per_example = staging_bytes_per_example(r),
        .reduce_buffers = pt_backend_is_host(r->be),
    };
    return pt_plan_make(out, &q, cost, err);
}

/* After the planner found no layout in the memory limit: the largest
 * train.batch it finds one for (bisection; each answer it gives was
 * planned), with the frozen prefix the run starts from; 0 when not even
 * a batch of 1 fits. Each batch is planned with the unit sizes a run of
 * that batch would measure at (its own micro-batch sizes: the sizes are
 * interpolated between the two, and a scratch area is not always linear)
 * and this run's times (which rank layouts, and decide no fit). The run's
 * own state is left as it was. */
static int64_t batch_that_fits(pt_run *r, int depth)
{
    const int64_t batch = r->spec.batch;
    const int frozen_depth = r->freeze.depth, frozen_units = r->frozen_units;
    r->freeze.depth = depth;
    r->frozen_units = depth > 0 ? pt_freeze_units(depth) : 0;
    /* the smallest batch a fixed layout takes: M micro-batches in each of
     * D replicas' shares; below it a refusal is no answer about memory */
    const int64_t least = (int64_t)(r->spec.micro == PT_TRAIN_AUTO ? 1 : r->spec.micro) *
                          (r->spec.replicas == PT_TRAIN_AUTO ? 1 : r->spec.replicas);
    int64_t lo = 0, hi = batch; /* lo planned (0: none yet), hi did not */
    for (int first = least > 1 && least < batch; hi - lo > 1; first = 0) {
        r->spec.batch = first ? least : lo + (hi - lo) / 2;
        int small, large, rc;
        measured_sizes(r, &small, &large);
        pt_cost_model sized;
        pt_err ignored;
        if ((rc = pt_cost_sizes(&sized, &r->arch, r->be, small, large, &ignored)) == 0) {
            for (int u = 0; u < sized.units && u < r->cost.units; u++)
                for (int k = 0; k < 2; k++) {
                    sized.unit[u].fwd[k] = r->cost.unit[u].fwd[k];
                    sized.unit[u].bwd[k] = r->cost.unit[u].bwd[k];
                }
            pt_plan p;
            rc = plan_with(r, 0, &sized, &p, &ignored);
            pt_cost_model_free(&sized);
        }
        if ((rc != 0 && rc != PT_EINPUT) || (first && rc != 0))
            break; /* not even the least batch: none */
        *(rc == 0 ? &lo : &hi) = r->spec.batch;
    }
    r->spec.batch = batch;
    r->freeze.depth = frozen_depth;
    r->frozen_units = frozen_units;
    return lo;
}

/* A name for this job's node-local resources, the same on every rank of a
 * node and different between nodes (their disk tiers may share a directory),
 * and between jobs: pid and start time alone collide across PID namespaces
 * (two containers whose rank 0 is PID 1, started in the same second, on a
 * shared /dev/shm or cache.disk_dir), hence a random part too. */
static int job_name(pt_run *r, pt_err *err)
{
    char base[48] = "";
    if (r->rank == 0) {
        uint32_t id = 0;
        if (getrandom(&id, sizeof id, GRND_NONBLOCK) != (ssize_t)sizeof id)
            id = (uint32_t)clock(); /* no entropy yet: something, at least */
        snprintf(base, sizeof base, "%d-%llx-%08x", (int)getpid(), (unsigned long long)time(NULL),
                 (unsigned)id);
    }
    int rc = pt_bcast(pt_comm_world(r->comm), base, sizeof base, 0, err);
    snprintf(r->job, sizeof r->job, "%s-n%d", base, pt_comm_node(r->comm));
    return rc;
}

/* The node's activation cache: its first rank creates it, the others attach. */
static int open_cache_held(pt_run *r, pt_err *err)
{
    const size_t row = (size_t)pt_arch_tokens(&r->arch) * r->arch.dim * pt_backend_act_size(r->be);
    /* ids: the training split's examples, then the test split's */
    const int64_t test = r->spec.test ? r->spec.test->count : 0;
    pt_cache_spec cs = {r->job, r->spec.train->count + test, row, r->spec.cache_memory,
                        r->spec.cache_dir, r->spec.cache_disk};
    pt_group *node = pt_comm_node_group(r->comm);
    const int first = pt_comm_local_rank(r->comm) == 0;
    int rc = first ? pt_cache_create(&r->cache, &cs, err) : 0;
    if (rc == 0) /* a stop signal after the creation, before the others attach */
        rc = pt_test_fault("cache-open", pt_comm_rank(r->comm), 0, err);
    /* the node's other ranks attach only to a segment its first rank made */
    int64_t made = rc;
    pt_err ignore;
    int got = pt_allreduce_max_i64(node, &made, rc ? &ignore : err);
    if (got && !first) /* the creator stopped answering: the job ends, its segment with it */
        pt_cache_remove_unattached(&cs);
    if (got)
        return rc ? rc : got;
    if (rc == 0 && made == 0 && !first)
        rc = pt_cache_attach(&r->cache, &cs, err);
    /* then every rank of every node agrees, whatever failed where (the next
     * steps are collectives a failed rank would not enter); a failure with
     * a stop requested ends as the stop asked (the names are held while the
     * cache opens, so a stop signal itself no longer makes an attach fail) */
    int64_t v[2] = {rc != 0 || made != 0, pt_cache_names_released()};
    if ((got = pt_allreduce_sum(pt_comm_world(r->comm), v, 2, PT_DT_I64, rc ? &ignore : err)))
        return rc ? rc : got;
    if (v[0] && v[1])
        return pt_fail(err, PT_ESTOPPED, "stopped by a signal before every rank had opened its "
                       "node's activation cache");
    return pt_group_agree(pt_comm_world(r->comm), rc, err);
}

/* Opens the node's activation cache: its first rank creates it, the others
 * attach. The names are held meanwhile (pt_cache_hold_names): a stop signal
 * during the opening takes them off once every rank of the node has
 * attached, and the run stops after its next step with a checkpoint, as a
 * stop during start-up does without the cache. */
static int open_cache(pt_run *r, pt_err *err)
{
    pt_cache_hold_names(1);
    const int rc = open_cache_held(r, err);
    pt_cache_hold_names(0);
    return rc;
}

/* Staging for the largest micro-batches this layout runs. */
static int stage_buffers(pt_run *r, pt_err *err)
{
    /* A step stages at most M micro-batches of at most max_micro examples,
     * and never more micro-batches than examples: the per-micro-batch
     * records are sized by examples too, so a re-plan that doubles M and
     * halves the micro-batch (as many examples, more records) fits. */
    const int need = r->micro * r->max_micro;
    if (need <= r->staged_examples)
        return 0;
    const int T = pt_arch_tokens(&r->arch);
    free(r->images);
    free(r->tokens);
    free(r->targets);
    free(r->batches);
    free(r->batch_ids);
    free(r->batch_first);
    r->images = malloc(((size_t)need * pt_arch_input_floats(&r->arch) + 1) * sizeof(float));
    r->tokens = malloc(((size_t)need * T + 1) * sizeof(int32_t));
    r->targets = malloc(((size_t)need * T + 1) * sizeof(int32_t));
    r->batches = calloc((size_t)need + 1, sizeof *r->batches);
    r->batch_ids = calloc((size_t)need + 1, sizeof *r->batch_ids);
    r->batch_first = calloc((size_t)need + 1, sizeof *r->batch_first);
    r->staged_examples = need;
    if (!r->images || !r->tokens || !r->targets || !r->batches || !r->batch_ids || !r->batch_first) {
        r->staged_examples = 0;
        return pt_fail(err, PT_ENOMEM, "out of memory for batch staging");
    }
    return 0;
}

static void reducer_unit_done(void *ctx, int unit) { pt_reducer_unit_done(ctx, unit); }
static void reducer_progress(void *ctx) { pt_reducer_progress(ctx); }

/* This rank's part of the current plan and mesh: schedule, segment (units
 * from old_seg by the moves, or left to be initialised when moves is NULL),
 * all-reduce, prefix source and executor. */
/* This rank's schedule and segment for the plan (an active rank's). */
static int build_segment(pt_run *r, pt_err *err)
{
    const pt_train_spec *sp = &r->spec;
    const int K = r->plan.stages, F = r->frozen_units;
    int rc;
    int trainable = 0;
    while (trainable < K - 1 && r->plan.bounds[trainable + 1] <= F)
        trainable++;
    if ((rc = pt_schedule_build(&r->sched, sp->gpipe ? PT_SCHED_GPIPE : PT_SCHED_1F1B, K,
                                r->plan.micro, trainable, err)) ||
        (rc = pt_schedule_validate(&r->sched, err)))
        return rc;
    const int first = r->plan.bounds[r->stage], count = r->plan.bounds[r->stage + 1] - first;
    const int frozen_here = F - first < 0 ? 0 : F - first > count ? count : F - first;
    /* Stage 0's first units come from the prefix source: the cached ones, or,
     * without the cache, a frozen prefix that fits on stage 0 with something
     * after it; the other frozen units run forward only where they are. */
    const int C = r->plan.cached_units;
    r->source_units = C > 0 ? C : (F > 0 && F < r->plan.bounds[1] ? F : 0);
    const int prefix = r->stage == 0 && r->source_units > 0;
    const int slots = pt_stage_exec_slots(&r->sched, r->stage, sp->recompute) + prefix;
    /* created frozen: the frozen units' gradients and moments are never
     * allocated (creating them active and freezing after would hold the
     * whole segment's training state at once, which a plan for the frozen
     * layout does not count) */
    pt_segment_spec spec = {first, count, r->max_micro, slots, frozen_here, prefix};
    return pt_segment_create(&r->seg, &r->arch, r->be, &spec, err);
}

static int build_stage(pt_run *r, const pt_dp_moves *moves, pt_segment *old_seg, uint64_t *sent,
                       pt_err *err)
{
    const pt_train_spec *sp = &r->spec;
    const int F = r->frozen_units;
    r->micro = r->plan.micro;
    r->max_micro = r->plan.micro_batch;
    r->built_frozen = F;
    int rc = stage_buffers(r, err);
    if (rc == 0 && r->active)
        rc = build_segment(r, err);
    if (rc == 0) /* (the test hook: as if this rank's memory ran out here) */
        rc = pt_test_fault("stage", r->rank, r->step, err);
    /* A re-plan: every rank (an idle one too, which still gives away what it
     * held) has its new memory before any unit moves, or none moves: a rank
     * that could not allocate would leave its partners waiting in the moves
     * until run.timeout_s, naming the wrong phase. (At the start, pt_run_open
     * agrees on the whole layout.) */
    if (moves && (rc = pt_run_agree(r, rc, err)) == 0)
        rc = pt_dp_execute_moves(moves, pt_comm_world(r->comm), r->rank, old_seg,
                                 r->active ? r->seg : NULL, sent, err);
    if (rc || !r->active)
        return rc;
    if ((rc = pt_reducer_create(&r->reducer, r->groups.replicas, r->seg, sp->bucket_bytes,
                                sp->overlap, err)))
        return rc;
    const int C = r->plan.cached_units;
    const int prefix = r->stage == 0 && r->source_units > 0;
    const int slots = pt_stage_exec_slots(&r->sched, r->stage, sp->recompute) + prefix;
    if (prefix && (rc = pt_prefix_create(&r->prefix, r, slots - 1, C > 0 ? r->cache : NULL, err)))
        return rc;
    pt_stage_spec xs = {&r->sched, r->stage, r->groups.pipe, r->seg, r->max_micro, sp->recompute,
                        prefix ? pt_prefix_input : NULL, r->prefix, prefix ? r->source_units : 0,
                        {reducer_unit_done, reducer_progress, r->reducer}, r->replica,
                        r->spec.where};
    return pt_stage_exec_create(&r->exec, &xs, err);
}

/* Frees the stage's executor, all-reduce, prefix source, schedule and
 * (unless kept) segment. */
static void release_stage(pt_run *r, int keep_segment)
{
    pt_stage_exec_destroy(r->exec);
    r->exec = NULL;
    pt_reducer_destroy(r->reducer);
    r->reducer = NULL;
    pt_prefix_destroy(r->prefix);
    r->prefix = NULL;
    pt_schedule_free(&r->sched);
    if (!keep_segment)
        pt_segment_destroy(r->seg);
    r->seg = NULL;
}

/* Whether two ranks of this node run on the same GPU (or any on none): by
 * the GPUs' UUIDs, so that ranks each shown one GPU of their own
 * (CUDA_VISIBLE_DEVICES per rank, a scheduler's one GPU per task) count as
 * apart, and more ranks than GPUs (the backend shares them round-robin) do
 * not. Every rank of the node takes part. */
static int gpus_shared(pt_run *r, int64_t *shared, pt_err *err)
{
    struct {
        unsigned char uuid[16];
        int32_t gpu;
    } mine = {{0}, 0}, *all;
    pt_device_info dev;
    if (pt_backend_device_info(r->be, &dev)) {
        memcpy(mine.uuid, dev.uuid, sizeof mine.uuid);
        mine.gpu = 1;
    }
    pt_group *node = pt_comm_node_group(r->comm);
    const int n = pt_comm_local_size(r->comm);
    if (!(all = calloc((size_t)n, sizeof *all)))
        return pt_fail(err, PT_ENOMEM, "out of memory");
    int rc = pt_allgather(node, &mine, all, sizeof mine, err);
    *shared = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        *shared |= !all[i].gpu;
        for (int j = 0; j < i; j++)
            *shared |= memcmp(all[i].uuid, all[j].uuid, sizeof mine.uuid) == 0;
    }
    free(all);
    return rc;
}

/* NCCL communicators on this rank's pipeline and replica groups, so stage
 * transfers and the all-reduce move device memory directly: where the device
 * is a GPU, NCCL is built in, and no two ranks of a node share a GPU (NCCL
 * refuses that). The world decides together, since groups span nodes;
 * otherwise everything goes through host memory over MPI, which rank 0
 * notes once, with the reason, for a GPU run of several ranks. */
static int open_nccl(pt_run *r, pt_err *err)
{
    int device, devices;
    void *stream = pt_backend_device_stream(r->be, &device, &devices);
    int64_t shared = 0, built = stream && pt_comm_has_nccl();
    int rc = built ? gpus_shared(r, &shared, err) : 0;
    int64_t unfit = !built || shared;
    if (rc == 0)
        rc = pt_allreduce_max_i64(pt_comm_world(r->comm), &unfit, err);
    if (rc == 0 && unfit && stream && r->ranks > 1 && r->rank == 0 && !r->noted_host_transfers) {
        fprintf(stderr, "pipetrain: note: stage transfers and the gradient all-reduce go "
                        "through host memory over MPI: %s\n",
                !pt_comm_has_nccl() ? "this build has no NCCL"
                                    : "ranks of a node share a GPU (NCCL needs one GPU per rank)");
        r->noted_host_transfers = 1;
    }
    if (rc || unfit)
        return rc;
    pt_group *groups[2] = {r->groups.pipe, r->groups.replicas};
    for (int i = 0; i < 2 && rc == 0; i++)
        if (groups[i] && pt_group_size(groups[i]) > 1)
            rc = pt_group_nccl_open(groups[i], device, stream, err);
    return rc;
}

/* The mesh and groups of r->plan; this rank's place in them. */
static int place(pt_run *r, pt_err *err)
{
    /* tests: a rank that stops answering on its way to the groups */
    int rc = pt_test_fault("groups", r->rank, r->step, err);
    if (rc == 0)
        rc = pt_mesh_build(&r->mesh, r->ranks, pt_comm_node_map(r->comm), r->plan.stages,
                           r->plan.replicas, err);
    if (rc == 0)
        rc = pt_mesh_groups_build(&r->groups, r->comm, &r->mesh, r->spec.timeout_s, err);
    if (rc == 0)
        rc = open_nccl(r, err);
    if (rc == 0) /* tests: a rank whose groups could not be made */
        rc = pt_test_fault("place", r->rank, r->step, err);
    r->replica = rc ? -1 : r->mesh.replica_of[r->rank];
    r->stage = rc ? -1 : r->mesh.stage_of[r->rank];
    r->active = r->replica >= 0;
    return rc;
}

int pt_layout_open(pt_run *r, pt_err *err)
{
    pt_group_set_timeout(pt_comm_world(r->comm), r->spec.timeout_s);
    int rc = job_name(r, err);
    if (rc == 0)
        rc = shared_node_inputs(r, err);
    int small, large, use = 0;
    profiled_sizes(r, &small, &large);
    const int costs = needs_costs(r);
    if (rc == 0 && (use = use_given_profile(r, costs, small, large, err)) < 0)
        rc = -use;
    if (rc == 0 && costs && !use)
        rc = memory_can_fit(r, small, large, err);
    if (rc == 0 && use && r->ranks > 1) { /* rank 0's figures, as measuring gives them */
        double links[3] = {0, 0, 0};
        if (r->rank == 0) {
            links[0] = r->spec.profile->bw_intra;
            links[1] = r->spec.profile->bw_inter;
            links[2] = r->spec.profile->latency;
        }
        rc = pt_bcast(pt_comm_world(r->comm), links, sizeof links, 0, err);
        r->bw_intra = links[0];
        r->bw_inter = links[1];
        r->latency = links[2];
    } else if (rc == 0 && r->ranks > 1) {
        rc = pt_comm_measure_links(r->comm, &r->bw_intra, &r->bw_inter, &r->latency, err);
    }
    if (!use) /* timed here: at what fits */
        measured_sizes(r, &small, &large);
    if (rc == 0 && costs)
        rc = shared_cost_model(r, small, large, use, err);
    /* timing the units at the larger size left the backend's working
     * memory (pt_arch_linear_work_bytes) at that size, and freed more than
     * training then allocates from the heap: both would stay in the
     * resident set beside the layout's count (about 5 MiB on a 256-wide
     * ViT) */
    if (rc == 0 && costs && !use) {
        pt_backend_release_work(r->be);
#ifdef __GLIBC__
        malloc_trim(0);
#endif
    }
    int depth = r->spec.resume_depth; /* rank 0's reading */
    if (rc == 0 && r->ranks > 1)
        rc = pt_bcast(pt_comm_world(r->comm), &depth, sizeof depth, 0, err);
    /* a fresh run's opening decision (run.c) is laid out as a resume's
     * frozen blocks are, the whole model planned first */
    const int opening = r->freeze.depth;
    if (opening > 0) {
        depth = opening;
        r->freeze.depth = r->frozen_units = 0;
    }
    if (rc == 0 && (rc = make_plan(r, 0, &r->plan, err)) == PT_EINPUT && depth > 0) {
        /* No layout fits the whole model in training, but the checkpoint
         * this run resumes has a frozen prefix, which needs no gradients or
         * moments: plan for it now, as the saved run's later layouts were
         * (the load re-plans for the same prefix, which changes nothing).
         * Every rank makes the same plans, so all take this branch. Only
         * the planner's refusal is retried: a refused profile, or
         * memory_can_fit's refusal (which counted the prefix), stands. */
        const pt_err first = *err;
        r->freeze.depth = depth;
        r->frozen_units = pt_freeze_units(depth);
        if (make_plan(r, 0, &r->plan, err) == 0) {
            rc = 0;
        } else { /* the whole model's refusal says what the user can change */
            r->freeze.depth = r->frozen_units = 0;
            *err = first;
        }
    } else if (rc == 0 && depth > 0 && (r->spec.train || opening > 0)) {
        /* A resume of a checkpoint with a frozen prefix: the load would
         * re-plan for it from this layout, holding this stage and the new
         * one at once (about twice a stage's memory: what may have ended
         * the saved run). The plan that re-plan makes, made here instead,
         * is built alone: the same layout, as the saved run's. (The same
         * for the opening decision and the re-plan after it.) */
        r->freeze.depth = depth;
        r->frozen_units = pt_freeze_units(depth);
        pt_plan next;
        if ((rc = make_plan(r, !r->spec.elastic || !r->cost.units, &next, err)) == 0)
            r->plan = next;
    }
    /* (not under a strict profile: another batch needs other timed sizes) */
    if (rc == PT_EINPUT && r->spec.fits_batch && r->rank == 0 && r->cost.units &&
        device_memory(r) > 0 && !r->spec.profile_strict)
        *r->spec.fits_batch = batch_that_fits(r, depth);
    if (opening > 0) { /* the decision stands, whatever was planned */
        r->freeze.depth = opening;
        r->frozen_units = pt_freeze_units(opening);
    }
    /* every rank enters open_cache's and build_stage's collectives, or none
     * does: a rank whose groups could not be made (NCCL on one node) would
     * leave the others waiting in them until run.timeout_s */
    if (rc == 0)
        rc = pt_run_agree(r, place(r, err), err);
    if (rc == 0 && r->spec.cache && r->spec.train)
        rc = open_cache(r, err);
    if (rc == 0)
        rc = build_stage(r, NULL, NULL, NULL, err);
    return rc;
}

void pt_layout_close(pt_run *r)
{
    release_stage(r, 0);
    pt_cache_close(r->cache); /* the creator removes the segment */
    r->cache = NULL;
    pt_cost_model_free(&r->cost);
    pt_mesh_groups_free(&r->groups);
    pt_mesh_free(&r->mesh);
}

int pt_layout_replan(pt_run *r, pt_transition *t, pt_err *err)
{
    const double t0 = now_s();
    pt_transition info = {r->plan.stages, r->plan.replicas, r->plan.micro, 0, 0, 0, 0, 0};
    pt_plan next;
    const int fixed = !r->spec.elastic || !r->cost.units;
    int rc = make_plan(r, fixed, &next, err);
    if (rc == 0)
        rc = pt_test_fault("replan", r->rank, r->step, err);
    if ((rc = pt_run_agree(r, rc, err)))
        return rc;
    /* the old layout stays readable until the moves are done */
    pt_plan old_plan = r->plan;
    pt_mesh old_mesh = r->mesh;
    pt_mesh_groups old_groups = r->groups;
    const int old_frozen = r->built_frozen;
    pt_segment *old_seg = r->seg;
    release_stage(r, 1);
    memset(&r->mesh, 0, sizeof r->mesh);
    memset(&r->groups, 0, sizeof r->groups);
    r->plan = next;
    pt_dp_moves moves = {0, NULL};
    rc = place(r, err);
    if (rc == 0) {
        pt_dp_layout from = {&old_mesh, old_plan.bounds, old_frozen};
        pt_dp_layout to = {&r->mesh, r->plan.bounds, r->frozen_units};
        rc = pt_dp_plan_moves(&moves, &from, &to, pt_comm_node_map(r->comm), err);
    }
    /* every rank enters build_stage's agreement, or none does */
    uint64_t sent = 0;
    if ((rc = pt_run_agree(r, rc, err)) == 0)
        rc = build_stage(r, &moves, old_seg, &sent, err);
    pt_dp_moves_free(&moves);
    pt_segment_destroy(old_seg);
    pt_mesh_groups_free(&old_groups);
    pt_mesh_free(&old_mesh);
    /* the working memory kept at the old layout's micro-batches, which the
     * new one may not need (it is counted at the new one's) */
    pt_backend_release_work(r->be);
    /* bytes summed over the ranks; the time is rank 0's, all ranks having
     * finished once the agreement below returns */
    double v[2] = {(double)sent, 0};
    if ((rc = pt_run_agree(r, rc, err)) == 0)
        rc = pt_allreduce_sum(pt_comm_world(r->comm), v, 1, PT_DT_F64, err);
    v[1] = now_s() - t0;
    if (rc == 0)
        rc = pt_bcast(pt_comm_world(r->comm), &v[1], sizeof v[1], 0, err);
    double took = v[1];
    info.new_stages = r->plan.stages;
    info.new_replicas = r->plan.replicas;
    info.new_micro = r->plan.micro;
    info.bytes = (uint64_t)v[0];
    info.seconds = took;
    if (t)
        *t = info;
    return rc;
}

void pt_profile_free(pt_profile *p)
{
    if (!p)
        return;
    free(p->node_of);
    pt_cost_model_free(&p->cost);
    memset(p, 0, sizeof *p);
}

int pt_layout_profile(const pt_run *r, pt_profile *out, pt_err *err)
{
    memset(out, 0, sizeof *out);
    const int *node_of = pt_comm_node_map(r->comm);
    out->ranks = r->ranks;
    out->cores = planner_cores(r);
    out->threads = r->node0_threads;
    out->memory_per_rank = memory_per_rank(r);
    snprintf(out->backend, sizeof out->backend, "%s", pt_backend_name(r->be));
    out->bw_intra = r->bw_intra;
    out->bw_inter = r->bw_inter;
    out->latency = r->latency;
    out->cost.units = r->cost.units;
    out->cost.batch[0] = r->cost.batch[0];
    out->cost.batch[1] = r->cost.batch[1];
    out->cost.boundary_bytes_per_example = r->cost.boundary_bytes_per_example;
    out->node_of = malloc((size_t)r->ranks * sizeof *out->node_of);
    out->cost.unit = malloc(((size_t)r->cost.units + 1) * sizeof *out->cost.unit);
    if (!out->node_of || !out->cost.unit) {
        pt_profile_free(out);
        return pt_fail(err, PT_ENOMEM, "out of memory for the run's profile");
    }
    for (int q = 0; q < r->ranks; q++)
        out->node_of[q] = node_of ? node_of[q] : 0;
    if (r->cost.units)
        memcpy(out->cost.unit, r->cost.unit, (size_t)r->cost.units * sizeof *out->cost.unit);
    return 0;
}

const char *pt_layout_mode(const pt_run *r)
{
    return r->ranks == 1 ? "single-device" : pt_comm_nodes(r->comm) == 1 ? "multi-device" : "multi-node";
}

void pt_layout_print(const pt_run *r, FILE *out)
{
    const int nodes = pt_comm_nodes(r->comm);
    const int cores = pt_comm_cores(r->comm);
    fprintf(out, "topology: %d rank%s on %d node%s, %d core%s on rank 0's node (%s)\n", r->ranks,
            r->ranks == 1 ? "" : "s", nodes, nodes == 1 ? "" : "s", cores, cores == 1 ? "" : "s",
            pt_comm_host(r->comm));
    if (r->ranks > 1)
        fprintf(out, "links: %.0f MB/s within a node, %s between nodes, %.1f us per message\n",
                r->bw_intra / 1e6, r->bw_inter > 0 ? "measured below" : "none", 1e6 * r->latency);
    if (r->bw_inter > 0)
        fprintf(out, "  between nodes: %.0f MB/s\n", r->bw_inter / 1e6);
    fprintf(out, "mode: %s, device %s (%d thread%s per rank)\n", pt_layout_mode(r),
            pt_backend_name(r->be), r->spec.threads, r->spec.threads == 1 ? "" : "s");
    /* how the backend's threads wait for each other (nn/cpu_pool.c) */
    char waiting[160];
    pt_backend_waiting(r->be, waiting, sizeof waiting);
    if (waiting[0])
        fprintf(out, "waiting threads: %s\n", waiting);
    fprintf(out, "model: %d units, batch %lld, schedule %s%s", pt_arch_units(&r->arch),
            (long long)r->spec.batch, r->spec.gpipe ? "gpipe" : "1f1b",
            r->spec.recompute ? " with recompute" : "");
    if (r->arch.kind == PT_MODEL_BERT) { /* what model.dropout's auto came to */
        char p[2][32]; /* 0.999999999 is not 1, and -0 is 0 */
        pt_number_text(r->arch.hidden_dropout + 0.0, p[0], sizeof p[0]);
        pt_number_text(r->arch.attn_dropout + 0.0, p[1], sizeof p[1]);
        fprintf(out, ", dropout %s (attention %s)", p[0], p[1]);
    }
    if (r->opening.made && r->frozen_units > 0) /* freeze.start 0: the first decision first */
        fprintf(out, ", the bottom %d of %d blocks frozen before the first step (%d units)",
                r->freeze.depth, r->arch.layers, r->frozen_units);
    fprintf(out, "\n");
    const int may = cached_units(r, r->plan.stages), C = r->plan.cached_units;
    if (C > 0)
        fprintf(out, "activation cache: serves units 0-%d, the first %d of %d frozen%s\n", C - 1, C,
                r->frozen_units, C < may ? " (stage 0 has no room for more under the memory limit; "
                "the stages run the others forward only)" : "");
    else if (may > 0)
        fprintf(out, "activation cache: serves none of the %d frozen units (stage 0 has no room for "
                "them under the memory limit; the stages run them forward only)\n", r->frozen_units);
    if (r->plan.step_time > 0)
        pt_plan_print(&r->plan, &r->arch, out);
    else
        fprintf(out, "layout: K = 1 stage x D = %d replica%s, M = %d micro-batch%s of up to %d "
                "example%s (fixed by the config and the ranks; nothing profiled)\n",
                r->plan.replicas, r->plan.replicas == 1 ? "" : "s", r->plan.micro,
                r->plan.micro == 1 ? "" : "es", r->plan.micro_batch,
                r->plan.micro_batch == 1 ? "" : "s");
    fprintf(out, "ranks:\n");
    for (int q = 0; q < r->ranks; q++) {
        const int rep = r->mesh.replica_of[q], st = r->mesh.stage_of[q];
        if (rep >= 0)
            fprintf(out, "  rank %d (node %d): replica %d, stage %d, units %d-%d\n", q,
                    pt_comm_node_of(r->comm, q), rep, st, r->plan.bounds[st],
                    r->plan.bounds[st + 1] - 1);
    }
    int idle = 0;
    for (int q = 0; q < r->ranks; q++)
        idle += r->mesh.replica_of[q] < 0;
    if (idle) {
        fprintf(out, "idle ranks (they wait, and join if a later re-plan needs them):");
        for (int q = 0; q < r->ranks; q++)
            if (r->mesh.replica_of[q] < 0)
                fprintf(out, " %d", q);
        const int cap = pt_mesh_capacity(r->ranks, pt_comm_node_map(r->comm), r->plan.stages);
        if (r->plan.replicas < cap) {
            /* what the planner said of more replicas of this pipeline (its
             * runners-up, printed above) */
            int listed = 0, fit = 0, short_of_examples = 0;
            for (int i = 0; i < r->plan.n_alt; i++)
                if (r->plan.alt[i].stages == r->plan.stages &&
                    r->plan.alt[i].replicas > r->plan.replicas) {
                    listed++;
                    fit += r->plan.alt[i].feasible;
                    short_of_examples += !r->plan.alt[i].feasible &&
                                         r->plan.alt[i].short_of_examples;
                }
            const char *why =
                r->spec.replicas != PT_TRAIN_AUTO ? "pipeline.replicas fixes the count"
                : r->spec.batch <= r->plan.replicas ? "a step has no example for another"
                : listed && !fit && short_of_examples == listed
                    ? "more would get fewer examples than pipeline.microbatches (the runners-up "
                      "above)"
                : listed && !fit && short_of_examples
                    ? "more do not fit in the memory limit or would get fewer examples than "
                      "pipeline.microbatches (the runners-up above)"
                : listed && !fit ? "more do not fit in the memory limit (the runners-up above)"
                : fit ? "more are predicted slower (the runners-up above)"
                      : "more are predicted slower or do not fit in the memory limit";
            fprintf(out, "\n  why: %d replica%s of the %d the ranks could form: %s\n",
                    r->plan.replicas, r->plan.replicas == 1 ? "" : "s", cap, why);
        } else
            fprintf(out, "\n  why: a %d-stage pipeline needs %d ranks of one node; the ranks left "
                    "over on each node cannot form one\n", r->plan.stages, r->plan.stages);
    }
    if (r->active && r->sched.stages > 0 && r->plan.micro <= 16) {
        fprintf(out, "schedule (compute order per stage):\n");
        pt_schedule_print(&r->sched, out);
    }
}
