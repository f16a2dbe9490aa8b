/*
 * outputs.c: where a command may write its outputs (eval's --logits and
 * --hidden, export's OUT): never over one of its inputs, into a checkpoint
 * (any run's) or a run's checkpoints directory, over the files a run keeps
 * beside them, or over the inputs of the run an export's checkpoint comes
 * from. Each refusal is bad input (PT_EINPUT) naming the option, the path
 * and what it would have replaced.
 */
#include "outputs/outputs.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/format.h"
#include "config/config.h"
#include "formats/formats.h"
#include "hf/hf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void pt_output_sweep(const char *path)
{
    const int n = pt_remove_dead_temporaries(path);
    if (n > 0)
        fprintf(stderr, "pipetrain: note: removed %d temporary file%s of an earlier write of '%s' "
                "that was killed\n", n, n == 1 ? "" : "s", path);
}

int pt_cli_path_ok(const char *option, const char *path, pt_err *err)
{
    const size_t n = strlen(path);
    if (n == 0) /* an unset shell variable, say: not the root directory */
        return pt_fail(err, PT_EINPUT, "%s is empty; give a path", option);
    if (n < PT_PATH_MAX)
        return 0;
    return pt_fail(err, PT_EINPUT, "%s '%.64s...' is %zu bytes long; a path of at most %d bytes is "
                   "taken (give a shorter name of the same place)", option, path, n,
                   PT_PATH_MAX - 1);
}

/* A file with bytes in it at path is replaced only when it is of the kind
 * the output writes: a safetensors file that reads as one (an earlier
 * export, logits, hidden states, another model's weights), or JSON (an
 * earlier report). A config, script or data file named there by mistake is
 * not. */
static int replaces_its_own_kind(const char *option, const char *path, pt_output_kind kind,
                                 pt_err *err)
{
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
        return 0; /* nothing there, an empty file, or what the write itself refuses (a link) */
    pt_err why = {0};
    int rc;
    if (kind == PT_OUTPUT_SAFETENSORS) {
        pt_st_file *f = NULL;
        if ((rc = pt_st_open(&f, path, &why)) == 0)
            pt_st_close(f);
    } else {
        void *text = NULL;
        size_t n = 0;
        json_t *j = NULL;
        /* a report is a few kilobytes: what is far larger is something else */
        if ((rc = pt_read_file(path, (size_t)64 << 20, &text, &n, &why)) == 0 &&
            (rc = pt_json_load_foreign(&j, text, n, PT_JSON_REALS | PT_JSON_LAST_KEY_WINS, &why)) == 0 &&
            !json_is_object(j))
            rc = pt_fail(&why, PT_EINPUT, "JSON, but not an object");
        json_decref(j);
        free(text);
    }
    /* only a verdict on what it holds refuses it: one that cannot be read
     * (no permission, an I/O error) is the write's to replace or refuse */
    if (rc == 0 || rc == PT_ESYS)
        return 0;
    if (rc == PT_ENOMEM)
        return pt_fail(err, PT_ENOMEM, "%s '%s': out of memory reading what is there", option, path);
    return pt_fail(err, PT_EINPUT, "%s '%s' holds a file that is not %s (%s); it is not replaced: "
                   "remove it first, or choose another name", option, path,
                   kind == PT_OUTPUT_SAFETENSORS ? "a safetensors file" : "a JSON object", why.msg);
}

/* Whether eval or export can write its output's file: what is there is of
 * the output's kind, and the temporary file a write starts with can be
 * created (and is removed). A path that cannot be written is bad input
 * (PT_EINPUT). */
int pt_output_probe(const char *option, const char *path, pt_output_kind kind, pt_err *err)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return pt_fail(err, PT_EINPUT, "%s '%s' is a directory; it takes a file name", option, path);
    if (replaces_its_own_kind(option, path, kind, err))
        return err->code;
    pt_wfile *f = NULL;
    if (pt_wfile_open(&f, path, err) == 0) {
        pt_wfile_abort(f);
        pt_output_sweep(path);
        return 0;
    }
    /* the system short of memory or descriptors is not the path's fault */
    const int code = err->code == PT_ENOMEM ? PT_ENOMEM : pt_err_input(err->code, err);
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    return pt_fail(err, code, "%s: cannot write there (%s)", option, why);
}

