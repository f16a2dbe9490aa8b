/*
 * segment.c: a contiguous run of units on one backend, with all of their
 * memory, and forward/backward through the run.
 *
 * Memory (all backend memory):
 *  - params: one blob, the units' parameter blobs back to back in unit order;
 *  - grads, m, v: one blob each for the active units [frozen, count) only, at
 *    the same relative offsets, so the active gradients are one contiguous
 *    range (one all-reduce) and frozen units cost no gradient or moment memory;
 *  - per slot: each active unit's saved activations, and the boundary
 *    activations between consecutive units of the segment (a prefix slot,
 *    which runs the frozen units' forwards only: their outputs alone);
 *  - one work area that every frozen unit's forward uses for what an active
 *    one saves: nothing of it is read after the forward (no backward reaches
 *    a frozen unit), so one serves every frozen unit and every slot, where
 *    a saved area per slot would hold (slots x frozen units) of it;
 *  - scratch shared by all units (one unit runs at a time) and two ping-pong
 *    buffers for activation gradients in backward.
 *
 * Dropout (BERT): a unit applies it only in a training forward (and its
 * backward) while it is active; frozen units and evaluation run in inference
 * form, so a frozen prefix gives the same activations in training, in
 * evaluation and in the activation cache.
 *
 * Invariants: 0 <= frozen <= count; a frozen unit is never passed a gradient
 * pointer; slot_n[k] is the batch size of the last forward in slot k, 0 if
 * none ran since the last backward.
 */
#include "nn/unit.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct pt_segment {
    pt_arch arch;
    pt_backend *be;
    int first, count, max_batch, slots, frozen;
    int prefix_slot; /* the last slot runs the frozen units' forwards only */
    pt_unit_info *info;
    const pt_unit_impl **impl;
    size_t *poff;      /* [count + 1] parameter offsets (elements) */
    size_t *saved_off; /* [count + 1] saved-area offsets (bytes) within a slot; a frozen unit's
                          is the next active one's (it takes none of the slot) */
    void *frozen_work; /* what the frozen units' forwards use in place of a saved area */
    size_t frozen_work_bytes;
    void *params, *grads, *m, *v;
    void **saved;      /* [slots] */
    void **bound;      /* [slots] count - 1 boundary activations each */
    const void **x_in; /* [slots] input recorded by forward */
    int *slot_n;
    int *slot_from;    /* [slots] the unit the recorded input entered */
    void *scratch;
    void *gbuf[2];
    double loss_scale;
    pt_unit_done_fn done_hook;
    void *done_ctx;
};

const pt_unit_impl *pt_unit_impl_for(const pt_arch *a, pt_unit_role role)
{
    switch (role) {
    case PT_UNIT_EMBED:
        return a->kind == PT_MODEL_VIT    ? &pt_unit_embed_vit
               : a->kind == PT_MODEL_BERT ? &pt_unit_embed_bert
                                          : &pt_unit_embed_gpt;
    case PT_UNIT_ATTN:
        return a->kind == PT_MODEL_BERT ? &pt_unit_attn_post : &pt_unit_attn;
    case PT_UNIT_MLP:
        return a->kind == PT_MODEL_BERT ? &pt_unit_mlp_post : &pt_unit_mlp;
    case PT_UNIT_HEAD:
        return a->kind == PT_MODEL_BERT ? &pt_unit_head_pooled : &pt_unit_head;
    }
    return NULL;
}

size_t pt_unit_saved_bytes(const pt_arch *a, const pt_backend *be, int unit, int n)
{
    pt_unit_info info;
    pt_unit_info_get(a, unit, &info);
    return pt_unit_impl_for(a, info.role)->saved_bytes(a, be, n);
}

