/*
 * checkpoint.h: saving and resuming runs, the run directory that holds
 * them, and the planner's measured inputs (the profile) they record.
 *
 * A checkpoint is a directory RUN_DIR/checkpoints/step_NNNNNNNNNN holding one
 * unit file per unit-owning rank (each unit's parameters and, unless frozen,
 * its AdamW moments, keyed by unit name) and a manifest (the training state,
 * the architecture, which file holds which unit with every file's size and
 * SHA-256, the config, the profile, the classes' labels and the digests of
 * the data, identity.c). Every file is a recfile (magic, version, CRC)
 * written under a temporary name and renamed into place; the manifest is
 * written last, so a directory without one is not a checkpoint. Units are
 * keyed by name, not by rank, so a checkpoint saved with one layout resumes
 * with any other.
 *
 * The run directory belongs to one training job at a time: the job holds an
 * exclusive lock on RUN_DIR/lock for its life (the kernel drops it when the
 * process dies), and only under that lock are the leftovers of crashed jobs
 * (temporary files; step directories without a manifest, at the next save)
 * removed.
 */
#ifndef PT_CHECKPOINT_CHECKPOINT_H
#define PT_CHECKPOINT_CHECKPOINT_H

#include "config/config.h"
#include "train/train.h"

#include <jansson.h>

/* One rank's side of a checkpoint: the engine it is saved from or loaded
 * into, and what that engine was built from (nothing here is owned). */
typedef struct pt_ckpt_run {
    pt_run *run;             /* layout, segment, step, freeze and optimizer state; its world */
    const pt_config *cfg;    /* written into the manifest; run.dir, train.batch, run.seed, ... */
    const pt_dataset *train; /* its label names (text classification) are recorded and checked */
    const pt_dataset *test;  /* the labels an evaluation checks */
    /* What the run is fed (identity.c), as 64 hex digits, or NULL or ""
     * when not known (synthetic data are not digested): rank 0's are what a
     * save records; a resume refuses another vocabulary and notes other
     * training or test examples under the same settings (rank 0), an
     * evaluation refuses another vocabulary (every rank) and notes other
     * test examples (rank 0). */
    const char *train_sha256, *test_sha256, *vocab_sha256;
    /* run.dir's lock, held by rank 0 of a training job (NULL elsewhere):
     * each save first checks that run.dir is still the one locked */
    struct pt_rundir_lock *lock;
} pt_ckpt_run;

/* The identity of a data set (what the model is fed: shapes, labels,
 * pixels, bytes, token ids, label names) and of a vocabulary (its tokens in
 * id order) as 64 hex digits and a NUL (identity.c). */
int pt_checkpoint_data_sha256(const pt_dataset *ds, char hex[65], pt_err *err);
int pt_checkpoint_vocab_sha256(const pt_vocab *v, char hex[65], pt_err *err);

/* Whether vocabulary `sha256` (of the file `path`, for the message) is the
 * one checkpoint dir was trained with: 0 when it is, or when the checkpoint
 * records none; PT_EINPUT saying so when it is not. */
int pt_checkpoint_check_vocab(const char *dir, const char *path, const char *sha256, pt_err *err);

/* Saves the run's current state (each unit once: replica 0 writes) and
 * deletes checkpoints beyond train.keep_checkpoints (and incomplete ones).
 * Collective over the world. */
int pt_checkpoint_save(const pt_ckpt_run *c, pt_err *err);

/* Restores parameters, moments and training state into a run whose
 * model and batch match the checkpoint's (a mismatch is an error naming the
 * key), from a checkpoint that passes pt_checkpoint_verify (rank 0 checks
 * it); the layout is re-planned for the checkpoint's frozen prefix first.
 * Collective over the world. */
int pt_checkpoint_load(const pt_ckpt_run *c, const char *dir, pt_err *err);

/* Restores only the parameters (for evaluation), from a checkpoint that
 * passes pt_checkpoint_verify (rank 0 checks it), but for a config record
 * that does not read (a newer pipetrain's key). Collective over the world. */
int pt_checkpoint_load_weights(const pt_ckpt_run *c, const char *dir, pt_err *err);
/* The same into one segment, in one process (for export), from a checkpoint
 * that passes pt_checkpoint_verify. */
int pt_checkpoint_load_segment(pt_segment *seg, const char *dir, pt_err *err);

/* The profile (the planner's measured inputs) a checkpoint's manifest
 * carries, for a run of model arch; empty (ranks 0) when it carries none.
 * Free with pt_profile_free. */
