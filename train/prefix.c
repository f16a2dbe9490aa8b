/*
 * prefix.c: the first stage's input when the model's frozen prefix sits in
 * front of it: the activation after the first `depth` (frozen) units, per
 * sample, from the activation cache when it has it and computed otherwise.
 *
 * For a training micro-batch: every sample whose entry is at the current
 * depth is copied from the cache; the others are grouped by the depth the
 * cache does have (0 for none) and only the missing units run, forward only,
 * in the segment's spare slot: from the raw input for a sample never cached,
 * from the shallower entry for one cached before the prefix grew (this is how
 * the cache is advanced when more blocks freeze); the results are stored at
 * the new depth, replacing the shallower entries in place. Evaluation of the
 * test split does the same under ids train count + test index (the frozen
 * prefix is the same function for both splits); text sampling and runs
 * without a cache compute the whole prefix.
 *
 * The cache holds host memory; with a device backend rows pass through host
 * staging buffers, a micro-batch's rows at a time: one download of a
 * group's results, one upload per run of consecutive hits, one upload of a
 * group's shallower entries (a copy per row, each waiting on the device,
 * cost more than recomputing a small model's prefix on a GPU). CI runs this
 * path on the CPU emulation of CUDA (tests/launch/test_emu_train.py).
 *
 * Exactness: on the CPU backend every op's forward gives a sample the same
 * bits whatever else is in the call and whatever the thread count, by
 * construction (docs/ARCHITECTURE.md, "Backends and ops"), so a cached
 * activation equals the one the prefix would compute now, in any grouping.
 */
#include "train/prefix.h"

#include "train/train.h"

#include <stdlib.h>
#include <string.h>

struct pt_prefix {
    pt_run *r;
    int slot;                      /* the segment slot reserved for prefix work */
    pt_cache *cache;               /* NULL: always compute */
    size_t row_bytes;              /* one sample's activation */
    /* staging for groups of missing samples */
    int *pick, *rest;              /* the group being computed, the samples still missing */
    int64_t *test_ids;             /* a test micro-batch's cache ids */
    int staged;                    /* backend memory is not host memory */
    char *hx, *hio;                /* staged: host rows of x, and of the in/out of a group */
    float *images;
    int32_t *tokens;
    void *in, *out;                /* backend activations [max_micro, T, d] */
};

void pt_prefix_destroy(pt_prefix *p)
{
    if (!p)
        return;
    pt_backend_free(p->r->be, p->in);
    pt_backend_free(p->r->be, p->out);
    free(p->pick);
    free(p->rest);
    free(p->test_ids);
    free(p->hx);
    free(p->hio);
    free(p->images);
    free(p->tokens);
    free(p);
}

int pt_prefix_create(pt_prefix **out, pt_run *r, int slot, pt_cache *cache, pt_err *err)
{
    *out = NULL;
    pt_prefix *p = calloc(1, sizeof *p);
    if (!p)
        return pt_fail(err, PT_ENOMEM, "out of memory for the frozen-prefix source");
    p->r = r;
    p->slot = slot;
    p->cache = cache;
    const int n = r->max_micro, T = pt_arch_tokens(&r->arch);
    p->row_bytes = pt_segment_act_elems(r->seg, 1) * pt_backend_act_size(r->be);
    p->staged = !pt_backend_is_host(r->be);
    if (p->staged) {
        p->hx = malloc((size_t)n * p->row_bytes);
        p->hio = malloc((size_t)n * p->row_bytes);
    }
    p->pick = malloc((size_t)n * sizeof *p->pick);
    p->rest = malloc((size_t)n * sizeof *p->rest);
    p->test_ids = malloc((size_t)n * sizeof *p->test_ids);
    p->images = malloc(((size_t)n * pt_arch_input_floats(&r->arch) + 1) * sizeof *p->images);
    p->tokens = malloc(((size_t)n * T + 1) * sizeof *p->tokens);
    p->in = pt_backend_alloc(r->be, (size_t)n * p->row_bytes);
    p->out = pt_backend_alloc(r->be, (size_t)n * p->row_bytes);
    if (!p->pick || !p->rest || !p->test_ids || (p->staged && (!p->hx || !p->hio)) || !p->images || !p->tokens || !p->in || !p->out) {
        pt_prefix_destroy(p);
        return pt_fail(err, PT_ENOMEM, "out of memory for the frozen-prefix source");
    }
    *out = p;
    return 0;
}

/* Row i of backend rows `dev`, or of their host staging `host` when the
 * backend's memory is not host memory: where a cache entry is read into or
 * written from. */
static char *host_row(const pt_prefix *p, void *dev, char *host, int i)
{
    return (p->staged ? host : (char *)dev) + (size_t)i * p->row_bytes;
}

/* Runs the prefix's units [from, depth) on the samples p->pick[0..k) of the
 * micro-batch (their activations at `from` in p->in when from > 0) and puts
 * the results into their rows of x, and into the cache. */
