/*
 * main.c: the pipetrain command line. Parses the subcommand and its
 * arguments, turns every failure into one "pipetrain: error: ..." line and an
 * exit status: 0 success, 2 bad input (command line, config, data,
 * checkpoint), 1 anything else, 130 stopped by a signal after saving.
 */
#include "launch/checkpoint.h"
#include "launch/run.h"
#include "launch/safetensors.h"
#include "launch/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PT_VERSION "0.1.0"

static const char usage[] =
    "usage: pipetrain COMMAND [ARGUMENTS]\n"
    "\n"
    "  train CONFIG.yaml [--set KEY=VALUE ...]\n"
    "        train; resume an interrupted run with --set train.resume=auto\n"
    "  eval CONFIG.yaml [--checkpoint DIR] [--logits OUT.safetensors] [--set KEY=VALUE ...]\n"
    "        test loss and accuracy of a checkpoint (default: the newest in run.dir);\n"
    "        --logits also writes every test row's logits\n"
    "  export CHECKPOINT_DIR OUT.safetensors\n"
    "        the checkpoint's weights as safetensors, with PyTorch names and shapes\n"
    "  keys  every configuration key, its default and what it allows (Markdown)\n"
    "\n"
    "Configuration keys are documented in README.md and by `pipetrain keys`.\n";

static int exit_code(int rc)
{
    switch (rc) {
    case PT_OK:
        return 0;
    case PT_EINPUT:
        return 2;
    case PT_ESTOPPED:
        return 130;
    default:
        return 1;
    }
}

static int fail(int rc, const pt_err *err)
{
    fprintf(stderr, "pipetrain: error: %s\n", err->msg);
    return exit_code(rc);
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "pipetrain: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", usage);
    return 2;
}

/* Reads CONFIG.yaml, the --set overrides and (for eval) --checkpoint and
 * --logits from argv[2..]; validates. */
static int read_config(int argc, char **argv, pt_config *cfg, const char **checkpoint,
                       const char **logits, pt_err *err)
{
    pt_config_defaults(cfg);
    int rc = pt_config_load(cfg, argv[2], err);
    for (int i = 3; rc == 0 && i < argc; i++) {
        if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) {
            rc = pt_config_set(cfg, argv[++i], err);
        } else if (strncmp(argv[i], "--set=", 6) == 0) {
            rc = pt_config_set(cfg, argv[i] + 6, err);
        } else if (checkpoint && strcmp(argv[i], "--checkpoint") == 0 && i + 1 < argc) {
            *checkpoint = argv[++i];
        } else if (logits && strcmp(argv[i], "--logits") == 0 && i + 1 < argc) {
            *logits = argv[++i];
        } else {
            rc = pt_fail(err, PT_EINPUT, "unexpected argument '%s' (see pipetrain --help)", argv[i]);
        }
    }
    return rc ? rc : pt_config_validate(cfg, err);
}

static int cmd_train(int argc, char **argv)
{
    pt_err err = {0};
    pt_config cfg;
    pt_run run;
    int rc = read_config(argc, argv, &cfg, NULL, NULL, &err);
    if (rc)
        return fail(rc, &err);
    char resume[PT_PATH_MAX + 64] = "";
    if (strcmp(cfg.train.resume, "auto") == 0) {
        pt_err none;
        if (pt_checkpoint_latest(cfg.run.dir, resume, sizeof resume, &none) != 0)
            fprintf(stderr, "pipetrain: no checkpoint in %s yet; starting fresh\n", cfg.run.dir);
    } else if (*cfg.train.resume) {
        snprintf(resume, sizeof resume, "%s", cfg.train.resume);
    } else if (pt_checkpoint_latest(cfg.run.dir, resume, sizeof resume, &err) == 0) {
        fprintf(stderr,
                "pipetrain: error: run.dir '%s' already holds checkpoints (newest: %s); resume with "
                "--set train.resume=auto or choose another run.dir\n",
                cfg.run.dir, resume);
        return 2;
    }
    if ((rc = pt_run_open(&run, &cfg, PT_RUN_TRAIN, &err)))
        return fail(rc, &err);
    if (*resume && (rc = pt_checkpoint_load(&run, resume, &err))) {
        pt_run_close(&run);
        return fail(rc, &err);
    }
    rc = pt_train(&run, &err);
    pt_run_close(&run);
    return rc ? fail(rc, &err) : 0;
}

