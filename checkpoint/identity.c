/*
 * identity.c: what a checkpoint records of the data it was trained on, so
 * that a resume, an evaluation or an export can tell the same data from
 * other data under the same keys (a data file edited in place, another
 * vocab.txt of the same size).
 *
 * A data set's identity is the SHA-256 of what the model is fed, not of the
 * files it came from: its kind, count and shapes (little-endian int64s),
 * then its arrays as they lie in memory (labels, normalised pixels, bytes,
 * token ids: little-endian on every machine pipetrain builds for), then its
 * label names, each with its NUL. So the tokenizer, model.context and the
 * normalisation are part of it. A vocabulary's identity is the SHA-256 of
 * its tokens in id order, each followed by a newline: the file's content up
 * to line endings.
 */
#include "checkpoint/checkpoint.h"
#include "formats/formats.h"

#include <string.h>

static void add_i64(pt_sha256 *h, int64_t v)
{
    unsigned char b[8];
    pt_put_le64(b, (uint64_t)v);
    pt_sha256_add(h, b, sizeof b);
}

int pt_checkpoint_data_sha256(const pt_dataset *ds, char hex[65], pt_err *err)
{
    pt_sha256 *h = pt_sha256_begin();
    static const char tag[] = "pipetrain data 1";
    pt_sha256_add(h, tag, sizeof tag);
    const int64_t head[] = {ds->kind,  ds->count,   ds->channels, ds->height,
                            ds->width, ds->classes, ds->context,  ds->nbytes};
    for (size_t i = 0; i < sizeof head / sizeof *head; i++)
        add_i64(h, head[i]);
    const size_t n = ds->count > 0 ? (size_t)ds->count : 0;
    if (ds->labels)
        pt_sha256_add(h, ds->labels, n * sizeof *ds->labels);
    if (ds->images)
        pt_sha256_add(h, ds->images,
                      n * (size_t)ds->channels * (size_t)ds->height * (size_t)ds->width *
                          sizeof *ds->images);
    if (ds->bytes && ds->nbytes > 0)
        pt_sha256_add(h, ds->bytes, (size_t)ds->nbytes);
    if (ds->tokens)
        pt_sha256_add(h, ds->tokens, n * (size_t)ds->context * sizeof *ds->tokens);
    for (int k = 0; ds->label_names && k < ds->classes; k++)
        pt_sha256_add(h, ds->label_names[k], strlen(ds->label_names[k]) + 1);
    unsigned char d[32];
    int rc = pt_sha256_end(h, d, err);
    if (rc == 0)
        pt_hex(d, 32, hex);
    return rc;
}

int pt_checkpoint_vocab_sha256(const pt_vocab *v, char hex[65], pt_err *err)
{
    pt_sha256 *h = pt_sha256_begin();
    const int32_t n = pt_vocab_size(v);
    for (int32_t id = 0; id < n; id++) {
        const char *t = pt_vocab_token(v, id);
        pt_sha256_add(h, t, strlen(t));
        pt_sha256_add(h, "\n", 1);
    }
    unsigned char d[32];
    int rc = pt_sha256_end(h, d, err);
    if (rc == 0)
        pt_hex(d, 32, hex);
    return rc;
}
