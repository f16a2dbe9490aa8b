/*
 * test_freeze.c: freeze policies. The schedule policy's depths for L = 6, 12
 * and 24 against PipeTransformer's progressive bound (tables worked out by
 * hand and in the research notes); the auto policy on synthetic gradient-norm
 * histories (stable prefixes freeze, uniform change freezes nothing, the bound
 * and max_depth cap it, depth never shrinks); and the saved state making the
 * same decisions after a reload.
 */
#include "freeze/freeze.h"
#include "tests/common/cunit_main.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int schedule_depths(int L, double alpha, int decisions, int *out)
{
    pt_freeze_state s;
    pt_freeze_config cfg = {PT_FREEZE_SCHEDULE, alpha, 0};
    pt_err err;
    if (pt_freeze_init(&s, &cfg, L, &err))
        return -1;
    for (int t = 0; t < decisions; t++) {
        pt_freeze_report r;
        out[t] = pt_freeze_decide(&s, &r);
    }
    pt_freeze_free(&s);
    return 0;
}

static void schedule_tables(void)
{
    /* ceil(L (1 - (1 - alpha)^t)) for t = 1.. */
    const struct {
        int L;
        double alpha;
        int want[9];
    } rows[] = {
        {12, 1.0 / 2, {6, 9, 11, 12, 12, 12, 12, 12, 12}},
        {12, 2.0 / 5, {5, 8, 10, 11, 12, 12, 12, 12, 12}},
        {12, 1.0 / 3, {4, 7, 9, 10, 11, 11, 12, 12, 12}},
        {12, 1.0 / 4, {3, 6, 7, 9, 10, 10, 11, 11, 12}},
        {12, 1.0 / 5, {3, 5, 6, 8, 9, 9, 10, 10, 11}},
        {24, 1.0 / 3, {8, 14, 17, 20, 21, 22, 23, 24, 24}},
        /* L = 6: 6 (1 - (2/3)^t) = 2, 3.33, 4.22, 4.81, 5.21, 5.47, 5.65, 5.77, 5.84 */
        {6, 1.0 / 3, {2, 4, 5, 5, 6, 6, 6, 6, 6}},
        /* L = 6, alpha 1/2: 3, 4.5, 5.25, 5.625, ... */
        {6, 1.0 / 2, {3, 5, 6, 6, 6, 6, 6, 6, 6}},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int got[9];
        CU_ASSERT_EQUAL_FATAL(schedule_depths(rows[i].L, rows[i].alpha, 9, got), 0);
        for (int t = 0; t < 9; t++) {
            if (got[t] != rows[i].want[t])
                printf("\n  L=%d alpha=%g t=%d: depth %d, expected %d", rows[i].L, rows[i].alpha, t + 1,
                       got[t], rows[i].want[t]);
            CU_ASSERT_EQUAL(got[t], rows[i].want[t]);
        }
    }
    /* exact integers stay exact: L (1 - (1/2)^1) = 6 exactly, not 7 */
    CU_ASSERT_EQUAL(pt_freeze_bound(12, 0.5, 1), 6);
    CU_ASSERT_EQUAL(pt_freeze_bound(8, 0.25, 2), 4); /* 8 (1 - 0.75^2) = 3.5 -> 4 */
    /* a tiny alpha is still a positive fraction of a block: one block */
    CU_ASSERT_EQUAL(pt_freeze_bound(6, 1e-10, 1), 1);
    CU_ASSERT_EQUAL(pt_freeze_bound(6, 1e-300, 1), 1);
    CU_ASSERT_EQUAL(pt_freeze_bound(6, 4.9e-324, 1000000000), 1);
    CU_ASSERT_EQUAL(pt_freeze_bound(6, 1e-300, 0), 0);
    /* alpha near 1: everything after the first decision */
    CU_ASSERT_EQUAL(pt_freeze_bound(6, 1.0 - 1e-16, 1), 6);
    CU_ASSERT_EQUAL(pt_freeze_units(0), 0);
    CU_ASSERT_EQUAL(pt_freeze_units(1), 3); /* embedding + attn + mlp of block 0 */
    CU_ASSERT_EQUAL(pt_freeze_units(6), 13);
}

