/*
 * format.h (private to checkpoint/: save.c, the writer, read.c and
 * manifest.c, the reader, and profile.c): what both sides of the checkpoint format must agree on,
 * kept in one place so they cannot drift apart.
 */
#ifndef PT_CHECKPOINT_FORMAT_H
#define PT_CHECKPOINT_FORMAT_H

#include "checkpoint/checkpoint.h"

#include <jansson.h>

/* The recfile magics of the manifest and of unit files (8 bytes each; the
 * literal's NUL is not part of it). */
#define PT_CKPT_MANIFEST_MAGIC "PTCKMAN1"
#define PT_CKPT_UNITS_MAGIC "PTUNITS1"

/* PT_CKPT_FORMAT 2: JSON manifest binding its files by SHA-256 and checkpoint
 * id. Ids are PT_CKPT_ID_CHARS hex digits; unit file names are shorter than
 * PT_CKPT_FILE_MAX bytes. */
enum { PT_CKPT_FORMAT = 2, PT_CKPT_ID_CHARS = 32, PT_CKPT_FILE_MAX = 64 };
/* The largest step a manifest may hold: train.max_steps' own bound, far
 * past any run, and far from int64's end (a step + 1 never overflows). */
#define PT_CKPT_MAX_STEP ((int64_t)1000000000000000)

/* The largest manifest record read: the most a save writes (1024 blocks'
 * units, 4096 labels of 256 bytes even as \u escapes, the config) is a few
 * MiB; a larger one is refused before it is parsed. */
#define PT_MANIFEST_MAX_BYTES (32 << 20)

/* Values a unit moves through the host in at a time while it is saved or
 * loaded (1 MiB of float32). */
#define PT_CKPT_PIECE ((size_t)1 << 18)

/* The manifest's "arch" record: written, read (-1 when a field is missing or
 * out of range, *bad naming it ("" for the record itself) and *allowed
 * saying what it may be; the record is not checked as a model, see
 * pt_arch_check) and
 * compared field by field from one table. pt_ckpt_arch_difference names the
 * config key behind the first field that differs (in words where it is the
 * data's: "the image height of the data"), or returns NULL;
 * pt_ckpt_arch_key gives the config key of such words for config c (an
 * evaluation's images are its test split's, a training's its training
 * split's). */
json_t *pt_ckpt_arch_json(const pt_arch *a);
int pt_ckpt_arch_read(const json_t *o, pt_arch *a, const char **bad, const char **allowed);
const char *pt_ckpt_arch_difference(const pt_arch *saved, const pt_arch *now, int *was, int *is);
const char *pt_ckpt_arch_key(const char *says, const pt_config *c, int evaluating);

#endif
