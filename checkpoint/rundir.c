/*
 * rundir.c: the run directory a training job owns: its lock, the listing of
 * its checkpoint directories (the newest, pruning) and the removal of what
 * crashed jobs left there.
 *
 * Removing leftovers is safe only when no writer is running: a temporary file
 * may be a live save of another rank. So it happens in two places only:
 * when the lock is taken (no rank of this job writes yet, and the lock keeps
 * other jobs out: temporary files), and when stage 0 prepares or prunes step
 * directories other than the one being written (incomplete directories).
 */
#include "checkpoint/checkpoint.h"
#include "checkpoint/manifest.h"

#include "comm/comm.h"
#include "formats/formats.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* the '/' between dir and what follows: none after a dir that ends in one
 * (runs/a/ + x is runs/a/x, the same file as runs/a//x, as a user writes it) */
static const char *separator(const char *dir)
{
    const size_t n = strlen(dir);
    return n && dir[n - 1] == '/' ? "" : "/";
}

char *pt_path_join(char *out, const char *dir, const char *name)
{
    int len = snprintf(out, PT_CKPT_PATH, "%s%s%s", dir, separator(dir), name);
    if (len < 0 || len >= PT_CKPT_PATH)
        out[0] = '\0';
    return out;
}

void pt_step_dir(const char *run_dir, int64_t step, char *out, size_t n)
{
    int len = snprintf(out, n, "%s%scheckpoints/step_%010" PRId64, run_dir, separator(run_dir), step);
    if (len < 0 || (size_t)len >= n)
        out[0] = '\0';
}

int pt_checkpoint_dir_step(const char *name, int64_t *step)
{
    char *end;
    if (strncmp(name, "step_", 5) != 0 || name[5] < '0' || name[5] > '9')
        return 0;
    errno = 0;
    long long v = strtoll(name + 5, &end, 10);
    if (errno || end == name + 5 || *end || v < 0)
        return 0;
    *step = v;
    return 1;
}

/* Whether a run's checkpoints/ entry is a step directory under the name a
 * save gives it (step_ and 10 or more digits): the name the scans return
 * and pruning removes. Another spelling of a step (step_4, a copy made by
 * hand) is the user's, left alone as any foreign entry. */
static int entry_step(const char *name, int64_t *step)
{
    char canonical[64];
    return pt_checkpoint_dir_step(name, step) &&
           snprintf(canonical, sizeof canonical, "step_%010" PRId64, *step) > 0 &&
           strcmp(canonical, name) == 0;
}

/* Whether dir is a step directory with a manifest: the directory itself,
 * not a symbolic link (a linked directory is not the run's: never a
 * checkpoint, never emptied), and a manifest that is, or links to, a
 * regular file. The loaders open the manifest through a link too, so a
 * checkpoint that eval, export and train.resume=DIR accept is one that
 * auto finds, and pruning never takes it for a save that did not finish. */
static int has_manifest(const char *dir)
{
    char path[PT_CKPT_PATH];
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0;
    pt_path_join(path, dir, "manifest");
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Whether a step directory's manifest cannot be looked at by this user
 * (a directory without search permission): not known to be a save that
 * did not finish, nor to be a checkpoint. */
static int unreadable(const char *dir)
{
    char path[PT_CKPT_PATH];
    struct stat st;
    return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
           stat(pt_path_join(path, dir, "manifest"), &st) != 0 &&
           (errno == EACCES || errno == EPERM);
}

/* Removes the files of dir; only_temporary: just the temporary ones. Then
 * the directory itself, unless only_temporary. A dir that is a symbolic
 * link is not followed (the files of where it leads are not ours), and
 * what is in dir is unlinked, never searched through. */
static void remove_files(const char *dir, int only_temporary)
{
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    /* the manifest first, on disk before the rest goes: a crash halfway
     * leaves a step directory without one (no checkpoint, which the next
     * save's pruning removes), never a manifest naming files that are gone */
    if (!only_temporary && unlinkat(dirfd(d), "manifest", 0) == 0 && fsync(dirfd(d)) != 0) {
        closedir(d); /* not known to be gone on disk: the rest stays for the next pruning */
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            (!only_temporary || pt_is_temporary_name(e->d_name)))
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    if (!only_temporary)
        rmdir(dir);
}

/* Checkpoint readers (pt_checkpoint_hold) hold a shared flock on its
 * manifest; pruning removes a checkpoint only under an exclusive one, taken
 * without waiting. Returns the descriptor to close after the removal, -2
 * when there is no manifest to hold (remove), or -1 to keep the checkpoint
 * for now: a reader holds it, or the lock could not be asked for (keeping
 * too much is the safe failure). NFS emulates flock with byte-range locks,
 * for which an exclusive lock needs the file open for writing. */
static int take_for_removal(const char *dir)
{
    char path[PT_CKPT_PATH];
    pt_path_join(path, dir, "manifest");
    int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM))
        fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? -2 : -1;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        /* a file system without locks at all: nothing can hold it */
        const int none = errno == ENOLCK || errno == ENOSYS || errno == EOPNOTSUPP;
        if (none)
            return fd;
        close(fd);
        return -1;
    }
    return fd;
}

int pt_checkpoint_hold(pt_ckpt_hold *h, const char *dir)
{
    h->fd = -1;
    char path[PT_CKPT_PATH];
    pt_path_join(path, dir, "manifest");
    /* O_NONBLOCK: a FIFO there must not stop the reader (the read that
     * follows refuses it, naming it) */
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat held, now;
    if (fd < 0)
        return 0;
    if (fstat(fd, &held) != 0 || !S_ISREG(held.st_mode)) {
        close(fd);
        return 0;
    }
    int rc;
    while ((rc = flock(fd, LOCK_SH)) != 0 && errno == EINTR)
        ;
    /* a pruning that held it first removed it, or a save replaced it */
    if (rc != 0 || stat(path, &now) != 0 || now.st_dev != held.st_dev || now.st_ino != held.st_ino) {
        close(fd);
        return 0;
    }
    h->fd = fd;
    return 1;
}

void pt_checkpoint_release(pt_ckpt_hold *h)
{
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
}

/* The newest complete checkpoint's step into *best (-1: none); PT_EINPUT
 * when checkpoints/ cannot be read, or a newer step directory cannot be
 * looked into by this user (which is newest is not known). */
