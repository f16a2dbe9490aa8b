/*
 * test_plan.c: the layout planner (balance/plan.c) on synthetic cost models,
 * so the expected choice can be worked out by hand:
 *  - a model that fits one device gets K = 1 and D = every rank;
 *  - one that does not gets the shortest pipeline that fits, with as many
 *    replicas as the ranks allow, and freezing (less memory) shortens it;
 *  - pipelines never cross nodes; replicas across a slow link make the
 *    all-reduce costly, and with large gradients the planner prefers fewer
 *    replicas;
 *  - a cached frozen prefix larger than stage 0 may hold is served in part,
 *    the most that fit;
 *  - fixed K, D, M are honoured, impossible ones refused; the runners-up are
 *    listed with a reason;
 *  - the terms of a step by hand: recompute's extra forward, transfers both
 *    ways, an all-reduce nothing hides with pipeline.overlap off, and more
 *    micro-batches only for a step more than 1% shorter;
 *  - the search over every (K, D, M) of 16 ranks takes about as much longer
 *    for 2050 units (1024 blocks) as it has more units than 258 (128
 *    blocks): each candidate's cut is linear in the units, where it was
 *    quadratic (minutes at 2050 units, seconds at 258).
 */
#include "balance/balance.h"
#include "tests/common/cunit_main.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* n identical units: forward f and backward 2f seconds per example, p
 * parameter bytes, a bytes of saved activations per example. */
static pt_cost_model model(int n, double f, double p, double a)
{
    pt_cost_model m = {0};
    m.units = n;
    m.batch[0] = 1;
    m.batch[1] = 64;
    m.boundary_bytes_per_example = 0;
    m.unit = calloc((size_t)n, sizeof *m.unit);
    for (int u = 0; u < n; u++) {
        pt_unit_cost *c = &m.unit[u];
        c->param_bytes = p;
        c->state_bytes = 3 * p;
        for (int k = 0; k < 2; k++) {
            c->fwd[k] = f * m.batch[k];
            c->bwd[k] = 2 * f * m.batch[k];
            c->saved_bytes[k] = a * m.batch[k];
            c->scratch_bytes[k] = 0;
        }
    }
    return m;
}

static pt_plan_request request(int ranks, const int *node_of, int64_t batch, double mem)
{
    pt_plan_request q = {0};
    q.ranks = ranks;
    q.node_of = node_of;
    q.schedule = PT_PLAN_1F1B;
    q.batch = batch;
    q.mem_limit = mem;
    q.cores = 0; /* no sharing of cores */
    q.threads = 1;
    q.bw_intra = 1e10;
    q.bw_inter = 1e10;
    q.overlap = 1;
    return q;
}

static void fits_one_device_is_data_parallel(void)
{
    pt_cost_model m = model(10, 1e-4, 1e3, 1e3);
    for (int ranks = 1; ranks <= 8; ranks++) {
        pt_plan_request q = request(ranks, NULL, 64, 0);
        pt_plan p;
        pt_err err;
        CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p, &q, &m, &err), 0);
        CU_ASSERT_EQUAL(p.stages, 1);
        CU_ASSERT_EQUAL(p.replicas, ranks);
        CU_ASSERT_EQUAL(p.micro, 1); /* no pipeline: one micro-batch per replica */
        CU_ASSERT_EQUAL(p.bounds[1], 10);
        CU_ASSERT(ranks == 1 || p.n_alt > 0);
    }
    pt_cost_model_free(&m);
}