static int same_inode(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* Whether paths a and b name the same entry of the same directory, whether
 * or not it exists (an input that would be read if it were there). */
static int same_name(const char *a, const char *b)
{
    const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
    const char *na = sa ? sa + 1 : a, *nb = sb ? sb + 1 : b;
    if (strcmp(na, nb) != 0 || !*na)
        return 0;
    char da[PT_PATH_MAX], db[PT_PATH_MAX];
    snprintf(da, sizeof da, "%.*s", sa ? (int)(sa - a) + (sa == a) : 1, sa ? a : ".");
    snprintf(db, sizeof db, "%.*s", sb ? (int)(sb - b) + (sb == b) : 1, sb ? b : ".");
    struct stat x, y;
    return stat(da, &x) == 0 && stat(db, &y) == 0 && same_inode(&x, &y);
}

/* An output of this command must not replace one of its inputs nor land in
 * the checkpoint directory it reads (a checkpoint holds only its own files,
 * and pruning old checkpoints would take anything else in it along):
 * PT_EINPUT naming both. path may be a directory (a bert export). */
int pt_output_not_input(const char *option, const char *path, const char *ckpt_dir,
                        const char *const *inputs, int n, pt_err *err)
{
    const char *slash = strrchr(path, '/');
    char parent[PT_PATH_MAX];
    snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1,
             slash ? path : ".");
    struct stat out, in;
    const int have_ckpt = ckpt_dir && stat(ckpt_dir, &in) == 0;
    const int is_it = have_ckpt && stat(path, &out) == 0 && same_inode(&out, &in);
    if (is_it || (have_ckpt && stat(parent, &out) == 0 && same_inode(&out, &in)))
        return pt_fail(err, PT_EINPUT, "%s '%s' %s the checkpoint directory '%s' that this "
                       "command reads; a checkpoint holds only its own files: write it elsewhere",
                       option, path, is_it ? "is" : "is in", ckpt_dir);
    const int exists = stat(path, &out) == 0;
    for (int i = 0; i < n; i++) {
        if (!inputs[i] || !*inputs[i])
            continue;
        if (stat(inputs[i], &in) == 0) {
            if (exists && same_inode(&out, &in))
                return pt_fail(err, PT_EINPUT, "%s '%s' is '%s', an input of this command or a "
                               "file its config reads; it is not overwritten: write it elsewhere",
                               option, path, inputs[i]);
        } else if (same_name(path, inputs[i])) {
            return pt_fail(err, PT_EINPUT, "%s '%s' is '%s', which this command or its config "
                           "reads when it is there; it is not created: write it elsewhere", option,
                           path, inputs[i]);
        }
    }
    if (!exists)
        return 0;
    /* the program itself (a slip of the shell's completion) */
    if (stat("/proc/self/exe", &in) == 0 && same_inode(&out, &in))
        return pt_fail(err, PT_EINPUT, "%s '%s' is the pipetrain program running this command; "
                       "it is not overwritten: write it elsewhere", option, path);
    return 0;
}

/* realpath into out; when it fails other than by a missing name (a real
 * path longer than PATH_MAX, a loop, no permission), PT_EINPUT naming what:
 * a check that needs the real path fails closed. *missing: it failed
 * because a name is not there (the write, or the mkdir, fails and says so).
 * option: the key or option the message starts with, NULL for none (the
 * caller names it). */
static int real_path(const char *option, const char *path, char out[PATH_MAX], int *missing,
                     pt_err *err)
{
    *missing = 0;
    if (realpath(path, out))
        return 0;
    if (errno == ENOENT || errno == ENOTDIR) {
        *missing = 1;
        return 0;
    }
    const int e = errno;
    return pt_fail(err, PT_EINPUT, "%s%sthe real path of '%.200s' cannot be found (%s), and "
                   "without it nothing can say it stays out of every run's checkpoints; %s",
                   option ? option : "", option ? ": " : "", path, strerror(e),
                   e == ENAMETOOLONG ? "give a place with a shorter real path"
                   : e == ELOOP      ? "its symbolic links lead in a circle: name a real place"
                                     : "name a place it can resolve");
}

/* Whether the real path `in` is dir or lies under it. */
static int under(const char *in, const char *dir)
{
    const size_t n = strlen(dir);
    return strncmp(in, dir, n) == 0 && (in[n] == '\0' || in[n] == '/' || (n == 1 && dir[0] == '/'));
}

/* Whether directory dir holds an entry `name` (of any kind). */
static int holds(const char *dir, const char *name)
{
    char p[PATH_MAX + 64];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &st) == 0;
}

/* Whether the real directory path `at` or a directory above it is a
 * checkpoint (a step_N directory that holds a manifest) or a run's
 * checkpoints directory (one named checkpoints beside a run's lock or
 * metrics.jsonl): 1 or 2, with that directory in `at`; 0 for neither. */
