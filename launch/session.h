/*
 * session.h (internal to launch/): one `pipetrain train`, `eval` or `plan`
 * as the command line sees it: the config, what the config chose (device,
 * threads, data), the training engine built from them (train/), and the
 * run's output (progress, metrics, checkpoints). setup.c wires the config
 * into the engine (memory.c checks what it needs of the rank's memory;
 * data.c loads the data; interop/ the initial weights);
 * loop.c is the training loop around its steps;
 * checkpoint/ saves and resumes it (pt_session_ckpt).
 */
#ifndef PT_LAUNCH_SESSION_H
#define PT_LAUNCH_SESSION_H

#define PT_VERSION "0.2.0"

#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "hf/hf.h"
#include "interop/interop.h"
#include "launch/progress.h"
#include "train/train.h"

/* Where the model's sizes come from when not the config (pt_session.sizes_given). */
enum { PT_SIZES_OF_CHECKPOINT = 1, PT_SIZES_OF_INIT = 2 };

typedef struct pt_session {
    pt_config cfg;
    pt_comm *comm;         /* the world (not owned) */
    int rank;
    pt_backend *be;
    int threads;           /* compute threads of this rank */
    char binding[256];     /* how this rank was bound to cores */
    pt_arch arch;          /* the config's model, fitted to the data (IDX image size) */
    pt_dataset train, test;
    pt_run run;            /* the engine */
    pt_progress progress;
    FILE *rank_metrics;    /* run.rank_metrics: this rank's step timings */
    FILE *sample_log;      /* run.log_samples: the sample ids of each step */
    int rank_metrics_errno; /* the first failed write to rank_metrics (then no more); 0 */
    pt_profile profile;    /* the planner's measured inputs given to the engine (ranks 0: none) */
    pt_profile profile_fallback; /* pipeline.profile's beside a resumed checkpoint's (rank 0) */
    int resume_depth;      /* frozen blocks of the checkpoint being resumed (this rank's reading) */
    int opening_depth;     /* a fresh train run's: what its first decision freezes, when that
                              comes before training (freeze.start 0) */
    int init_pending;      /* train: model.init_from's weights not loaded, a resume planned */
    int sizes_given;       /* the model's sizes are not the config's to change: 0, or
                              PT_SIZES_OF_CHECKPOINT (a resume's, an eval's, or that of
                              the resume a plan's config makes), PT_SIZES_OF_INIT
                              (model.init_from's) */
    int batch_kept;        /* train and plan of a resume: train.batch is the checkpoint's,
                              not one a refusal may suggest changing */
    int cache_on;          /* the run opens the node's activation cache: cache.enabled, and not
                              an eval (which passes each test example once: nothing to reuse) */
    int norm_auto;         /* bits 0-2: data.lowercase, strip_accents, split_cjk were auto */
    char normalized_from[PT_PATH_MAX + 64]; /* the checkpoint they came from ("": the file) */
    /* what the run is fed, as checkpoints record it ("": not known): the
     * vocabulary on every rank, the data sets on rank 0 when training */
    char train_sha256[65], test_sha256[65], vocab_sha256[65];
    pt_rundir_lock *lock; /* train's rank 0: run.dir's lock, which saves check (not owned) */
    size_t run_dir_made;  /* train's rank 0: the length of the first directory of run.dir's
                             path this session made (0: none) */
    /* train: the checkpoint this run resumed ("": a fresh start), and where
     * rank 0 moved the later checkpoints of the history it leaves ("": none),
     * for the metrics' start event */
    char resumed_from[PT_CKPT_PATH], abandoned_to[PT_CKPT_PATH];
} pt_session;

/* The session as checkpoint/ sees it: its engine, config and data. */
pt_ckpt_run pt_session_ckpt(pt_session *s);

/* train: opens this rank's logs in run.dir (RUN_DIR/metrics.jsonl on rank
 * 0, the per-rank logs the config asks for); under run.dir's lock only, so
 * that a job refused before it or for it makes none. */
int pt_session_open_logs(pt_session *s, pt_err *err);

/* Removes from this rank's logs a last line cut short by an earlier run,
 * with a note; under run.dir's lock only. */
int pt_session_cut_logs(pt_session *s, pt_err *err);

/* RUN_DIR/NAME-rankR.jsonl, this rank's file NAME ("metrics", "samples"). */
void pt_session_rank_file(const pt_session *s, const char *name, char *path, size_t n);