static void memory_forces_a_pipeline_and_freezing_shortens_it(void)
{
    /* 8 units of 1 MB parameters (+3 MB gradient and moments while they
     * train): 32 MB in all, and 11.5 MB per device. Active, 3 units do not
     * fit a device: K = 4. With 5 units frozen and cached (1 MB each, on
     * stage 0 to compute cache misses) 3 active ones remain: stage 0 holds
     * 5 + 4 MB, stage 1 8 MB, so K = 2 (K = 1 needs 17 MB). With 7 frozen:
     * 7 + 4 MB, K = 1. The elastic test's (4, 1) -> (2, 2) -> (1, 4). */
    pt_cost_model m = model(8, 1e-4, 1e6, 100);
    int want_k[] = {4, 2, 1}, frozen[] = {0, 5, 7};
    for (int i = 0; i < 3; i++) {
        pt_plan_request q = request(4, NULL, 64, 11.5e6);
        q.frozen_units = frozen[i];
        q.cached_units = frozen[i];
        pt_plan p;
        pt_err err;
        CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p, &q, &m, &err), 0);
        CU_ASSERT_EQUAL(p.stages, want_k[i]);
        CU_ASSERT_EQUAL(p.replicas, 4 / want_k[i]);
        for (int s = 0; s < p.stages; s++) {
            CU_ASSERT(p.stage_mem[s] <= 11.5e6);
            /* only active units are all-reduced: 1 MB of gradient each */
            double active = 0;
            for (int u = p.bounds[s]; u < p.bounds[s + 1]; u++)
                active += u >= frozen[i] ? 1e6 : 0;
            CU_ASSERT_DOUBLE_EQUAL(p.stage_grad_bytes[s], p.replicas > 1 ? active : 0, 1e-6);
        }
    }
    /* a limit nothing fits */
    pt_plan_request q = request(4, NULL, 64, 1e6);
    pt_plan p;
    pt_err err;
    CU_ASSERT_EQUAL(pt_plan_make(&p, &q, &m, &err), PT_EINPUT);
    pt_cost_model_free(&m);
}

static void a_cached_prefix_stage_0_cannot_hold_is_served_in_part(void)
{
    /* 16 units of 1 MB parameters (+3 MB while they train) on K = 8 fixed
     * stages under 8.5 MB: the whole model in training fits (2 units a
     * stage). With 15 frozen the cache may serve 8 (the other 7 stages need
     * a unit each), all on stage 0: 8 MB and at least one unit more do not
     * fit. It serves 7 then, stage 0 holding them and unit 7 (8 MB), and the
     * stages share the others as any frozen units. */
    pt_cost_model m = model(16, 1e-4, 1e6, 100);
    pt_plan_request q = request(8, NULL, 64, 8.5e6);
    q.stages = 8;
    q.replicas = 1;
    pt_plan p;
    pt_err err;
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p, &q, &m, &err), 0); /* the whole model */
    CU_ASSERT_EQUAL(p.cached_units, 0);
    q.frozen_units = 15;
    for (int may = 8; may >= 7; may--) {
        q.cached_units = may;
        CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p, &q, &m, &err), 0);
        CU_ASSERT_EQUAL(p.cached_units, 7);
        CU_ASSERT_EQUAL(p.bounds[1], 8);
        for (int s = 0; s < p.stages; s++)
            CU_ASSERT(p.stage_mem[s] <= 8.5e6);
    }
    q.cached_units = 5; /* fewer than fit: all of them */
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p, &q, &m, &err), 0);
    CU_ASSERT_EQUAL(p.cached_units, 5);
    q.cached_units = 8; /* without a limit: all of them */
    q.mem_limit = 0;
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p, &q, &m, &err), 0);
    CU_ASSERT_EQUAL(p.cached_units, 8);
    /* a limit nothing fits, cached or not: the refusal of the layout with
     * all of them cached */
    q.mem_limit = 2e6;
    CU_ASSERT_EQUAL(pt_plan_make(&p, &q, &m, &err), PT_EINPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "8 units into 8 stages"));
    pt_cost_model_free(&m);
}

static void nodes_and_the_inter_node_link(void)
{
    const int block[4] = {0, 0, 1, 1};
    /* small gradients: replicas everywhere, K = 1 */
    pt_cost_model small = model(8, 1e-4, 1e3, 100);
    pt_plan_request q = request(4, block, 64, 0);
    pt_plan p;
    pt_err err;
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p, &q, &small, &err), 0);
    CU_ASSERT_EQUAL(p.stages, 1);
    CU_ASSERT_EQUAL(p.replicas, 4);
    CU_ASSERT(p.spans_nodes);
    /* huge gradients over a slow link between nodes: the exposed all-reduce
     * of 4 replicas across nodes costs more than a 2-stage pipeline's bubble */
    pt_cost_model big = model(8, 1e-5, 1e8, 100);
    q.bw_inter = 1e8;
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p, &q, &big, &err), 0);
    CU_ASSERT(p.exposed_time >= 0);
    const double chosen = p.step_time;
    for (int i = 0; i < p.n_alt; i++)
        CU_ASSERT(!p.alt[i].feasible || p.alt[i].step_time >= 0.99 * chosen);
    /* the same with fixed K = 1 and D = 4 is slower than the choice */
    q.stages = 1;
    q.replicas = 4;
    pt_plan fixed;
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&fixed, &q, &big, &err), 0);
    CU_ASSERT(fixed.step_time >= chosen);
    CU_ASSERT(fixed.exposed_time > 0 && fixed.spans_nodes);
    /* K = 3 cannot be placed: no node has 3 ranks */
    q.stages = 3;
    q.replicas = 0;
    CU_ASSERT_EQUAL(pt_plan_make(&p, &q, &small, &err), PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "pipeline.stages") != NULL);
    q.stages = 2;
    q.replicas = 3;
    CU_ASSERT_EQUAL(pt_plan_make(&p, &q, &small, &err), PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "pipeline.replicas") != NULL);
    pt_cost_model_free(&small);
    pt_cost_model_free(&big);
}