static int newest(const char *run_dir, int64_t *best_out, pt_err *err)
{
    char root[PT_CKPT_PATH], path[PT_CKPT_PATH];
    DIR *d = opendir(pt_path_join(root, run_dir, "checkpoints"));
    int64_t best = -1, hidden = -1;
    *best_out = -1;
    if (!d && (errno == EACCES || errno == EPERM))
        return pt_fail(err, PT_EINPUT, "cannot read '%s': %s", root, strerror(errno));
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            int64_t step;
            if (!entry_step(e->d_name, &step) || step <= best)
                continue;
            if (has_manifest(pt_path_join(path, root, e->d_name)))
                best = step;
            else if (step > hidden && unreadable(path))
                hidden = step;
        }
        closedir(d);
    }
    /* a newer one this user may not look into: which is newest is unknown */
    if (hidden > best) {
        pt_step_dir(run_dir, hidden, path, sizeof path);
        return pt_fail(err, PT_EINPUT, "'%s' cannot be read (%s), and no checkpoint this user "
                       "can read is newer: make it readable, or move it out of checkpoints/",
                       path, strerror(EACCES));
    }
    *best_out = best;
    return 0;
}

int pt_checkpoint_readable(const char *run_dir, pt_err *err)
{
    int64_t best;
    return newest(run_dir, &best, err);
}

int pt_checkpoint_latest(const char *run_dir, char *out, size_t n, pt_err *err)
{
    int64_t best;
    char root[PT_CKPT_PATH];
    int rc = newest(run_dir, &best, err);
    if (rc == 0 && best < 0)
        rc = pt_fail(err, PT_EINPUT, "no checkpoint in '%s'", pt_path_join(root, run_dir, "checkpoints"));
    if (rc == 0)
        pt_step_dir(run_dir, best, out, n);
    return rc;
}

int64_t pt_checkpoint_passed_over(const char *run_dir, const char *latest)
{
    const char *base = latest ? strrchr(latest, '/') : NULL;
    int64_t from = -1, newest = -1;
    if (latest && !pt_checkpoint_dir_step(base ? base + 1 : latest, &from))
        return -1;
    char root[PT_CKPT_PATH], path[PT_CKPT_PATH];
    DIR *d = opendir(pt_path_join(root, run_dir, "checkpoints"));
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int64_t step;
        if (entry_step(e->d_name, &step) && step > from && step > newest &&
            !has_manifest(pt_path_join(path, root, e->d_name)))
            newest = step;
    }
    if (d)
        closedir(d);
    return newest;
}

/* RUN_DIR/abandoned, made if missing; anything there but a directory of
 * its own (a file, a link, which would carry moves elsewhere) is refused. */
static int abandoned_dir(const char *run_dir, char *out, size_t n, pt_err *err)
{
    snprintf(out, n, "%s%sabandoned", run_dir, separator(run_dir));
    struct stat st;
    if (lstat(out, &st) != 0) {
        int rc = pt_mkdir_p(out, 0755, err);
        if (rc)
            return rc;
    } else if (!S_ISDIR(st.st_mode)) {
        return pt_fail(err, PT_EINPUT, "'%s' is %s, not a directory: checkpoints set aside go "
                       "there; remove or rename it", out,
                       S_ISLNK(st.st_mode) ? "a symbolic link" : pt_file_kind(st.st_mode));
    }
    return 0;
}

void pt_rundir_sweep_abandoned(const char *run_dir)
{
    char base[PT_CKPT_PATH], path[PT_CKPT_PATH];
    DIR *d = opendir(pt_path_join(base, run_dir, "abandoned"));
    struct dirent *e;
    static const char *const made[] = {"after-step_", "replaced-by-step_", "step_"};
    while (d && (e = readdir(d))) {
        const char *dot = strrchr(e->d_name, '.');
        int ours = 0;
        for (size_t i = 0; i < sizeof made / sizeof *made; i++)
            ours |= strncmp(e->d_name, made[i], strlen(made[i])) == 0;
        /* (rmdir takes an empty directory only: what holds anything stays) */
        if (ours && dot && strlen(dot) == 7 && rmdir(pt_path_join(path, base, e->d_name)) == 0)
            fprintf(stderr, "pipetrain: note: removed '%s', an empty directory a start killed "
                    "before its first move to abandoned/ left\n", path);
    }
    if (d)
        closedir(d);
}

/* The note of a step directory that was a symbolic link, moved aside. */
static void note_link_moved(const char *path, const char *dest)
{
    fprintf(stderr, "pipetrain: note: '%s' was a symbolic link, not a checkpoint of the run's; "
            "moved to '%s' (where it leads is left as it was)\n", path, dest);
}

/* Moves `path` (checkpoints/NAME, what pipetrain does not remove: a
 * directory inside, a link) whole into a new directory of its own under
 * RUN_DIR/abandoned; dest gets its new path. */
static int set_aside(const char *run_dir, const char *path, const char *name, char *dest,
                     size_t n, pt_err *err)
{
    char base[PT_CKPT_PATH];
    int rc = abandoned_dir(run_dir, base, sizeof base, err);
    if (rc)
        return rc;
    snprintf(dest, n, "%s/%s.XXXXXX", base, name);
    if (!mkdtemp(dest))
        return pt_fail(err, PT_ESYS, "cannot create '%s': %s", dest, strerror(errno));
    const size_t at = strlen(dest);
    snprintf(dest + at, n - at, "/%s", name);
    if (rename(path, dest) != 0) {
        rc = pt_fail(err, PT_ESYS, "'%s' holds what is not a file of a checkpoint, and "
                     "cannot be moved to '%s': %s", path, dest, strerror(errno));
        dest[at] = '\0';
        rmdir(dest);
        return rc;
    }
    /* durable where it went before where it left (as pt_rundir_abandon_after) */
    char from[PT_CKPT_PATH];
    dest[at] = '\0';
    pt_fsync_dir(dest, NULL);
    dest[at] = '/';
    pt_fsync_dir(base, NULL);
    snprintf(from, sizeof from, "%s", path);
    char *slash = strrchr(from, '/');
    if (slash && slash != from) {
        *slash = '\0';
        pt_fsync_dir(from, NULL);
    }
    return rc;
}

/* A step directory made for a save: run.dir was writable when the run
 * began, so one that cannot be made now (a file system gone read-only, or
 * its permissions changed under the run) fails the run as a full disk
 * does, exit 1, not as input the user gave. */
static int make_step_dir(const char *dir, pt_err *err)
{
    int rc = pt_mkdir_p(dir, 0755, err);
    if (rc == PT_EINPUT)
        rc = err->code = PT_ESYS;
    return rc;
}

