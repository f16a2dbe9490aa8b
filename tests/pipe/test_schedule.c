/*
 * test_schedule.c: every GPipe and 1F1B schedule for K <= 8 stages and
 * M <= 32 micro-batches validates (structure and rendezvous simulation), needs
 * the activation slots it should, and finishes in the number of lock-step
 * rounds the fill-drain shape implies; broken schedules are caught.
 */
#include "pipe/pipe.h"
#include "tests/common/cunit_main.h"

#include <string.h>

static void all_schedules_validate(void)
{
    int checked = 0;
    for (int kind = 0; kind < 2; kind++)
        for (int K = 1; K <= 8; K++)
            for (int M = 1; M <= 32; M++) {
                pt_schedule s;
                pt_err err = {0};
                CU_ASSERT_EQUAL_FATAL(pt_schedule_build(&s, (pt_sched_kind)kind, K, M, 0, &err), 0);
                int rc = pt_schedule_validate(&s, &err);
                if (rc)
                    printf("\n  %s K=%d M=%d: %s", kind ? "1F1B" : "GPipe", K, M, err.msg);
                CU_ASSERT_EQUAL(rc, 0);
                for (int st = 0; st < K; st++) {
                    int want = kind == PT_SCHED_GPIPE ? M : (K - st < M ? K - st : M);
                    CU_ASSERT_EQUAL(pt_schedule_in_flight(&s, st), want);
                }
                pt_schedule_free(&s);
                checked++;
            }
    printf(" [%d schedules]", checked);
}

/* Without fusing the send-receive pairs, 1F1B neighbours both block in a send
 * to each other: the simulation must see it. */
/* With the first stages frozen (forward only), every K, M and first trainable
 * stage still validates; frozen stages hold activations of no micro-batch
 * after its forward. */
static void frozen_stages_validate(void)
{
    int checked = 0;
    for (int kind = 0; kind < 2; kind++)
        for (int K = 2; K <= 8; K++)
            for (int ft = 1; ft < K; ft++)
                for (int M = 1; M <= 32; M++) {
                    pt_schedule s;
                    pt_err err = {0};
                    CU_ASSERT_EQUAL_FATAL(pt_schedule_build(&s, (pt_sched_kind)kind, K, M, ft, &err), 0);
                    int rc = pt_schedule_validate(&s, &err);
                    if (rc)
                        printf("\n  %s K=%d M=%d trainable from %d: %s", kind ? "1F1B" : "GPipe", K, M, ft, err.msg);
                    CU_ASSERT_EQUAL(rc, 0);
                    for (int st = 0; st < ft; st++)
                        for (int i = 0; i < s.len[st]; i++)
                            CU_ASSERT(s.act[st][i].kind != PT_A_BWD && s.act[st][i].kind != PT_A_RECV_GRAD);
                    pt_schedule_free(&s);
                    checked++;
                }
    pt_schedule s;
    pt_err err;
    CU_ASSERT_NOT_EQUAL(pt_schedule_build(&s, PT_SCHED_GPIPE, 3, 4, 3, &err), 0); /* nothing trainable */
    printf(" [%d schedules]", checked);
}

static void unfused_1f1b_deadlocks(void)
{
    pt_schedule s;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_schedule_build(&s, PT_SCHED_1F1B, 4, 8, 0, &err), 0);
    for (int st = 0; st < s.stages; st++)
        for (int i = 0; i < s.len[st]; i++)
            s.act[st][i].fused = 0;
    CU_ASSERT_NOT_EQUAL(pt_schedule_simulate(&s, NULL, &err), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "deadlock"));
    pt_schedule_free(&s);
}