static void fixed_choices_are_honoured(void)
{
    pt_cost_model m = model(12, 1e-4, 1e4, 1e3);
    for (int K = 1; K <= 4; K++)
        for (int D = 1; D * K <= 4; D++)
            for (int M = 1; M <= 4; M++) {
                pt_plan_request q = request(4, NULL, 48, 0);
                q.stages = K;
                q.replicas = D;
                q.micro = M;
                pt_plan p;
                pt_err err;
                CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p, &q, &m, &err), 0);
                CU_ASSERT(p.stages == K && p.replicas == D && p.micro == M);
                CU_ASSERT_EQUAL(p.micro_batch, (48 / D + M - 1) / M);
                CU_ASSERT(fabs(p.step_time - (p.compute_time + p.bubble_time + p.transfer_time + p.exposed_time)) < 1e-12);
                CU_ASSERT_EQUAL(p.bounds[0], 0);
                CU_ASSERT_EQUAL(p.bounds[K], 12);
            }
    pt_cost_model_free(&m);
}

/* One device under a memory limit: M is searched past 8 per stage, up to
 * one example per micro-batch, when only smaller micro-batches keep little
 * enough for the backward; a single stage without a frozen prefix counts
 * no boundary buffer (its input comes from no prefix source: pipe/exec.c),
 * not a pipeline stage's four. 4 units of 1e5 parameter bytes (4e5 with
 * gradient and moments: 1.6e6 in all), 1e3 bytes saved per example and
 * unit, boundaries 1e3 bytes per example, batch 64. With M micro-batches of
 * 64 / M examples, 1F1B keeps one in flight: 1.6e6 + 7e3 * 64 / M (what
 * the units save, and the 3 outputs passed between them) and the segment's
 * two gradient buffers (2e3 * 64 / M). A limit of 1.6e6 + 9e3 * 4 fits
 * M = 16 (4 examples) and nothing up to 8. */
static void memory_limit_searches_micro_batches_of_one_stage(void)
{
    pt_cost_model m = model(4, 1e-4, 1e5, 1e3);
    m.boundary_bytes_per_example = 1e3;
    const double limit = 1.6e6 + 9e3 * 4 + 1;
    pt_plan_request q = request(1, NULL, 64, limit);
    pt_plan p;
    pt_err err;
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p, &q, &m, &err), 0);
    CU_ASSERT(p.stages == 1 && p.replicas == 1);
    CU_ASSERT_EQUAL(p.micro, 16);
    CU_ASSERT_EQUAL(p.micro_batch, 4);
    CU_ASSERT(p.stage_mem[0] <= limit);
    /* one example per micro-batch is the last resort */
    q.mem_limit = 1.6e6 + 9e3 + 1;
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p, &q, &m, &err), 0);
    CU_ASSERT_EQUAL(p.micro, 64);
    /* below that nothing fits */
    q.mem_limit = 1.6e6 + 9e3 - 1;
    CU_ASSERT_EQUAL(pt_plan_make(&p, &q, &m, &err), PT_EINPUT);
    /* a batch of 65 over one stage: the search goes up to the whole 65 */
    pt_plan_request odd = request(1, NULL, 65, 1.6e6 + 9e3 + 1);
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p, &odd, &m, &err), 0);
    CU_ASSERT_EQUAL(p.micro, 65);
    CU_ASSERT_EQUAL(p.micro_batch, 1);
    /* without a limit nothing is searched past 8: M = 1 is the fastest */
    q.mem_limit = 0;
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p, &q, &m, &err), 0);
    CU_ASSERT_EQUAL(p.micro, 1);
    pt_cost_model_free(&m);
}