int pt_rundir_prepare_step(const char *run_dir, int64_t step, pt_err *err)
{
    char dir[PT_CKPT_PATH], dest[PT_CKPT_PATH + 64];
    pt_step_dir(run_dir, step, dir, sizeof dir);
    struct stat st;
    if (lstat(dir, &st) != 0)
        return make_step_dir(dir, err);
    if (S_ISDIR(st.st_mode)) {
        /* the manifest first, through the directory itself (never a link's
         * target), so it stops being a checkpoint before anything else goes */
        const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            const int failed = unlinkat(fd, "manifest", 0) == 0 && fsync(fd) != 0;
            const int e = errno;
            close(fd);
            if (failed) /* its files stay until the manifest's removal is known to be on disk */
                return pt_fail(err, PT_ESYS, "'%s': cannot make the removal of its manifest "
                               "durable (fsync): %s", dir, strerror(e));
        }
        remove_files(dir, 0);
        if (lstat(dir, &st) != 0)
            return make_step_dir(dir, err);
    }
    /* left: something that is not a file of ours (a directory in it, a link
     * or a file by its name); never searched through or removed: moved */
    char name[64];
    snprintf(name, sizeof name, "step_%010" PRId64, step);
    const int link = S_ISLNK(st.st_mode);
    int rc = set_aside(run_dir, dir, name, dest, sizeof dest, err);
    if (rc)
        return rc;
    if (link)
        note_link_moved(dir, dest);
    else
        fprintf(stderr, "pipetrain: note: '%s' %s not a file of a checkpoint; moved to '%s'\n",
                dir, S_ISDIR(st.st_mode) ? "held what is" : "was", dest);
    return make_step_dir(dir, err);
}

void pt_rundir_prune(const char *run_dir, int keep, int64_t current)
{
    char root[PT_CKPT_PATH], path[PT_CKPT_PATH];
    DIR *d = opendir(pt_path_join(root, run_dir, "checkpoints"));
    if (!d)
        return;
    int64_t *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t step;
        if (!entry_step(e->d_name, &step))
            continue;
        pt_path_join(path, root, e->d_name);
        const int complete = has_manifest(path);
        if (!complete && unreadable(path))
            continue; /* not known to be a crashed save: left to its owner */
        if (!complete) {
            if (step != current) {
                remove_files(path, 0);
                /* not silently: it may be a checkpoint whose manifest the
                 * user removed, not a crashed save's; what is left (a
                 * directory inside, or a link) is moved aside whole, once */
                struct stat st;
                char dest[PT_CKPT_PATH + 64];
                pt_err err = {0};
                const int link = lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
                if (link && set_aside(run_dir, path, e->d_name, dest, sizeof dest, &err) == 0)
                    note_link_moved(path, dest);
                else if (link)
                    fprintf(stderr, "pipetrain: note: '%s' is a symbolic link, not a checkpoint "
                            "of the run's; %s\n", path, err.msg);
                else if (lstat(path, &st) != 0)
                    fprintf(stderr, "pipetrain: note: '%s' was not a complete checkpoint (no "
                            "manifest: a save that did not finish, or a manifest removed); its "
                            "files were removed\n", path);
                else if (set_aside(run_dir, path, e->d_name, dest, sizeof dest, &err) == 0)
                    fprintf(stderr, "pipetrain: note: '%s' was not a complete checkpoint (no "
                            "manifest) and held what is not a file of a checkpoint; its files "
                            "were removed, the rest moved to '%s'\n", path, dest);
                else
                    fprintf(stderr, "pipetrain: note: '%s' is not a complete checkpoint (no "
                            "manifest); %s\n", path, err.msg);
            }
            continue;
        }
        if (n == cap) {
            size_t grown = cap ? 2 * cap : 64;
            int64_t *more = realloc(steps, grown * sizeof *steps);
            if (!more)
                break; /* keeping too much is the safe failure */
            steps = more;
            cap = grown;
        }
        steps[n++] = step;
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        size_t newer = 0;
        for (size_t j = 0; j < n; j++)
            newer += steps[j] > steps[i];
        if (newer >= (size_t)keep && steps[i] != current) {
            pt_step_dir(run_dir, steps[i], path, sizeof path);
            /* one that an eval or export is reading stays until a later save */
            const int held = take_for_removal(path);
            if (held == -1)
                continue;
            remove_files(path, 0);
            if (held >= 0)
                close(held);
        }
    }
    free(steps);
}

/* The complete checkpoints of RUN_DIR/checkpoints after `step` (all of
 * them for -1) move into a new RUN_DIR/abandoned/<name>.XXXXXX. */
static int abandon(const char *run_dir, int64_t step, const char *name, char *moved_to, size_t n,
                   int *count, pt_err *err)
{
    char root[PT_CKPT_PATH], path[PT_CKPT_PATH], dest[PT_CKPT_PATH + 64];
    *count = 0;
    moved_to[0] = '\0';
    DIR *d = opendir(pt_path_join(root, run_dir, "checkpoints"));
    if (!d)
        return 0;
    /* whether abandoned/ was there: made here, it goes again with a move
     * taken back whole */
    char base_dir[PT_CKPT_PATH];
    struct stat st;
    const int had_base = lstat(pt_path_join(base_dir, run_dir, "abandoned"), &st) == 0;
    int rc = 0, moved;
    struct dirent *e;
    /* scanned again until a pass moves nothing: a directory read while
     * entries leave it may skip some (POSIX leaves that open) */
    do {
        moved = 0;
        rewinddir(d);
        while (rc == 0 && (e = readdir(d))) {
            int64_t at;
            /* complete ones only: an incomplete directory is no history, and
             * the next save's pruning removes it */
            if (!entry_step(e->d_name, &at) || at <= step ||
                !has_manifest(pt_path_join(path, root, e->d_name)))
                continue;
            if (!moved_to[0]) {
                char base[PT_CKPT_PATH];
                if ((rc = abandoned_dir(run_dir, base, sizeof base, err)))
                    break;
                snprintf(dest, sizeof dest, "%s/%s.XXXXXX", base, name);
                if (!mkdtemp(dest)) {
                    rc = pt_fail(err, PT_ESYS, "cannot create '%s': %s", dest, strerror(errno));
                    break;
                }
                snprintf(moved_to, n, "%s", dest);
            }
            snprintf(dest, sizeof dest, "%s/%s", moved_to, e->d_name);
            /* not from under a reader (an eval, export or inspect holds it:
             * it opens the files by their path), as pruning does not: a
             * read is given a while to end (path: the step's, from the
             * check above) */
            int held = take_for_removal(path);
            for (int tries = 0; held == -1 && tries < 200; tries++) {
                /* the job's other ranks wait for this start: busy, not gone,
                 * to their questions (a run.timeout_s under the 10 s) */
                pt_comm_busy("moving its later checkpoints to abandoned/, one of them being read");
                nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
                held = take_for_removal(path);
            }
            if (held == -1) {
                rc = pt_fail(err, PT_ESYS, "'%s' is being read (an eval, export or inspect holds "
                             "it) and cannot move to abandoned/ now; nothing was moved: start "
                             "again once that command ends", path);
                break;
            }
            if (rename(path, dest) != 0)
                rc = pt_fail(err, PT_ESYS, "cannot move '%s' to '%s': %s", path, dest,
                             strerror(errno));
            else
                ++*count, ++moved;
            if (held >= 0)
                close(held);
        }
    } while (rc == 0 && moved);
    closedir(d);
    if (rc && moved_to[0]) { /* all or nothing: what moved goes back */
        DIR *back = opendir(moved_to);
        while (back && (e = readdir(back))) {
            int64_t at;
            if (!entry_step(e->d_name, &at))
                continue;
            snprintf(dest, sizeof dest, "%s/%s", moved_to, e->d_name);
            if (rename(dest, pt_path_join(path, root, e->d_name)) == 0)
                --*count;
        }
        if (back)
            closedir(back);
        if (*count == 0 && rmdir(moved_to) == 0) {
            moved_to[0] = '\0';
            if (!had_base)
                rmdir(base_dir);
        }
    }
    if (*count) {
        /* where they went first (the new directory, then its entry in
         * abandoned/), where they left last: a power loss in between
         * leaves them in both places, never in neither */
        char base[PT_CKPT_PATH];
        snprintf(base, sizeof base, "%s%sabandoned", run_dir, separator(run_dir));
        pt_fsync_dir(moved_to, NULL);
        pt_fsync_dir(base, NULL);
        pt_fsync_dir(root, NULL);
    }
    return rc;
}

