/*
 * test_reduce.c (run under mpirun with 4 ranks): the gradient all-reduce of
 * dp/reduce.c. For groups of D = 2, 3 and 4 replicas, segments with and
 * without a frozen prefix, bucket sizes from one unit per bucket to one
 * bucket for everything, with and without overlap (units reported done one
 * by one, last first, with progress calls between, as backward does): every
 * replica must end with exactly the float sum of the D inputs added in
 * replica order (each rank recomputes every replica's input from the seed),
 * so all replicas hold the same bits; frozen units' gradients do not exist
 * and are not touched. Then a reduction that keeps moving but lasts longer
 * than the group's timeout (one replica reports its units 0.3 s apart, the
 * timeout 0.9 s): the limit is on a wait without progress, so it must
 * finish, not be taken for a dead replica. Exit status: the number of
 * failed checks.
 */
#include "dp/dp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static float input(int replica, int unit, size_t i)
{
    pt_rng rng;
    pt_rng_seed(&rng, 77 + (uint64_t)replica, (uint64_t)unit * 1000003 + i);
    /* values of very different sizes, so the order of the additions shows */
    double v = pt_rng_normal(&rng) * (i % 7 == 0 ? 1e4 : 1e-3);
    return (float)v;
}

/* delay: seconds replica 1 waits before reporting each unit done (0: none),
 * with the group's timeout at 3 times that */
static void run_case(pt_comm *comm, pt_backend *be, int D, int frozen, size_t bucket, int overlap,
                     double delay)
{
    const int rank = pt_comm_rank(comm), size = pt_comm_size(comm);
    const int color = rank / D < size / D ? rank / D : -1;
    pt_group *g = NULL;
    pt_err err;
    if (pt_group_split(comm, color, rank, &g, &err)) {
        CHECK(0, "split: %s", err.msg);
        return;
    }
    if (!g)
        return;
    const int me = pt_group_rank(g);
    if (delay > 0)
        pt_group_set_timeout(g, 3 * delay);
    pt_arch a = {.kind = PT_MODEL_GPT, .dim = 12, .layers = 3, .heads = 3, .mlp_hidden = 20, .causal = 1,
                 .vocab = 256, .context = 5, .init_std = 0.02, .seed = 1};
    pt_segment *seg;
    pt_segment_spec spec = {1, 6, 2, 1, 0, 0}; /* blocks 0..2: units 1..6 */
    if (pt_segment_create(&seg, &a, be, &spec, &err) || pt_segment_freeze(seg, frozen, &err)) {
        CHECK(0, "segment: %s", err.msg);
        pt_group_free(g);
        return;
    }
    for (int step = 0; step < 2; step++) {
        for (int u = 1 + frozen; u < 7; u++) {
            float *gr = pt_segment_unit_data(seg, u, PT_PART_GRAD);
            for (size_t i = 0; i < pt_segment_unit_numel(seg, u); i++)
                gr[i] = input(me + step, u, i);
        }
        pt_reducer *r;
        if (pt_reducer_create(&r, g, seg, bucket, overlap, &err)) {
            CHECK(0, "create: %s", err.msg);
            break;
        }
        pt_reducer_begin(r);
        for (int u = 6; u > frozen; u--) {
            if (delay > 0 && me == 1)
                nanosleep(&(struct timespec){0, (long)(delay * 1e9)}, NULL);
            pt_reducer_unit_done(r, u);
            pt_reducer_progress(r);
        }
        pt_reducer_stats st;
        if (pt_reducer_finish(r, &st, &err))
            CHECK(0, "finish: %s", err.msg);
        size_t n_all = 0;
        for (int u = 1 + frozen; u < 7; u++) {
            const float *gr = pt_segment_unit_data(seg, u, PT_PART_GRAD);
            const size_t n = pt_segment_unit_numel(seg, u);
            n_all += n;
            int bad = 0;
            for (size_t i = 0; i < n; i++) {
                float acc = input(0 + step, u, i);
                for (int k = 1; k < D; k++)
                    acc += input(k + step, u, i);
                bad += memcmp(&acc, &gr[i], sizeof acc) != 0;
            }
            CHECK(!bad, "D=%d frozen=%d bucket=%zu overlap=%d step %d: unit %d has %d elements "
                  "that are not the ordered sum", D, frozen, bucket, overlap, step, u, bad);
        }
        CHECK(st.bytes >= (uint64_t)(2 * n_all * sizeof(float) * (D - 1) / D) - 16 * sizeof(float),
              "D=%d: %llu bytes reported for %zu gradients", D, (unsigned long long)st.bytes, n_all);
        for (int u = 1; u < 1 + frozen; u++)
            CHECK(pt_segment_unit_data(seg, u, PT_PART_GRAD) == NULL, "frozen unit %d has a gradient", u);
        pt_reducer_destroy(r);
    }
    pt_segment_destroy(seg);
    pt_group_free(g);
}

int main(int argc, char **argv)
{
    pt_comm *comm;
    pt_err err;
    if (pt_comm_open(&comm, &argc, &argv, 600, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    pt_backend *be;
    if (pt_backend_open(&be, "cpu", 1, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int cases = 0;
    for (int D = 2; D <= pt_comm_size(comm) && D <= 4; D++)
        for (int frozen = 0; frozen <= 3; frozen += 3)
            for (int b = 0; b < 3; b++)
                for (int overlap = 0; overlap < 2; overlap++) {
                    const size_t bucket = b == 0 ? 1 : b == 1 ? 4096 : (size_t)1 << 30;
                    run_case(comm, be, D, frozen, bucket, overlap, 0);
                    cases++;
                }
    /* slow but moving: 6 buckets, 1.8 s in all, a timeout of 0.9 s */
    run_case(comm, be, 2, 0, 1, 1, 0.3);
    cases++;
    int64_t total = failures;
    pt_allreduce_sum(pt_comm_world(comm), &total, 1, PT_DT_I64, &err);
    if (pt_comm_rank(comm) == 0)
        printf("%d cases on %d ranks: %lld failed checks\n", cases, pt_comm_size(comm), (long long)total);
    pt_backend_close(be);
    pt_comm_close(comm, 0);
    return total ? 1 : 0;
}