static int checkpoints_at_or_above(char at[PATH_MAX])
{
    char parent[PATH_MAX];
    for (;;) {
        const char *slash = strrchr(at, '/');
        const char *base = slash ? slash + 1 : at;
        if (strncmp(base, "step_", 5) == 0 && holds(at, "manifest"))
            return 1;
        if (strcmp(base, "checkpoints") == 0 && slash) {
            snprintf(parent, sizeof parent, "%.*s", (int)(slash - at) + (slash == at), at);
            if (holds(parent, "lock") || holds(parent, "metrics.jsonl"))
                return 2;
        }
        if (!slash || slash == at)
            return 0;
        at[slash - at] = '\0';
    }
}

/* An output must not land in any checkpoint, whichever run it belongs to:
 * not in (or be) a checkpoint, nor in (or be) a run's checkpoints
 * directory, where an export would add files to a checkpoint or make a step
 * directory that is none. Looks at path (when it is there) and every
 * directory above it. */
static int output_not_in_checkpoints(const char *option, const char *path, pt_err *err)
{
    char at[PATH_MAX], parent[PATH_MAX]; /* realpath writes up to PATH_MAX */
    struct stat st;
    int missing = 1, rc = 0;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
        (rc = real_path(option, path, at, &missing, err)))
        return rc;
    /* the nearest directory above it that is there: a bert export makes
     * the levels that are not (and where nothing is there, the write fails
     * and says so) */
    snprintf(parent, sizeof parent, "%s", path);
    while (missing) {
        char *slash = strrchr(parent, '/');
        while (slash && slash > parent && slash[1] == '\0') { /* a trailing '/' */
            *slash = '\0';
            slash = strrchr(parent, '/');
        }
        if (!slash && strcmp(parent, ".") == 0)
            return 0;
        if (!slash)
            snprintf(parent, sizeof parent, ".");
        else if (slash == parent) {
            if (parent[1] == '\0')
                return 0;
            parent[1] = '\0';
        } else
            *slash = '\0';
        if ((rc = real_path(option, parent, at, &missing, err)))
            return rc;
    }
    switch (checkpoints_at_or_above(at)) {
    case 1:
        return pt_fail(err, PT_EINPUT, "%s '%s' is in checkpoint directory '%s' (it holds a "
                       "manifest): a checkpoint holds only its own files; write it elsewhere",
                       option, path, at);
    case 2:
        return pt_fail(err, PT_EINPUT, "%s '%s' is in '%s', a run's checkpoints: a "
                       "checkpoint holds only its own files, and pruning removes whole "
                       "checkpoints; write it elsewhere", option, path, at);
    default:
        return 0;
    }
}

int pt_output_dir_not_in_checkpoints(const char *option, const char *path, pt_err *err)
{
    return output_not_in_checkpoints(option, path, err);
}

/* path with its "." components dropped and each ".." taking the component
 * before it away (not past the root), in place; path is absolute. */
static void lexical_normalize(char *path)
{
    char out[PATH_MAX];
    size_t n = 0;
    const char *p = path;
    while (*p) {
        while (*p == '/')
            p++;
        const char *end = strchr(p, '/');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0)
            break;
        if (len == 1 && p[0] == '.') {
            /* nothing */
        } else if (len == 2 && p[0] == '.' && p[1] == '.') {
            while (n > 0 && out[n - 1] != '/')
                n--;
            if (n > 0)
                n--; /* the slash before it */
        } else if (n + 1 + len < sizeof out) {
            out[n++] = '/';
            memcpy(out + n, p, len);
            n += len;
        }
        p += len;
    }
    if (n == 0)
        out[n++] = '/';
    out[n] = '\0';
    memcpy(path, out, n + 1);
}

/* Whether directory dir holds a pipetrain checkpoint's manifest (by its
 * magic: a checkpoint reached under another name, a bind mount say). */