int pt_rundir_abandon_after(const char *run_dir, int64_t step, char *moved_to, size_t n,
                            int *count, pt_err *err)
{
    char name[64];
    snprintf(name, sizeof name, "after-step_%010" PRId64, step);
    return abandon(run_dir, step, name, moved_to, n, count, err);
}

/* The manifest's SHA-256 in hex: which checkpoint a path holds. */
static int manifest_hex(const char *dir, char hex[65], pt_err *err)
{
    char path[PT_CKPT_PATH];
    unsigned char digest[32];
    uint64_t size;
    struct stat st;
    /* larger than any manifest, whose record is at most
     * PT_MANIFEST_MAX_BYTES and its header a few bytes (a forged file naming
     * a sparse one would be hashed for as long as its size takes) */
    if (stat(pt_path_join(path, dir, "manifest"), &st) == 0 && S_ISREG(st.st_mode) &&
        st.st_size > 2 * (off_t)PT_MANIFEST_MAX_BYTES)
        return pt_fail(err, PT_EINPUT, "'%s': %lld bytes, more than a manifest holds", path,
                       (long long)st.st_size);
    int rc = pt_sha256_file(path, digest, &size, err);
    for (int i = 0; rc == 0 && i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    return rc;
}

static const char RESUMING_HINT[] =
    "RUN_DIR/resuming names the checkpoint an interrupted start was resuming: another "
    "directory's, not yet saved in run.dir, or a step of run.dir's own it went back to while "
    "its later ones moved to abandoned/; remove it to resume the newest left in "
    "RUN_DIR/checkpoints";

/* A third line, "moving", while run.dir's own checkpoints after the
 * history kept move to abandoned/: some may be left there (a kill between
 * two moves), so the file stands whatever run.dir holds. */
static const char MOVING[] = "moving\n";

static int resuming_write(const char *run_dir, const char *from, int64_t step, int moving,
                          pt_err *err)
{
    char path[PT_CKPT_PATH], text[PT_PATH_MAX + 96 + sizeof MOVING], hex[65];
    char *abs = realpath(from, NULL);
    if (!abs)
        return pt_fail(err, PT_ESYS, "'%s': %s", from, strerror(errno));
    if (strchr(abs, '\n')) {
        free(abs);
        return pt_fail(err, PT_EINPUT, "'%s': a checkpoint path with a newline cannot be resumed "
                       "into another run.dir (its RUN_DIR/resuming names it on a line)", from);
    }
    if (manifest_hex(abs, hex, err)) {
        free(abs);
        return err->code;
    }
    /* one under run.dir by its path there: every node names it so, where
     * another's mount would not hold the absolute path */
    char *root = realpath(run_dir, NULL);
    const size_t rn = root ? strlen(root) : 0;
    const char *named = root && strncmp(abs, root, rn) == 0 && abs[rn] == '/' && rn > 1
                            ? abs + rn + 1
                            : abs;
    int len = snprintf(text, sizeof text, "%" PRId64 " %s\n%s\n%s", step, hex, named,
                       moving ? MOVING : "");
    free(root);
    free(abs);
    if (len < 0 || (size_t)len >= sizeof text)
        return pt_fail(err, PT_EINPUT, "'%s': its absolute path is too long", from);
    int rc = pt_write_file_atomic(pt_path_join(path, run_dir, "resuming"), text, (size_t)len, err);
    if (rc == 0)
        pt_fsync_dir(run_dir, NULL);
    return rc;
}

int pt_rundir_resuming_set(const char *run_dir, const char *from, int64_t step, pt_err *err)
{
    return resuming_write(run_dir, from, step, 0, err);
}

/* Whether run_dir holds a complete checkpoint of `step` or later. */
static int holds_step(const char *run_dir, int64_t step)
{
    char latest[PT_CKPT_PATH];
    pt_err none;
    int64_t newest = -1;
    const char *base;
    return pt_checkpoint_latest(run_dir, latest, sizeof latest, &none) == 0 &&
           (base = strrchr(latest, '/')) && pt_checkpoint_dir_step(base + 1, &newest) &&
           newest >= step;
}

/* Whether checkpoint `from` (of `step`) is run_dir's own step directory. */
static int own_checkpoint(const char *run_dir, const char *from, int64_t step)
{
    char own[PT_CKPT_PATH];
    struct stat from_st, own_st;
    pt_step_dir(run_dir, step, own, sizeof own);
    return stat(from, &from_st) == 0 && stat(own, &own_st) == 0 &&
           from_st.st_dev == own_st.st_dev && from_st.st_ino == own_st.st_ino;
}

int pt_rundir_resuming_get(const char *run_dir, char *out, size_t n, pt_err *err)
{
    char path[PT_CKPT_PATH];
    pt_path_join(path, run_dir, "resuming");
    struct stat st;
    out[0] = '\0';
    if (lstat(path, &st) != 0 && errno == ENOENT)
        return 0;
    /* a FIFO or device there is refused, not opened (it would block) */
    const int fd = pt_open_input(path, 0, err);
    if (fd < 0) {
        char why[sizeof err->msg];
        memcpy(why, err->msg, sizeof why);
        return pt_fail(err, PT_EINPUT, "%s (%s)", why, RESUMING_HINT);
    }
    char text[PT_PATH_MAX + 97 + sizeof MOVING];
    size_t len = 0;
    ssize_t got;
    while (len < sizeof text - 1 && (got = read(fd, text + len, sizeof text - 1 - len)) > 0)
        len += (size_t)got;
    close(fd);
    text[len] = '\0';
    int64_t step = -1;
    char hex[65] = "";
    int used = 0;
    const char *named = NULL;
    /* (a path holds no newline: the set refuses one) */
    const size_t tail = sizeof MOVING - 1;
    const int whole = len < sizeof text - 1; /* not cut short by the buffer */
    const int moving = whole && len > tail + 1 && memcmp(text + len - tail, MOVING, tail) == 0 &&
                       text[len - tail - 1] == '\n';
    if (moving)
        text[len -= tail] = '\0';
    if (whole && strlen(text) == len && len > 0 && text[len - 1] == '\n' &&
        sscanf(text, "%" SCNd64 " %64[0-9a-f]%n", &step, hex, &used) == 2 && step >= 0 &&
        step <= PT_CKPT_MAX_STEP &&
        strlen(hex) == 64 && text[used] == '\n') {
        named = text + used + 1;
        text[len - 1] = '\0';
        if (!*named || strchr(named, '\n') || strlen(named) >= n)
            named = NULL;
    }
    /* a relative path is under run.dir (resuming_write) */
    char joined[PT_CKPT_PATH];
    if (named && named[0] != '/') {
        if (snprintf(joined, sizeof joined, "%s%s%s", run_dir, separator(run_dir), named) >= (int)sizeof joined ||
            strlen(joined) >= n)
            named = NULL;
        else
            named = joined;
    }
    if (!named)
        return pt_fail(err, PT_EINPUT, "'%s' does not hold a step, a manifest's SHA-256 and one "
                       "checkpoint path (%s)", path, RESUMING_HINT);
    /* stale once run.dir holds a complete checkpoint of that step or later:
     * the resume's save was made, and what followed is the new history; for
     * a step of run.dir's own gone back to, once none after it is left.
     * Never while the moves to abandoned/ may not be done. */
    if (!moving && (own_checkpoint(run_dir, named, step) ? !holds_step(run_dir, step + 1)
                                                         : holds_step(run_dir, step)))
        return 0;
    char now[65];
    pt_err why = {0};
    if (manifest_hex(named, now, &why) != 0 || strcmp(now, hex) != 0)
        return pt_fail(err, PT_EINPUT, "'%s' names %s (step %" PRId64 "), which %s%s%s (%s)", path,
                       named, step,
                       why.code ? "is no longer a checkpoint there" : "holds another checkpoint now",
                       why.code ? ": " : "", why.code ? why.msg : "", RESUMING_HINT);
    /* run.dir's own step as every rank sees run.dir, not as rank 0's
     * absolute path (a node may mount it elsewhere) */
    if (own_checkpoint(run_dir, named, step))
        pt_step_dir(run_dir, step, out, n);
    else
        snprintf(out, n, "%s", named);
    return 0;
}

int pt_rundir_resuming_own(const char *run_dir, const char *named)
{
    const char *base = strrchr(named, '/');
    int64_t step;
    return base && pt_checkpoint_dir_step(base + 1, &step) && own_checkpoint(run_dir, named, step);
}

int pt_rundir_resuming_clear(const char *run_dir, pt_err *err)
{
    char path[PT_CKPT_PATH];
    if (unlink(pt_path_join(path, run_dir, "resuming")) == 0)
        pt_fsync_dir(run_dir, NULL);
    else if (errno != ENOENT)
        return pt_fail(err, PT_ESYS, "could not remove '%s': %s", path, strerror(errno));
    return 0;
}

int pt_rundir_abandoned_branch(const char *run_dir, const char *from, int64_t *kept)
{
    char base[PT_CKPT_PATH];
    char *abs = realpath(from, NULL);
    char *root = realpath(pt_path_join(base, run_dir, "abandoned"), NULL);
    char *cut = abs ? strrchr(abs, '/') : NULL;
    int found = 0;
    if (cut && cut != abs && root) {
        *cut = '\0'; /* the directory holding the step: after-step_K.XXXXXX */
        char *name = strrchr(abs, '/');
        char canonical[64];
        long long k = -1;
        if (name && name != abs) {
            *name++ = '\0';
            /* (with the name it is made under: step_K's ten digits and more) */
            static const char prefix[] = "after-step_";
            char *end = NULL;
            errno = 0;
            if (strncmp(name, prefix, sizeof prefix - 1) == 0 &&
                isdigit((unsigned char)name[sizeof prefix - 1]))
                k = strtoll(name + sizeof prefix - 1, &end, 10);
            found = strcmp(abs, root) == 0 && end && errno == 0 && k >= 0 && *end == '.' &&
                    snprintf(canonical, sizeof canonical, "after-step_%010lld", k) ==
                        (int)(end - name) &&
                    strncmp(canonical, name, (size_t)(end - name)) == 0;
        }
        if (found)
            *kept = (int64_t)k;
    }
    free(abs);
    free(root);
    return found;
}

int pt_rundir_resume_from(const char *run_dir, const char *from, int64_t step, int *foreign,
                          char *moved_to, size_t n, int *count, pt_err *err)
{
    char marker[PT_CKPT_PATH];
    struct stat mst;
    *foreign = !own_checkpoint(run_dir, from, step);
    moved_to[0] = '\0';
    *count = 0;
    /* what an earlier interrupted start left, put back if this one fails */
    void *before = NULL;
    size_t before_len = 0;
    pt_err quiet;
    pt_path_join(marker, run_dir, "resuming");
    const int had = lstat(marker, &mst) == 0 && S_ISREG(mst.st_mode) &&
                    pt_read_file(marker, PT_PATH_MAX + 128, &before, &before_len, &quiet) == 0;
    /* named before anything moves: another directory's checkpoint, or a step
     * of run.dir's own with later ones to move (a start killed between two
     * of the moves leaves `auto` the step gone back to, not the newest of
     * the history half moved) */
    const int named = *foreign || holds_step(run_dir, step + 1);
    int rc = named ? resuming_write(run_dir, from, step, 1, err) : 0;
    /* one of a history run.dir left after step K (in its abandoned/) leaves
     * every own step after K: the history that replaced it, none of them
     * its ancestors; another directory's checkpoint leaves all of them (its
     * history is not run.dir's: kept beside it, its older steps would be
     * the first that pruning removes, and a go-back to one would mix the
     * two) */
    int64_t branch;
    char name[64];
    if (rc == 0 && *foreign && pt_rundir_abandoned_branch(run_dir, from, &branch) && branch < step)
        rc = pt_rundir_abandon_after(run_dir, branch, moved_to, n, count, err);
    else if (rc == 0 && *foreign)
        rc = abandon(run_dir, -1,
                     (snprintf(name, sizeof name, "replaced-by-step_%010" PRId64, step), name),
                     moved_to, n, count, err);
    else if (rc == 0)
        rc = pt_rundir_abandon_after(run_dir, step, moved_to, n, count, err);
    if (rc == 0 && !*foreign) {
        /* run.dir's own history goes on; a file left saying `moving` would
         * take every later `auto` back to this step */
        rc = pt_rundir_resuming_clear(run_dir, err);
    } else if (rc == 0) {
        /* moved: stale once that step is saved here (a file left saying
         * `moving` is right too: it goes with the save) */
        pt_err quiet_write;
        resuming_write(run_dir, from, step, 0, &quiet_write);
    } else if (rc != 0 && *count > 0) {
        /* some could not be put back: the `moving` file stands, so that
         * `auto` does not resume what is left of the history moving out */
    } else if (rc != 0 && named && had) {
        if (pt_write_file_atomic(marker, before, before_len, &quiet) == 0)
            pt_fsync_dir(run_dir, NULL);
    } else if (rc != 0 && named)
        pt_rundir_resuming_clear(run_dir, &quiet);
    free(before);
    return rc;
}

void pt_rundir_resuming_early(const char *run_dir, const char *from, pt_rundir_resuming_was *was)
{
    memset(was, 0, sizeof *was);
    manifest m;
    pt_err quiet;
    const int opened = pt_manifest_open(&m, from, &quiet) == 0;
    const int64_t step = m.step;
    pt_manifest_close(&m);
    if (!opened)
        return;
    /* run.dir's own; or a run.dir holding that step or later, which would
     * pass the file over: until this start moves them, its own history
     * stands, as if it never ran */
    if (own_checkpoint(run_dir, from, step) || holds_step(run_dir, step))
        return;
    char marker[PT_CKPT_PATH];
    struct stat mst;
    pt_path_join(marker, run_dir, "resuming");
    was->had = lstat(marker, &mst) == 0;
    if (was->had && !(S_ISREG(mst.st_mode) && pt_read_file(marker, PT_PATH_MAX + 128, &was->text,
                                                          &was->len, &quiet) == 0)) {
        pt_rundir_resuming_keep(was);
        return;
    }
    was->set = pt_rundir_resuming_set(run_dir, from, step, &quiet) == 0;
}

void pt_rundir_resuming_undo(const char *run_dir, pt_rundir_resuming_was *was)
{
    char marker[PT_CKPT_PATH];
    pt_err quiet;
    if (was->set && was->had) {
        if (pt_write_file_atomic(pt_path_join(marker, run_dir, "resuming"), was->text, was->len,
                                 &quiet) == 0)
            pt_fsync_dir(run_dir, NULL);
    } else if (was->set && pt_rundir_resuming_clear(run_dir, &quiet) != 0) {
        fprintf(stderr, "pipetrain: note: %s (it names the checkpoint this start was to resume: "
                "remove it, or train.resume=auto resumes that checkpoint)\n", quiet.msg);
    }
    pt_rundir_resuming_keep(was);
}

void pt_rundir_resuming_keep(pt_rundir_resuming_was *was)
{
    free(was->text);
    memset(was, 0, sizeof *was);
}

int pt_rundir_resuming_note(const char *run_dir, const char *latest, char *out, size_t n)
{
    char named[PT_CKPT_PATH];
    pt_err quiet;
    out[0] = '\0';
    if (pt_rundir_resuming_get(run_dir, named, sizeof named, &quiet) != 0) {
        /* what train.resume=auto refuses the run.dir for */
        snprintf(out, n, "%s is used, run.dir's newest; train.resume=auto refuses this run.dir: %s",
                 latest, quiet.msg);
        return 1;
    }
    if (!*named)
        return 0;
    if (pt_rundir_resuming_own(run_dir, named))
        snprintf(out, n, "%s%sresuming names %s, run.dir's own step that a start went back to and "
                 "stopped before the later ones moved to abandoned/ (or is moving them now): %s "
                 "is of the history that start left, and train.resume=auto goes back to the "
                 "named one", run_dir, separator(run_dir), named, latest);
    else
        snprintf(out, n, "%s%sresuming names %s, which a start resumed and did not save here (or "
                 "is saving now): %s is of the history that resume left, and train.resume=auto "
                 "resumes the named one", run_dir, separator(run_dir), named, latest);
    return 1;
}

int pt_rundir_auto_resume_peek(const char *run_dir, char *out, size_t n)
{
    pt_err quiet;
    if (pt_rundir_resuming_get(run_dir, out, n, &quiet) == 0 && *out)
        return 1;
    if (pt_checkpoint_latest(run_dir, out, n, &quiet) == 0)
        return 1;
    out[0] = '\0';
    return 0;
}

int pt_rundir_resuming_instead(const char *run_dir, char *out, size_t n, char *said,
                               size_t said_n)
{
    pt_err quiet;
    if (pt_rundir_resuming_get(run_dir, out, n, &quiet) != 0 || !*out)
        return 0;
    snprintf(said, said_n, "%s holds no checkpoint of its own yet; %s%sresuming names %s, which a "
             "start resumed and did not save there (train.resume=auto resumes it): %s is used",
             run_dir, run_dir, separator(run_dir), out, out);
    return 1;
}

int pt_checkpoint_complete(const char *dir)
{
    return has_manifest(dir);
}

/* What crashed jobs left that is certainly garbage: temporary files in the
 * step directories. A step directory without a manifest stays until the next
 * save prunes it: the user may be pointing at it (and gets told it is not a
 * checkpoint), and removing it early gains nothing. */
static void remove_leftovers(const char *run_dir)
{
    char root[PT_CKPT_PATH], path[PT_CKPT_PATH];
    DIR *d = opendir(pt_path_join(root, run_dir, "checkpoints"));
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t step;
        if (!entry_step(e->d_name, &step))
            continue;
        pt_path_join(path, root, e->d_name);
        remove_files(path, 1);
    }
    closedir(d);
}