static void max_depth_caps(void)
{
    pt_freeze_state s;
    pt_freeze_config cfg = {PT_FREEZE_SCHEDULE, 0.5, 4};
    pt_err err;
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&s, &cfg, 12, &err), 0);
    pt_freeze_report r;
    for (int t = 0; t < 8; t++)
        pt_freeze_decide(&s, &r);
    CU_ASSERT_EQUAL(s.depth, 4);
    pt_freeze_free(&s);
    pt_freeze_config none = {PT_FREEZE_NONE, 0.5, 0};
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&s, &none, 12, &err), 0);
    for (int t = 0; t < 5; t++)
        CU_ASSERT_EQUAL(pt_freeze_decide(&s, &r), 0);
    pt_freeze_free(&s);
    pt_freeze_config bad = {PT_FREEZE_AUTO, 1.0, 0};
    CU_ASSERT_EQUAL(pt_freeze_init(&s, &bad, 12, &err), PT_EINPUT);
}

/* Feeds `steps` steps of norms norm(b, interval) for each interval, deciding after each. */
static void run_auto(pt_freeze_state *s, int intervals, double (*norm)(int, int), int *depths,
                     pt_freeze_report *last)
{
    double *v = calloc((size_t)s->blocks, sizeof *v);
    for (int i = 0; i < intervals; i++) {
        for (int step = 0; step < 10; step++) {
            for (int b = 0; b < s->blocks; b++)
                v[b] = norm(b, i);
            pt_freeze_accumulate(s, v);
        }
        depths[i] = pt_freeze_decide(s, last);
    }
    free(v);
}

/* blocks 0..2 settle after the first interval; blocks 3..5 keep shrinking fast */
static double settling_prefix(int b, int i) { return b < 3 ? 1.0 + 0.001 * i : 4.0 / (1 + i); }
static double uniform_change(int b, int i) { return (1.0 + b) / (1.0 + i); }
/* everything settled but the last block */
static double all_but_last(int b, int i) { return b < 5 ? 2.0 : 1.0 / (1 + i); }

static void auto_policy(void)
{
    pt_freeze_state s;
    pt_freeze_report r;
    pt_err err;
    int d[6];
    pt_freeze_config cfg = {PT_FREEZE_AUTO, 0.5, 0};
    /* the stable prefix freezes once the first decision has a reference */
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&s, &cfg, 6, &err), 0);
    run_auto(&s, 3, settling_prefix, d, &r);
    CU_ASSERT_EQUAL(d[0], 0); /* the first decision only records the norms */
    CU_ASSERT_EQUAL(d[1], 3);
    CU_ASSERT_EQUAL(d[2], 3);
    CU_ASSERT_EQUAL(r.candidate, 3);
    CU_ASSERT(r.threshold > 0);
    pt_freeze_free(&s);
    /* every block changes at the same rate: the first block is not below the median */
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&s, &cfg, 6, &err), 0);
    run_auto(&s, 4, uniform_change, d, &r);
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(d[i], 0);
    pt_freeze_free(&s);
    /* the norms say 5, the progressive bound says ceil(6 (1 - 0.5^t)) = 3, 5, 6 */
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&s, &cfg, 6, &err), 0);
    run_auto(&s, 3, all_but_last, d, &r);
    CU_ASSERT_EQUAL(d[0], 0);
    CU_ASSERT_EQUAL(d[1], 5); /* bound at t=2 is 5 */
    pt_freeze_free(&s);
    pt_freeze_config slow = {PT_FREEZE_AUTO, 0.2, 0};
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&s, &slow, 6, &err), 0);
    run_auto(&s, 3, all_but_last, d, &r);
    CU_ASSERT_EQUAL(d[1], pt_freeze_bound(6, 0.2, 2)); /* 6 (1 - 0.64) = 2.16 -> 3 */
    CU_ASSERT_EQUAL(d[1], 3);
    CU_ASSERT_EQUAL(r.candidate, 5);
    pt_freeze_free(&s);
    /* depth never shrinks, and max_depth caps it */
    pt_freeze_config capped = {PT_FREEZE_AUTO, 0.5, 2};
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&s, &capped, 6, &err), 0);
    run_auto(&s, 6, settling_prefix, d, &r);
    for (int i = 1; i < 6; i++)
        CU_ASSERT(d[i] >= d[i - 1] && d[i] <= 2);
    CU_ASSERT_EQUAL(d[5], 2);
    pt_freeze_free(&s);
}