static int is_checkpoint(const char *dir)
{
    char p[PATH_MAX + 64], magic[sizeof PT_CKPT_MANIFEST_MAGIC - 1];
    snprintf(p, sizeof p, "%s/manifest", dir);
    const int fd = open(p, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    const int yes = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                    read(fd, magic, sizeof magic) == (ssize_t)sizeof magic &&
                    memcmp(magic, PT_CKPT_MANIFEST_MAGIC, sizeof magic) == 0;
    close(fd);
    return yes;
}

int pt_output_run_dir_ok(const char *run_dir, pt_err *err)
{
    /* the nearest directory at or above run.dir that exists (train makes the rest) */
    char path[PATH_MAX], at[PATH_MAX];
    snprintf(path, sizeof path, "%s", *run_dir ? run_dir : ".");
    struct stat st;
    while (!(stat(path, &st) == 0 && S_ISDIR(st.st_mode))) {
        char *slash = strrchr(path, '/');
        if (!slash) {
            snprintf(path, sizeof path, ".");
            break;
        }
        if (slash == path) {
            path[1] = '\0';
            break;
        }
        *slash = '\0';
    }
    int missing, rc;
    /* (no key in the message: the caller names run.dir's line) */
    if ((rc = real_path(NULL, path, at, &missing, err)) || missing)
        return rc; /* missing: creating run.dir fails and says so */
    /* with the components of run.dir that do not exist yet: a step
     * directory that a save will make is the run's to prune too */
    const size_t have = strlen(path), len = strlen(run_dir);
    /* and the whole of it within PATH_MAX with room for its checkpoints'
     * files (checkpoints/step_N/units-stageS.bin and their temporaries'
     * suffixes): a run.dir whose real path is longer trains, but nothing
     * could resolve it to resume it */
    enum { ROOM = 128 };
    const size_t whole = strlen(at) + (have < len ? len - have : 0);
    if (whole + ROOM >= PATH_MAX)
        return pt_fail(err, PT_EINPUT, "its real path would be %zu bytes long: with its checkpoints' "
                       "files, past what paths may hold (%d bytes); give a place with a shorter "
                       "real path", whole, PATH_MAX);
    if (strcmp(path, ".") != 0 && have < len && run_dir[have] == '/') {
        const size_t used = strlen(at);
        snprintf(at + used, sizeof at - used, "%s", run_dir + have);
    } else if (strcmp(path, ".") == 0 && *run_dir && run_dir[0] != '/') {
        const size_t used = strlen(at);
        snprintf(at + used, sizeof at - used, "/%s", run_dir);
    }
    /* the tail's "." and "..", as making the directories resolves them
     * (nothing in the tail exists, so no link is in it) */
    lexical_normalize(at);
    /* pruning touches only RUN/checkpoints/step_N: run.dir must not be at or
     * below one of a run (a step directory with a manifest, or one under the
     * checkpoints of a directory with a run's lock or log) */
    char step_dir[PATH_MAX], parent[PATH_MAX];
    snprintf(step_dir, sizeof step_dir, "%s", at);
    for (;;) {
        char *slash = strrchr(step_dir, '/');
        if (!slash || slash == step_dir)
            return 0;
        int64_t step;
        snprintf(parent, sizeof parent, "%.*s", (int)(slash - step_dir), step_dir);
        const char *up = strrchr(parent, '/');
        if (is_checkpoint(step_dir))
            return pt_fail(err, PT_EINPUT, "'%s' is in checkpoint directory '%s' (it holds a "
                           "checkpoint's manifest), not a run directory: a checkpoint holds only "
                           "its own files; to continue from it, set train.resume to it and run.dir "
                           "to a directory of its own", run_dir, step_dir);
        if (pt_checkpoint_dir_step(slash + 1, &step) && up && strcmp(up + 1, "checkpoints") == 0) {
            char run[PATH_MAX];
            snprintf(run, sizeof run, "%.*s", (int)(up - parent) + (up == parent), parent);
            if (holds(step_dir, "manifest"))
                return pt_fail(err, PT_EINPUT, "'%s' is in checkpoint directory '%s' (it holds a "
                               "manifest), not a run directory: a checkpoint holds only its own "
                               "files, and pruning it would remove this run's lock and logs; to "
                               "continue from it, set train.resume to it and run.dir to a "
                               "directory of its own", run_dir, step_dir);
            if (holds(run, "lock") || holds(run, "metrics.jsonl"))
                return pt_fail(err, PT_EINPUT, "'%s' is in '%s', a step directory of the run in "
                               "'%s', not a run directory: that run's saves and pruning would "
                               "remove this run's lock and logs; choose a directory of its own",
                               run_dir, step_dir, run);
        }
        *slash = '\0';
    }
}

/* A name a run keeps in its run.dir for itself: pt_rundir_is_run_file's, and
 * RUN_DIR/resuming (the checkpoint a resume from elsewhere continues, which
 * train.resume=auto reads) and RUN_DIR/abandoned (the later steps a resume
 * of an older one moved aside). An output or input there would be read as
 * the run's own, or moved, or moved into. */
static int is_run_name(const char *base)
{
    return pt_rundir_is_run_file(base) || strcmp(base, "resuming") == 0 || strcmp(base, "abandoned") == 0;
}

/* Nor one of any run's own files: a name is_run_name knows in a directory
 * that is a run's (it holds a lock or a checkpoints directory beside it),
 * whichever run that is (another's lock replaced let a second job into its
 * run.dir while the first trained). */
static int output_not_a_run_file(const char *option, const char *path, pt_err *err)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!is_run_name(base))
        return 0;
    char parent[PT_PATH_MAX];
    snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1,
             slash ? path : ".");
    struct stat st;
    char ckpts[PT_PATH_MAX + 16];
    snprintf(ckpts, sizeof ckpts, "%s/checkpoints", parent);
    const int run = (strcmp(base, "lock") != 0 && holds(parent, "lock")) ||
                    (stat(ckpts, &st) == 0 && S_ISDIR(st.st_mode));
    const int held = strcmp(base, "lock") == 0 && holds(parent, "lock");
    if (run || held)
        return pt_fail(err, PT_EINPUT, "%s '%s' is one of the files the run directory '%s' keeps "
                       "(its lock, logs, profile, or its resumes' records: resuming, "
                       "abandoned); write it elsewhere", option, path, parent);
    return 0;
}

