/*
 * checkpoint.h (internal to launch/): saving and resuming runs.
 *
 * A checkpoint is a directory RUN_DIR/checkpoints/step_NNNNNNNNNN holding one
 * unit file per unit-owning rank (units-rR.bin: each unit's parameters and,
 * unless frozen, its AdamW moments, keyed by unit name) and a manifest (the
 * training state, the architecture, which file holds which unit, and the
 * config). Every file is a recfile (magic, version, CRC) written under a
 * temporary name and renamed into place; the manifest is written last, so a
 * directory without one is not a checkpoint. Units are keyed by name, not by
 * rank, so a checkpoint saved with one layout resumes with any other.
 */
#ifndef PT_LAUNCH_CHECKPOINT_H
#define PT_LAUNCH_CHECKPOINT_H

#include "launch/run.h"

/* Saves the run's current state and deletes checkpoints beyond
 * train.keep_checkpoints (and incomplete ones). */
int pt_checkpoint_save(pt_run *r, pt_err *err);

/* The newest complete checkpoint under RUN_DIR/checkpoints into out; returns
 * 0 if found, PT_EINPUT (with a message) if there is none. */
int pt_checkpoint_latest(const char *run_dir, char *out, size_t n, pt_err *err);

/* Restores parameters, moments and training state into a run whose model and
 * batch match the checkpoint's (a mismatch is an error naming the key). */
int pt_checkpoint_load(pt_run *r, const char *dir, pt_err *err);

/* Restores only the parameters (for evaluation). */
int pt_checkpoint_load_weights(pt_run *r, const char *dir, pt_err *err);

/* The config stored in a checkpoint's manifest, and its architecture. */
int pt_checkpoint_read_config(const char *dir, pt_config *cfg, pt_arch *arch, pt_err *err);

#endif