/* A profile whose every cost is 0 (units too small for the clock): every
 * candidate is as fast as the winner, and the runners-up say so, with no
 * ratio of zeros ("nanx slower") in their reasons. */
static void zero_costs_explain_without_ratios(void)
{
    pt_cost_model m = model(6, 0, 1e3, 1e3);
    for (int ranks = 2; ranks <= 4; ranks++) {
        pt_plan_request q = request(ranks, NULL, 16, 0);
        pt_plan p;
        pt_err err;
        CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p, &q, &m, &err), 0);
        CU_ASSERT(p.n_alt > 0);
        for (int i = 0; i < p.n_alt; i++) {
            CU_ASSERT_PTR_NULL(strstr(p.alt[i].why, "nan"));
            CU_ASSERT_PTR_NULL(strstr(p.alt[i].why, "inf"));
        }
    }
    pt_cost_model_free(&m);
}

/* The terms of a predicted step worked out by hand, each against the
 * planner's: activation recompute costs one more forward of every unit;
 * stage-to-stage transfers go both ways, (M + K - 1) * 2 messages; with
 * pipeline.overlap off no backward hides the all-reduce; and M grows only
 * for a step more than 1% shorter. */
static void cost_terms_by_hand(void)
{
    pt_err err;
    pt_plan p0, p1;
    /* recompute: 4 units, forward 1e-4 s per example, batch 64 on 1 rank */
    pt_cost_model m = model(4, 1e-4, 1e3, 1e3);
    pt_plan_request q = request(1, NULL, 64, 0);
    q.stages = q.replicas = q.micro = 1;
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p0, &q, &m, &err), 0);
    q.recompute = 1;
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p1, &q, &m, &err), 0);
    CU_ASSERT(fabs(p1.compute_time - p0.compute_time - 64 * 4 * 1e-4) < 1e-12);
    for (int n = 1; n <= 64; n *= 4)
        CU_ASSERT(fabs(pt_cost_time(&m, 0, n, 0, 1) - pt_cost_time(&m, 0, n, 0, 0) -
                       pt_cost_time(&m, 0, n, 1, 0)) < 1e-15);
    /* transfers: 2 stages, 4 micro-batches of 16, 1e3 bytes an example at
     * 1e9 bytes/s and 1e-5 s a message */
    m.boundary_bytes_per_example = 1e3;
    q = request(2, NULL, 64, 0);
    q.stages = 2, q.replicas = 1, q.micro = 4;
    q.bw_intra = 1e9, q.latency = 1e-5;
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p0, &q, &m, &err), 0);
    CU_ASSERT(fabs(p0.transfer_time - (4 + 2 - 1) * 2 * (1e-5 + 1e3 * 16 / 1e9)) < 1e-15);
    pt_cost_model_free(&m);
    /* overlap: 4 replicas of 8e8 gradient bytes at 1e8 bytes/s (12 s) */
    pt_cost_model big = model(8, 1e-5, 1e8, 100);
    q = request(4, NULL, 64, 0);
    q.stages = 1, q.replicas = 4, q.micro = 1;
    q.bw_intra = 1e8;
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p1, &q, &big, &err), 0);
    CU_ASSERT(fabs(p1.allreduce_time - 2.0 * 3 / 4 * 8e8 / 1e8) < 1e-9);
    CU_ASSERT(p1.exposed_time < p1.allreduce_time); /* the last backward hides some */
    q.overlap = 0;
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p0, &q, &big, &err), 0);
    CU_ASSERT(p0.exposed_time == p0.allreduce_time && p0.allreduce_time == p1.allreduce_time);
    pt_cost_model_free(&big);
    /* hysteresis: 4 units on 2 stages, a unit's forward 1e-4 (a + b / 48)
     * for a micro-batch of b, batch 48: a step of M micro-batches takes
     * (M + 1) (a + 1 / M) in those units, with a = 0.16: 2.32, 1.98,
     * 1.9733 and 2.05 for M = 1 to 4. M = 3 is 0.34% shorter than M = 2. */
    pt_cost_model h = model(4, 1e-4, 1e3, 1e3);
    for (int u = 0; u < 4; u++)
        for (int k = 0; k < 2; k++) {
            h.unit[u].fwd[k] = 1e-4 * (0.16 + h.batch[k] / 48.0);
            h.unit[u].bwd[k] = 2 * h.unit[u].fwd[k];
        }
    q = request(2, NULL, 48, 0);
    q.stages = 2, q.replicas = 1;
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p0, &q, &h, &err), 0);
    CU_ASSERT_EQUAL(p0.micro, 2);
    q.micro = 3;
    CU_ASSERT_EQUAL_FATAL(pt_plan_make(&p1, &q, &h, &err), 0);
    CU_ASSERT(p1.step_time < p0.step_time && p1.step_time > 0.99 * p0.step_time);
    pt_cost_model_free(&h);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The search that used to take minutes ends the test instead of holding
 * up the suite for them. */