/* A per-rank file of a run: metrics-rank<R>.jsonl, samples-rank<R>.jsonl,
 * op_profile-rank<R>.json. */
static int rank_file_name(const char *base)
{
    const size_t n = strlen(base);
    return ((strncmp(base, "metrics-rank", 12) == 0 || strncmp(base, "samples-rank", 12) == 0) &&
            n > 6 && strcmp(base + n - 6, ".jsonl") == 0) ||
           (strncmp(base, "op_profile-rank", 15) == 0 && n > 5 && strcmp(base + n - 5, ".json") == 0);
}

int pt_rundir_is_run_file(const char *base)
{
    return strcmp(base, "lock") == 0 || strcmp(base, "metrics.jsonl") == 0 ||
           strcmp(base, "profile.json") == 0 || rank_file_name(base);
}

int pt_rundir_in_use(const char *run_dir)
{
    char path[PT_CKPT_PATH];
    const int fd = open(pt_path_join(path, run_dir, "lock"), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    const int held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd); /* and with it a shared lock taken just now */
    return held;
}

int pt_rundir_make(const char *run_dir, size_t *made, pt_err *err)
{
    *made = 0;
    for (int tries = 0;; tries++) {
        size_t now = 0;
        int rc = pt_mkdir_p_made(run_dir, 0755, &now, NULL, err);
        *made = pt_made_either(*made, now);
        struct stat st;
        if (rc == 0)
            return 0;
        /* made again by a third start meanwhile: there, as wanted */
        if (stat(run_dir, &st) == 0 && S_ISDIR(st.st_mode))
            return 0;
        /* tried again while it is not there (a level went between its
         * making and the next's); a cause that stays fails each try */
        if (tries >= 20 || errno != ENOENT)
            return rc;
    }
}