size_t pt_unit_scratch_bytes(const pt_arch *a, const pt_backend *be, int unit, int n)
{
    pt_unit_info info;
    pt_unit_info_get(a, unit, &info);
    size_t bytes = pt_unit_impl_for(a, info.role)->scratch_bytes(a, be, n);
    /* and what attention allocates for itself while it runs */
    if (info.role == PT_UNIT_ATTN && be->ops->attention_work_bytes)
        bytes += be->ops->attention_work_bytes(be, n, pt_arch_tokens(a), a->heads,
                                               a->dim / a->heads, a->attn_dropout > 0);
    return bytes;
}

size_t pt_arch_linear_work_bytes(const pt_arch *a, const pt_backend *be, int n)
{
    size_t pack, parts;
    pt_arch_linear_work(a, be, n, &pack, &parts);
    return pack + parts;
}

void pt_arch_linear_work(const pt_arch *a, const pt_backend *be, int n, size_t *pack_,
                         size_t *parts_)
{
    *pack_ = *parts_ = 0;
    if (!be->ops->linear_work_bytes)
        return;
    /* no product has more rows than the micro-batch has tokens */
    const double tokens = (double)(n > 0 ? n : 1) * pt_arch_tokens(a);
    const int rows = tokens > INT_MAX ? INT_MAX : (int)tokens;
    size_t pack = 0, parts = 0;
    for (int u = 0; u < pt_arch_units(a); u++) {
        pt_unit_info info;
        pt_unit_info_get(a, u, &info);
        int dims[PT_UNIT_LINEARS][2];
        const int count = pt_unit_impl_for(a, info.role)->linears(a, dims);
        for (int k = 0; k < count; k++) {
            size_t p, q;
            be->ops->linear_work_bytes(be, rows, dims[k][0], dims[k][1], &p, &q);
            pack = p > pack ? p : pack;
            parts = q > parts ? q : parts;
        }
    }
    *pack_ = pack;
    *parts_ = parts;
}

static size_t par_bytes(const pt_segment *s, size_t n) { return n * s->be->real_size; }

size_t pt_segment_act_elems(const pt_segment *s, int n)
{
    return (size_t)n * pt_arch_tokens(&s->arch) * s->arch.dim;
}

static size_t bound_bytes(const pt_segment *s)
{
    return pt_segment_act_elems(s, s->max_batch) * s->be->act_size;
}

/* Outputs between units that slot k holds: those of every unit but the
 * last, or in a prefix slot those of the frozen units but the last. */
static int prefix_bounds(const pt_segment *s, int k)
{
    if (s->prefix_slot && k == s->slots - 1)
        return s->frozen > 1 ? s->frozen - 1 : 0;
    return s->count - 1;
}

static void *bound_at(const pt_segment *s, int slot, int i)
{
    return (char *)s->bound[slot] + (size_t)i * bound_bytes(s);
}

/* Offset of active unit i's state in the grads/m/v blobs (elements). */
static size_t active_off(const pt_segment *s, int i) { return s->poff[i] - s->poff[s->frozen]; }

static void free_training_state(pt_segment *s)
{
    pt_backend_free(s->be, s->grads);
    pt_backend_free(s->be, s->m);
    pt_backend_free(s->be, s->v);
    s->grads = s->m = s->v = NULL;
}

void pt_segment_destroy(pt_segment *s)
{
    if (!s)
        return;
    pt_backend_free(s->be, s->params);
    free_training_state(s);
    for (int k = 0; s->saved && k < s->slots; k++) {
        pt_backend_free(s->be, s->saved[k]);
        pt_backend_free(s->be, s->bound[k]);
    }
    pt_backend_free(s->be, s->scratch);
    pt_backend_free(s->be, s->frozen_work);
    pt_backend_free(s->be, s->gbuf[0]);
    pt_backend_free(s->be, s->gbuf[1]);
    free(s->info);
    free(s->impl);
    free(s->poff);
    free(s->saved_off);
    free(s->saved);
    free(s->bound);
    free(s->x_in);
    free(s->slot_n);
    free(s->slot_from);
    free(s);
}

