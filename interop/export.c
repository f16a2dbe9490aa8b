/*
 * export.c: `pipetrain export CHECKPOINT_DIR OUT`: reads
 * the checkpoint's config and weights into a whole-model segment on the CPU
 * and writes them for PyTorch: safetensors with the reference model's names
 * (weights.c), or for bert a Hugging Face model directory
 * (hf/hf.h) with the run's tokenizer files when its data.vocab is still the
 * vocabulary the checkpoint was trained with.
 */

#include "interop/interop.h"

#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "formats/formats.h"
#include "hf/hf.h"
#include "outputs/outputs.h"
#include "tokenize/tokenize.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The config's relative input paths (model.init_from, data.vocab, the
 * data files) made relative to the directory the run started in, as the
 * checkpoint records it (not before it did: then they are read from here),
 * so that an export from elsewhere finds the run's vocabulary and spares
 * its inputs. A path that would not fit, or is not there (a project moved
 * since, exported from its new place), is left as it is. */
static int run_paths(const char *ckpt, pt_config *cfg, pt_err *err)
{
    char cwd[PT_PATH_MAX];
    int rc = pt_checkpoint_read_cwd(ckpt, cwd, sizeof cwd, err);
    char *const paths[] = {cfg->model.init_from, cfg->data.vocab,        cfg->data.train_file,
                           cfg->data.test_file,  cfg->data.train_images, cfg->data.train_labels,
                           cfg->data.test_images, cfg->data.test_labels, cfg->data.text};
    for (size_t i = 0; rc == 0 && *cwd && i < sizeof paths / sizeof *paths; i++) {
        char joined[PT_PATH_MAX];
        if (*paths[i] && *paths[i] != '/' &&
            snprintf(joined, sizeof joined, "%s/%s", cwd, paths[i]) < (int)sizeof joined &&
            access(joined, F_OK) == 0)
            memcpy(paths[i], joined, strlen(joined) + 1);
    }
    return rc;
}

/* The vocabulary at path as export writes it (its tokens in id order, one
 * per line: what was checked, whatever line endings the file had), when it
 * is the one checkpoint dir was trained with (or the checkpoint records
 * none). malloc'd into *text, *n bytes. */
static int vocab_for_export(const char *dir, const char *path, char **text, size_t *n, pt_err *err)
{
    pt_vocab *v = NULL;
    char sha[65];
    *text = NULL;
    *n = 0;
    int rc = pt_vocab_load(&v, path, err);
    if (rc == 0 && (rc = pt_checkpoint_vocab_sha256(v, sha, err)) == 0 &&
        (rc = pt_checkpoint_check_vocab(dir, path, sha, err)) == PT_EINPUT)
        pt_fail(err, rc, "'%.900s' is no longer the vocabulary the checkpoint was trained with "
                "(its tokens changed since)", path);
    size_t bytes = 0;
    for (int32_t id = 0; rc == 0 && id < pt_vocab_size(v); id++)
        bytes += strlen(pt_vocab_token(v, id)) + 1;
    if (rc == 0 && !(*text = malloc(bytes ? bytes : 1)))
        rc = pt_fail(err, PT_ENOMEM, "out of memory for '%s'", path);
    for (int32_t id = 0; rc == 0 && id < pt_vocab_size(v); id++) {
        const char *t = pt_vocab_token(v, id);
        const size_t len = strlen(t);
        memcpy(*text + *n, t, len);
        (*text)[*n + len] = '\n';
        *n += len + 1;
    }
    pt_vocab_free(v);
    return rc;
}

