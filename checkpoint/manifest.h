/*
 * manifest.h (private to checkpoint/): a checkpoint's manifest as read.c
 * and manifest.c see it: opening it and reading its records, each checked
 * and, where the reader's run must agree, compared with it. Every function
 * returns 0 or a PT_E* code with a message naming the manifest.
 */
#ifndef PT_CHECKPOINT_MANIFEST_H
#define PT_CHECKPOINT_MANIFEST_H

#include "checkpoint/format.h"
#include "formats/formats.h"

/* An open manifest: its record file, its JSON, the directory it is in and
 * the step that directory is named for, its checkpoint id, and its "units"
 * and "files" records. */
typedef struct manifest {
    pt_recfile *f;
    json_t *j;
    const char *dir;
    const char *id;
    int64_t step;
    const json_t *units, *files;
} manifest;

/* The training state of the manifest (everything but units and arch). */
typedef struct saved_state {
    int64_t epoch, epoch_step, batch, seed, frozen;
    pt_lr_schedule lr;
} saved_state;

/* dir's manifest: its format, its own step against dir's name, its id and
 * records present, and its "units" and "files" bound to each other (every
 * unit's file a usable name that the files list, every listed file some
 * unit's: what nothing reads is no part of a checkpoint);
 * pt_manifest_close frees it (and any partly opened). */
int pt_manifest_open(manifest *m, const char *dir, pt_err *err);
/* Whether a name the manifest gives for a unit file is one we may open: a
 * plain name of a file inside the checkpoint's own directory (not empty,
 * not "." or "..", not the manifest). */
int pt_manifest_file_name_ok(const char *file);
void pt_manifest_close(manifest *m);

/* The manifest's profile (the planner's measured inputs) into *out; a
 * manifest without one (none was saved before the format carried it) gives
 * an empty profile (ranks 0). */
int pt_manifest_profile(const manifest *m, const pt_arch *arch, pt_profile *out, pt_err *err);
/* The manifest's config (YAML text, over the defaults) and architecture,
 * which that config must make (else the manifest was edited). */
int pt_manifest_config(const manifest *m, pt_config *cfg, pt_arch *arch, pt_err *err);
/* The same, but a config record that does not read (a newer pipetrain's
 * key) sets *read to 0 and gives the architecture record alone. */
int pt_manifest_config_if_read(const manifest *m, pt_config *cfg, pt_arch *arch, int *read,
                               pt_err *err);
/* The training state: epoch, position, batch, seed, frozen units, LR. */
int pt_manifest_state(const manifest *m, saved_state *st, pt_err *err);

/* The manifest's class labels (one string per class, in the classifier's
 * row order; saved for text classification): their count in *n (0 when the
 * manifest has none). Each must be a non-empty string, and there must be 1
 * to arch_classes. */
int pt_manifest_labels(const manifest *m, int arch_classes, const json_t **out, int *n,
                       pt_err *err);
/* Those labels against the data's now: the same names in the same order,
 * or bad input. A checkpoint without labels is not checked. */
int pt_manifest_check_labels(const manifest *m, const pt_arch *arch, const pt_dataset *train,
                             const char *train_file, pt_err *err);

/* One part ("train", "test", "vocab") of the "data" record: *sha256 its 64
 * hex digits and *examples its count (-1 for the vocabulary), or *sha256
 * NULL when none is recorded. Anything else is malformed. */
int pt_manifest_data(const manifest *m, const char *part, const char **sha256, int64_t *examples,
                     pt_err *err);
/* Every part of the "data" record well formed. */
int pt_manifest_check_data(const manifest *m, pt_err *err);
/* The vocabulary the checkpoint was trained with (its digest) against this
 * run's (now, in hex): another one is refused. Not checked when either is
 * not known. */
int pt_manifest_check_vocab(const manifest *m, const char *path, const char *now, pt_err *err);
/* The architecture record against the model now (training: the dropout
 * probabilities must agree too). */
int pt_manifest_check_arch(const pt_arch *now, const manifest *m, int training, const char **key,
                           pt_err *err);

#endif
