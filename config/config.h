/*
 * config.h: the run configuration, read from YAML and `--set key=value`
 * overrides, validated, and written back (the public header of config/).
 *
 * Every key is one row of a schema table (schema.c): its type, range or
 * allowed words, default and one line of documentation. Parsing, range
 * checks, error messages and `pipetrain keys` (the README's key table) all
 * come from that table, so they cannot disagree.
 */
#ifndef PT_CONFIG_CONFIG_H
#define PT_CONFIG_CONFIG_H

#include "nn/nn.h"

#include <stdint.h>
#include <stdio.h>

#define PT_PATH_MAX 1024
#define PT_AUTO (-1) /* integer keys that accept the word `auto` store this */

enum { PT_DATA_FASHION_MNIST, PT_DATA_IDX, PT_DATA_TEXT_FILE, PT_DATA_KJV, PT_DATA_SYNTH_IMAGES,
       PT_DATA_SYNTH_TEXT, PT_DATA_TEXT_CLASSIFICATION };
enum { PT_PIPE_GPIPE, PT_PIPE_1F1B };
enum { PT_DEVICE_AUTO, PT_DEVICE_CPU, PT_DEVICE_CUDA };
enum { PT_FREEZE_EVERY_EPOCH, PT_FREEZE_EVERY_STEP };
enum { PT_PRECISION_FP32, PT_PRECISION_BF16 };

typedef struct pt_config {
    char source[PT_PATH_MAX]; /* the YAML file it came from */
    /* nonzero when that file held no settings: empty, only comments, or a
     * pipe read before its writer came (pt_config_has_settings) */
    int empty_source;
    /* nonzero when loading it failed on a key, or a value of a key's list
     * of words, that this pipetrain does not know (a newer one's), not on
     * YAML it could not read */
    int unknown_names;

    struct {
        char dir[PT_PATH_MAX];
        long long seed;
        int threads;
        int device; /* PT_DEVICE_* */
        int precision; /* PT_PRECISION_* */
        int metrics;
        int rank_metrics;
        double timeout_s;
        long long check_replicas;
        int log_samples;
        int profile_ops;
    } run;

    struct {
        int kind; /* pt_model_kind */
        int dim, layers, heads, mlp_hidden, patch, classes, context;
        int vocab, positions, type_vocab; /* bert */
        double ln_eps;
        double hidden_dropout, attn_dropout; /* PT_AUTO: see interop/init_from.c */
        double init_std;
        char init_from[PT_PATH_MAX];
    } model;

    struct {
        int kind; /* PT_DATA_* */
        char train_images[PT_PATH_MAX], train_labels[PT_PATH_MAX];
        char test_images[PT_PATH_MAX], test_labels[PT_PATH_MAX];
        char text[PT_PATH_MAX];
        char train_file[PT_PATH_MAX], test_file[PT_PATH_MAX]; /* text classification */
        char vocab[PT_PATH_MAX];
        int lowercase, strip_accents, split_cjk; /* PT_AUTO, 0 or 1: see launch/data.c */
        double test_fraction;
        double mean, std;
        int shuffle;
        int hflip, crop_pad;
        long long synthetic_examples;
        int image_size;
    } data;

    struct {
        long long batch;
        int epochs;
        long long max_steps;
        double lr, min_lr;
        int schedule; /* pt_lr_kind */
        long long warmup_steps;
        double weight_decay, beta1, beta2, eps, grad_clip;
        long long log_every;
        int eval_every;       /* epochs */
        long long eval_every_steps; /* 0: by epochs only */
        long long eval_examples;
        long long checkpoint_every;
        int keep_checkpoints;
        char resume[PT_PATH_MAX];
    } train;

    struct {
        int length;
        double temperature;
        int top_k;
        char prompt[256];
    } sample;

    struct {
        int stages;       /* PT_AUTO or K */
        int replicas;     /* PT_AUTO or D */
        int microbatches; /* PT_AUTO or M */
        int schedule;     /* PT_PIPE_* */
        int recompute;
        double memory_gib; /* per device; 0 = what the device has */
        int cores;         /* per node, for the planner; 0 = hwloc's count */
        int elastic;
        int overlap;
        double bucket_mib;
        char profile[PT_PATH_MAX]; /* the planner's measured inputs from this file; "" = measure */
    } pipeline;

    struct {
        int policy;        /* pt_freeze_kind */
        double alpha;
        int every;         /* decisions every this many epochs or steps */
        int unit;          /* PT_FREEZE_EVERY_* */
        int start;         /* no decision before this many epochs or steps */
        int max_depth;     /* 0 = all blocks */
    } freeze;

    struct {
        int enabled;
        double memory_gib;
        char disk_dir[PT_PATH_MAX];
        double disk_gib;
        int min_depth;     /* cache only from this many frozen blocks */
    } cache;

    /* Source line of each key that was set (0 = default, -1 = --set), for
     * messages about cross-key problems found after parsing. */
    int line[128];
    /* Keys --set gave more than once (the last value is used), as "key old
     * -> new" joined by ", " (values cut to 80 bytes), for a note; "" for
     * none; and how many more there were than fit. */
    char set_twice[1024];
    int set_twice_more;
} pt_config;

