/*
 * schedule.c: pipeline schedules as data. A schedule is, for every stage, the
 * ordered list of what that stage does in one training step: forward and
 * backward of micro-batches, and the sends and receives that connect them.
 *
 * Building happens in two passes: the compute order of each stage (GPipe:
 * every forward, then every backward; 1F1B: K-1-s warm-up forwards, then
 * alternating forward and backward, then the remaining backwards), then the
 * lowering of each compute action into its receive, the action and its send.
 * A send directly followed by a receive is fused into one group (both posted,
 * the group done when both are), which is what keeps neighbouring stages in
 * 1F1B from each blocking in a send to the other.
 *
 * Validation checks the structure (every micro-batch forwarded and backwarded
 * once per stage, in dependency order, every send matched by the peer's
 * receive) and then simulates all stages under the strictest semantics, a
 * send completing only when the peer is at the matching receive; a schedule
 * that passes cannot deadlock with buffered or non-blocking transfers either.
 * Backward runs micro-batches in increasing order on every stage, so
 * gradients accumulate in the same order as in a one-stage run. Stages before
 * the first trainable one (all their units frozen) only forward: nothing is
 * sent back to them.
 */
#include "pipe/pipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *pt_action_name(pt_action_kind k)
{
    static const char *names[] = {"F", "B", "send-act", "recv-act", "send-grad", "recv-grad"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

void pt_schedule_free(pt_schedule *s)
{
    for (int i = 0; s->act && i < s->stages; i++)
        free(s->act[i]);
    free(s->act);
    free(s->len);
    memset(s, 0, sizeof *s);
}

/* Compute order of one stage: F and B actions only. */
static int compute_order(pt_sched_kind kind, int K, int M, int stage, int trainable, pt_action *out)
{
    int n = 0;
    if (kind == PT_SCHED_GPIPE || stage < trainable) {
        for (int m = 0; m < M; m++)
            out[n++] = (pt_action){PT_A_FWD, m, 0};
        for (int m = 0; m < M && stage >= trainable; m++)
            out[n++] = (pt_action){PT_A_BWD, m, 0};
        return n;
    }
    int warmup = K - 1 - stage < M ? K - 1 - stage : M;
    int f = 0, b = 0;
    for (; f < warmup; f++)
        out[n++] = (pt_action){PT_A_FWD, f, 0};
    while (f < M) {
        out[n++] = (pt_action){PT_A_FWD, f++, 0};
        out[n++] = (pt_action){PT_A_BWD, b++, 0};
    }
    while (b < M)
        out[n++] = (pt_action){PT_A_BWD, b++, 0};
    return n;
}

static int is_send(pt_action_kind k) { return k == PT_A_SEND_ACT || k == PT_A_SEND_GRAD; }
static int is_recv(pt_action_kind k) { return k == PT_A_RECV_ACT || k == PT_A_RECV_GRAD; }

int pt_schedule_build(pt_schedule *s, pt_sched_kind kind, int stages, int micro, int trainable,
                      pt_err *err)
{
    memset(s, 0, sizeof *s);
    if (stages < 1 || micro < 1 || trainable < 0 || trainable >= stages)
        return pt_fail(err, PT_EINPUT,
                       "a schedule needs at least 1 stage and 1 micro-batch and a trainable last "
                       "stage (got %d stages, %d micro-batches, first trainable %d)",
                       stages, micro, trainable);
    s->kind = kind;
    s->stages = stages;
    s->micro = micro;
    s->trainable = trainable;
    s->len = calloc((size_t)stages, sizeof *s->len);
    s->act = calloc((size_t)stages, sizeof *s->act);
    pt_action *order = malloc((size_t)2 * micro * sizeof *order);
    if (!s->len || !s->act || !order) {
        free(order);
        pt_schedule_free(s);
        return pt_fail(err, PT_ENOMEM, "out of memory building a schedule");
    }
    for (int st = 0; st < stages; st++) {
        int n = compute_order(kind, stages, micro, st, trainable, order);
        pt_action *list = malloc((size_t)3 * n * sizeof *list);
        if (!list) {
            free(order);
            pt_schedule_free(s);
            return pt_fail(err, PT_ENOMEM, "out of memory building a schedule");
        }
        int len = 0;
        for (int i = 0; i < n; i++) {
            const int m = order[i].mb;
            if (order[i].kind == PT_A_FWD) {
                if (st > 0)
                    list[len++] = (pt_action){PT_A_RECV_ACT, m, 0};
                list[len++] = order[i];
                if (st < stages - 1)
                    list[len++] = (pt_action){PT_A_SEND_ACT, m, 0};
            } else {
                if (st < stages - 1)
                    list[len++] = (pt_action){PT_A_RECV_GRAD, m, 0};
                list[len++] = order[i];
                if (st > trainable)
                    list[len++] = (pt_action){PT_A_SEND_GRAD, m, 0};
            }
        }
        /* a send followed directly by a receive: one group */
        for (int i = 0; i + 1 < len; i++)
            if (is_send(list[i].kind) && is_recv(list[i + 1].kind))
                list[i].fused = 1;
        s->act[st] = list;
        s->len[st] = len;
    }
    free(order);
    return 0;
}

/* ------------------------------------------------------------- validation */

static int peer_of(pt_action_kind k, int stage)
{
    return (k == PT_A_SEND_ACT || k == PT_A_RECV_GRAD) ? stage + 1 : stage - 1;
}

/* The action the peer must be at for a -> the matching kind. */
static pt_action_kind matching(pt_action_kind k)
{
    switch (k) {
    case PT_A_SEND_ACT:
        return PT_A_RECV_ACT;
    case PT_A_RECV_ACT:
        return PT_A_SEND_ACT;
    case PT_A_SEND_GRAD:
        return PT_A_RECV_GRAD;
    case PT_A_RECV_GRAD:
        return PT_A_SEND_GRAD;
    default:
        return k;
    }
}

static int check_structure(const pt_schedule *s, pt_err *err)
{
    const int K = s->stages, M = s->micro, ft = s->trainable;
    int *seen = calloc((size_t)6 * M, sizeof *seen);
    if (!seen)
        return pt_fail(err, PT_ENOMEM, "out of memory validating a schedule");
    int rc = 0;
    for (int st = 0; st < K && rc == 0; st++) {
        memset(seen, 0, (size_t)6 * M * sizeof *seen);
        for (int i = 0; i < s->len[st] && rc == 0; i++) {
            const pt_action a = s->act[st][i];
            if ((unsigned)a.kind > PT_A_RECV_GRAD || a.mb < 0 || a.mb >= M) {
                rc = pt_fail(err, PT_EINTERNAL, "stage %d action %d is malformed", st, i);
                break;
            }
            if (is_send(a.kind) || is_recv(a.kind)) {
                int peer = peer_of(a.kind, st);
                if (peer < 0 || peer >= K) {
                    rc = pt_fail(err, PT_EINTERNAL, "stage %d action %d (%s %d) has no peer stage %d",
                                 st, i, pt_action_name(a.kind), a.mb, peer);
                    break;
                }
            }
            if (seen[a.kind * M + a.mb]++) {
                rc = pt_fail(err, PT_EINTERNAL, "stage %d does %s of micro-batch %d twice", st,
                             pt_action_name(a.kind), a.mb);
                break;
            }
            /* dependency order inside the stage */
            const char *missing = NULL;
            if (a.kind == PT_A_FWD && st > 0 && !seen[PT_A_RECV_ACT * M + a.mb])
                missing = "its activation receive";
            if (a.kind == PT_A_BWD && !seen[PT_A_FWD * M + a.mb])
                missing = "its forward";
            if ((a.kind == PT_A_BWD || a.kind == PT_A_RECV_GRAD) && st < ft)
                missing = "any gradient (the stage is frozen)";
            if (a.kind == PT_A_BWD && st < K - 1 && !seen[PT_A_RECV_GRAD * M + a.mb])
                missing = "its gradient receive";
            if (a.kind == PT_A_SEND_ACT && !seen[PT_A_FWD * M + a.mb])
                missing = "the forward that makes it";
            if (a.kind == PT_A_SEND_GRAD && !seen[PT_A_BWD * M + a.mb])
                missing = "the backward that makes it";
            if (missing)
                rc = pt_fail(err, PT_EINTERNAL, "stage %d: %s of micro-batch %d comes before %s",
                             st, pt_action_name(a.kind), a.mb, missing);
        }
        for (int m = 0; m < M && rc == 0; m++) {
            int want[6] = {1, st >= ft, st < K - 1, st > 0, st > ft, st >= ft && st < K - 1};
            for (int k = 0; k < 6 && rc == 0; k++)
                if (seen[k * M + m] != want[k])
                    rc = pt_fail(err, PT_EINTERNAL, "stage %d does %s of micro-batch %d %d times, not %d",
                                 st, pt_action_name((pt_action_kind)k), m, seen[k * M + m], want[k]);
        }
    }
    free(seen);
    return rc;
}

/* Index one past the group that starts at i. */
static int group_end(const pt_action *list, int len, int i)
{
    while (i < len && list[i].fused)
        i++;
    return i < len ? i + 1 : len;
}

/*
 * Rendezvous simulation. Every stage has posted all operations of its current
 * group; a send and a receive complete together, and only when both are
 * posted (each in the current group of its stage). A group is done when all
 * its operations are; compute actions are done as soon as they are reached.
 */
int pt_schedule_simulate(const pt_schedule *s, int *rounds, pt_err *err)
{
    const int K = s->stages;
    int *pc = calloc((size_t)K, sizeof *pc);
    unsigned char **op_done = calloc((size_t)K, sizeof *op_done);
    int rc = pc && op_done ? 0 : pt_fail(err, PT_ENOMEM, "out of memory simulating a schedule");
    for (int st = 0; rc == 0 && st < K; st++)
        if (!(op_done[st] = calloc((size_t)s->len[st] + 1, 1)))
            rc = pt_fail(err, PT_ENOMEM, "out of memory simulating a schedule");
    int round = 0;
    for (int done = 0; rc == 0 && !done; round++) {
        int progress = 0;
        /* match posted sends with posted receives */
        for (int st = 0; st < K; st++) {
            if (pc[st] >= s->len[st])
                continue;
            const pt_action *list = s->act[st];
            int end = group_end(list, s->len[st], pc[st]);
            for (int i = pc[st]; i < end; i++) {
                if (!is_send(list[i].kind) || op_done[st][i])
                    continue;
                int peer = peer_of(list[i].kind, st);
                if (pc[peer] >= s->len[peer])
                    continue;
                int pend = group_end(s->act[peer], s->len[peer], pc[peer]);
                for (int j = pc[peer]; j < pend; j++) {
                    pt_action b = s->act[peer][j];
                    if (!op_done[peer][j] && b.kind == matching(list[i].kind) && b.mb == list[i].mb) {
                        op_done[st][i] = op_done[peer][j] = 1;
                        progress = 1;
                        break;
                    }
                }
            }
        }
        /* advance every stage whose group is complete */
        done = 1;
        for (int st = 0; st < K; st++) {
            if (pc[st] >= s->len[st])
                continue;
            const pt_action *list = s->act[st];
            int end = group_end(list, s->len[st], pc[st]), complete = 1;
            for (int i = pc[st]; i < end; i++)
                if ((is_send(list[i].kind) || is_recv(list[i].kind)) && !op_done[st][i])
                    complete = 0;
            if (complete) {
                pc[st] = end;
                progress = 1;
            }
            done &= pc[st] >= s->len[st];
        }
        if (!done && !progress) {
            char where[512];
            size_t len = 0;
            for (int st = 0; st < K && len < sizeof where; st++) {
                int at = pc[st] < s->len[st];
                const pt_action a = s->act[st][at ? pc[st] : s->len[st] - 1];
                len += (size_t)snprintf(where + len, sizeof where - len, "%s stage %d at %s %d",
                                        st ? "," : "", st, at ? pt_action_name(a.kind) : "end",
                                        at ? a.mb : -1);
            }
            rc = pt_fail(err, PT_EINTERNAL, "%s schedule for %d stages x %d micro-batches deadlocks:%s",
                         s->kind == PT_SCHED_GPIPE ? "GPipe" : "1F1B", K, s->micro, where);
        }
    }
    for (int st = 0; op_done && st < K; st++)
        free(op_done[st]);
    free(op_done);
    free(pc);
    if (rounds)
        *rounds = round;
    return rc;
}

int pt_schedule_validate(const pt_schedule *s, pt_err *err)
{
    int rc = check_structure(s, err);
    return rc ? rc : pt_schedule_simulate(s, NULL, err);
}

int pt_schedule_in_flight(const pt_schedule *s, int stage)
{
    int now = 0, peak = 0;
    for (int i = 0; i < s->len[stage]; i++) {
        if (s->act[stage][i].kind == PT_A_FWD)
            now++;
        else if (s->act[stage][i].kind == PT_A_BWD)
            now--;
        peak = now > peak ? now : peak;
    }
    return peak;
}

void pt_schedule_print(const pt_schedule *s, FILE *out)
{
    for (int st = 0; st < s->stages; st++) {
        fprintf(out, "  stage %d:", st);
        for (int i = 0; i < s->len[st]; i++) {
            const pt_action a = s->act[st][i];
            if (a.kind == PT_A_FWD || a.kind == PT_A_BWD)
                fprintf(out, " %s%d", pt_action_name(a.kind), a.mb);
        }
        fputc('\n', out);
    }
}