/* rate[b] = 0.1 (b + 1): the norms 1 in the first interval, 1 - rate after */
static double rising_rates(int b, int i) { return i == 0 ? 1.0 : 1.0 - 0.1 * (b + 1); }

/* The threshold is the median of the active blocks' change rates: with an
 * even count, the mean of the two middle ones. Rates 0.1 to 0.4 over 4
 * blocks: median 0.25, so the bottom 2 freeze (the upper middle, 0.3,
 * would freeze 3); over 5 blocks, 0.3 and 3. */
static void auto_policy_median(void)
{
    pt_freeze_config cfg = {PT_FREEZE_AUTO, 0.99, 0}; /* a bound that does not decide */
    pt_freeze_state s;
    pt_freeze_report r;
    pt_err err;
    int d[2];
    const int blocks[2] = {4, 5}, want[2] = {2, 3};
    const double threshold[2] = {0.25, 0.3};
    for (int k = 0; k < 2; k++) {
        CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&s, &cfg, blocks[k], &err), 0);
        run_auto(&s, 2, rising_rates, d, &r);
        CU_ASSERT_EQUAL(d[0], 0);
        CU_ASSERT_DOUBLE_EQUAL(r.threshold, threshold[k], 1e-12);
        CU_ASSERT_EQUAL(r.candidate, want[k]);
        CU_ASSERT_EQUAL(d[1], want[k]);
        pt_freeze_free(&s);
    }
}

/* Feeds steps[i] steps of norms norm(b, i) in interval i, deciding after each. */
static void run_windows(pt_freeze_state *s, int intervals, const int *steps,
                        double (*norm)(int, int), int *depths, pt_freeze_report *last)
{
    double v[6];
    for (int i = 0; i < intervals; i++) {
        for (int step = 0; step < steps[i]; step++) {
            for (int b = 0; b < s->blocks; b++)
                v[b] = norm(b, i);
            pt_freeze_accumulate(s, v);
        }
        depths[i] = pt_freeze_decide(s, last);
    }
}

/* blocks 0..2 the same norm every step; blocks 3..5 double theirs per interval */
static double steady_prefix(int b, int i) { return b < 3 ? 1.0 + 0.25 * b : (double)(1 << i); }

/* Intervals of different lengths (freeze.start 4 steps, then freeze.every
 * 2) compare the norms per step, not the sums: a block whose norm per step
 * does not change has rate 0 whatever the lengths. Comparing sums, blocks
 * 0..2 halved (rate 0.5) while 3..5, twice the norm over half the steps,
 * looked unchanged (rate 0), and nothing froze. */