static void broken_structure_is_caught(void)
{
    pt_schedule s;
    pt_err err = {0};
    /* backward before forward */
    CU_ASSERT_EQUAL_FATAL(pt_schedule_build(&s, PT_SCHED_GPIPE, 2, 2, 0, &err), 0);
    pt_action *l = s.act[1];
    for (int i = 0; i < s.len[1]; i++)
        if (l[i].kind == PT_A_BWD && l[i].mb == 0) {
            pt_action t = l[i];
            l[i] = l[1]; /* l[1] is F0 (after recv-act 0) */
            l[1] = t;
            break;
        }
    CU_ASSERT_NOT_EQUAL(pt_schedule_validate(&s, &err), 0);
    pt_schedule_free(&s);
    /* a micro-batch forwarded twice */
    CU_ASSERT_EQUAL_FATAL(pt_schedule_build(&s, PT_SCHED_1F1B, 3, 4, 0, &err), 0);
    for (int i = 0; i < s.len[0]; i++)
        if (s.act[0][i].kind == PT_A_FWD && s.act[0][i].mb == 1)
            s.act[0][i].mb = 0;
    CU_ASSERT_NOT_EQUAL(pt_schedule_validate(&s, &err), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "twice"));
    pt_schedule_free(&s);
    /* a receive nobody sends: stage 1 waits for a gradient of a micro-batch 2 stages up never sends */
    CU_ASSERT_EQUAL_FATAL(pt_schedule_build(&s, PT_SCHED_GPIPE, 3, 2, 0, &err), 0);
    for (int i = 0; i < s.len[2]; i++)
        if (s.act[2][i].kind == PT_A_SEND_GRAD && s.act[2][i].mb == 1)
            s.act[2][i].mb = 0;
    CU_ASSERT_NOT_EQUAL(pt_schedule_validate(&s, &err), 0);
    pt_schedule_free(&s);
}

/* GPipe on K stages, M micro-batches: forwards fill in M + K - 1 steps and
 * backwards drain in as many; with one round per transfer hop the lock-step
 * simulation's length grows with M + K, never with M * K. */
static void fill_drain_length(void)
{
    for (int K = 2; K <= 6; K++)
        for (int M = 1; M <= 16; M *= 2) {
            pt_schedule s;
            pt_err err = {0};
            int rounds;
            CU_ASSERT_EQUAL_FATAL(pt_schedule_build(&s, PT_SCHED_GPIPE, K, M, 0, &err), 0);
            CU_ASSERT_EQUAL(pt_schedule_simulate(&s, &rounds, &err), 0);
            CU_ASSERT(rounds <= 8 * (M + K));
            pt_schedule_free(&s);
        }
}

static void one_f_one_b_order(void)
{
    pt_schedule s;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_schedule_build(&s, PT_SCHED_1F1B, 4, 6, 0, &err), 0);
    /* stage 1: 2 warm-up forwards, then F B alternating, then the remaining backwards */
    const char *want = "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5";
    char got[128] = "";
    for (int i = 0; i < s.len[1]; i++) {
        pt_action a = s.act[1][i];
        if (a.kind == PT_A_FWD || a.kind == PT_A_BWD) {
            char t[8];
            snprintf(t, sizeof t, "%s%s%d", *got ? " " : "", pt_action_name(a.kind), a.mb);
            strcat(got, t);
        }
    }
    CU_ASSERT_STRING_EQUAL(got, want);
    pt_schedule_free(&s);
    CU_ASSERT_NOT_EQUAL(pt_schedule_build(&s, PT_SCHED_1F1B, 0, 4, 0, &err), 0);
}

static const pt_test tests[] = {{"all_schedules_validate", all_schedules_validate},
                                {"frozen_stages_validate", frozen_stages_validate},
                                {"unfused_1f1b_deadlocks", unfused_1f1b_deadlocks},
                                {"broken_structure_is_caught", broken_structure_is_caught},
                                {"fill_drain_length", fill_drain_length},
                                {"one_f_one_b_order", one_f_one_b_order},
                                {NULL, NULL}};
static const pt_test_suite suites[] = {{"schedules", tests}, {NULL, NULL}};