static int alloc_training_state(pt_segment *s, pt_err *err)
{
    size_t n = s->poff[s->count] - s->poff[s->frozen];
    s->grads = pt_backend_alloc(s->be, par_bytes(s, n));
    s->m = pt_backend_alloc(s->be, par_bytes(s, n));
    s->v = pt_backend_alloc(s->be, par_bytes(s, n));
    if (!s->grads || !s->m || !s->v)
        return pt_fail(err, PT_ENOMEM, "out of memory for %zu gradient and moment elements", 3 * n);
    return 0;
}

int pt_segment_create(pt_segment **out, const pt_arch *a, pt_backend *be,
                      const pt_segment_spec *spec, pt_err *err)
{
    *out = NULL;
    int rc = pt_arch_check(a, err);
    if (rc)
        return rc;
    const int units = pt_arch_units(a);
    if (spec->first < 0 || spec->count < 1 || spec->first + spec->count > units)
        return pt_fail(err, PT_EINTERNAL, "segment [%d, %d) is outside the model's %d units",
                       spec->first, spec->first + spec->count, units);
    if (spec->max_batch < 1 || spec->slots < 1)
        return pt_fail(err, PT_EINTERNAL, "segment needs max_batch >= 1 and slots >= 1");
    /* the ops index a micro-batch's rows (examples x tokens) with an int */
    if ((int64_t)spec->max_batch * pt_arch_tokens(a) > INT_MAX)
        return pt_fail(err, PT_EINPUT, "a micro-batch of %d examples of %d tokens is %" PRId64
                       " rows of activations, more than the %d an op indexes; allowed: more "
                       "micro-batches (pipeline.microbatches) or a smaller train.batch",
                       spec->max_batch, pt_arch_tokens(a),
                       (int64_t)spec->max_batch * pt_arch_tokens(a), INT_MAX);
    if (spec->frozen < 0 || spec->frozen > spec->count)
        return pt_fail(err, PT_EINTERNAL, "segment of %d units with %d frozen", spec->count,
                       spec->frozen);
    if (a->kind == PT_MODEL_BERT && (!be->ops->mean_pool_fwd || !be->ops->mean_pool_bwd))
        return pt_fail(err, PT_EBACKEND,
                       "the %s backend does not implement BERT's padding mask and pooling yet; "
                       "use run.device cpu",
                       be->name);
    if ((a->hidden_dropout > 0 || a->attn_dropout > 0) && !be->ops->dropout)
        return pt_fail(err, PT_EBACKEND, "the %s backend does not implement dropout", be->name);

    pt_segment *s = calloc(1, sizeof *s);
    if (!s)
        return pt_fail(err, PT_ENOMEM, "out of memory creating a segment");
    s->arch = *a;
    s->be = be;
    s->first = spec->first;
    s->count = spec->count;
    s->max_batch = spec->max_batch;
    s->slots = spec->slots;
    s->frozen = spec->frozen; /* before alloc_training_state: only the active units' state */
    s->prefix_slot = spec->prefix_slot != 0;
    s->loss_scale = 1.0;
    s->info = calloc(s->count, sizeof *s->info);
    s->impl = calloc(s->count, sizeof *s->impl);
    s->poff = calloc(s->count + 1, sizeof *s->poff);
    s->saved_off = calloc(s->count + 1, sizeof *s->saved_off);
    s->saved = calloc(s->slots, sizeof *s->saved);
    s->bound = calloc(s->slots, sizeof *s->bound);
    s->x_in = calloc(s->slots, sizeof *s->x_in);
    s->slot_n = calloc(s->slots, sizeof *s->slot_n);
    s->slot_from = calloc(s->slots, sizeof *s->slot_from);
    if (!s->info || !s->impl || !s->poff || !s->saved_off || !s->saved || !s->bound || !s->x_in ||
        !s->slot_n || !s->slot_from) {
        pt_segment_destroy(s);
        return pt_fail(err, PT_ENOMEM, "out of memory creating a segment");
    }

    size_t scratch = 0;
    for (int i = 0; i < s->count; i++) {
        pt_unit_info_get(a, s->first + i, &s->info[i]);
        s->impl[i] = pt_unit_impl_for(a, s->info[i].role);
        s->poff[i + 1] = s->poff[i] + s->info[i].numel;
        const size_t saved = s->impl[i]->saved_bytes(a, be, s->max_batch);
        s->saved_off[i + 1] = s->saved_off[i] + (i < s->frozen ? 0 : saved);
        if (i < s->frozen && saved > s->frozen_work_bytes)
            s->frozen_work_bytes = saved;
        size_t w = s->impl[i]->scratch_bytes(a, be, s->max_batch);
        scratch = w > scratch ? w : scratch;
    }

    s->params = pt_backend_alloc(be, par_bytes(s, s->poff[s->count]));
    s->scratch = pt_backend_alloc(be, scratch);
    s->gbuf[0] = pt_backend_alloc(be, bound_bytes(s));
    s->gbuf[1] = pt_backend_alloc(be, bound_bytes(s));
    s->frozen_work = s->frozen_work_bytes ? pt_backend_alloc(be, s->frozen_work_bytes) : NULL;
    int ok = s->params && s->scratch && s->gbuf[0] && s->gbuf[1] &&
             (s->frozen_work || !s->frozen_work_bytes);
    for (int k = 0; ok && k < s->slots; k++) {
        const int prefix = s->prefix_slot && k == s->slots - 1;
        s->saved[k] = prefix ? NULL : pt_backend_alloc(be, s->saved_off[s->count]);
        s->bound[k] = pt_backend_alloc(be, bound_bytes(s) * (size_t)prefix_bounds(s, k));
        ok = (prefix || s->saved[k]) && s->bound[k];
    }
    if (!ok || (rc = alloc_training_state(s, err))) {
        pt_segment_destroy(s);
        return rc ? rc : pt_fail(err, PT_ENOMEM, "out of memory for a segment of %d units", spec->count);
    }
    *out = s;
    return 0;
}