static void auto_policy_unequal_intervals(void)
{
    pt_freeze_config cfg = {PT_FREEZE_AUTO, 0.5, 0};
    pt_freeze_state s;
    pt_freeze_report r;
    pt_err err;
    int d[3];
    const int lengths[3] = {4, 2, 2};
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&s, &cfg, 6, &err), 0);
    run_windows(&s, 2, lengths, steady_prefix, d, &r);
    CU_ASSERT_EQUAL(d[0], 0);
    CU_ASSERT_EQUAL(d[1], 3);
    CU_ASSERT_EQUAL(r.candidate, 3);
    for (int b = 0; b < 3; b++) {
        CU_ASSERT_EQUAL(r.rates[b], 0.0);
        CU_ASSERT_EQUAL(r.norms[b], 1.0 + 0.25 * b); /* the report: per step */
    }
    for (int b = 3; b < 6; b++) {
        CU_ASSERT_DOUBLE_EQUAL(r.rates[b], 1.0, 1e-15);
        CU_ASSERT_EQUAL(r.norms[b], 2.0);
    }
    pt_freeze_free(&s);
    /* a saved state in the middle of the second interval, through text,
     * decides as the state that was not saved; one of a build that did not
     * record prev_steps (the key left out) compares the sums, as it did */
    pt_freeze_state a, b, old;
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&a, &cfg, 6, &err), 0);
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&b, &cfg, 6, &err), 0);
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&old, &cfg, 6, &err), 0);
    run_windows(&a, 1, lengths, steady_prefix, d, &r);
    double v[6];
    for (int k = 0; k < 6; k++)
        v[k] = steady_prefix(k, 1);
    pt_freeze_accumulate(&a, v);
    json_t *saved = pt_freeze_to_json(&a);
    CU_ASSERT_FATAL(saved != NULL);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(saved, "prev_steps")), 4);
    CU_ASSERT_EQUAL(pt_freeze_from_json(&b, saved, 1000, &err), 0);
    CU_ASSERT_EQUAL(json_object_del(saved, "prev_steps"), 0);
    CU_ASSERT_EQUAL(pt_freeze_from_json(&old, saved, 1000, &err), 0);
    json_decref(saved);
    pt_freeze_accumulate(&a, v);
    pt_freeze_accumulate(&b, v);
    pt_freeze_accumulate(&old, v);
    CU_ASSERT_EQUAL(pt_freeze_decide(&a, &r), 3);
    CU_ASSERT_EQUAL(pt_freeze_decide(&b, &r), 3);
    CU_ASSERT_EQUAL(pt_freeze_decide(&old, &r), 0); /* the sums: blocks 0..2 rate 0.5, 3..5 0 */
    CU_ASSERT_EQUAL(r.rates[0], 0.5);
    CU_ASSERT_EQUAL(r.rates[3], 0.0);
    pt_freeze_free(&a);
    pt_freeze_free(&b);
    pt_freeze_free(&old);
    /* a negative or non-integer prev_steps is refused */
    const char *bad[] = {
        "{\"depth\": 0, \"decisions\": 1, \"have_prev\": true, \"acc_steps\": 0, "
        "\"prev_steps\": -1, \"acc\": [0,0,0,0,0,0], \"prev\": [0,0,0,0,0,0]}",
        "{\"depth\": 0, \"decisions\": 1, \"have_prev\": true, \"acc_steps\": 0, "
        "\"prev_steps\": 1.5, \"acc\": [0,0,0,0,0,0], \"prev\": [0,0,0,0,0,0]}",
        "{\"depth\": 0, \"decisions\": 1, \"have_prev\": true, \"acc_steps\": 0, "
        "\"prev_steps\": \"2\", \"acc\": [0,0,0,0,0,0], \"prev\": [0,0,0,0,0,0]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&s, &cfg, 6, &err), 0);
        json_t *j = json_loads(bad[i], 0, NULL);
        CU_ASSERT_FATAL(j != NULL);
        CU_ASSERT_EQUAL(pt_freeze_from_json(&s, j, 1000, &err), PT_EINPUT);
        json_decref(j);
        pt_freeze_free(&s);
    }
}