/* An output must not land in a run directory's checkpoints (a checkpoint
 * holds only its own files, and pruning takes whole directories) nor be one
 * of the files a run keeps beside them (its lock, logs and profile: a lock
 * replaced lets a second job in). run_dir: the run's directory. */
static int output_not_in_this_run(const char *option, const char *path, const char *run_dir,
                                  pt_err *err)
{
    char real_run[PATH_MAX], ckpts[PATH_MAX + 16], real_ckpts[PATH_MAX];
    char parent[PATH_MAX], real_parent[PATH_MAX], real_out[PATH_MAX];
    int missing, rc;
    if (!run_dir || !*run_dir)
        return 0;
    if ((rc = real_path(option, run_dir, real_run, &missing, err)) || missing)
        return rc;
    snprintf(ckpts, sizeof ckpts, "%s/checkpoints", run_dir);
    if ((rc = real_path(option, ckpts, real_ckpts, &missing, err)))
        return rc;
    const int have_ckpts = !missing;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1,
             slash ? path : ".");
    if ((rc = real_path(option, parent, real_parent, &missing, err)) || missing)
        return rc; /* no such directory: the write fails and says so */
    if ((rc = real_path(option, path, real_out, &missing, err)))
        return rc;
    const int exists = !missing;
    if (have_ckpts && (under(real_parent, real_ckpts) || (exists && under(real_out, real_ckpts))))
        return pt_fail(err, PT_EINPUT, "%s '%s' is in '%s', a run's checkpoints: a checkpoint holds "
                       "only its own files, and pruning removes whole checkpoints; write it "
                       "elsewhere", option, path, ckpts);
    const int own = is_run_name(base);
    if (strcmp(real_parent, real_run) == 0 && (own || (exists && strcmp(real_out, real_ckpts) == 0)))
        return pt_fail(err, PT_EINPUT, "%s '%s' is one of the files run.dir '%s' keeps (its lock, "
                       "logs, profile, checkpoints, or its resumes' records: resuming, "
                       "abandoned); write it elsewhere", option, path, run_dir);
    return 0;
}

/* an input file and the config key that names it (NULL: the config file) */
typedef struct {
    const char *path, *key;
} named_input;

/* The files a config names as inputs, in out[] (at most CONFIG_INPUTS, ""
 * where unset), their paths built in names[]: model.init_from and the
 * files of a Hugging Face model directory in it (model.safetensors,
 * config.json, vocab.txt, tokenizer_config.json: init_from is such a
 * directory) or beside it (the three but model.safetensors: init_from is
 * that file), data.vocab and the tokenizer_config.json beside it, the data
 * files. pipeline.profile is not among them (see
 * pt_run_dir_not_over_inputs). */