int pt_segment_first(const pt_segment *s) { return s->first; }
int pt_segment_count(const pt_segment *s) { return s->count; }
const pt_arch *pt_segment_arch(const pt_segment *s) { return &s->arch; }
pt_backend *pt_segment_backend(const pt_segment *s) { return s->be; }
int pt_segment_frozen(const pt_segment *s) { return s->frozen; }
void pt_segment_set_loss_scale(pt_segment *s, double scale) { s->loss_scale = scale; }

/* ------------------------------------------------------------ parameters */

int pt_segment_init_params(pt_segment *s, pt_err *err)
{
    size_t most = 0;
    for (int i = 0; i < s->count; i++)
        most = s->info[i].numel > most ? s->info[i].numel : most;
    float *host = malloc(most * sizeof *host);
    if (!host)
        return pt_fail(err, PT_ENOMEM, "out of memory initialising parameters");
    for (int i = 0; i < s->count; i++) {
        const pt_unit_info *u = &s->info[i];
        pt_rng rng;
        pt_rng_seed(&rng, s->arch.seed, (uint64_t)(s->first + i));
        for (int k = 0; k < u->n_params; k++) {
            const pt_param_info *p = &u->params[k];
            for (size_t j = 0; j < p->numel; j++) {
                float v = 0.0f;
                if (p->init == PT_INIT_ONE)
                    v = 1.0f;
                else if (p->init == PT_INIT_NORMAL)
                    v = (float)(p->init_std * pt_rng_normal(&rng));
                host[p->offset + j] = v;
            }
        }
        s->be->ops->par_from_f32(s->be, (char *)s->params + par_bytes(s, s->poff[i]), host, u->numel);
    }
    free(host);
    return 0;
}