int pt_checkpoint_read_profile(const char *dir, const pt_arch *arch, pt_profile *out, pt_err *err);

/* The frozen blocks of a checkpoint's freeze state (0 to layers), for
 * planning before it is loaded; the load checks the state in full. */
int pt_checkpoint_read_depth(const char *dir, int layers, int *depth, pt_err *err);

/* The class labels a checkpoint of text classification was trained with,
 * in the classifier's row order (classes of them, the architecture's):
 * malloc'd strings in a malloc'd array, or *n = 0 and NULL when the
 * checkpoint records none (other data, or saved before labels were). */
int pt_checkpoint_read_labels(const char *dir, int classes, char ***names, int *n, pt_err *err);

/* The config stored in a checkpoint's manifest, and its architecture (the
 * one that config makes, else PT_EINPUT: the manifest was edited). A
 * text classification checkpoint's data.lowercase, data.strip_accents and
 * data.split_cjk are 0 or 1: one saved before they were keys (auto) was
 * uncased, all three 1. */
int pt_checkpoint_read_config(const char *dir, pt_config *cfg, pt_arch *arch, pt_err *err);
/* The config record alone (not checked against the architecture record). */
int pt_checkpoint_read_config_record(const char *dir, pt_config *cfg, pt_err *err);

/* The working directory of the run that saved the checkpoint (what its
 * config's relative paths are relative to) into out (n bytes), or "" when
 * the manifest predates the record. PT_EINPUT when it is not an absolute
 * path that fits. */
int pt_checkpoint_read_cwd(const char *dir, char *out, size_t n, pt_err *err);

/* Checks a checkpoint directory without a run, reading everything a resume
 * reads: the manifest (in its own step's directory, its format field), the
 * training state, the architecture (which must be a valid model, and the one
 * the config record makes), the freeze state, the config,
 * and every unit's records in the unit files it names (size, SHA-256,
 * binding to this checkpoint, record sizes); also every other file the
 * manifest lists. 0, or PT_EINPUT with the message a resume would give. */
int pt_checkpoint_verify(const char *dir, pt_err *err);

/* What a checkpoint holds, for `pipetrain inspect`: verified first (as
 * pt_checkpoint_verify), then a new JSON object in *out: checkpoint, id,
 * step, epoch, epoch_step, batch, seed, model {kind, parameters, dim,
 * layers, heads, mlp_hidden, tokens, classes}, frozen_blocks, lr {schedule,
 * peak, min, warmup_steps, total_steps, next: the rate of the next update},
 * labels (null or the class names), data {train, test, vocab: null or
 * {sha256, examples}}, started_in (null where not recorded), files, bytes;
 * and the config the run saved into *cfg. */
int pt_checkpoint_describe(const char *dir, pt_config *cfg, json_t **out, pt_err *err);

/* ---------------------------------------------- the run directory (rundir.c) */

enum { PT_CKPT_PATH = 2 * PT_PATH_MAX };

/* dir/name into out (PT_CKPT_PATH bytes); empty when it does not fit, so the
 * open that follows fails with a message instead of using a cut path. */
char *pt_path_join(char *out, const char *dir, const char *name);
/* RUN_DIR/checkpoints/step_NNNNNNNNNN */
void pt_step_dir(const char *run_dir, int64_t step, char *out, size_t n);
/* Whether name is "step_N" (N >= 0), and N. */
int pt_checkpoint_dir_step(const char *name, int64_t *step);

/* Removes the empty directories of RUN_DIR/abandoned that a move to it
 * makes first (a start killed between making one and its first move leaves
 * it); under the run's lock. */
void pt_rundir_sweep_abandoned(const char *run_dir);
/* 0, or PT_EINPUT when RUN_DIR/checkpoints cannot be read or a step
 * directory newer than every complete checkpoint cannot be looked into by
 * this user (so which checkpoint is the newest is not known; the latest
 * below refuses the same). */
int pt_checkpoint_readable(const char *run_dir, pt_err *err);
/* The newest complete checkpoint under RUN_DIR/checkpoints (a step
 * directory with a manifest that is, or links to, a regular file; a
 * damaged one is the reader's to refuse, naming the file) into out;
 * returns 0 if found, PT_EINPUT (with a message) if there is none. */
