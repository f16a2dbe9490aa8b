/*
 * names.c: the Hugging Face names of pipetrain's bert parameters. Names come
 * from nn's unit descriptions: the local part of each of our parameter names
 * decides its Hugging Face name, so nothing here lists layers; and the other
 * spellings a file may use (TensorFlow-era gamma and beta).
 */
#include "hf/hf_internal.h"

#include "formats/formats.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Hugging Face names of parameter k of a unit (without a "bert." prefix):
 * 3 for the fused qkv (its rows split in equal thirds), 1 otherwise, 0 for
 * the head (not a BERT tensor). */
int pt_hf_names(const pt_unit_info *u, int k, char names[3][NAME_MAX_LEN])
{
    const char *full = u->params[k].name, *local = full + strlen(u->name) + 1;
    const char *wb = ends_with(local, ".weight") ? "weight" : "bias";
    if (u->role == PT_UNIT_HEAD)
        return 0;
    if (u->role == PT_UNIT_EMBED) {
        const char *table = strncmp(local, "word.", 5) == 0   ? "word_embeddings"
                            : strncmp(local, "pos.", 4) == 0  ? "position_embeddings"
                            : strncmp(local, "type.", 5) == 0 ? "token_type_embeddings"
                                                              : "LayerNorm";
        snprintf(names[0], NAME_MAX_LEN, "embeddings.%s.%s", table, wb);
        return 1;
    }
    const int N = u->block;
    if (strncmp(local, "qkv.", 4) == 0) {
        const char *part[3] = {"query", "key", "value"};
        for (int i = 0; i < 3; i++)
            snprintf(names[i], NAME_MAX_LEN, "encoder.layer.%d.attention.self.%s.%s", N, part[i],
                     wb);
        return 3;
    }
    const char *where = u->role == PT_UNIT_ATTN
                            ? (strncmp(local, "proj.", 5) == 0 ? "attention.output.dense"
                                                               : "attention.output.LayerNorm")
                        : strncmp(local, "fc1.", 4) == 0 ? "intermediate.dense"
                        : strncmp(local, "fc2.", 4) == 0 ? "output.dense"
                                                         : "output.LayerNorm";
    snprintf(names[0], NAME_MAX_LEN, "encoder.layer.%d.%s.%s", N, where, wb);
    return 1;
}

/* Tensors a BERT file may hold that pipetrain's bert has no use for. */
int pt_hf_ignorable(const char *name)
{
    return strncmp(name, "pooler.", 7) == 0 || strcmp(name, "embeddings.position_ids") == 0 ||
           strncmp(name, "classifier.", 11) == 0 || strncmp(name, "cls.", 4) == 0;
}

int pt_hf_known_name(const pt_arch *a, const char *name)
{
    for (int u = 0; u < pt_arch_units(a); u++) {
        pt_unit_info info;
        pt_unit_info_get(a, u, &info);
        for (int k = 0; k < info.n_params; k++) {
            char names[3][NAME_MAX_LEN];
            int n = pt_hf_names(&info, k, names);
            for (int i = 0; i < n; i++)
                if (strcmp(names[i], name) == 0)
                    return 1;
        }
    }
    return 0;
}

/* Older BERT files (Google's TensorFlow conversions, among them
 * bert-base-uncased's model.safetensors) name LayerNorm's scale and shift
 * gamma and beta; transformers renames them to weight and bias as it
 * loads. The legacy spelling of a current name, or NULL for a name that
 * has none. */
static const char *legacy_suffix(const char *name, const char **current)
{
    static const char *const pairs[2][2] = {{".LayerNorm.weight", ".LayerNorm.gamma"},
                                            {".LayerNorm.bias", ".LayerNorm.beta"}};
    for (int i = 0; i < 2; i++) {
        if (ends_with(name, pairs[i][0])) {
            *current = pairs[i][0];
            return pairs[i][1];
        }
        if (ends_with(name, pairs[i][1])) {
            *current = pairs[i][1];
            return pairs[i][0];
        }
    }
    return NULL;
}

/* name with its LayerNorm suffix in the other spelling (see legacy_suffix)
 * into out; 0 when name has no other spelling. */
int pt_hf_other_spelling(const char *name, char *out, size_t n)
{
    const char *current, *other = legacy_suffix(name, &current);
    if (!other)
        return 0;
    int len = (int)(strlen(name) - strlen(current));
    return snprintf(out, n, "%.*s%s", len, name, other) < (int)n;
}