static void too_slow(int sig)
{
    (void)sig;
    static const char msg[] = "\n  planning 2050 units took over 120 s: the search is quadratic again\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(1);
}

/* Seconds pt_plan_make takes to choose every part of the layout of n units
 * (blocks of three kinds of cost) on 16 ranks of one node of 2 cores, the
 * way `pipeline.*: auto` does with a memory limit that every stage fits. */
static double plan_seconds(int n, pt_plan *p)
{
    pt_cost_model m = model(n, 1e-5, 4096, 5000);
    m.boundary_bytes_per_example = 1088;
    for (int u = 0; u < n; u++) {
        pt_unit_cost *c = &m.unit[u];
        const double f = 1e-5 * (1 + u % 3), grow = 0.8 * m.batch[1];
        c->fwd[0] = f;
        c->fwd[1] = f * grow;
        c->bwd[0] = 2 * f;
        c->bwd[1] = 2 * f * grow;
        c->param_bytes = 4096 * (1 + u % 2);
        c->state_bytes = 3 * c->param_bytes;
    }
    pt_plan_request q = request(16, NULL, 128, 1e10);
    q.cores = 2;
    q.bw_intra = 1e9;
    q.bw_inter = 1e8;
    q.latency = 1e-5;
    q.staging_bytes_per_example = 100;
    q.reduce_buffers = 1;
    pt_err err = {0};
    const double t0 = now_s();
    const int rc = pt_plan_make(p, &q, &m, &err);
    const double took = now_s() - t0;
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(rc != 0 || (p->bounds[0] == 0 && p->bounds[p->stages] == n));
    pt_cost_model_free(&m);
    return took;
}

/* 8x the units took 60x to 100x as long before (the cut was O(K n^2));
 * now about 8x (O(K n) per cut, and the pricing of every unit). The bound
 * is relative to the small search measured around the large one, so a
 * slow or busy machine (or a sanitizer) slows both; the floor keeps a very
 * fast machine from dividing by next to nothing. */
static void many_units_plan_in_linear_time(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = too_slow;
    sigaction(SIGALRM, &sa, NULL);
    alarm(120);
    pt_plan p;
    const double small_before = plan_seconds(258, &p);
    const double large = plan_seconds(2050, &p);
    const double small_after = plan_seconds(258, &p);
    alarm(0);
    double small = small_before > small_after ? small_before : small_after;
    small = small > 0.01 ? small : 0.01;
    printf(" [258 units %.3f s and %.3f s, 2050 units %.3f s: %.1fx]", small_before, small_after,
           large, large / small);
    CU_ASSERT(large / small < 24);
}

static const pt_test tests[] = {
    {"fits_one_device_is_data_parallel", fits_one_device_is_data_parallel},
    {"memory_forces_a_pipeline_and_freezing_shortens_it", memory_forces_a_pipeline_and_freezing_shortens_it},
    {"a_cached_prefix_stage_0_cannot_hold_is_served_in_part", a_cached_prefix_stage_0_cannot_hold_is_served_in_part},
    {"nodes_and_the_inter_node_link", nodes_and_the_inter_node_link},
    {"fixed_choices_are_honoured", fixed_choices_are_honoured},
    {"memory_limit_searches_micro_batches_of_one_stage", memory_limit_searches_micro_batches_of_one_stage},
    {"zero_costs_explain_without_ratios", zero_costs_explain_without_ratios},
    {"cost_terms_by_hand", cost_terms_by_hand},
    {"many_units_plan_in_linear_time", many_units_plan_in_linear_time},
    {NULL, NULL}};
static const pt_test_suite suites[] = {{"layout planner", tests}, {NULL, NULL}};