int pt_checkpoint_latest(const char *run_dir, char *out, size_t n, pt_err *err);
/* Whether dir is a complete checkpoint as pt_checkpoint_latest counts one
 * (a directory, not a link, whose manifest is a regular file). */
int pt_checkpoint_complete(const char *dir);

/* A reader's hold on checkpoint dir (eval, export): while it is held, the
 * pruning of a run training in that run.dir leaves the checkpoint alone (it
 * goes at a later save). 1 when held; 0, holding nothing, when dir has no
 * manifest (any more: pruned, or replaced by a save, before the hold), which
 * the read that follows reports. Release with pt_checkpoint_release (a
 * released or never-held hold may be released again). */
typedef struct pt_ckpt_hold {
    int fd; /* -1: none */
} pt_ckpt_hold;
int pt_checkpoint_hold(pt_ckpt_hold *h, const char *dir);
void pt_checkpoint_release(pt_ckpt_hold *h);

/* The newest step directory under RUN_DIR/checkpoints that is newer than
 * checkpoint `latest` (a path as pt_checkpoint_latest gives) and not a
 * complete checkpoint (a save that did not finish, a damaged manifest), or
 * -1: what `auto` passed over, for a note. latest NULL: any such directory. */
int64_t pt_checkpoint_passed_over(const char *run_dir, const char *latest);

/* An empty step directory RUN_DIR/checkpoints/step_N for a new save: an
 * existing one loses its manifest first (so it stops being a checkpoint
 * before anything else changes), then its files; one holding what is not a
 * file of a checkpoint (a directory, say) moves whole to
 * RUN_DIR/abandoned/step_N.XXXXXX (a note says so) rather than block every
 * later save of that step. */
int pt_rundir_prepare_step(const char *run_dir, int64_t step, pt_err *err);
/* Keeps the newest `keep` complete checkpoints; removes older ones (but
 * those a reader holds, pt_checkpoint_hold, which go at a later call) and
 * incomplete directories other than step `current`. */
void pt_rundir_prune(const char *run_dir, int keep, int64_t current);
/* A resume at step `step` leaves the history after it: the complete
 * checkpoints of RUN_DIR/checkpoints beyond it move, whole, into a new
 * RUN_DIR/abandoned/after-step_N.XXXXXX (its path into moved_to, and how many
 * into *count; 0 and "" when there are none), so that neither a later
 * `auto` resume nor pruning mixes the two histories, and nothing is lost.
 * A move that fails puts back what moved before it. */
int pt_rundir_abandon_after(const char *run_dir, int64_t step, char *moved_to, size_t n,
                            int *count, pt_err *err);
/* RUN_DIR/resuming: a start that resumes another directory's checkpoint
 * of step `step` (RUN_DIR's own checkpoints of that step and later move to
 * abandoned/ first) names it there before anything moves: the step, its
 * manifest's SHA-256 and its absolute path (one with a newline is refused,
 * PT_EINPUT). The file goes once the checkpoint is saved in RUN_DIR, and a
 * fresh start or a resume of RUN_DIR's own removes it. Until RUN_DIR holds
 * a complete checkpoint of that step or later, its newest belongs to the
 * history that start left, so an `auto` resume takes the named checkpoint
 * instead, as the interrupted start would have. A start going back to a
 * step of RUN_DIR's own names it the same way while the later ones move.
 * The moves go one at a time (a kill between two leaves some), so while
 * they are under way the file holds a third line, `moving`, and is never
 * stale; pt_rundir_resume_from writes it without that line once they are
 * done (or removes it, for RUN_DIR's own). get: 0 with the path in
 * out (n bytes) when the file names one and is not stale (a step of
 * RUN_DIR's own as RUN_DIR/checkpoints/step_N, as every rank names
 * run.dir; another directory's by its absolute path), out empty when
 * there is no file or it is stale; PT_EINPUT (with a message naming the
 * file) when it is not a regular file, does not hold what set writes, or
 * the named checkpoint is gone or holds another manifest now. */
int pt_rundir_resuming_set(const char *run_dir, const char *from, int64_t step, pt_err *err);
int pt_rundir_resuming_get(const char *run_dir, char *out, size_t n, pt_err *err);
/* The checkpoint train.resume=auto would take, looked at read only and
 * before the run's lock settles it: the one RUN_DIR/resuming names (an
 * interrupted resume of another directory's checkpoint, or a go-back),
 * else RUN_DIR's newest complete one. 1 with its path in out (n bytes), 0
 * with out empty when there is none or the files cannot be read (the
 * resume itself reports that, naming the file). */