/* Defaults for every key. */
void pt_config_defaults(pt_config *c);

/* Reads a YAML file over the current values. Errors are PT_EINPUT with
 * "FILE:LINE: KEY: problem; allowed: ..." in err. */
int pt_config_load(pt_config *c, const char *path, pt_err *err);

/* 0 when the file pt_config_load read set something, else PT_EINPUT
 * naming it: an empty config would start a run of every default that
 * nobody asked for. A separate check, so that under a launcher the ranks
 * can first compare what they read (a pipe reaches rank 0 alone). */
int pt_config_has_settings(const pt_config *c, pt_err *err);

/* The same, from YAML text in memory; `name` stands for the file in messages. */
int pt_config_load_text(pt_config *c, const char *text, size_t len, const char *name, pt_err *err);

/* Applies one "key=value" override. */
int pt_config_set(pt_config *c, const char *assignment, pt_err *err);

/* Cross-key checks and input files that must exist, after all overrides. */
int pt_config_validate(const pt_config *c, pt_err *err);
/* The cache's disk tier directory on this node (cache.disk_dir), when the
 * cache is on: a directory a file can be made in. For the commands that
 * make the tier; eval opens no cache and skips it. */
int pt_config_check_disk_tier(const pt_config *c, pt_err *err);

/* Whether the run opens the frozen blocks' activation cache: cache.enabled,
 * with a freeze policy (without one nothing would ever be cached). */
int pt_config_cache_on(const pt_config *c);

/* Whether a run of this configuration reads key (resuming: a run that
 * resumes a checkpoint): not model.patch for a gpt, nor cache.* with the
 * cache off, nor pipeline.elastic where nothing is re-planned, ...
 * (config/check.c's table). */
int pt_config_reads(const pt_config *c, const char *key, int resuming);
/* Calls note(key, why, arg) for each key the file or a --set gave a value
 * that such a run never reads (keys left at their defaults are not named),
 * with why, as "read only with model.kind vit, and model.kind is gpt";
 * returns how many. */
int pt_config_unused(const pt_config *c, int resuming,
                     void (*note)(const char *key, const char *why, void *arg), void *arg);

/* PT_EINPUT with "FILE:LINE: KEY: message" (or "--set: KEY: ..." or
 * "FILE: (default) KEY: ...", wherever key got its value): for problems with
 * a key found after the config was accepted (the data, the ranks, the device),
 * so every message about a key says where to change it. */
int pt_config_key_fail(const pt_config *c, pt_err *err, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Puts "FILE:LINE: KEY: " (as pt_config_key_fail) in front of err's message,
 * keeping its code: for errors from a module that names the file it read or
 * the value it got, but cannot know which key chose it. Returns the code. */
int pt_config_key_prefix(const pt_config *c, pt_err *err, const char *key);
/* "FILE:LINE: " where key got its value, "--set: ", or "FILE: (default) ". */
void pt_config_where(const pt_config *c, const char *key, char *out, size_t n);

/* The model architecture the config describes (image geometry and class count
 * of the dataset included). */
void pt_config_arch(const pt_config *c, pt_arch *a);

/* Writes every key and its current value as YAML (for checkpoints and logs). */
int pt_config_write_yaml(const pt_config *c, FILE *out);
/* The same, but only the keys a run of this configuration reads, fresh or
 * resumed (pt_config_reads): what a person needs to run it again. */
int pt_config_write_yaml_read(const pt_config *c, FILE *out);

/* The keys whose name starts with prefix ("data.") and whose values differ
 * between a and b, as "key a -> b, ..." into out (cut to n, "" when none),
 * leaving out a key that neither reads (pt_config_reads: a data.text beside
 * image data changes nothing); returns how many differ. */
int pt_config_differences(const pt_config *a, const pt_config *b, const char *prefix, char *out,
                          size_t n);

/* Where the training (test = 0) or test (test = 1) examples of the config
 * come from, for messages: "data.train_file 'PATH'", "data.test_images
 * 'PATH' and data.test_labels 'PATH'", "data.text 'PATH'", or "its data.*
 * settings" for generated data. */
void pt_config_data_source(const pt_config *c, int test, char *out, size_t n);
/* The key that names where the training examples come from (data.train_file,
 * data.text, data.train_images; data.synthetic_examples for generated data). */
const char *pt_config_data_key(const pt_config *c);

/* Prints the key table as Markdown (the README's "Configuration" section). */
void pt_config_print_keys(FILE *out);

/* Name of a data kind, schedule, ... as written in the config. */
const char *pt_config_word(const char *key, int value);

#endif