size_t pt_segment_unit_numel(const pt_segment *s, int unit)
{
    int i = unit - s->first;
    return (i >= 0 && i < s->count) ? s->info[i].numel : 0;
}

static const char *part_name(pt_part part)
{
    static const char *names[] = {"parameters", "gradients", "first moments", "second moments"};
    return names[part];
}

/* Backend pointer of a unit's part, or NULL with err set. */
static void *part_ptr(const pt_segment *s, int unit, pt_part part, pt_err *err)
{
    int i = unit - s->first;
    if (i < 0 || i >= s->count) {
        pt_fail(err, PT_EINTERNAL, "unit %d is not in segment [%d, %d)", unit, s->first,
                s->first + s->count);
        return NULL;
    }
    if (part == PT_PART_PARAM)
        return (char *)s->params + par_bytes(s, s->poff[i]);
    if (i < s->frozen) {
        pt_fail(err, PT_EINTERNAL, "unit %s is frozen and has no %s", s->info[i].name,
                part_name(part));
        return NULL;
    }
    void *blob = part == PT_PART_GRAD ? s->grads : part == PT_PART_M ? s->m : s->v;
    return (char *)blob + par_bytes(s, active_off(s, i));
}

void *pt_segment_unit_data(pt_segment *s, int unit, pt_part part)
{
    return part_ptr(s, unit, part, NULL);
}

/* Elements [at, at + n) of a unit's part, or a failure naming them when they
 * are not all in it. */
static void *range_ptr(const pt_segment *s, int unit, pt_part part, size_t at, size_t n,
                       pt_err *err)
{
    char *p = part_ptr(s, unit, part, err);
    if (!p)
        return NULL;
    size_t numel = s->info[unit - s->first].numel;
    if (at > numel || n > numel - at) {
        pt_fail(err, PT_EINTERNAL, "elements [%zu, +%zu) are not in unit %s's %zu", at, n,
                s->info[unit - s->first].name, numel);
        return NULL;
    }
    return p + par_bytes(s, at);
}

int pt_segment_unit_read(const pt_segment *s, int unit, pt_part part, size_t at, size_t n,
                         float *host, pt_err *err)
{
    void *p = range_ptr(s, unit, part, at, n, err);
    if (!p)
        return err ? err->code : PT_EINTERNAL;
    s->be->ops->par_to_f32(s->be, host, p, n);
    return 0;
}

int pt_segment_unit_write(pt_segment *s, int unit, pt_part part, size_t at, size_t n,
                          const float *host, pt_err *err)
{
    void *p = range_ptr(s, unit, part, at, n, err);
    if (!p)
        return err ? err->code : PT_EINTERNAL;
    s->be->ops->par_from_f32(s->be, p, host, n);
    return 0;
}

int pt_segment_unit_get(const pt_segment *s, int unit, pt_part part, float *host, pt_err *err)
{
    return pt_segment_unit_read(s, unit, part, 0, pt_segment_unit_numel(s, unit), host, err);
}

int pt_segment_unit_set(pt_segment *s, int unit, pt_part part, const float *host, pt_err *err)
{
    return pt_segment_unit_write(s, unit, part, 0, pt_segment_unit_numel(s, unit), host, err);
}