enum { HF_FILES = 4, CONFIG_INPUTS = 1 + 2 * HF_FILES + 9 };
typedef char input_name[2 * PT_PATH_MAX];
static int config_inputs(const pt_config *cfg, named_input out[CONFIG_INPUTS],
                         input_name names[2 * HF_FILES + 1])
{
    static const char *const hf[HF_FILES] = {"model.safetensors", "config.json", "vocab.txt",
                                             "tokenizer_config.json"};
    const char *init = cfg->model.init_from, *slash = strrchr(init, '/');
    const char *vocab = cfg->data.vocab, *vslash = strrchr(vocab, '/');
    int n = 0;
    out[n++] = (named_input){init, "model.init_from"};
    for (int i = 0; i < HF_FILES; i++) {
        snprintf(names[2 * i], sizeof names[0], "%s/%s", init, hf[i]);
        snprintf(names[2 * i + 1], sizeof names[0], "%.*s%s", slash ? (int)(slash - init) + 1 : 0,
                 init, hf[i]);
        out[n++] = (named_input){*init ? names[2 * i] : "", "model.init_from"};
        out[n++] = (named_input){*init && i > 0 ? names[2 * i + 1] : "", "model.init_from"};
    }
    snprintf(names[2 * HF_FILES], sizeof names[0], "%.*stokenizer_config.json",
             vslash ? (int)(vslash - vocab) + 1 : 0, vocab);
    out[n++] = (named_input){vocab, "data.vocab"};
    out[n++] = (named_input){*vocab ? names[2 * HF_FILES] : "", "data.vocab"};
    out[n++] = (named_input){cfg->data.train_file, "data.train_file"};
    out[n++] = (named_input){cfg->data.test_file, "data.test_file"};
    out[n++] = (named_input){cfg->data.train_images, "data.train_images"};
    out[n++] = (named_input){cfg->data.train_labels, "data.train_labels"};
    out[n++] = (named_input){cfg->data.test_images, "data.test_images"};
    out[n++] = (named_input){cfg->data.test_labels, "data.test_labels"};
    out[n++] = (named_input){cfg->data.text, "data.text"};
    return n;
}

/* train's inputs are none of what its run writes or removes: the files
 * run.dir keeps (its lock, logs and profiles, appended to or replaced) and
 * whatever lies in its checkpoints directory (a save empties the step
 * directory it writes, pruning removes whole ones). Each input that exists
 * is looked at by its real path, so a symbolic link to such a file counts
 * as the file. pipeline.profile is not among them: run.dir's own
 * profile.json is where such a file comes from, and the run writes it
 * again with what it planned from. */
int pt_run_dir_not_over_inputs(const pt_config *cfg, const char **key, pt_err *err)
{
    *key = NULL;
    char real_run[PATH_MAX], ckpts[PATH_MAX + 16], real_ckpts[PATH_MAX], real_in[PATH_MAX];
    int missing, rc;
    if ((rc = real_path("run.dir", cfg->run.dir, real_run, &missing, err)) || missing)
        return rc; /* not there yet: nothing in it can be an input */
    snprintf(ckpts, sizeof ckpts, "%s/checkpoints", real_run);
    if ((rc = real_path("run.dir", ckpts, real_ckpts, &missing, err)))
        return rc;
    const int have_ckpts = !missing;
    named_input inputs[1 + CONFIG_INPUTS] = {{cfg->empty_source ? "" : cfg->source, NULL}};
    input_name names[2 * HF_FILES + 1];
    const int n = 1 + config_inputs(cfg, inputs + 1, names);
    for (int i = 0; i < n; i++) {
        const char *p = inputs[i].path;
        /* one that does not resolve is not read as it is (its loader says
         * why, where it is an input at all: most are the files a model
         * directory may hold) */
        if (!p || !*p || !realpath(p, real_in))
            continue;
        const char *cut = strrchr(real_in, '/');
        char parent[PATH_MAX];
        snprintf(parent, sizeof parent, "%.*s", cut ? (int)(cut - real_in) + (cut == real_in) : 0,
                 real_in);
        const char *shown = inputs[i].key ? "" : "the config file ";
        *key = inputs[i].key;
        if (have_ckpts && under(real_in, real_ckpts))
            return pt_fail(err, PT_EINPUT, "%s'%s' is in '%s/checkpoints', run.dir's "
                           "checkpoints, which the run's saves and pruning replace and remove: "
                           "keep it elsewhere", shown, p, cfg->run.dir);
        if (cut && strcmp(parent, real_run) == 0 && is_run_name(cut + 1))
            return pt_fail(err, PT_EINPUT, "%s'%s' is one of the files run.dir '%s' keeps (its "
                           "lock, logs, profiles, or its resumes' records: resuming, abandoned), "
                           "which the run writes, moves or removes: keep it elsewhere",
                           shown, p, cfg->run.dir);
        *key = NULL;
    }
    return 0;
}

/* A run.dir that exists but holds no lock file has had no run in it (every
 * train makes one and leaves it there; one that holds checkpoints had, its
 * lock removed by hand): a file in it under the name of a
 * run's logs or profile is someone else's, which the run would append to
 * or replace, as is a file named lock that holds no run's lock text (a
 * run's starts "pid "; one cut short before its text is empty). The
 * profile.json that pipeline.profile names is let be: the run reads it and
 * writes it again. A lock, log or profile that is no file at all is left to
 * its own refusal, which says what it is. */