/* A run's log in run.dir: metrics.jsonl, metrics-rank<R>.jsonl,
 * samples-rank<R>.jsonl. */
static int log_name(const char *base)
{
    return strcmp(base, "metrics.jsonl") == 0 ||
           (rank_file_name(base) && strncmp(base, "op_profile-rank", 15) != 0);
}

void pt_rundir_logs_note(const char *run_dir, pt_rundir_logs *logs)
{
    memset(logs, 0, sizeof *logs);
    logs->unknown = 1;
    DIR *d = opendir(run_dir);
    if (!d)
        return;
    size_t cap = 0;
    struct dirent *e;
    int ok = 1;
    errno = 0;
    while (ok && (e = readdir(d))) {
        if (!log_name(e->d_name))
            continue;
        const size_t n = strlen(e->d_name) + 1;
        if (logs->len + n > cap) {
            size_t grown = cap ? 2 * cap : 256;
            while (grown < logs->len + n)
                grown *= 2;
            char *more = realloc(logs->names, grown);
            if (!more) {
                ok = 0;
                break;
            }
            logs->names = more;
            cap = grown;
        }
        memcpy(logs->names + logs->len, e->d_name, n);
        logs->len += n;
        errno = 0;
    }
    if (errno != 0) /* a listing cut short: what was there is not known */
        ok = 0;
    closedir(d);
    logs->unknown = !ok;
}