int pt_segment_freeze(pt_segment *s, int frozen, pt_err *err)
{
    if (frozen < s->frozen || frozen > s->count)
        return pt_fail(err, PT_EINTERNAL, "cannot freeze %d of %d units (already %d frozen)", frozen,
                       s->count, s->frozen);
    if (frozen == s->frozen)
        return 0;
    /* the newly frozen units' forwards move to the work area (their saved
     * areas in the slots stay, unused; the active units' keep their place) */
    size_t work = s->frozen_work_bytes;
    for (int i = s->frozen; i < frozen; i++) {
        const size_t saved = s->impl[i]->saved_bytes(&s->arch, s->be, s->max_batch);
        work = saved > work ? saved : work;
    }
    if (work > s->frozen_work_bytes) {
        void *grown = pt_backend_alloc(s->be, work);
        if (!grown)
            return pt_fail(err, PT_ENOMEM, "out of memory for the frozen units' work area");
        pt_backend_free(s->be, s->frozen_work);
        s->frozen_work = grown;
        s->frozen_work_bytes = work;
    }
    if (s->prefix_slot) { /* its outputs, of more frozen units */
        const int k = s->slots - 1, n = frozen > 1 ? frozen - 1 : 0;
        void *grown = pt_backend_alloc(s->be, bound_bytes(s) * (size_t)n);
        if (!grown)
            return pt_fail(err, PT_ENOMEM, "out of memory for the prefix slot's outputs");
        pt_backend_free(s->be, s->bound[k]);
        s->bound[k] = grown;
    }
    void *old[3] = {s->grads, s->m, s->v};
    size_t keep_from = s->poff[frozen] - s->poff[s->frozen];
    s->grads = s->m = s->v = NULL;
    int old_frozen = s->frozen;
    s->frozen = frozen;
    int rc = alloc_training_state(s, err);
    if (rc) {
        free_training_state(s);
        s->grads = old[0];
        s->m = old[1];
        s->v = old[2];
        s->frozen = old_frozen;
        return rc;
    }
    size_t bytes = par_bytes(s, s->poff[s->count] - s->poff[frozen]);
    void *now[3] = {s->grads, s->m, s->v};
    for (int k = 0; k < 3; k++) {
        s->be->ops->copy(s->be, now[k], (char *)old[k] + par_bytes(s, keep_from), bytes);
        pt_backend_free(s->be, old[k]);
    }
    return 0;
}

/* ----------------------------------------------------- forward / backward */

static pt_unit_call make_call(const pt_segment *s, int i, int slot, int n, int train)
{
    pt_unit_call c = {
        .be = s->be,
        .arch = &s->arch,
        .info = &s->info[i],
        .p = (char *)s->params + par_bytes(s, s->poff[i]),
        .g = i >= s->frozen ? (char *)s->grads + par_bytes(s, active_off(s, i)) : NULL,
        .saved = i < s->frozen ? s->frozen_work : (char *)s->saved[slot] + s->saved_off[i],
        .scratch = s->scratch,
        .n = n,
        .train = train,
        .unit = s->first + i,
        .dropout = train && i >= s->frozen,
        .loss_scale = s->loss_scale,
    };
    return c;
}

static int check_slot(const pt_segment *s, int slot, int n, pt_err *err)
{
    if (slot < 0 || slot >= s->slots)
        return pt_fail(err, PT_EINTERNAL, "slot %d out of range [0, %d)", slot, s->slots);
    if (n < 1 || n > s->max_batch)
        return pt_fail(err, PT_EINTERNAL, "micro-batch of %d examples; this segment holds 1 to %d",
                       n, s->max_batch);
    return 0;
}

int pt_segment_forward(pt_segment *s, int slot, const pt_batch *batch, const void *x_in,
                       void *y_out, int train, pt_stats *stats, pt_err *err)
{
    return pt_segment_forward_range(s, slot, 0, s->count, batch, x_in, y_out, train, stats, err);
}