int pt_run_dir_not_foreign(const pt_config *cfg, pt_err *err)
{
    const char *run_dir = *cfg->run.dir ? cfg->run.dir : ".";
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/lock", run_dir);
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0 || errno != ENOENT) {
        struct stat st;
        char text[4];
        ssize_t got = -1;
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
            got = pread(fd, text, sizeof text, 0);
        if (fd >= 0)
            close(fd);
        if (got > 0 && (got < (ssize_t)sizeof text || memcmp(text, "pid ", 4) != 0))
            return pt_fail(err, PT_EINPUT, "'%s' is no pipetrain run's lock file (a run's starts "
                           "'pid '): the run would write its lock over it; move that file "
                           "away or choose another run.dir", path);
        return 0;
    }
    if (holds(run_dir, "checkpoints"))
        return 0; /* a run's, its lock removed by hand */
    DIR *d = opendir(run_dir);
    if (!d)
        return 0; /* not there yet, or not a directory: making it says why */
    char profile[PATH_MAX] = "", real[PATH_MAX];
    if (*cfg->pipeline.profile && !realpath(cfg->pipeline.profile, profile))
        profile[0] = '\0';
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        /* RUN_DIR/resuming: the marker a resume from another directory
         * leaves (made after the lock), which the first save removes,
         * whatever it is */
        const int marker = strcmp(e->d_name, "resuming") == 0;
        if (!marker && !pt_rundir_is_run_file(e->d_name))
            continue;
        snprintf(path, sizeof path, "%s/%s", run_dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0 || (!marker && !S_ISREG(st.st_mode)))
            continue; /* a link, FIFO or directory: refused where it is opened, as such */
        if (S_ISREG(st.st_mode) && st.st_size == 0)
            continue; /* nothing to lose (and an empty metrics.jsonl, which a start of an
                       * older pipetrain killed before its lock left, must not lock it out) */
        if (strcmp(e->d_name, "profile.json") == 0 && *profile && realpath(path, real) &&
            strcmp(real, profile) == 0)
            continue;
        rc = pt_fail(err, PT_EINPUT, "'%s' is someone else's: no pipetrain run has used '%s' "
                     "(it holds no lock file and no checkpoints), and a run would append to or "
                     "replace that file (a run keeps its lock, logs and profile there); move it "
                     "away or choose a new run.dir", path, run_dir);
    }
    closedir(d);
    return rc;
}

/* The same, and nowhere in any run's checkpoints (output_not_in_checkpoints). */
int pt_output_not_in_run(const char *option, const char *path, const char *run_dir, pt_err *err)
{
    int rc = output_not_in_this_run(option, path, run_dir, err);
    if (rc == 0)
        rc = output_not_a_run_file(option, path, err);
    return rc ? rc : output_not_in_checkpoints(option, path, err);
}

/* An export must not replace one of the inputs of the run its checkpoint
 * comes from, as the checkpoint's config names them (model.init_from and
 * the files beside it, data.vocab and its directory, the data files): an
 * export into the pretrained model's own directory would replace that
 * model. Checks out itself and, for a bert export (a directory), each file
 * it writes there. */
int pt_export_not_over_inputs(const char *out, int dir, const pt_config *cfg, pt_err *err)
{
    static const char *const written[] = {"model.safetensors", "config.json", "vocab.txt",
                                          "tokenizer_config.json"};
    /* a tokenizer_config.json written beside data.vocab would change how
     * the next run with that vocabulary tokenizes (its data.lowercase auto) */
    char vocab_dir[PT_PATH_MAX];
    const char *vslash = strrchr(cfg->data.vocab, '/');
    snprintf(vocab_dir, sizeof vocab_dir, "%.*s",
             vslash ? (int)(vslash - cfg->data.vocab) + (vslash == cfg->data.vocab) : 1,
             vslash ? cfg->data.vocab : ".");
    named_input inputs[CONFIG_INPUTS + 1];
    input_name names[2 * HF_FILES + 1];
    int n = config_inputs(cfg, inputs, names);
    inputs[n++] = (named_input){*cfg->data.vocab ? vocab_dir : "", "the directory of data.vocab"};
    struct stat o, in;
    for (int w = -1; w < (dir ? (int)(sizeof written / sizeof *written) : 0); w++) {
        char p[2 * PT_PATH_MAX];
        snprintf(p, sizeof p, w < 0 ? "%s" : "%s/%s", out, w < 0 ? "" : written[w]);
        if (stat(p, &o) != 0)
            continue;
        for (int i = 0; i < n; i++)
            if (inputs[i].path && *inputs[i].path &&
                stat(inputs[i].path, &in) == 0 && same_inode(&o, &in))
                return pt_fail(err, PT_EINPUT, "export: '%s' %s '%s', %s of the run this "
                               "checkpoint comes from%s; export elsewhere", p,
                               w < 0 && dir ? "is" : "would replace", inputs[i].path,
                               inputs[i].key, w < 0 && dir ? ", whose files it would replace" : "");
    }
    return 0;
}

