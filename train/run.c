/*
 * run.c: building one rank's engine from its spec: the sampler and the
 * learning-rate schedule, the freeze state, the layout (layout.c) and the
 * initial weights; the staging of micro-batches; the world's agreement on
 * success; the check of that first layout against the start run.dir's
 * lock settles (pt_run_check_start). Freed in the reverse order by pt_run_close, which is safe on a
 * partly built run.
 */
#include "train/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pt_run_open(pt_run *r, pt_comm *comm, const pt_train_spec *spec, pt_run_mode mode, pt_err *err)
{
    memset(r, 0, sizeof *r);
    r->spec = *spec;
    r->arch = spec->arch;
    r->comm = comm;
    r->be = spec->be;
    r->rank = pt_comm_rank(comm);
    r->ranks = pt_comm_size(comm);
    int rc;
    if (mode == PT_RUN_TRAIN) {
        if ((rc = pt_sampler_init(&r->sampler, spec->train->count, spec->batch, spec->seed,
                                  spec->shuffle, err)))
            goto fail;
        int64_t per_epoch = pt_sampler_steps(&r->sampler);
        r->total_steps = per_epoch * spec->epochs;
        if (spec->max_steps > 0 && spec->max_steps < r->total_steps)
            r->total_steps = spec->max_steps;
        r->lr = (pt_lr_schedule){spec->lr_kind, spec->lr, spec->min_lr, spec->warmup, r->total_steps};
    }
    if ((rc = pt_freeze_init(&r->freeze, &spec->freeze, r->arch.layers, err))) {
        pt_err_prefix(err, "freeze");
        goto fail;
    }
    /* (every rank learns of a failure here before the layout's collectives) */
    r->reduce = calloc((size_t)pt_arch_units(&r->arch) + (size_t)r->arch.layers + 8, sizeof *r->reduce);
    rc = r->reduce ? 0 : pt_fail(err, PT_ENOMEM, "out of memory for the step's sums");
    if ((rc = pt_run_agree(r, rc, err)))
        goto fail;
    if (mode != PT_RUN_EVAL && pt_freeze_due(r, 0)) {
        /* freeze.start 0: the first decision comes before training, so a
         * fresh run makes it before its first layout, which is then laid out
         * for it alone (not for the whole model in training first, and
         * re-planned, holding both); `plan` shows that layout. Every rank
         * takes rank 0's reading of whether the run is fresh; a decision is
         * the same on every rank. */
        int fresh = spec->fresh;
        if (r->ranks > 1 && (rc = pt_bcast(pt_comm_world(comm), &fresh, sizeof fresh, 0, err)))
            goto fail;
        if (fresh) {
            pt_run_freeze_decide(r, &r->opening.report);
            r->opening.made = 1;
        }
    }
    rc = pt_layout_open(r, err);
    if (rc == 0 && r->active)
        rc = pt_segment_init_params(r->seg, err);
    /* A rank that could not build its stage (out of memory for its units,
     * say) tells the others here, which would otherwise go on to the next
     * collective and wait there for it until run.timeout_s, or mismatch. */
    if ((rc = pt_run_agree(r, rc, err)))
        goto fail;
    return 0;
fail:
    pt_run_close(r);
    return rc;
}

int pt_run_check_start(pt_run *r, int resuming, pt_err *err)
{
    if (resuming) {
        r->opening.made = 0;
        return 0;
    }
    const int want = r->opening.made ? pt_freeze_units(r->opening.report.new_depth) : 0;
    if (r->frozen_units == want)
        return 0;
    return pt_fail(err, PT_EINPUT, "changed while this job started: the checkpoint it planned its "
                   "layout for (%d of %d blocks frozen) is gone, and the job starts fresh; start it "
                   "again", r->freeze.depth, r->arch.layers);
}

void pt_run_close(pt_run *r)
{
    free(r->images);
    free(r->tokens);
    free(r->targets);
    free(r->batches);
    free(r->reduce);
    free(r->batch_ids);
    free(r->batch_first);
    pt_layout_close(r);
    pt_freeze_free(&r->freeze);
    pt_sampler_free(&r->sampler);
    memset(r, 0, sizeof *r);
}

int pt_run_stage(pt_run *r, const pt_dataset *ds, const int64_t *ids, int n, int micro, int augment)
{
    const int per_image = pt_arch_input_floats(&r->arch);
    const int rows = (int)pt_arch_rows_per_example(&r->arch), T = pt_arch_tokens(&r->arch);
    if (n > r->staged_examples) { /* stage_buffers sizes for every layout's steps */
        fprintf(stderr, "pipetrain: internal error: %d examples staged in room for %d\n", n,
                r->staged_examples);
        abort();
    }
    pt_dataset_gather(ds, ids, n, augment ? &r->spec.aug : NULL, r->spec.seed, r->epoch, r->images,
                      r->tokens, r->targets);
    memcpy(r->batch_ids, ids, (size_t)n * sizeof *ids);
    int m = micro < n ? micro : n, first = 0;
    for (int k = 0; k < m; k++) {
        int count = n / m + (k < n % m);
        pt_batch *b = &r->batches[k];
        r->batch_first[k] = first;
        b->n = count;
        b->images = ds->kind == PT_DATA_IMAGES ? r->images + (size_t)first * per_image : NULL;
        b->tokens = ds->kind == PT_DATA_TEXT || ds->kind == PT_DATA_TEXTCLS
                        ? r->tokens + (size_t)first * T
                        : NULL;
        b->targets = r->targets + (size_t)first * rows;
        /* dropout's identity of the examples: their ids in the data set and
         * the step, whatever micro-batch, replica or stage they meet */
        b->ids = r->batch_ids + first;
        b->step = r->step;
        first += count;
    }
    return m;
}

int pt_run_agree(pt_run *r, int rc, pt_err *err)
{
    return pt_group_agree(pt_comm_world(r->comm), rc, err);
}