static void saved_state_decides_the_same(void)
{
    pt_freeze_config cfg = {PT_FREEZE_AUTO, 0.5, 0};
    pt_freeze_state a, b;
    pt_freeze_report r;
    pt_err err;
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&a, &cfg, 6, &err), 0);
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&b, &cfg, 6, &err), 0);
    int d[6];
    run_auto(&a, 1, settling_prefix, d, &r);
    double v[6];
    for (int k = 0; k < 6; k++)
        v[k] = 0.1 * (k + 1) / 3.0; /* not exactly representable: the text must keep every bit */
    pt_freeze_accumulate(&a, v);
    /* through text, as a checkpoint keeps it */
    json_t *saved = pt_freeze_to_json(&a);
    CU_ASSERT_FATAL(saved != NULL);
    char *text = json_dumps(saved, 0);
    json_decref(saved);
    json_t *loaded = json_loads(text, 0, NULL);
    CU_ASSERT_FATAL(loaded != NULL);
    CU_ASSERT_EQUAL(pt_freeze_from_json(&b, loaded, 1000, &err), 0);
    json_decref(loaded);
    for (int k = 0; k < 6; k++)
        CU_ASSERT_EQUAL(memcmp(&a.acc[k], &b.acc[k], sizeof(double)), 0);
    int da[4], db[4];
    run_auto(&a, 4, settling_prefix, da, &r);
    run_auto(&b, 4, settling_prefix, db, &r);
    CU_ASSERT_EQUAL(memcmp(da, db, sizeof da), 0);
    CU_ASSERT_EQUAL(a.decisions, b.decisions);
    /* incomplete, out of range, wrong types, wrong lengths, non-finite */
    const char *bad[] = {
        "{\"depth\": 2}",
        "{\"depth\": 7, \"decisions\": 1, \"have_prev\": true, \"acc_steps\": 0, "
        "\"acc\": [0,0,0,0,0,0], \"prev\": [0,0,0,0,0,0]}",
        "{\"depth\": -1, \"decisions\": 1, \"have_prev\": true, \"acc_steps\": 0, "
        "\"acc\": [0,0,0,0,0,0], \"prev\": [0,0,0,0,0,0]}",
        "{\"depth\": 1, \"decisions\": 1, \"have_prev\": 1, \"acc_steps\": 0, "
        "\"acc\": [0,0,0,0,0,0], \"prev\": [0,0,0,0,0,0]}",
        "{\"depth\": 1, \"decisions\": 1, \"have_prev\": true, \"acc_steps\": 0, "
        "\"acc\": [0,0,0,0,0], \"prev\": [0,0,0,0,0,0]}",
        "{\"depth\": 1, \"decisions\": 1, \"have_prev\": true, \"acc_steps\": 0, "
        "\"acc\": [0,0,0,0,0,null], \"prev\": [0,0,0,0,0,0]}",
        "[]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j = json_loads(bad[i], 0, NULL);
        CU_ASSERT_FATAL(j != NULL);
        CU_ASSERT_EQUAL(pt_freeze_from_json(&b, j, 1000, &err), PT_EINPUT);
        json_decref(j);
    }
    /* counts past what the step allows (an edited checkpoint: a count at
     * INT32_MAX or INT64_MAX then overflowed as the run went on) are
     * refused; at the bounds they load */
    const struct {
        long long decisions, acc, prev, step;
        int ok;
    } counts[] = {{11, 10, 10, 10, 1},          {12, 10, 10, 10, 0},
                  {1, 11, 0, 10, 0},            {1, 0, 11, 10, 0},
                  {1, 0, 0, 0, 1},              {2, 0, 0, 0, 0},
                  {2147483647LL, 0, 0, 10, 0},  {1, 9223372036854775807LL, 0, 10, 0},
                  {1, 0, 0, -1, 0}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        json_t *j = json_pack("{s:i, s:I, s:b, s:I, s:I, s:[ffffff], s:[ffffff]}", "depth", 0,
                              "decisions", (json_int_t)counts[i].decisions, "have_prev", 1,
                              "acc_steps", (json_int_t)counts[i].acc, "prev_steps",
                              (json_int_t)counts[i].prev, "acc", 0., 0., 0., 0., 0., 0., "prev", 0., 0.,
                              0., 0., 0., 0.);
        CU_ASSERT_FATAL(j != NULL);
        CU_ASSERT_EQUAL(pt_freeze_from_json(&b, j, counts[i].step, &err),
                        counts[i].ok ? 0 : PT_EINPUT);
        json_decref(j);
    }
    free(text);
    pt_freeze_free(&a);
    pt_freeze_free(&b);
}

/* A state with every block frozen (depth == blocks: max_depth's default is
 * all of them) saves and loads as any other, through text, and decides the
 * same afterwards; one past it is refused. */
static void every_block_frozen_round_trip(void)
{
    pt_freeze_config cfg = {PT_FREEZE_SCHEDULE, 0.5, 0};
    pt_freeze_state a, b;
    pt_freeze_report r;
    pt_err err;
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&a, &cfg, 6, &err), 0);
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&b, &cfg, 6, &err), 0);
    for (int t = 0; t < 3; t++) /* 3, 5, 6 */
        pt_freeze_decide(&a, &r);
    CU_ASSERT_EQUAL_FATAL(a.depth, 6);
    json_t *saved = pt_freeze_to_json(&a);
    CU_ASSERT_FATAL(saved != NULL);
    char *text = json_dumps(saved, 0);
    json_decref(saved);
    CU_ASSERT_FATAL(text != NULL);
    json_t *loaded = json_loads(text, 0, NULL);
    CU_ASSERT_FATAL(loaded != NULL);
    CU_ASSERT_EQUAL(pt_freeze_from_json(&b, loaded, 1000, &err), 0);
    CU_ASSERT_EQUAL(b.depth, 6);
    CU_ASSERT_EQUAL(b.decisions, a.decisions);
    CU_ASSERT_EQUAL(pt_freeze_decide(&a, &r), 6);
    CU_ASSERT_EQUAL(pt_freeze_decide(&b, &r), 6);
    CU_ASSERT_EQUAL(r.old_depth, 6);
    CU_ASSERT_EQUAL(json_object_set_new(loaded, "depth", json_integer(7)), 0);
    CU_ASSERT_EQUAL(pt_freeze_from_json(&b, loaded, 1000, &err), PT_EINPUT);
    json_decref(loaded);
    free(text);
    pt_freeze_free(&a);
    pt_freeze_free(&b);
}