static int cmd_eval(int argc, char **argv)
{
    pt_err err = {0};
    pt_config cfg;
    pt_run run;
    const char *checkpoint = NULL, *logits_path = NULL;
    char latest[PT_PATH_MAX + 64];
    int rc = read_config(argc, argv, &cfg, &checkpoint, &logits_path, &err);
    if (rc)
        return fail(rc, &err);
    if (!checkpoint) {
        if ((rc = pt_checkpoint_latest(cfg.run.dir, latest, sizeof latest, &err)))
            return fail(rc, &err);
        checkpoint = latest;
    }
    if ((rc = pt_run_open(&run, &cfg, PT_RUN_EVAL, &err)))
        return fail(rc, &err);
    pt_eval_result ev;
    const int64_t rows = run.test.count * pt_arch_rows_per_example(&run.arch);
    const int classes = pt_arch_out_classes(&run.arch);
    float *logits = logits_path ? malloc((size_t)rows * classes * sizeof *logits) : NULL;
    if (logits_path && !logits)
        rc = pt_fail(&err, PT_ENOMEM, "out of memory for %lld rows of logits", (long long)rows);
    if (rc == 0 && (rc = pt_checkpoint_load_weights(&run, checkpoint, &err)) == 0 &&
        (rc = pt_evaluate(&run, 0, logits, &ev, &err)) == 0) {
        if (logits) {
            const int64_t shape[2] = {rows, classes};
            const pt_st_tensor t = {"logits", 2, shape, logits};
            rc = pt_st_write(logits_path, &t, 1, NULL, &err);
        }
        printf("checkpoint %s\ntest loss %.4f\ntest accuracy %.2f%%\nexamples %lld\n", checkpoint,
               ev.loss, 100.0 * ev.accuracy, (long long)ev.examples);
        if (run.arch.kind == PT_MODEL_GPT && cfg.sample.length > 0) {
            char text[4097];
            int len = cfg.sample.length < 4096 ? cfg.sample.length : 4096;
            if ((rc = pt_sample_text(&run, cfg.sample.prompt, len, cfg.sample.temperature,
                                     cfg.sample.top_k, (uint64_t)cfg.run.seed, text, &err)) == 0)
                printf("sample: %s%s\n", cfg.sample.prompt, text);
        }
    }
    free(logits);
    pt_run_close(&run);
    return rc ? fail(rc, &err) : 0;
}

static int cmd_export(int argc, char **argv)
{
    if (argc != 4)
        return usage_error("export takes a checkpoint directory and an output file%s", "");
    pt_err err = {0};
    pt_run run;
    memset(&run, 0, sizeof run);
    int rc = pt_checkpoint_read_config(argv[2], &run.cfg, &run.arch, &err);
    pt_segment_spec spec = {0, 0, 1, 1};
    if (rc == 0)
        spec.count = pt_arch_units(&run.arch);
    if (rc == 0 && (rc = pt_backend_open(&run.be, "cpu", 1, &err)) == 0 &&
        (rc = pt_segment_create(&run.seg, &run.arch, run.be, &spec, &err)) == 0 &&
        (rc = pt_checkpoint_load_weights(&run, argv[2], &err)) == 0) {
        const char *meta[] = {"format", "pt", "producer", "pipetrain " PT_VERSION,
                              "model.kind", pt_config_word("model.kind", run.cfg.model.kind), NULL};
        if ((rc = pt_weights_save(run.seg, argv[3], meta, &err)) == 0)
            printf("wrote %s\n", argv[3]);
    }
    pt_segment_destroy(run.seg);
    if (run.be)
        pt_backend_close(run.be);
    return rc ? fail(rc, &err) : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--version") == 0) {
        printf("pipetrain %s\n", PT_VERSION);
        return 0;
    }
    if (strcmp(cmd, "keys") == 0) {
        pt_config_print_keys(stdout);
        return 0;
    }
    if (strcmp(cmd, "export") == 0)
        return cmd_export(argc, argv);
    if (strcmp(cmd, "train") == 0 || strcmp(cmd, "eval") == 0) {
        if (argc < 3)
            return usage_error("%s needs a config file", cmd);
        return strcmp(cmd, "train") == 0 ? cmd_train(argc, argv) : cmd_eval(argc, argv);
    }
    return usage_error("unknown command '%s'", cmd);
}