static int compute_group(pt_prefix *p, const pt_batch *b, const int64_t *ids, int k, int from,
                         int depth, void *x, pt_err *err)
{
    pt_run *r = p->r;
    const int per_image = pt_arch_input_floats(&r->arch), T = pt_arch_tokens(&r->arch);
    for (int j = 0; j < k; j++) {
        const int i = p->pick[j];
        if (b->images)
            memcpy(p->images + (size_t)j * per_image, b->images + (size_t)i * per_image,
                   (size_t)per_image * sizeof *p->images);
        if (b->tokens)
            memcpy(p->tokens + (size_t)j * T, b->tokens + (size_t)i * T, (size_t)T * sizeof *p->tokens);
    }
    /* forward only, so in inference form (no dropout): no ids wanted */
    pt_batch sub = {k, b->images ? p->images : NULL, b->tokens ? p->tokens : NULL, NULL, NULL, 0};
    int rc = pt_segment_forward_range(r->seg, p->slot, from, depth, &sub, from ? p->in : NULL, p->out,
                                      0, NULL, err);
    for (int j = 0; rc == 0 && j < k; j++) {
        const int i = p->pick[j];
        pt_backend_copy(r->be, (char *)x + (size_t)i * p->row_bytes, (const char *)p->out + (size_t)j * p->row_bytes,
                        p->row_bytes);
    }
    if (rc != 0 || !p->cache || !ids)
        return rc;
    if (p->staged) /* the group's results, in one copy */
        pt_backend_download(r->be, p->hio, p->out, (size_t)k * p->row_bytes);
    for (int j = 0; rc == 0 && j < k; j++)
        if (pt_cache_put(p->cache, ids[p->pick[j]], depth, host_row(p, p->out, p->hio, j), err) < 0)
            rc = err->code;
    return rc;
}

int pt_prefix_input(void *ctx, int mb, const pt_batch *b, int training, void *x, pt_err *err)
{
    pt_prefix *p = ctx;
    pt_run *r = p->r;
    const int depth = r->source_units, n = b->n;
    const int64_t *ids = (training || r->evaluating) && p->cache ? r->batch_ids + r->batch_first[mb]
                                                                  : NULL;
    if (!ids) { /* nothing to look up: the whole prefix for every sample */
        for (int i = 0; i < n; i++)
            p->pick[i] = i;
        r->step_computed += training ? n : 0; /* evaluation is not the epoch's work */
        return compute_group(p, b, NULL, n, 0, depth, x, err);
    }
    if (!training) { /* the test split's ids follow the training split's */
        for (int i = 0; i < n; i++)
            p->test_ids[i] = r->spec.train->count + ids[i];
        ids = p->test_ids;
    }
    /* evaluation is not the epoch's work: its hits are counted apart. A
     * hit counts only where the cache holds the whole frozen prefix: where
     * it holds less (the stages after it need units of their own), the
     * rest of the prefix runs on every example, and every example counts
     * as computed. */
    const int whole = depth >= r->frozen_units;
    int64_t *hits = training ? &r->step_hits : &r->eval_hits;
    if (!whole && training)
        r->step_computed += n;
    /* hits go straight into x; the misses wait in `todo` */
    int todo = 0, rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int got = pt_cache_get(p->cache, ids[i], depth, host_row(p, x, p->hx, i), err);
        if (got < 0)
            rc = err->code;
        else if (got) {
            *hits += whole;
            r->step_part_hits += training && !whole;
        }
        else
            p->rest[todo++] = i;
    }
    if (p->staged) /* the hits, one copy per run of consecutive rows (the misses are written below) */
        for (int i = 0, t = 0; rc == 0 && i < n;) {
            const int miss_at = t < todo ? p->rest[t] : n;
            if (i < miss_at)
                pt_backend_upload(r->be, (char *)x + (size_t)i * p->row_bytes, p->hx + (size_t)i * p->row_bytes,
                                  (size_t)(miss_at - i) * p->row_bytes);
            i = miss_at + 1;
            t++;
        }
    /* one group per depth the cache holds for them (0: nothing cached yet) */
    while (rc == 0 && todo > 0) {
        int start = pt_cache_depth(p->cache, ids[p->rest[0]]);
        start = start < depth ? start : 0;
        int k = 0, left = 0;
        for (int j = 0; j < todo; j++) {
            const int i = p->rest[j];
            int d = pt_cache_depth(p->cache, ids[i]);
            d = d < depth ? d : 0;
            int take = d == start;
            if (take && start > 0) { /* its shallower entry becomes the group's input */
                take = pt_cache_get(p->cache, ids[i], start, host_row(p, p->in, p->hio, k), err);
                if (take < 0) { /* a failed read, as on the hit path above */
                    rc = err->code;
                    break;
                }
            }
            if (take)
                p->pick[k++] = i;
            else
                p->rest[left++] = i; /* left <= j: in place */
        }
        if (rc)
            break;
        if (k == 0) { /* the entries changed under us: the first from the input */
            p->pick[k++] = p->rest[0];
            memmove(p->rest, p->rest + 1, (size_t)(--left) * sizeof *p->rest);
            start = 0;
        }
        if (p->staged && start > 0)
            pt_backend_upload(r->be, p->in, p->hio, (size_t)k * p->row_bytes);
        rc = compute_group(p, b, ids, k, start, depth, x, err);
        r->step_computed += training && whole ? k : 0;
        todo = left;
    }
    return rc;
}