/* path as an absolute name of its directory and its last component, so
 * that two spellings of one output ("a.st", "./a.st") compare equal. */
static void output_name(const char *path, char *out, size_t n)
{
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX], real[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1,
             slash ? path : ".");
    if (!realpath(dir, real))
        snprintf(real, sizeof real, "%s", dir);
    snprintf(out, n, "%s/%s", real, slash ? slash + 1 : path);
}

/* Whether two output paths name one file: the same directory and name. A
 * write replaces the name, and a symbolic link there is refused, so two
 * names of one inode do not collide. */
int pt_output_same(const char *a, const char *b)
{
    char na[2 * PATH_MAX + 2], nb[2 * PATH_MAX + 2];
    output_name(a, na, sizeof na);
    output_name(b, nb, sizeof nb);
    return strcmp(na, nb) == 0;
}

/* The run directory a checkpoint directory lies in: RUN/checkpoints/step_N. */
void pt_output_run_of_checkpoint(const char *ckpt, char *out, size_t n)
{
    char bare[2 * PT_PATH_MAX];
    if (strlen(ckpt) >= sizeof bare) {
        out[0] = '\0';
        return;
    }
    snprintf(bare, sizeof bare, "%s", ckpt);
    for (size_t k = strlen(bare); k > 1 && bare[k - 1] == '/';)
        bare[--k] = '\0';
    const int len = snprintf(out, n, "%s/../..", bare);
    if (len < 0 || (size_t)len >= n) {
        out[0] = '\0';
        return;
    }
    /* as the user would write it (RUN for RUN/checkpoints/step_N, "." for
     * checkpoints/step_N) where that names the same directory (not where a
     * level is '..' or a link) */
    char lexical[sizeof bare];
    snprintf(lexical, sizeof lexical, "%s", bare);
    for (int level = 0; level < 2; level++) {
        char *slash = strrchr(lexical, '/');
        if (level == 1 && strcmp(lexical, ".") == 0)
            snprintf(lexical, sizeof lexical, ".."); /* step_N, in checkpoints/ */
        else if (!slash)
            snprintf(lexical, sizeof lexical, ".");
        else
            slash[slash == lexical] = '\0'; /* "/step_N" keeps its "/" */
        for (size_t k = strlen(lexical); k > 1 && lexical[k - 1] == '/';)
            lexical[--k] = '\0';
    }
    char a[PATH_MAX], b[PATH_MAX];
    if (realpath(out, a) && realpath(lexical, b) && strcmp(a, b) == 0)
        snprintf(out, n, "%s", lexical);
}

int pt_output_run_placement(const pt_config *cfg, int run_dir, pt_err *err)
{
    /* not inside another run's checkpoints, whose pruning would take this
     * run's lock and logs */
    int rc = run_dir ? pt_output_run_dir_ok(cfg->run.dir, err) : 0;
    if (rc == PT_EINPUT)
        pt_config_key_prefix(cfg, err, "run.dir");
    /* nor may the run's files or checkpoints be any of its inputs */
    const char *input_key = NULL;
    if (rc == 0 && run_dir && (rc = pt_run_dir_not_over_inputs(cfg, &input_key, err)) == PT_EINPUT &&
        input_key)
        pt_config_key_prefix(cfg, err, input_key);
    /* nor may run.dir hold another's files under the run's files' names */
    if (rc == 0 && run_dir && (rc = pt_run_dir_not_foreign(cfg, err)) == PT_EINPUT)
        pt_config_key_prefix(cfg, err, "run.dir");
    /* nor may the cache's disk tier keep its file in a checkpoint, which a
     * pruning removes under it */
    if (rc == 0 && pt_config_cache_on(cfg) && *cfg->cache.disk_dir &&
        (rc = pt_output_dir_not_in_checkpoints("the directory", cfg->cache.disk_dir, err)) ==
            PT_EINPUT)
        pt_config_key_prefix(cfg, err, "cache.disk_dir");
    return rc;
}
