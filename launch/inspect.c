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

/* The checkpoint path names: itself when it holds a manifest (or nothing
 * of a run: the describe names what is missing), else a run directory's
 * newest. */
static int checkpoint_of(const char *path, char *out, size_t n, pt_err *err)
{
    char manifest[PT_CKPT_PATH], ckpts[PT_CKPT_PATH];
    struct stat st;
    if (lstat(pt_path_join(manifest, path, "manifest"), &st) == 0 ||
        stat(pt_path_join(ckpts, path, "checkpoints"), &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(out, n, "%s", path);
        return 0;
    }
    if (pt_checkpoint_latest(path, out, n, err) == 0)
        return 0;
    return pt_fail(err, PT_EINPUT, "inspect: '%s' is a run directory without a complete "
                   "checkpoint in its checkpoints/", path);
}

int pt_inspect(const char *path, int config, pt_err *err)
{
    char dir[PT_CKPT_PATH];
    int rc = checkpoint_of(path, dir, sizeof dir, err);
    if (rc)
        return rc;
    pt_config *cfg = malloc(sizeof *cfg); /* large: keep it off the stack */
    if (!cfg)
        return pt_fail(err, PT_ENOMEM, "out of memory reading checkpoint %s", dir);
    pt_ckpt_hold hold; /* not pruned while it is read */
    pt_checkpoint_hold(&hold, dir);
    json_t *o = NULL;
    rc = pt_checkpoint_describe(dir, cfg, &o, err);
    pt_checkpoint_release(&hold);
    if (rc == 0 && config) {
        pt_config_write_yaml(cfg, stdout);
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
