/*
 * sampler.c: the order of an epoch and the share of each replica.
 *
 * An epoch is a permutation of the example ids, fixed by (seed, epoch) alone;
 * global batch s is the run perm[s*B, (s+1)*B), and replica r of D takes a
 * contiguous slice of it. Two invariants follow, and the rest of pipetrain
 * relies on them:
 *  - every rank computes the same permutation without talking to the others;
 *  - the D slices of a global batch partition it exactly, whatever D is, so a
 *    re-plan that changes D between steps loses and repeats nothing, and the
 *    loss averaged over the global batch does not depend on D.
 */
#include "data/data_internal.h"

#include <stdlib.h>
#include <string.h>

int pt_sampler_init(pt_sampler *s, int64_t count, int64_t global_batch, uint64_t seed, int shuffle,
                    pt_err *err)
{
    memset(s, 0, sizeof *s);
    if (count < 1)
        return pt_fail(err, PT_EINPUT,
                       "the global batch is %lld but the dataset has %lld examples: a sampler "
                       "needs at least one example",
                       (long long)global_batch, (long long)count);
    if (global_batch < 1 || global_batch > count)
        return pt_fail(err, PT_EINPUT,
                       "the global batch is %lld but the dataset has %lld example%s: the batch "
                       "must be in [1, %lld]",
                       (long long)global_batch, (long long)count, count == 1 ? "" : "s",
                       (long long)count);
    if (global_batch > INT32_MAX)
        return pt_fail(err, PT_EINPUT,
                       "the global batch is %lld (of %lld examples); at most %d is supported",
                       (long long)global_batch, (long long)count, INT32_MAX);
    int64_t *perm = (uint64_t)count <= SIZE_MAX / sizeof *perm
                        ? malloc((size_t)count * sizeof *perm)
                        : NULL;
    if (!perm)
        return pt_fail(err, PT_ENOMEM, "out of memory for the order of %lld examples",
                       (long long)count);
    for (int64_t i = 0; i < count; i++)
        perm[i] = i;
    s->count = count;
    s->batch = global_batch;
    s->seed = seed;
    s->shuffle = shuffle;
    s->epoch = -1;
    s->perm = perm;
    return 0;
}

void pt_sampler_free(pt_sampler *s)
{
    if (!s)
        return;
    free(s->perm);
    memset(s, 0, sizeof *s);
}

void pt_sampler_set_epoch(pt_sampler *s, int64_t epoch)
{
    /* Always from the identity, so epoch e's order does not depend on which
     * epochs were visited before (resume, re-plan). */
    for (int64_t i = 0; i < s->count; i++)
        s->perm[i] = i;
    if (s->shuffle) {
        pt_rng rng;
        pt_rng_seed(&rng, s->seed, PT_STREAM_EPOCH_ORDER + (uint64_t)epoch);
        for (int64_t i = s->count - 1; i > 0; i--) {
            int64_t j = (int64_t)pt_rng_below(&rng, (uint64_t)i + 1);
            int64_t t = s->perm[i];
            s->perm[i] = s->perm[j];
            s->perm[j] = t;
        }
    }
    s->epoch = epoch;
}

int64_t pt_sampler_steps(const pt_sampler *s) { return s->batch > 0 ? s->count / s->batch : 0; }

void pt_sampler_slice(const pt_sampler *s, int64_t step, int replica, int replicas,
                      const int64_t **ids, int *n)
{
    *ids = NULL;
    *n = 0;
    if (step < 0 || step >= pt_sampler_steps(s) || replicas < 1 || replica < 0 ||
        replica >= replicas)
        return;
    int64_t base = s->batch / replicas, extra = s->batch % replicas;
    int64_t start = replica * base + (replica < extra ? replica : extra);
    *ids = s->perm + step * s->batch + start;
    *n = (int)(base + (replica < extra ? 1 : 0));
}
