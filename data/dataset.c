/*
 * dataset.c: what every dataset kind shares: freeing it, and gathering a list
 * of examples into the host arrays of one (micro-)batch.
 *
 * Gathering is the only path from a dataset to the model, so it is where
 * augmentation is applied; each example is produced from its id alone, which
 * keeps batches identical however the ids are grouped.
 */
#include "data/data_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void pt_dataset_free(pt_dataset *ds)
{
    if (!ds)
        return;
    free(ds->images);
    free(ds->labels);
    free(ds->bytes);
    free(ds->tokens);
    if (ds->label_names)
        for (int k = 0; k < ds->classes; k++)
            free(ds->label_names[k]);
    free(ds->label_names);
    memset(ds, 0, sizeof *ds);
}

static void gather_images(const pt_dataset *ds, const int64_t *ids, int n, const pt_augment *aug,
                          uint64_t seed, int64_t epoch, float *images, int32_t *targets)
{
    size_t per = (size_t)ds->channels * (size_t)ds->height * (size_t)ds->width;
    int augment = pt_augment_active(aug);
    for (int j = 0; j < n; j++) {
        int64_t id = ids[j];
        assert(id >= 0 && id < ds->count);
        const float *src = ds->images + (size_t)id * per;
        float *dst = images + (size_t)j * per;
        if (augment)
            pt_augment_image(ds, aug, seed, epoch, id, src, dst);
        else
            memcpy(dst, src, per * sizeof *dst);
        targets[j] = ds->labels[id];
    }
}

static void gather_text(const pt_dataset *ds, const int64_t *ids, int n, int32_t *tokens,
                        int32_t *targets)
{
    size_t context = (size_t)ds->context;
    for (int j = 0; j < n; j++) {
        int64_t id = ids[j];
        assert(id >= 0 && id < ds->count);
        const uint8_t *text = ds->bytes + (size_t)id * context;
        int32_t *tok = tokens + (size_t)j * context;
        int32_t *tgt = targets + (size_t)j * context;
        for (size_t t = 0; t < context; t++) {
            tok[t] = text[t];
            tgt[t] = text[t + 1];
        }
    }
}

static void gather_textcls(const pt_dataset *ds, const int64_t *ids, int n, int32_t *tokens,
                           int32_t *targets)
{
    size_t context = (size_t)ds->context;
    for (int j = 0; j < n; j++) {
        int64_t id = ids[j];
        assert(id >= 0 && id < ds->count);
        memcpy(tokens + (size_t)j * context, ds->tokens + (size_t)id * context,
               context * sizeof *tokens);
        targets[j] = ds->labels[id];
    }
}

void pt_dataset_gather(const pt_dataset *ds, const int64_t *ids, int n, const pt_augment *aug,
                       uint64_t seed, int64_t epoch, float *images, int32_t *tokens,
                       int32_t *targets)
{
    if (ds->kind == PT_DATA_IMAGES)
        gather_images(ds, ids, n, aug, seed, epoch, images, targets);
    else if (ds->kind == PT_DATA_TEXTCLS)
        gather_textcls(ds, ids, n, tokens, targets);
    else
        gather_text(ds, ids, n, tokens, targets);
}

double pt_dataset_bytes(const pt_dataset *ds)
{
    double bytes = 0;
    if (ds->images)
        bytes += (double)ds->count * ds->channels * ds->height * ds->width * sizeof(float);
    if (ds->labels)
        bytes += (double)ds->count * sizeof(int32_t);
    if (ds->bytes)
        bytes += (double)ds->nbytes;
    if (ds->tokens)
        bytes += (double)ds->count * ds->context * sizeof(int32_t);
    for (int k = 0; ds->label_names && k < ds->classes; k++)
        bytes += (double)strlen(ds->label_names[k]) + 1 + sizeof(char *);
    return bytes;
}

static int64_t memory_limit; /* pt_data_set_memory_limit: 0 = none */

void pt_data_set_memory_limit(int64_t bytes) { memory_limit = bytes > 0 ? bytes : 0; }

int64_t pt_data_memory_limit(void) { return memory_limit; }