int pt_segment_forward_range(pt_segment *s, int slot, int from, int to, const pt_batch *batch,
                             const void *x_in, void *y_out, int train, pt_stats *stats,
                             pt_err *err)
{
    int rc = check_slot(s, slot, batch->n, err);
    if (rc)
        return rc;
    if (from < 0 || from >= to || to > s->count)
        return pt_fail(err, PT_EINTERNAL, "forward over units [%d, %d) of a %d-unit segment", from, to,
                       s->count);
    if (s->prefix_slot && slot == s->slots - 1 && (train || to > s->frozen))
        return pt_fail(err, PT_EINTERNAL, "forward over units [%d, %d) in the prefix slot, which "
                       "runs the %d frozen units only, not for a backward", from, to, s->frozen);
    if (train && (from > s->frozen || to < s->count))
        return pt_fail(err, PT_EINTERNAL,
                       "a training forward must run every unit backward will reach (ran [%d, %d) of "
                       "%d, %d frozen)",
                       from, to, s->count, s->frozen);
    const int starts_with_embed = from == 0 && s->info[0].role == PT_UNIT_EMBED;
    const int ends_with_head = to == s->count && s->info[s->count - 1].role == PT_UNIT_HEAD;
    if (!starts_with_embed && !x_in)
        return pt_fail(err, PT_EINTERNAL, "segment starting at %s needs an input activation",
                       s->info[0].name);
    if (!ends_with_head && !y_out)
        return pt_fail(err, PT_EINTERNAL, "segment ending at %s needs an output buffer",
                       s->info[s->count - 1].name);
    s->x_in[slot] = x_in;
    s->slot_n[slot] = batch->n;
    s->slot_from[slot] = from;
    for (int i = from; i < to; i++) {
        const void *x = i == from ? x_in : bound_at(s, slot, i - 1);
        void *y = i == to - 1 ? y_out : bound_at(s, slot, i);
        pt_unit_call c = make_call(s, i, slot, batch->n, train);
        if ((rc = s->impl[i]->forward(&c, batch, x, y, stats, err)) ||
            (s->be->ops->status && (rc = s->be->ops->status(s->be, err))))
            return pt_err_prefix(err, "forward of %s", s->info[i].name);
    }
    return 0;
}

int pt_segment_backward(pt_segment *s, int slot, const pt_batch *batch, const void *dy, void *dx,
                        pt_err *err)
{
    int rc = check_slot(s, slot, batch->n, err);
    if (rc)
        return rc;
    if (s->prefix_slot && slot == s->slots - 1)
        return pt_fail(err, PT_EINTERNAL, "backward in the prefix slot, which runs the frozen "
                       "units' forwards only");
    if (s->slot_n[slot] != batch->n)
        return pt_fail(err, PT_EINTERNAL, "backward of slot %d without a matching forward", slot);
    if (s->info[s->count - 1].role != PT_UNIT_HEAD && !dy)
        return pt_fail(err, PT_EINTERNAL, "segment ending at %s needs an output gradient",
                       s->info[s->count - 1].name);
    int cur = 0;
    for (int i = s->count - 1; i >= s->frozen; i--) {
        const void *x = i == s->slot_from[slot] ? s->x_in[slot] : bound_at(s, slot, i - 1);
        const void *g_out = i == s->count - 1 ? dy : s->gbuf[cur];
        void *g_in = i == 0 ? dx : (i > s->frozen ? s->gbuf[1 - cur] : NULL);
        pt_unit_call c = make_call(s, i, slot, batch->n, 1);
        if ((rc = s->impl[i]->backward(&c, batch, x, g_out, g_in, err)) ||
            (s->be->ops->status && (rc = s->be->ops->status(s->be, err))))
            return pt_err_prefix(err, "backward of %s", s->info[i].name);
        if (s->done_hook)
            s->done_hook(s->done_ctx, s->first + i);
        cur = 1 - cur;
    }
    s->slot_n[slot] = 0;
    return 0;
}

void pt_segment_set_backward_hook(pt_segment *s, pt_unit_done_fn fn, void *ctx)
{
    s->done_hook = fn;
    s->done_ctx = ctx;
}

int pt_segment_logits(pt_segment *s, int slot, int row, float *out, pt_err *err)
{
    const int last = s->count - 1;
    if (s->info[last].role != PT_UNIT_HEAD)
        return pt_fail(err, PT_EINTERNAL, "logits asked of a segment without the head");
    if (slot < 0 || slot >= s->slots || s->slot_n[slot] < 1)
        return pt_fail(err, PT_EINTERNAL, "no forward has run in slot %d", slot);
    pt_unit_call c = make_call(s, last, slot, s->slot_n[slot], 0);
    return pt_unit_head_logits(&c, row, out, err);
}