int pt_rundir_auto_resume_peek(const char *run_dir, char *out, size_t n);
/* 0, or PT_ESYS when the file is there and could not be removed. */
int pt_rundir_resuming_clear(const char *run_dir, pt_err *err);
/* Whether `named` (a path get returned) is a step directory of RUN_DIR's
 * own: a go-back, not another directory's checkpoint. */
int pt_rundir_resuming_own(const char *run_dir, const char *named);
/* Whether `from` is a step directory in RUN_DIR/abandoned/after-step_K.*
 * (a history RUN_DIR left after its step K): 1 with K in *kept, or 0. */
int pt_rundir_abandoned_branch(const char *run_dir, const char *from, int64_t *kept);
/* Resuming checkpoint `from` of step `step` into RUN_DIR (on one rank):
 * *foreign tells whether it is another directory's. RUN_DIR's own
 * checkpoints after the history the run keeps move to abandoned/
 * (pt_rundir_abandon_after; for a foreign one, its own of that step too,
 * after RUN_DIR/resuming names `from`; for one of RUN_DIR's abandoned
 * histories, its own after the step that history left); a resume of RUN_DIR's own removes
 * RUN_DIR/resuming. A failure leaves RUN_DIR/resuming as it was. */
int pt_rundir_resume_from(const char *run_dir, const char *from, int64_t step, int *foreign,
                          char *moved_to, size_t n, int *count, pt_err *err);
/* A resume of another directory's checkpoint names it in RUN_DIR/resuming
 * at once, before anything of it is read (the step from its manifest): a
 * start killed while it loads (SIGKILL, the OOM killer, a node lost) then
 * leaves `auto` the checkpoint it was to continue, not a run.dir without
 * one, where `auto` would start afresh. Nothing when `from` is RUN_DIR's
 * own or its manifest does not open (the load says why), when RUN_DIR holds
 * a checkpoint of that step or later (the file would be passed over: until
 * the start moves them, RUN_DIR's own history stands), or when
 * RUN_DIR/resuming is there but not a regular file (the load refuses it).
 * On one rank; errors are left to pt_rundir_resume_from, which writes the
 * file again. *was keeps what the file held before: pt_rundir_resuming_undo
 * puts it back (a start refused before pt_rundir_resume_from succeeded),
 * pt_rundir_resuming_keep lets it go (that call succeeded). */
typedef struct pt_rundir_resuming_was {
    int set;      /* this start wrote the file */
    int had;      /* a file was there before: its bytes */
    void *text;
    size_t len;
} pt_rundir_resuming_was;
void pt_rundir_resuming_early(const char *run_dir, const char *from, pt_rundir_resuming_was *was);
void pt_rundir_resuming_undo(const char *run_dir, pt_rundir_resuming_was *was);
void pt_rundir_resuming_keep(pt_rundir_resuming_was *was);
/* The note for a command that reads RUN_DIR's newest (`latest`) while
 * RUN_DIR/resuming names another checkpoint, or cannot be read (for which
 * train.resume=auto refuses the run.dir): 1 with the text in out, or 0. */
int pt_rundir_resuming_note(const char *run_dir, const char *latest, char *out, size_t n);
/* For a command that reads RUN_DIR's newest while RUN_DIR holds none:
 * 1 with the checkpoint RUN_DIR/resuming names in out (as `auto` would
 * resume it) and the note saying so in said, or 0. */
int pt_rundir_resuming_instead(const char *run_dir, char *out, size_t n, char *said,
                               size_t said_n);

typedef struct pt_rundir_lock {
    int fd; /* -1: not held */
    /* RUN_DIR/checkpoints as the job first saw it (what it leads to, when it
     * is a link the user put there): saves check it is still that one */
    int ckpts_known;
    unsigned long long ckpts_dev, ckpts_ino;
    /* what taking it made or changed, for pt_rundir_lock_undo: the lock
     * file made (else its bytes before: was_len of was, -1 when they could
     * not be kept), and
     * the length of the first directory of run_dir's path it made (0: none;
     * it makes run_dir again when another start removed it meanwhile; set
     * when the lock is not taken too) */
    int created;
    size_t made;
    char *was;
    long was_len;
} pt_rundir_lock;

/* Makes run_dir and the directories above it that are missing (0755),
 * again while it goes meanwhile (a start refused beside this one removes
 * the directories it made once they are empty): *made gets the length of
 * the first directory of the path made (0: none), for pt_rmdir_made. */