int pt_export(const char *ckpt, const char *out, const char *version, pt_err *err)
{
    char producer[64];
    snprintf(producer, sizeof producer, "pipetrain %s", version);
    pt_config *cfg = calloc(1, sizeof *cfg);
    pt_arch arch;
    pt_backend *be = NULL;
    pt_segment *seg = NULL;
    /* the config as the checkpoint names its inputs, and (cfg) with its
     * relative paths read from the run's directory: the export spares both
     * (a copy of the project exported in its own directory names its own) */
    pt_config *given = calloc(1, sizeof *given);
    /* while this reads the checkpoint, a run training in its run.dir does not
     * prune it (no manifest: the read says so) */
    pt_ckpt_hold hold;
    pt_checkpoint_hold(&hold, ckpt);
    int rc = cfg && given ? pt_checkpoint_read_config(ckpt, cfg, &arch, err)
                          : pt_fail(err, PT_ENOMEM, "out of memory");
    if (rc == 0) {
        *given = *cfg;
        rc = run_paths(ckpt, cfg, err);
    }
    pt_segment_spec spec = {0, 0, 1, 1, 0, 0};
    struct stat st;
    /* out without trailing '/' or '/.': 'link/' names where a link leads,
     * and the link is never written through */
    char bare[PT_PATH_MAX + 1];
    snprintf(bare, sizeof bare, "%s", out);
    for (size_t n = strlen(bare);;) {
        if (n > 1 && bare[n - 1] == '/')
            bare[--n] = '\0';
        else if (n > 2 && bare[n - 1] == '.' && bare[n - 2] == '/')
            bare[n -= 2] = '\0';
        else
            break;
    }
    /* a directory the export makes: no '.' or '..' after a level that is
     * not there yet (where it lands, and what a failure takes back, would
     * be another directory than the name says) */
    if (rc == 0 && arch.kind == PT_MODEL_BERT)
        rc = pt_path_dots_after_missing(out, err);
    if (rc == 0 && lstat(bare, &st) == 0 && S_ISLNK(st.st_mode))
        rc = pt_fail(err, PT_EINPUT, "export: '%s' is a symbolic link; it is not replaced (name "
                     "the file or directory it leads to)", out);
    else if (rc == 0 && arch.kind == PT_MODEL_BERT && stat(out, &st) == 0 && !S_ISDIR(st.st_mode))
        rc = pt_fail(err, PT_EINPUT, "export: '%s' exists and is %s; a bert model is written as a "
                     "directory (model.safetensors and config.json)", out,
                     pt_file_kind(st.st_mode));
    else if (rc == 0 && (rc = pt_output_not_input("export", out, ckpt, NULL, 0, err)) == 0) {
        char run[2 * PT_PATH_MAX];
        pt_output_run_of_checkpoint(ckpt, run, sizeof run);
        if ((rc = pt_output_not_in_run("export", out, run, err)) == 0)
            rc = pt_export_not_over_inputs(out, arch.kind == PT_MODEL_BERT, cfg, err);
        if (rc == 0)
            rc = pt_export_not_over_inputs(out, arch.kind == PT_MODEL_BERT, given, err);
    }
    if (rc == 0 && arch.kind != PT_MODEL_BERT) /* before the work, as eval does */
        rc = pt_output_probe("export", out, PT_OUTPUT_SAFETENSORS, err);
    /* a bert export's directory, when it is there already: that its files
     * can be written (one that is not there is made by the export, which
     * says when it cannot be) */
    if (rc == 0 && arch.kind == PT_MODEL_BERT && stat(out, &st) == 0) {
        /* each file of it that is there is replaced only when it is of its
         * kind: the weights a safetensors file, the two configs JSON objects
         * (vocab.txt, a list of tokens, has no kind to tell a stranger by) */
        static const struct {
            const char *name, *what;
            pt_output_kind kind;
        } files[] = {{"model.safetensors", "the weights file", PT_OUTPUT_SAFETENSORS},
                     {"config.json", "the model's config", PT_OUTPUT_JSON},
                     {"tokenizer_config.json", "the tokenizer's config", PT_OUTPUT_JSON}};
        for (size_t k = 0; rc == 0 && k < sizeof files / sizeof files[0]; k++) {
            char path[2 * PT_PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", out, files[k].name);
            if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
                rc = pt_fail(err, PT_EINPUT, "export: '%s', %s a bert export writes into '%s', "
                             "is a directory there; remove it, or export elsewhere", path,
                             files[k].what, out);
            else
                rc = pt_output_probe("export", path, files[k].kind, err);
        }
    }
    if (rc == 0)
        spec.count = pt_arch_units(&arch);
    if (rc == 0 && (rc = pt_backend_open(&be, "cpu", 1, err)) == 0 &&
        (rc = pt_segment_create(&seg, &arch, be, &spec, err)) == 0 &&
        (rc = pt_checkpoint_load_segment(seg, ckpt, err)) == 0) {
        /* with what the weights' shapes cannot tell, for model.init_from
         * to check (pt_weights_check_recorded) */
        char heads[32], ln_eps[32];
        snprintf(heads, sizeof heads, "%d", arch.heads);
        pt_number_text(pt_arch_ln_eps(&arch), ln_eps, sizeof ln_eps);
        const char *meta[] = {"format", "pt", "producer", producer,
                              "model.kind", pt_config_word("model.kind", cfg->model.kind),
                              "model.heads", heads, "model.ln_eps", ln_eps, NULL};
        if (arch.kind == PT_MODEL_BERT) { /* a Hugging Face model directory */
            char **labels = NULL;
            int n_labels = 0;
            /* the tokenizer the run used (data.vocab), when it is still there */
            char *vocab = NULL;
            pt_hf_tokenizer tok = {NULL, 0, arch.context, {1, 1, 1}};
            pt_err why = {0};
            struct stat vs;
            if (stat(cfg->data.vocab, &vs) != 0 || !S_ISREG(vs.st_mode)) /* never wait on a FIFO */
                pt_fail(&why, PT_EINPUT, "'%.900s' is not there as a regular file", cfg->data.vocab);
            else if (vocab_for_export(ckpt, cfg->data.vocab, &vocab, &tok.vocab_bytes, &why) == 0 &&
                     pt_hf_vocab_check(cfg->data.vocab, vocab, tok.vocab_bytes, arch.vocab, &why) == 0 &&
                     pt_resolve_normalize(cfg, &tok.norm, &why) == 0)
                tok.vocab = vocab;
            /* a vocabulary that could not be read now (no descriptor left, a
             * read error) is no reason to export without tokenizer files */
            if (!tok.vocab && (why.code == PT_ESYS || why.code == PT_ENOMEM)) {
                *err = why;
                rc = pt_err_prefix(err, "export: reading the run's data.vocab for the "
                                   "tokenizer files");
            }
            /* tokenizer files in the directory that the export cannot replace
             * are left alone, and so is the rest: they may be no earlier
             * export's but a model's own, its vocabulary that a relative
             * data.vocab named from another directory */
            for (int k = 0; !tok.vocab && rc == 0 && k < 2; k++) {
                char path[2 * PT_PATH_MAX];
                struct stat ls;
                snprintf(path, sizeof path, "%s/%s", out, k ? "tokenizer_config.json" : "vocab.txt");
                if (lstat(path, &ls) == 0)
                    rc = pt_fail(err, PT_EINPUT,
                                 "export: '%s' is there, and this export has no tokenizer to "
                                 "replace it with (the run's data.vocab: %s); nothing was "
                                 "written: remove it or export elsewhere", path, why.msg);
            }
            if (!tok.vocab && rc == 0)
                fprintf(stderr, "pipetrain: note: the export has no tokenizer files: the run's "
                        "data.vocab: %s\n", why.msg);
            /* what a killed earlier export into the directory left there */
            static const char *const files[] = {"model.safetensors", "config.json", "vocab.txt",
                                                "tokenizer_config.json"};
            for (size_t k = 0; rc == 0 && k < sizeof files / sizeof files[0]; k++) {
                char path[2 * PT_PATH_MAX];
                if (snprintf(path, sizeof path, "%s/%s", out, files[k]) < (int)sizeof path)
                    pt_output_sweep(path);
            }
            if (rc == 0 &&
                (rc = pt_checkpoint_read_labels(ckpt, arch.classes, &labels, &n_labels, err)) == 0 &&
                (rc = pt_hf_bert_save(seg, out, (const char *const *)labels, n_labels,
                                      tok.vocab ? &tok : NULL, err)) == 0) {
                signal(SIGPIPE, SIG_IGN); /* see below */
                printf("wrote %s: model.safetensors, config.json%s\n", out,
                       tok.vocab ? ", vocab.txt, tokenizer_config.json" : "");
            }
            free(vocab);
            for (int k = 0; k < n_labels; k++)
                free(labels[k]);
            free(labels);
        } else if ((rc = pt_weights_save(seg, out, meta, err)) == 0) {
            /* the output is in place: a reader of stdout that has gone
             * (a closed pipe) ends nothing, as a full stdout does not */
            signal(SIGPIPE, SIG_IGN);
            printf("wrote %s\n", out);
        }
    }
    pt_segment_destroy(seg);
    if (be)
        pt_backend_close(be);
    pt_checkpoint_release(&hold);
    free(cfg);
    free(given);
    return rc;
}