/* A resume may change freeze.* (with a note): a lower freeze.max_depth or a
 * smaller freeze.alpha gives a bound below the depth the checkpoint holds,
 * and the frozen blocks stay frozen (their optimizer state is gone): depth
 * never shrinks, across a reload as within a run. */
static void resumed_under_lower_limits_keeps_its_depth(void)
{
    pt_freeze_config was = {PT_FREEZE_SCHEDULE, 0.5, 0};
    pt_freeze_state a;
    pt_freeze_report r;
    pt_err err;
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&a, &was, 6, &err), 0);
    pt_freeze_decide(&a, &r);
    pt_freeze_decide(&a, &r); /* 3, 5 */
    CU_ASSERT_EQUAL_FATAL(a.depth, 5);
    json_t *saved = pt_freeze_to_json(&a);
    CU_ASSERT_FATAL(saved != NULL);
    const pt_freeze_config now[] = {{PT_FREEZE_SCHEDULE, 0.1, 0}, /* bound at t = 3: 2 */
                                    {PT_FREEZE_SCHEDULE, 0.5, 2},
                                    {PT_FREEZE_AUTO, 0.1, 0},
                                    {PT_FREEZE_AUTO, 0.5, 1}};
    for (size_t i = 0; i < sizeof now / sizeof now[0]; i++) {
        pt_freeze_state b;
        CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&b, &now[i], 6, &err), 0);
        CU_ASSERT_EQUAL_FATAL(pt_freeze_from_json(&b, saved, 1000, &err), 0);
        int d[3];
        run_auto(&b, 3, settling_prefix, d, &r);
        for (int t = 0; t < 3; t++) {
            if (d[t] != 5)
                printf("\n  case %zu, decision %d after the reload: depth %d, expected 5", i, t, d[t]);
            CU_ASSERT_EQUAL(d[t], 5);
        }
        CU_ASSERT_EQUAL(r.old_depth, 5);
        pt_freeze_free(&b);
    }
    json_decref(saved);
    pt_freeze_free(&a);
}

/* A block whose gradient norm was 0 over the last interval (its parameters
 * get no gradient) has not changed: rate 0, settled, so it does not hold
 * back the blocks above it. */
static double dead_first_block(int b, int i) { return b == 0 ? 0.0 : b < 3 ? 1.0 : 4.0 / (1 + i); }

static void zero_norm_block_is_settled(void)
{
    pt_freeze_config cfg = {PT_FREEZE_AUTO, 0.5, 0};
    pt_freeze_state s;
    pt_freeze_report r;
    pt_err err;
    int d[2];
    CU_ASSERT_EQUAL_FATAL(pt_freeze_init(&s, &cfg, 6, &err), 0);
    run_auto(&s, 2, dead_first_block, d, &r);
    CU_ASSERT_EQUAL(d[1], 3);
    CU_ASSERT_EQUAL(r.candidate, 3);
    CU_ASSERT_FATAL(r.rates != NULL);
    CU_ASSERT_EQUAL(r.rates[0], 0.0);
    pt_freeze_free(&s);
}

static const pt_test tests[] = {{"schedule_tables", schedule_tables},
                                {"max_depth_caps", max_depth_caps},
                                {"auto_policy", auto_policy},
                                {"auto_policy_median", auto_policy_median},
                                {"auto_policy_unequal_intervals", auto_policy_unequal_intervals},
                                {"saved_state_decides_the_same", saved_state_decides_the_same},
                                {"every_block_frozen_round_trip", every_block_frozen_round_trip},
                                {"resumed_under_lower_limits_keeps_its_depth",
                                 resumed_under_lower_limits_keeps_its_depth},
                                {"zero_norm_block_is_settled", zero_norm_block_is_settled},
                                {NULL, NULL}};
static const pt_test_suite suites[] = {{"freeze policies", tests}, {NULL, NULL}};
