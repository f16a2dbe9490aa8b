/*
 * inspect.c: `pipetrain inspect` (see inspect.h).
 */
#include "launch/inspect.h"

#include "checkpoint/checkpoint.h"
#include "config/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* The checkpoint path names: itself when it holds a manifest (or nothing
 * of a run: the describe names what is missing), else a run directory's
 * newest. */
static int checkpoint_of(const char *path, char *out, size_t n, pt_err *err)
{
    char manifest[PT_CKPT_PATH], ckpts[PT_CKPT_PATH], mark[PT_CKPT_PATH];
    struct stat st;
    const int has_manifest = lstat(pt_path_join(manifest, path, "manifest"), &st) == 0;
    if (!has_manifest &&
        (stat(pt_path_join(ckpts, path, "checkpoints"), &st) != 0 || !S_ISDIR(st.st_mode))) {
        /* a run that has only just begun: its lock or log, no checkpoints/ yet */
        const int there = lstat(ckpts, &st) == 0;
        if (lstat(pt_path_join(mark, path, "lock"), &st) == 0 ||
            lstat(pt_path_join(mark, path, "metrics.jsonl"), &st) == 0) {
            /* as eval takes it: the step an interrupted resume into it read */
            char said[3 * PT_CKPT_PATH + 256];
            if (!there && pt_rundir_resuming_instead(path, out, n, said, sizeof said)) {
                fprintf(stderr, "pipetrain: note: %s\n", said);
                return 0;
            }
            return pt_fail(err, PT_EINPUT, "inspect: '%s' is a run directory without a "
                           "checkpoint yet (%s)", path,
                           there ? "its checkpoints is not a directory" : "no checkpoints/ in it");
        }
    }
    if (has_manifest ||
        stat(pt_path_join(ckpts, path, "checkpoints"), &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(out, n, "%s", path);
        return 0;
    }
    if (pt_checkpoint_readable(path, err))
        return err->code;
    if (pt_checkpoint_latest(path, out, n, err) == 0) {
        /* as eval says it: an interrupted resume's RUN_DIR/resuming */
        char said[3 * PT_CKPT_PATH + 256];
        if (pt_rundir_resuming_note(path, out, said, sizeof said))
            fprintf(stderr, "pipetrain: note: %s\n", said);
        return 0;
    }
    char said[3 * PT_CKPT_PATH + 256];
    if (pt_rundir_resuming_instead(path, out, n, said, sizeof said)) {
        fprintf(stderr, "pipetrain: note: %s\n", said);
        return 0;
    }
    return pt_fail(err, PT_EINPUT, "inspect: '%s' is a run directory without a complete "
                   "checkpoint in its checkpoints/", path);
}

int pt_inspect(const char *path, int config, pt_err *err)
{
    char dir[PT_CKPT_PATH];
    pt_config *cfg = malloc(sizeof *cfg); /* large: keep it off the stack */
    if (!cfg)
        return pt_fail(err, PT_ENOMEM, "out of memory reading checkpoint %s", path);
    json_t *o = NULL;
    int rc = 0;
    /* a run directory's newest, held against pruning while it is read; a
     * run that trains there may prune it between the choice and the hold,
     * or a scan may meet a save and a pruning halfway: choose again then */
    for (int tries = 0;; tries++) {
        const int run_dir = (rc = checkpoint_of(path, dir, sizeof dir, err)) != 0 ||
                            strcmp(dir, path) != 0;
        pt_ckpt_hold hold;
        const int held = rc == 0 && pt_checkpoint_hold(&hold, dir);
        if (rc == 0)
            rc = pt_checkpoint_describe(dir, cfg, &o, err);
        if (held)
            pt_checkpoint_release(&hold);
        if (rc == 0 || !run_dir || held || tries == 49 || !pt_rundir_in_use(path))
            break;
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    if (rc) {
        free(cfg);
        return rc;
    }
    if (rc == 0 && config) {
        /* to run it again: the keys such a run reads, and not the
         * checkpoint that run resumed (a run of this config starts fresh,
         * or resumes with train.resume set anew) */
        cfg->train.resume[0] = '\0';
        pt_config_write_yaml_read(cfg, stdout);
    } else if (rc == 0) {
        char *text = json_dumps(o, JSON_INDENT(2));
        if (text)
            printf("%s\n", text);
        else
            rc = pt_fail(err, PT_ENOMEM, "out of memory writing what %s holds", dir);
        free(text);
    }
    json_decref(o);
    free(cfg);
    return rc;
}