int pt_segment_head_input(pt_segment *s, int slot, int example, float *out, pt_err *err)
{
    const int last = s->count - 1;
    if (s->info[last].role != PT_UNIT_HEAD)
        return pt_fail(err, PT_EINTERNAL, "the head's input asked of a segment without the head");
    if (slot < 0 || slot >= s->slots || s->slot_n[slot] < 1)
        return pt_fail(err, PT_EINTERNAL, "no forward has run in slot %d", slot);
    if (example < 0 || example >= s->slot_n[slot])
        return pt_fail(err, PT_EINTERNAL, "example %d of a micro-batch of %d", example,
                       s->slot_n[slot]);
    /* what forward passed the head: the recorded input when the head was the
     * first unit run, else the boundary activation before it (kept per slot) */
    const char *x = s->slot_from[slot] == last ? s->x_in[slot] : bound_at(s, slot, last - 1);
    const size_t per = pt_segment_act_elems(s, 1);
    s->be->ops->act_to_f32(s->be, out, x + (size_t)example * per * s->be->act_size, per);
    return s->be->ops->status ? s->be->ops->status(s->be, err) : 0;
}

/* -------------------------------------------------------------- optimizer */

void *pt_segment_grads(pt_segment *s, size_t *count)
{
    *count = s->poff[s->count] - s->poff[s->frozen];
    return s->grads;
}

void pt_segment_zero_grads(pt_segment *s)
{
    size_t n = s->poff[s->count] - s->poff[s->frozen];
    s->be->ops->zero(s->be, s->grads, par_bytes(s, n));
}

double pt_segment_grad_sumsq(pt_segment *s)
{
    size_t n = s->poff[s->count] - s->poff[s->frozen];
    return n ? s->be->ops->sumsq(s->be, s->grads, n) : 0.0;
}

void pt_segment_unit_grad_sumsq(pt_segment *s, double *out)
{
    for (int i = 0; i < s->count; i++)
        out[i] = i < s->frozen ? 0.0
                               : s->be->ops->sumsq(s->be, (char *)s->grads + par_bytes(s, active_off(s, i)),
                                                   s->info[i].numel);
}

void pt_segment_scale_grads(pt_segment *s, double f)
{
    size_t n = s->poff[s->count] - s->poff[s->frozen];
    if (n)
        s->be->ops->scale(s->be, s->grads, n, f);
}

int pt_segment_adamw(pt_segment *s, const pt_adamw *opt, pt_err *err)
{
    if (opt->step < 1)
        return pt_fail(err, PT_EINTERNAL, "AdamW step must count from 1, got %lld",
                       (long long)opt->step);
    pt_adamw_args args = {
        .lr = opt->lr,
        .beta1 = opt->beta1,
        .beta2 = opt->beta2,
        .eps = opt->eps,
        .bias_corr1 = 1.0 - pow(opt->beta1, (double)opt->step),
        .bias_corr2 = 1.0 - pow(opt->beta2, (double)opt->step),
        .grad_scale = opt->grad_scale,
    };
    for (int i = s->frozen; i < s->count; i++) {
        const pt_unit_info *u = &s->info[i];
        for (int k = 0; k < u->n_params; k++) {
            const pt_param_info *p = &u->params[k];
            size_t pofs = s->poff[i] + p->offset, aofs = active_off(s, i) + p->offset;
            args.weight_decay = p->decay ? opt->weight_decay : 0.0;
            s->be->ops->adamw(s->be, (char *)s->params + par_bytes(s, pofs),
                              (char *)s->grads + par_bytes(s, aofs), (char *)s->m + par_bytes(s, aofs),
                              (char *)s->v + par_bytes(s, aofs), p->numel, &args);
        }
    }
    return s->be->ops->status ? s->be->ops->status(s->be, err) : 0;
}