int pt_rundir_make(const char *run_dir, size_t *made, pt_err *err);

/* Creates run_dir if needed and takes its lock, without waiting: PT_EINPUT
 * naming the holder when another job has it. Then removes the temporary
 * files crashed jobs left. */
int pt_rundir_lock_take(pt_rundir_lock *lock, const char *run_dir, pt_err *err);
/* A start refused while it holds the lock takes back what taking it did:
 * the lock file when it made it (removed while held: a job waiting on it
 * takes the lock of the file named lock then, as pt_rundir_lock_take
 * does), else the holder text, put back as it was. The lock stays held
 * (pt_rundir_lock_release). */
void pt_rundir_lock_undo(pt_rundir_lock *lock, const char *run_dir);
void pt_rundir_lock_release(pt_rundir_lock *lock);
/* Whether run_dir is still the directory this job locked, before a save
 * writes into it and again before it prunes: RUN_DIR/lock the file held
 * (not gone with a run.dir moved or removed, nor replaced) and
 * RUN_DIR/checkpoints the directory the job first saw there (a link the
 * user made before the job started is followed, as ever; one put in its
 * place later, or another directory, is not); PT_ESYS saying what changed
 * when not, so the job stops rather than write, or prune, where another
 * job may. The first check that finds checkpoints/ records it. 0 when
 * lock is NULL or not held. */
int pt_rundir_lock_check(pt_rundir_lock *lock, const char *run_dir, pt_err *err);
/* Whether a job holds run_dir's lock now (a training run in progress). */
int pt_rundir_in_use(const char *run_dir);
/* The first line of RUN_DIR/lock (who holds it, with a random job id), for
 * ranks to check that they see the directory rank 0 locked. */
int pt_rundir_lock_text(const char *run_dir, char *out, size_t n, pt_err *err);
/* Whether this process may create files in run_dir and in its checkpoints/
 * (when there is one), where every rank writes its units' files at each
 * save: PT_EINPUT naming the directory, the host and the reason (a node
 * that mounts the shared file system read-only) when it may not. */
int pt_rundir_check_writable(const char *run_dir, pt_err *err);

/* The run's logs run_dir holds (metrics.jsonl, metrics-rank<R>.jsonl,
 * samples-rank<R>.jsonl), noted by rank 0 once it holds the lock and before
 * any rank opens its own: a refused start takes back, under the lock, the
 * empty ones that were not there, whichever rank made them (a rank that
 * stopped answering cannot). Nothing is taken back when run_dir could not
 * be listed. */
typedef struct {
    char *names; /* NUL-terminated names, one after another */
    size_t len;
    int unknown;
} pt_rundir_logs;
void pt_rundir_logs_note(const char *run_dir, pt_rundir_logs *logs);
void pt_rundir_logs_undo(const char *run_dir, const pt_rundir_logs *logs);
void pt_rundir_logs_free(pt_rundir_logs *logs);

/* Whether base is the name of a file a run keeps in its run.dir: its lock,
 * its logs (metrics.jsonl, metrics-rank<R>.jsonl, samples-rank<R>.jsonl)
 * and its profiles (profile.json, op_profile-rank<R>.json). */
int pt_rundir_is_run_file(const char *base);

/* ------------------------------------------------ the profile (profile.c)
 *
 * The planner's measured inputs (train.h's pt_profile) as JSON. Every
 * checkpoint's manifest carries the profile its run planned from, so a
 * resume plans the same layouts; every training run writes
 * RUN_DIR/profile.json; pipeline.profile hands such a file to a new run.
 * Files are untrusted: every value is checked, and an error names the file
 * and the key. */

/* The profile as a JSON object (with the model it was measured for); NULL
 * when out of memory. */
json_t *pt_profile_json(const pt_profile *p, const pt_arch *arch);
/* Parses a profile object into *out (free with pt_profile_free). It must
 * have been measured for the model `arch`. `where` names the file in
 * errors. PT_EINPUT when anything is malformed or out of range. */
int pt_profile_parse(const json_t *o, const pt_arch *arch, const char *where, pt_profile *out,
                     pt_err *err);
/* A profile file (profile.json), read and parsed. */
int pt_profile_read(const char *path, const pt_arch *arch, pt_profile *out, pt_err *err);
/* Writes one atomically. */
int pt_profile_write(const char *path, const pt_profile *p, const pt_arch *arch, pt_err *err);

#endif
