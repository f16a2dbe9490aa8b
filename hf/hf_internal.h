/*
 * hf_internal.h (internal to hf/): what config.c, names.c and weights.c
 * share.
 */
#ifndef PT_HF_INTERNAL_H
#define PT_HF_INTERNAL_H

#include "hf/hf.h"
#include "formats/formats.h"

#include <jansson.h>
#include <string.h>

#define NAME_MAX_LEN PT_ST_MAX_NAME

static inline int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

/* config.c: a JSON file of at most 1 MiB, read as Python's json reads it
 * (every number a real, a repeated key at its last value); errors name the
 * file. */
int pt_hf_read_json(const char *path, json_t **root, pt_err *err);

/* names.c: the Hugging Face names of parameter k of a unit (without a
 * "bert." prefix): 3 for the fused qkv (its rows split in equal thirds), 1
 * otherwise, 0 for the head (not a BERT tensor). */
int pt_hf_names(const pt_unit_info *u, int k, char names[3][NAME_MAX_LEN]);
/* Whether a file's tensor is one pipetrain's bert has no use for (pooler,
 * pre-training heads, position ids). */
int pt_hf_ignorable(const char *name);
/* Whether name is the Hugging Face name of a parameter of arch a. */
int pt_hf_known_name(const pt_arch *a, const char *name);
/* name with its LayerNorm suffix in the other spelling (gamma/beta against
 * weight/bias) into out; 0 when it has none. */
int pt_hf_other_spelling(const char *name, char *out, size_t n);

#endif