/* Binds cores, opens the device, loads the data, builds the engine from the
 * config (collective over the world), initialises the weights (from the seed
 * or, unless `resume` names a checkpoint, model.init_from) and, for
 * training, makes run.dir (its logs: pt_session_open_logs). Every
 * failure that is the config's fault names the key, file and line. Does not
 * resume or load a checkpoint (see pt_checkpoint_load and
 * pt_checkpoint_load_weights), but takes from checkpoint `resume` (the one a
 * resume would take, or an eval reads; NULL or "": none) the tokenizer
 * normalisation it recorded, for the data keys left at auto; and for
 * training (and a plan of that resume) plans for its frozen blocks, from its
 * profile when it applies to this world, so the resumed run makes the saved
 * run's layouts (pipeline.profile comes first). */
int pt_session_open(pt_session *s, pt_comm *comm, const pt_config *cfg, pt_run_mode mode,
                    const char *resume, pt_err *err);
/* train: when pt_session_open planned a resume (and so left model.init_from's
 * weights alone, which the checkpoint's replace) but none was settled under
 * run.dir's lock (the checkpoint went in between), checks and loads them
 * now. Collective over the world, whichever ranks have weights waiting
 * (each planned from its own reading of run.dir). */
int pt_session_load_pending_init(pt_session *s, pt_err *err);
/* A resume of checkpoint ckpt when it is not the one pt_session_open took
 * the tokenizer keys left at auto from (a checkpoint saved while the job
 * started): PT_EINPUT when it recorded other values for them. */
int pt_session_check_normalize(const pt_session *s, const char *ckpt, pt_err *err);
/* The parts of pt_session_open, file by file. */

/* setup.c: how many blocks a fresh run's first freeze decision freezes
 * before the first step (freeze.start 0) in a model of `layers` blocks; 0
 * otherwise. */
int pt_session_opening_depth(const pt_config *c, int layers);

/* data.c: the training and test sets the config names, into s->train and
 * s->test (only the test set for an evaluation: a plan checks the training
 * set as training would); their digests, which
 * checkpoints record (not for synthetic data or a plan); rank 0's digests
 * of data, vocabulary and initial weights against this rank's (collective
 * over the world). */
int pt_session_load_data(pt_session *s, pt_run_mode mode, pt_err *err);
void pt_session_digest_data(pt_session *s, pt_run_mode mode);
int pt_session_same_data(pt_session *s, pt_err *err);

/* memory.c: the memory this rank may use, the node's RAM over its ranks;
 * what it holds of the data (both splits, once loaded) and of the node's
 * activation cache. The checks pt_session_open makes before the data is
 * made, and again once it is loaded (then with the data counted), each
 * PT_EINPUT naming the key to change: the replica's share of
 * train.batch staged at once in host memory; and, where nothing plans the
 * layout (one stage with fixed micro-batches), the model's stage by the
 * planner's count (pt_plan_stage_bytes) against pipeline.memory_gib, a
 * GPU's memory or the RAM left beside the data. */
double pt_session_memory_per_rank(const pt_session *s);
double pt_session_data_bytes(const pt_session *s);
int pt_session_check_staging(pt_session *s, pt_err *err);
int pt_session_check_model_memory(pt_session *s, pt_run_mode mode, pt_err *err);

/* Writes RUN_DIR/profile.json: the measured inputs this run planned from
 * (rank 0; a run that planned nothing has no unit costs in it). */
int pt_session_write_profile(const pt_session *s, pt_err *err);
void pt_session_close(pt_session *s);

/* loop.c: trains from the engine's position to the end of the run: steps,
 * evaluation, freeze decisions (and re-plans), checkpoints, progress and
 * metrics, and a clean stop on a signal (PT_ESTOPPED after saving). */
int pt_session_train(pt_session *s, pt_err *err);
/* A GPT sample for a terminal: the prompt, then the n bytes drawn, with
 * bytes that are not UTF-8 (and controls) as \xNN and a backslash as \\
 * (pt_utf8_printable_bytes), into out (cap >= 1 bytes; 4 per byte always fit). */
void pt_session_show_sample(const char *prompt, const char *text, size_t n, char *out,
                            size_t cap);
/* op_report.c (run.profile_ops): the op timings of the `steps` recorded
 * steps, which took step_s wall seconds in all, as a table on the progress
 * stream and RUN_DIR/op_profile-rank<R>.json. */
int pt_op_report(pt_session *s, int64_t steps, double step_s, pt_err *err);
#endif
