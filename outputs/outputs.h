/*
 * outputs.h: the public interface of the outputs module: the checks every
 * output of `eval` and `export` passes before anything is written, and
 * those that keep `train`'s run files off its inputs. Each returns 0 or
 * PT_EINPUT with a message naming the option, the path and what it would
 * have replaced.
 */
#ifndef PT_OUTPUTS_H
#define PT_OUTPUTS_H

#include "config/config.h"
#include "nn/nn.h"

/* path, a path given on the command line, fits the checks' buffers (fewer
 * than PT_PATH_MAX bytes, as a configuration's paths): a longer one is
 * refused rather than checked cut short. */
int pt_cli_path_ok(const char *option, const char *path, pt_err *err);

/* What an output file holds: safetensors (export, eval --logits and
 * --hidden) or JSON (eval --report). */
typedef enum { PT_OUTPUT_SAFETENSORS, PT_OUTPUT_JSON } pt_output_kind;

/* Whether a file can be written at path (creates and removes the temporary
 * name a write starts with); a directory there is refused, and so is a file
 * with bytes in it that is not of the output's kind (a config or a script
 * named by mistake: only an earlier output of that kind is replaced). When
 * it can, the temporary files that a killed earlier write of path left are
 * removed (pt_output_sweep). */
int pt_output_probe(const char *option, const char *path, pt_output_kind kind, pt_err *err);
/* Removes what killed writes of path left beside it (formats.h,
 * pt_remove_dead_temporaries), with a note when there was any. */
void pt_output_sweep(const char *path);

/* path (a file, or a bert export's directory) is none of the n inputs and
 * does not lie in ckpt_dir, the checkpoint the command reads. */
int pt_output_not_input(const char *option, const char *path, const char *ckpt_dir,
                        const char *const *inputs, int n, pt_err *err);

/* path is not in (nor is) any checkpoint or run's checkpoints directory,
 * nor one of the files run_dir keeps beside them (lock, logs, profile). */
int pt_output_not_in_run(const char *option, const char *path, const char *run_dir, pt_err *err);

/* path (a directory a run keeps files in, such as cache.disk_dir) is not
 * in (nor is) any checkpoint or run's checkpoints directory, whose pruning
 * removes whole directories; option names it in the message. */
int pt_output_dir_not_in_checkpoints(const char *option, const char *path, pt_err *err);

/* run.dir (train) is neither in nor is any checkpoint, nor at or below a
 * step directory of a run's checkpoints (one a save will make), whichever
 * run's: that run's saves and pruning would take this one's lock and logs
 * (the nearest existing directory at or above it is looked at). Other
 * directories in a run's checkpoints/, which no pruning touches, are let be. */
int pt_output_run_dir_ok(const char *run_dir, pt_err *err);

/* train's inputs (the config file and every file the config names but
 * pipeline.profile) are none of the files run.dir keeps (its lock, logs and
 * profiles) and lie nowhere in run.dir's checkpoints: the run would write
 * over them or remove them. On a refusal, *key is the config key that names
 * the input (NULL: the config file itself). */
int pt_run_dir_not_over_inputs(const pt_config *cfg, const char **key, pt_err *err);

/* run.dir (train), when it exists without a run's lock file or checkpoints, holds no file
 * under the names of a run's lock, logs or profile: someone else's, which
 * the run would append to or replace (pipeline.profile's file excepted). */
int pt_run_dir_not_foreign(const pt_config *cfg, pt_err *err);

/* What train refuses of where a run's files go, from the config and what is
 * on disk, the checks above with the config key named (train before its
 * session makes run.dir; plan alike, making nothing): run.dir's where
 * run_dir is set (one process of the job: rank 0), cache.disk_dir's on every
 * process (each checks its own node's). */
int pt_output_run_placement(const pt_config *cfg, int run_dir, pt_err *err);

/* An export at out (dir: a bert export's directory, checked file by file)
 * replaces none of the inputs cfg names: model.init_from and the files
 * beside it, data.vocab, the data files (text classification, IDX images and
 * labels, data.text); nor is it data.vocab's directory. */
int pt_export_not_over_inputs(const char *out, int dir, const pt_config *cfg, pt_err *err);

/* Whether two output paths name one file (the same directory and name). */
int pt_output_same(const char *a, const char *b);

/* out = the run directory checkpoint directory ckpt lies in
 * (RUN/checkpoints/step_N), as RUN/checkpoints/step_N/../..; "" when it does
 * not fit in n bytes. */
void pt_output_run_of_checkpoint(const char *ckpt, char *out, size_t n);

#endif