static int noted(const pt_rundir_logs *logs, const char *base)
{
    for (size_t at = 0; at < logs->len; at += strlen(logs->names + at) + 1)
        if (strcmp(logs->names + at, base) == 0)
            return 1;
    return 0;
}

void pt_rundir_logs_undo(const char *run_dir, const pt_rundir_logs *logs)
{
    if (logs->unknown)
        return;
    DIR *d = opendir(run_dir);
    if (!d)
        return;
    char path[PT_CKPT_PATH];
    struct stat st;
    struct dirent *e;
    while ((e = readdir(d)))
        if (log_name(e->d_name) && !noted(logs, e->d_name) &&
            lstat(pt_path_join(path, run_dir, e->d_name), &st) == 0 && S_ISREG(st.st_mode) &&
            st.st_size == 0)
            unlink(path);
    closedir(d);
}

void pt_rundir_logs_free(pt_rundir_logs *logs)
{
    free(logs->names);
    memset(logs, 0, sizeof *logs);
    logs->unknown = 1;
}

int pt_rundir_lock_take(pt_rundir_lock *lock, const char *run_dir, pt_err *err)
{
    memset(lock, 0, sizeof *lock);
    lock->fd = -1;
    char path[PT_CKPT_PATH];
    struct stat st;
    /* tries left for a run.dir that goes while it is made and opened: a
     * start refused beside this one, which made it, removes it again when
     * it holds nothing (its lock not taken yet, this start's logs not
     * opened yet); it is made again */
    int again = 20, reopened_enoent = 0;
remake:;
    size_t made = 0;
    int rc = pt_rundir_make(run_dir, &made, err);
    lock->made = pt_made_either(lock->made, made); /* (over the tries) */
    if (rc)
        return rc;
    /* never through a link (the file it leads to would be truncated and
     * written), never waiting on a FIFO; what is in the lock's place and is
     * not a file of its own is the user's to move. Made only where there is
     * none (O_EXCL), so that a refusal knows whether the file is its own */
    int renamed = 0;
reopen:;
    int created = 0;
    int fd = open(pt_path_join(path, run_dir, "lock"), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
        created = fd >= 0;
        if (fd < 0 && errno == EEXIST && ++renamed < 20) /* another start's, made just now */
            goto reopen;
    }
    const int open_errno = errno;
    if (fd < 0 && open_errno == ENOENT && again-- > 0) {
        if (lstat(run_dir, &st) != 0 && errno == ENOENT)
            goto remake;
        if (!reopened_enoent++) /* made again by a third start in between: once more */
            goto reopen;
    }
    errno = open_errno;
    if (fd < 0 && errno == ELOOP)
        return pt_fail(err, PT_EINPUT, "'%s' is a symbolic link; the lock file of a run.dir is "
                       "never opened through one (remove it)", path);
    /* a place the user named that cannot hold the lock is bad input (as for
     * the logs: formats/fileio.c; ENOENT in a run.dir that is there: a
     * directory where no file can be made, as /proc/self); the system
     * running out of something, or a run.dir that keeps going, is not */
    if (fd < 0)
        return pt_fail(err, errno == EISDIR || errno == EACCES || errno == EPERM || errno == EROFS ||
                       errno == ENOTDIR || errno == ENXIO ||
                       (errno == ENOENT && stat(run_dir, &st) == 0) ? PT_EINPUT : PT_ESYS,
                       "cannot open the lock file '%s': %s", path, strerror(open_errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink > 1) {
        close(fd);
        return pt_fail(err, PT_EINPUT, "'%s' is not a regular file of its own (%s); the lock file "
                       "of a run.dir must be one, never written where a link leads (move it away)",
                       path, S_ISREG(st.st_mode) ? "a hard link to another name" : "not a file");
    }
    /* a job holds its lock for its whole run; pt_rundir_in_use (an eval
     * looking whether a run trains here) holds a shared one for a moment:
     * look again for a while before calling the run.dir in use */
    int locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
    for (int tries = 0; !locked && errno == EWOULDBLOCK && tries < 40; tries++) {
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
        locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
    }
    if (!locked) {
        int e = errno;
        /* a lock file this start made and could not lock (no locks on this
         * file system) goes with the refusal: only while its name is still
         * this file, and not when another job holds it */
        struct stat named;
        if (created && e != EWOULDBLOCK && lstat(path, &named) == 0 &&
            named.st_dev == st.st_dev && named.st_ino == st.st_ino)
            unlink(path);
        char holder[256] = "";
        ssize_t got = pread(fd, holder, sizeof holder - 1, 0);
        holder[got > 0 ? got : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        close(fd);
        if (e == EWOULDBLOCK)
            return pt_fail(err, PT_EINPUT, "run.dir '%s' is in use by another pipetrain job (%s); "
                           "wait for it to end or choose another run.dir",
                           run_dir, *holder ? holder : "it holds the lock file");
        return pt_fail(err, PT_ESYS, "cannot lock '%s': %s", path, strerror(e));
    }
    /* the file locked must still be the one named lock: a refused job
     * removes the lock file it made (pt_rundir_lock_undo), and a third
     * job would make and lock a new one beside this descriptor's */
    struct stat named;
    if (lstat(path, &named) != 0 || named.st_dev != st.st_dev || named.st_ino != st.st_ino) {
        close(fd);
        if (++renamed < 20)
            goto reopen;
        return pt_fail(err, PT_ESYS, "cannot lock '%s': it is removed or replaced as it is locked",
                       path);
    }
    /* a lock file this start made is another job's too when that job held
     * it in between (it holds its holder text): a refusal leaves it */
    if (created && (fstat(fd, &named) != 0 || named.st_size > 0))
        created = 0;
    lock->created = created;
    lock->was_len = -1;
    if (!created && fstat(fd, &named) == 0 && named.st_size <= (1 << 20)) {
        /* its bytes, put back by a refusal (a holder's text is a line) */
        lock->was = malloc(named.st_size > 0 ? (size_t)named.st_size : 1);
        ssize_t got = lock->was ? pread(fd, lock->was, (size_t)named.st_size, 0) : -1;
        if (got == (ssize_t)named.st_size)
            lock->was_len = (long)got;
    }
    /* who holds it, for the message a second job prints */
    char host[256] = "?", text[512];
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    char when[64] = "?";
    if (localtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    char id[17];
    pt_unique_id(id, sizeof id);
    int len = snprintf(text, sizeof text, "pid %ld on %s since %s (job %s)\n", (long)getpid(), host,
                       when, id);
    if (ftruncate(fd, 0) == 0 && len > 0) {
        /* on the server before the other ranks read it (they compare it
         * with rank 0's: an NFS client keeps written pages until a sync) */
        if (pwrite(fd, text, (size_t)len, 0) == len)
            fsync(fd);
    }
    lock->fd = fd;
    remove_leftovers(run_dir);
    /* the checkpoints/ there now (a link the user made included) is the
     * run's; one made later is recorded by the first save */
    pt_err ignored;
    (void)pt_rundir_lock_check(lock, run_dir, &ignored);
    return 0;
}

void pt_rundir_lock_undo(pt_rundir_lock *lock, const char *run_dir)
{
    if (lock->fd < 0)
        return;
    char path[PT_CKPT_PATH];
    struct stat held, named;
    if (lock->created) {
        /* only while the name is still the file held */
        if (fstat(lock->fd, &held) == 0 && lstat(pt_path_join(path, run_dir, "lock"), &named) == 0 &&
            held.st_dev == named.st_dev && held.st_ino == named.st_ino)
            unlink(path);
    } else if (lock->was_len >= 0 && ftruncate(lock->fd, 0) == 0 && lock->was_len > 0) {
        if (pwrite(lock->fd, lock->was, (size_t)lock->was_len, 0) == lock->was_len)
            fsync(lock->fd);
    }
}

int pt_rundir_lock_text(const char *run_dir, char *out, size_t n, pt_err *err)
{
    char path[PT_CKPT_PATH];
    pt_path_join(path, run_dir, "lock");
    *out = '\0';
    /* never wait on a FIFO, never follow a link */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return pt_err_input(pt_fail(err, PT_ESYS, "cannot read '%s': %s", path, strerror(errno)), err);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return pt_fail(err, PT_EINPUT, "'%s' is not a regular file", path);
    }
    ssize_t got = pread(fd, out, n - 1, 0);
    close(fd);
    out[got > 0 ? got : 0] = '\0';
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

int pt_rundir_check_writable(const char *run_dir, pt_err *err)
{
    char path[PT_CKPT_PATH];
    const char *dirs[] = {run_dir, pt_path_join(path, run_dir, "checkpoints")};
    for (int i = 0; i < 2; i++) {
        struct stat st;
        if (i == 1 && (lstat(dirs[i], &st) != 0 || !S_ISDIR(st.st_mode)))
            break; /* none yet: made in run_dir at the first save */
        if (access(dirs[i], W_OK | X_OK) != 0) {
            const int e = errno;
            char host[256] = "?";
            gethostname(host, sizeof host - 1);
            host[sizeof host - 1] = '\0';
            return pt_fail(err, PT_EINPUT, "cannot create files in '%s' on host '%s': %s; every "
                           "rank writes its units' files there at each checkpoint, so run.dir must "
                           "be writable from every node", dirs[i], host, strerror(e));
        }
    }
    return 0;
}

int pt_rundir_lock_check(pt_rundir_lock *lock, const char *run_dir, pt_err *err)
{
    if (!lock || lock->fd < 0)
        return 0;
    char path[PT_CKPT_PATH];
    struct stat held, named;
    if (fstat(lock->fd, &held) != 0)
        return pt_fail(err, PT_ESYS, "cannot look at run.dir '%s''s lock: %s", run_dir,
                       strerror(errno));
    pt_path_join(path, run_dir, "lock");
    const int found = lstat(path, &named) == 0;
    if (!found || named.st_dev != held.st_dev || named.st_ino != held.st_ino)
        return pt_fail(err, PT_ESYS,
                       "run.dir '%s' is no longer the directory this job locked: '%s' %s; the "
                       "job stops rather than save where another job may write too",
                       run_dir, path,
                       !found ? "is gone (run.dir moved or removed? the checkpoints so far are "
                                "where it went)"
                              : "is another file than the lock the job holds (replaced)");
    pt_path_join(path, run_dir, "checkpoints");
    struct stat now;
    if (stat(path, &now) != 0) {
        if (!lock->ckpts_known)
            return 0; /* made by the first save */
        return pt_fail(err, PT_ESYS, "'%s' is gone since the job's first save (moved or "
                       "removed); the job stops rather than save into a new one", path);
    }
    if (!lock->ckpts_known) {
        lock->ckpts_known = 1;
        lock->ckpts_dev = (unsigned long long)now.st_dev;
        lock->ckpts_ino = (unsigned long long)now.st_ino;
        return 0;
    }
    if ((unsigned long long)now.st_dev != lock->ckpts_dev ||
        (unsigned long long)now.st_ino != lock->ckpts_ino)
        return pt_fail(err, PT_ESYS,
                       "'%s' is no longer the directory of checkpoints this job saved in (%s since "
                       "the job's first save); the job stops rather than save (and prune) there",
                       path, lstat(path, &named) == 0 && S_ISLNK(named.st_mode)
                                 ? "a symbolic link leading elsewhere put in its place"
                                 : "another directory put in its place");
    return 0;
}

void pt_rundir_lock_release(pt_rundir_lock *lock)
{
    if (lock->fd >= 0)
        close(lock->fd); /* closing drops the flock */
    lock->fd = -1;
    free(lock->was);
    lock->was = NULL;
    lock->was_len = -1;
}
