/*
 * fileio.c: crash-safe writes (write to a temporary name, fsync, rename, fsync
 * the directory) and the sweep of what killed writers left, whole-file reads
 * with a size limit, mkdir -p, directory fsync, and append-only logs. The
 * checksums, digests and unique ids are digest.c's.
 *
 * Invariants of a pt_wfile: fd is the open temporary file until commit or
 * abort; buf holds `used` bytes not yet written to fd; crc and size describe
 * every byte handed to pt_wfile_write, buffered or not; once `failed` is set
 * the temporary file can only be removed.
 */
#include "formats/formats.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <openssl/evp.h>
#include <zlib.h>

/* The random part of a temporary name: 64 bits in lowercase hex. */
enum { TEMP_ID_CHARS = 16 };

/* Large enough that checkpoint payloads go out in few system calls. */
#define WFILE_BUFFER_BYTES ((size_t)1 << 20)

struct pt_wfile {
    int fd;
    int held; /* after pt_wfile_sync: the descriptor that keeps the lock until the rename, or -1 */
    int slot; /* its temporary name's tracking slot, or -1 */
    int failed;
    char *path;
    char *tmp;
    unsigned char *buf;
    size_t used;
    uint32_t crc;
    uint64_t size;
};

int pt_is_temporary_name(const char *name)
{
    return strstr(name, PT_TEMP_MARK) != NULL;
}

static char *copy_string(const char *s)
{
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (c)
        memcpy(c, s, n);
    return c;
}

/* The directory holding path: "." for a bare name, "/" for "/name". */
static char *directory_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return copy_string(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *dir = malloc(n + 1);
    if (dir) {
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    return dir;
}

/* The bytes of a file name (its last path component) that its temporary
 * names keep: all where they fit a name's 255 bytes beside the mark, a pid
 * of up to 10 digits, a dot and the id; else as many of the first as fit
 * (a temporary name then also matches a longer name with the same start,
 * whose dead temporaries the sweep may remove as well). */
static size_t temp_base_len(const char *base)
{
    const size_t room = 255 - strlen(PT_TEMP_MARK) - 10 - 1 - TEMP_ID_CHARS, b = strlen(base);
    if (b < room)
        return b;
    /* not inside a UTF-8 character: a name cut there is not valid UTF-8,
     * which some file systems refuse (ZFS's utf8only, strict casefolding)
     * where the whole name is fine */
    size_t n = room; /* a character has at most 3 continuation bytes */
    while (n > room - 3 && ((unsigned char)base[n] & 0xC0) == 0x80)
        n--;
    return n;
}

/* Whether directory entry `name` is a temporary name of a file whose last
 * path component is base ("BASE.tmp.PID.ID", BASE cut as temp_base_len
 * says). */
static int temporary_of(const char *name, const char *base)
{
    const size_t b = temp_base_len(base), m = strlen(PT_TEMP_MARK);
    if (strncmp(name, base, b) != 0 || strncmp(name + b, PT_TEMP_MARK, m) != 0)
        return 0;
    /* exactly what pt_wfile_open writes: the pid in decimal (no sign,
     * space or leading zero, at most 10 digits), a dot, 16 lowercase hex */
    const char *s = name + b + m;
    size_t digits = 0;
    while (s[digits] >= '0' && s[digits] <= '9')
        digits++;
    if (digits == 0 || digits > 10 || s[0] == '0' || s[digits] != '.')
        return 0;
    s += digits + 1;
    for (int k = 0; k < TEMP_ID_CHARS; k++)
        if (!((s[k] >= '0' && s[k] <= '9') || (s[k] >= 'a' && s[k] <= 'f')))
            return 0;
    return s[TEMP_ID_CHARS] == '\0';
}

int pt_remove_dead_temporaries(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char *dir = directory_of(path);
    if (!dir || !*base) {
        free(dir);
        return 0;
    }
    DIR *d = opendir(dir);
    free(dir);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!temporary_of(e->d_name, base))
            continue;
        /* its writer holds a lock on it while it lives (pt_wfile_open),
         * whatever machine or PID namespace it runs in: a file that can be
         * locked has no writer left. Never through a link, never a FIFO.
         * Opened for writing where it may be: NFS emulates flock with
         * POSIX locks, whose exclusive kind needs it (EBADF otherwise, and
         * nothing there would ever be swept). */
        const int flags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
        int fd = openat(dirfd(d), e->d_name, O_RDWR | flags);
        if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM))
            fd = openat(dirfd(d), e->d_name, O_RDONLY | flags);
        if (fd < 0)
            continue;
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
            unlinkat(dirfd(d), e->d_name, 0) == 0)
            removed++;
        close(fd);
    }
    closedir(d);
    return removed;
}

static int write_all(int fd, const void *data, size_t n)
{
    const unsigned char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The temporary names of the open pt_wfiles, for a signal handler that may
 * run on any thread at any moment: each in a slot of its own, never in the
 * heap (a name the file frees could be reused for another file's by then).
 * A slot is claimed (owner), its name written between two increments of
 * seq (odd while it is written), and marked live; the handler copies a
 * live name and uses the copy only if seq did not move meanwhile. */
enum { TRACKED_NAME = 4096 + 96 };
static struct {
    _Atomic int owner, live;
    _Atomic unsigned seq;
    /* a directory's (pt_mkdir_p_made with a slot): the length of the
     * shortest prefix made, MADE_NONE while none is; 0 for a temporary file */
    _Atomic size_t made;
    char name[TRACKED_NAME];
} tracked[PT_WFILE_TRACKED];

/* Tracks name; the slot, or -1 when none is free or the name is too long. */
static int track(const char *name, size_t made)
{
    const size_t n = strlen(name);
    for (int i = 0; n < TRACKED_NAME && i < PT_WFILE_TRACKED; i++) {
        int expected = 0;
        if (!atomic_compare_exchange_strong(&tracked[i].owner, &expected, 1))
            continue;
        atomic_fetch_add(&tracked[i].seq, 1);
        memcpy(tracked[i].name, name, n + 1);
        atomic_store(&tracked[i].made, made);
        atomic_fetch_add(&tracked[i].seq, 1);
        atomic_store(&tracked[i].live, 1);
        return i;
    }
    return -1;
}

static void untrack(int slot)
{
    if (slot < 0)
        return;
    atomic_store(&tracked[slot].live, 0);
    atomic_store(&tracked[slot].owner, 0);
}

/* A tracked directory none of whose levels is made yet. */
#define MADE_NONE ((size_t)-1)

/* rmdir of dir, then of each parent while its name is at least made
 * bytes long, until one is not empty; a level that is not there (a
 * creation that failed or was stopped before it, or one that could not
 * be: a name too long, a file in the way) is passed over; in place,
 * no allocation (a signal handler's too). */
static void rmdir_up(char *dir, size_t made)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') /* a trailing '/' names the same directory */
        dir[--n] = '\0';
    while (made && n >= made &&
           (rmdir(dir) == 0 || errno == ENOENT || errno == ENOTDIR || errno == ENAMETOOLONG)) {
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
            break;
        while (slash > dir && slash[-1] == '/')
            slash--;
        *slash = '\0';
        n = (size_t)(slash - dir);
    }
}

void pt_wfile_remove_temporaries(void)
{
    /* the files first: a directory goes only once empty */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < PT_WFILE_TRACKED; i++) {
            if (!atomic_load(&tracked[i].live))
                continue;
            char copy[TRACKED_NAME];
            const unsigned before = atomic_load(&tracked[i].seq);
            if (before & 1)
                continue; /* being written: not a file yet */
            memcpy(copy, tracked[i].name, sizeof copy);
            copy[sizeof copy - 1] = '\0';
            const size_t made = atomic_load(&tracked[i].made);
            if (atomic_load(&tracked[i].seq) != before || !atomic_load(&tracked[i].live) ||
                (made > 0) != pass)
                continue;
            if (made)
                rmdir_up(copy, made);
            else
                unlink(copy);
        }
}

void pt_made_dirs_untrack(int slot) { untrack(slot); }

/* The group's thread blocks the signals that can come from outside while
 * it renames (a handler that ran there would interrupt a rename or an fsync,
 * EINTR, and end the process between two files); one that comes is pending
 * until end unblocks it, and its handler then finds no group. A handler on
 * another thread that does not block them stores the signal before it looks
 * at `grouping`, and end clears `grouping` before it looks at the signal
 * (both sequentially consistent): either end sees the signal and raises it,
 * or the handler sees no group and goes on as without one. */
static atomic_int grouping, deferred;
static sigset_t group_saved;

/* Blocks in this thread the signals that come from outside (not those a
 * fault raises: blocked, they would end the process anyway); the mask
 * before into *saved. */
static void block_outside_signals(sigset_t *saved)
{
    sigset_t all;
    sigfillset(&all);
    const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++)
        sigdelset(&all, faults[i]);
    pthread_sigmask(SIG_BLOCK, &all, saved);
}

void pt_wfile_group_begin(void)
{
    block_outside_signals(&group_saved);
    atomic_store(&grouping, 1);
}

void pt_wfile_group_end(void)
{
    atomic_store(&grouping, 0);
    pthread_sigmask(SIG_SETMASK, &group_saved, NULL); /* a pending signal is delivered here */
    const int sig = atomic_exchange(&deferred, 0);
    if (sig)
        raise(sig);
}

int pt_wfile_defer_signal(int sig)
{
    atomic_store(&deferred, sig);
    if (atomic_load(&grouping))
        return 1;
    atomic_store(&deferred, 0);
    return 0;
}

static void wfile_free(pt_wfile *f)
{
    untrack(f->slot);
    free(f->path);
    free(f->tmp);
    free(f->buf);
    free(f);
}

int pt_pread_all(int fd, void *buf, size_t n, uint64_t offset, const char *path, pt_err *err)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = offset > (uint64_t)INT64_MAX ? (errno = EOVERFLOW, -1)
                                                 : pread(fd, p, n, (off_t)offset);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return pt_fail(err, PT_ESYS, "'%s': cannot read at byte %llu: %s", path,
                           (unsigned long long)offset, strerror(errno));
        if (r == 0)
            return pt_fail(err, PT_EINPUT, "'%s': unexpected end of file at byte %llu (was it "
                           "truncated?)", path, (unsigned long long)offset);
        p += r;
        n -= (size_t)r;
        offset += (uint64_t)r;
    }
    return 0;
}

int pt_wfile_open(pt_wfile **out, const char *path, pt_err *err)
{
    *out = NULL;
    if (!path || !*path)
        return pt_fail(err, PT_EINPUT, "cannot write a file with an empty path");
    /* the rename at commit would replace whatever is there: a regular file
     * is what we may replace; a device (as root, /dev/null itself), a FIFO
     * or a directory is left alone and refused */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return pt_fail(err, PT_EINPUT,
                       "'%s' exists and is not a regular file (%s); it is not replaced", path,
                       pt_file_kind(st.st_mode));
    /* nor a symbolic link: the rename would replace the link itself, not
     * the file it leads to (or put a file where a dangling link was) */
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
        return pt_fail(err, PT_EINPUT,
                       "'%s' is a symbolic link; it is not replaced (name the file it leads to, "
                       "or remove the link)", path);
    pt_wfile *f = calloc(1, sizeof *f);
    size_t tmp_cap = strlen(path) + 64;
    if (f) {
        f->fd = -1;
        f->held = -1;
        f->slot = -1;
        f->path = copy_string(path);
        f->tmp = malloc(tmp_cap);
        f->buf = malloc(WFILE_BUFFER_BYTES);
    }
    if (!f || !f->path || !f->tmp || !f->buf) {
        if (f)
            wfile_free(f); /* nothing was created yet */
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory opening the file for writing", path);
    }
    /* pid alone is not unique over time: PID 1 in a container, or a pid
     * reused after a reboot, would meet a crashed writer's leftover on every
     * retry. 64 random bits make a collision a non-event; a clash is retried. */
    for (int attempt = 0; attempt < 8; attempt++) {
        char id[TEMP_ID_CHARS + 1];
        pt_unique_id(id, sizeof id);
        const char *slash = strrchr(path, '/');
        const char *base = slash ? slash + 1 : path;
        snprintf(f->tmp, tmp_cap, "%.*s%.*s" PT_TEMP_MARK "%ld.%s", (int)(base - path), path,
                 (int)temp_base_len(base), base, (long)getpid(), id);
        /* tracked before it exists, so that a signal handler never misses
         * it (the name is ours alone: pid, 64 random bits, and O_EXCL) */
        f->slot = track(f->tmp, 0);
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        /* Locked until the file is closed or the process ends: how a sweep
         * of dead writers' leftovers (pt_remove_dead_temporaries) tells this
         * one is alive. A sweep may lock and remove the file in the moment
         * before the lock: then the name no longer leads to this file (or
         * the lock is taken), and another name is tried. A file system
         * without locks (ENOLCK, EINVAL, ...) is written unlocked. */
        if (f->fd >= 0) {
            struct stat named, mine;
            const int locked = flock(f->fd, LOCK_EX | LOCK_NB) == 0;
            if ((!locked && errno == EWOULDBLOCK) ||
                (locked && (stat(f->tmp, &named) != 0 || fstat(f->fd, &mine) != 0 ||
                            named.st_dev != mine.st_dev || named.st_ino != mine.st_ino))) {
                close(f->fd);
                f->fd = -1;
                errno = EEXIST; /* not ours any more: another name */
            }
        }
        if (f->fd >= 0)
            break;
        const int e = errno;
        untrack(f->slot);
        f->slot = -1;
        errno = e;
        if (e != EEXIST)
            break;
    }
    if (f->fd < 0) {
        int e = errno;
        int rc = pt_fail(err, PT_ESYS, "'%s': cannot create the temporary file '%s': %s", path,
                         f->tmp, strerror(e));
        free(f->tmp);
        f->tmp = NULL; /* not ours: abort must not unlink it */
        pt_wfile_abort(f);
        return rc;
    }
    *out = f;
    return 0;
}

static int flush_buffer(pt_wfile *f, pt_err *err)
{
    if (f->used == 0)
        return 0;
    if (write_all(f->fd, f->buf, f->used) != 0) {
        f->failed = 1;
        return pt_fail(err, PT_ESYS, "'%s': cannot write the temporary file '%s': %s", f->path,
                       f->tmp, strerror(errno));
    }
    f->used = 0;
    return 0;
}

int pt_wfile_write(pt_wfile *f, const void *data, size_t n, pt_err *err)
{
    if (f->failed)
        return pt_fail(err, PT_EINTERNAL, "'%s': writing after an earlier write failed", f->path);
    if (f->fd < 0)
        return pt_fail(err, PT_EINTERNAL, "'%s': writing after the file was synced", f->path);
    if (n > WFILE_BUFFER_BYTES - f->used) {
        int rc = flush_buffer(f, err);
        if (rc)
            return rc;
    }
    if (n >= WFILE_BUFFER_BYTES) {
        if (write_all(f->fd, data, n) != 0) {
            f->failed = 1;
            return pt_fail(err, PT_ESYS, "'%s': cannot write the temporary file '%s': %s",
                           f->path, f->tmp, strerror(errno));
        }
    } else if (n > 0) {
        memcpy(f->buf + f->used, data, n);
        f->used += n;
    }
    f->crc = pt_crc32(f->crc, data, n);
    f->size += n;
    return 0;
}

uint32_t pt_wfile_crc(const pt_wfile *f) { return f->crc; }

uint64_t pt_wfile_size(const pt_wfile *f) { return f->size; }

const char *pt_wfile_path(const pt_wfile *f) { return f->path; }

/* Flushes and fsyncs the temporary file, takes a second descriptor of it that
 * holds its lock (which tells pt_remove_dead_temporaries that its writer
 * lives) through the rename, and closes the one written through (close can
 * report a deferred write error, NFS's: it counts). 0, or the file is failed
 * (its temporary file left for the caller's commit or abort to remove). */
static int finish_writing(pt_wfile *f, pt_err *err)
{
    if (f->failed)
        return pt_fail(err, PT_EINTERNAL, "'%s': committing after an earlier write failed", f->path);
    if (f->fd < 0)
        return 0; /* synced: only the rename is left */
    int rc = flush_buffer(f, err);
    if (!rc && fsync(f->fd) != 0)
        rc = pt_fail(err, PT_ESYS, "'%s': cannot fsync the temporary file '%s': %s", f->path,
                     f->tmp, strerror(errno));
    /* without the second descriptor a sweep could take the file before the rename */
    f->held = rc ? -1 : fcntl(f->fd, F_DUPFD_CLOEXEC, 0);
    if (!rc && f->held < 0)
        rc = pt_fail(err, PT_ESYS,
                     "'%s': cannot hold the temporary file '%s' through its rename: %s", f->path,
                     f->tmp, strerror(errno));
    if (close(f->fd) != 0 && !rc)
        rc = pt_fail(err, PT_ESYS, "'%s': cannot close the temporary file '%s': %s", f->path,
                     f->tmp, strerror(errno));
    f->fd = -1;
    if (rc)
        f->failed = 1;
    return rc;
}

int pt_wfile_sync(pt_wfile *f, pt_err *err)
{
    if (f->failed)
        return pt_fail(err, PT_EINTERNAL, "'%s': syncing after an earlier write failed", f->path);
    return finish_writing(f, err);
}

int pt_wfile_commit(pt_wfile *f, pt_err *err)
{
    int rc = finish_writing(f, err);
    if (f->fd >= 0) { /* failed before: only closed */
        close(f->fd);
        f->fd = -1;
    }
    if (!rc && rename(f->tmp, f->path) != 0)
        rc = pt_fail(err, PT_ESYS, "'%s': cannot rename '%s' into place: %s", f->path, f->tmp,
                     strerror(errno));
    if (rc)
        unlink(f->tmp);
    if (f->held >= 0)
        close(f->held);
    f->held = -1;
    if (rc) {
        wfile_free(f);
        return rc;
    }
    char *dir = directory_of(f->path);
    if (!dir)
        rc = pt_fail(err, PT_ENOMEM, "'%s': out of memory", f->path);
    else if ((rc = pt_fsync_dir(dir, err)) != 0)
        pt_err_prefix(err, "'%s' is written but its rename may not survive a power loss", f->path);
    free(dir);
    wfile_free(f);
    return rc;
}

void pt_wfile_abort(pt_wfile *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp)
        unlink(f->tmp);
    if (f->held >= 0) /* after the unlink: the lock is held until the name is gone */
        close(f->held);
    wfile_free(f);
}

int pt_write_file_atomic(const char *path, const void *data, size_t n, pt_err *err)
{
    pt_wfile *f;
    int rc = pt_wfile_open(&f, path, err);
    if (rc)
        return rc;
    rc = pt_wfile_write(f, data, n, err);
    if (rc) {
        pt_wfile_abort(f);
        return rc;
    }
    return pt_wfile_commit(f, err);
}

int pt_read_file(const char *path, size_t max_bytes, void **data, size_t *n, pt_err *err)
{
    *data = NULL;
    *n = 0;
    /* a regular file only, checked on the descriptor: a FIFO put at the
     * path after a caller's check would block the open, a device never end */
    int fd = pt_open_input(path, 0, err);
    if (fd < 0)
        return err->code;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = pt_fail(err, PT_ESYS, "'%s': cannot stat: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > max_bytes) {
        close(fd);
        return pt_fail(err, PT_EINPUT, "'%s' is %llu bytes, larger than the limit of %zu bytes",
                       path, (unsigned long long)st.st_size, max_bytes);
    }
    /* The size is a hint only (/proc's files say 0, a file may grow under
     * us): read until end of file, with room for one byte past the limit to
     * detect it. */
    size_t cap = 4096;
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size < SIZE_MAX - 2)
        cap = (size_t)st.st_size + 2;
    unsigned char *buf = malloc(cap);
    size_t len = 0;
    int rc = 0;
    while (buf) {
        if (cap - len < 2) {
            size_t grown = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
            unsigned char *bigger = grown > cap ? realloc(buf, grown) : NULL;
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap = grown;
        }
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = pt_fail(err, PT_ESYS, "'%s': cannot read: %s", path, strerror(errno));
            break;
        }
        if (r == 0)
            break;
        len += (size_t)r;
        if (len > max_bytes) {
            rc = pt_fail(err, PT_EINPUT, "'%s' is larger than the limit of %zu bytes", path,
                         max_bytes);
            break;
        }
    }
    close(fd);
    if (!buf)
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory reading the file", path);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *data = buf;
    *n = len;
    return 0;
}

/* mkdir that accepts an existing directory. A directory it makes is made
 * durable: its parent is fsynced, so that the new entry survives a crash
 * before anything that relies on it (a checkpoint's step directory, before
 * older checkpoints are removed). A parent this process may not read (so
 * cannot open to fsync) is left as it is. */
static int make_one_directory(const char *dir, mode_t mode, int *created, int slot,
                              pt_err *err)
{
    *created = 0;
    /* a tracked mkdir and its record as one step for a signal: a handler
     * that ran when mkdir returned, before the record, would leave the
     * directory behind */
    sigset_t saved;
    if (slot >= 0)
        block_outside_signals(&saved);
    const int made = mkdir(dir, mode) == 0;
    const int e_mkdir = errno;
    if (made && slot >= 0 && atomic_load(&tracked[slot].made) == MADE_NONE)
        atomic_store(&tracked[slot].made, strlen(dir)); /* a signal from here on takes it back */
    if (slot >= 0)
        pthread_sigmask(SIG_SETMASK, &saved, NULL);
    errno = e_mkdir;
    if (made) {
        *created = 1;
        const char *slash = strrchr(dir, '/');
        char parent[PATH_MAX];
        if (!slash)
            snprintf(parent, sizeof parent, ".");
        else if (slash == dir)
            snprintf(parent, sizeof parent, "/");
        else if ((size_t)(slash - dir) < sizeof parent)
            snprintf(parent, sizeof parent, "%.*s", (int)(slash - dir), dir);
        else {
            errno = ENAMETOOLONG; /* what pt_fail records */
            return pt_fail(err, PT_ESYS, "cannot make '%s' durable: its parent's name is too "
                           "long", dir);
        }
        const int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
            return errno == EACCES ? 0 : pt_fail(err, PT_ESYS, "cannot open directory '%s' "
                                                 "to fsync it: %s", parent, strerror(errno));
        const int rc = fsync(fd) != 0 && errno != EINVAL
                           ? pt_fail(err, PT_ESYS, "cannot fsync directory '%s': %s", parent,
                                     strerror(errno))
                           : 0;
        close(fd);
        return rc;
    }
    int e = errno;
    struct stat st;
    if (e == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
    if (e == EEXIST)
        e = ENOTDIR;
    errno = e; /* what pt_fail records, not stat's */
    /* a place the user named that cannot hold a directory is bad input;
     * the system running out of something (space, inodes) is not */
    const int input = e == EACCES || e == EPERM || e == EROFS || e == ENOTDIR ||
                      e == ENAMETOOLONG || e == ELOOP;
    return pt_fail(err, input ? PT_EINPUT : PT_ESYS, "cannot create directory '%s': %s", dir,
                   strerror(e));
}

/* Where the last line of the first size bytes of fd ends: one past its
 * last newline, 0 if there is none, or -1 with errno on a read error. */
static off_t after_last_newline(int fd, off_t size)
{
    char buf[4096]; /* small: the stack may be (ulimit -s); a log ends in a newline near its end */
    while (size > 0) {
        const size_t n = size < (off_t)sizeof buf ? (size_t)size : sizeof buf;
        ssize_t got = pread(fd, buf, n, size - (off_t)n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got != (ssize_t)n) {
            if (got >= 0)
                errno = EIO;
            return -1;
        }
        for (size_t i = n; i > 0; i--)
            if (buf[i - 1] == '\n')
                return size - (off_t)n + (off_t)i;
        size -= (off_t)n;
    }
    return 0;
}

int pt_log_open(const char *path, FILE **out, pt_err *err)
{
    *out = NULL;
    /* read too: pt_log_cut looks for the last line; O_NONBLOCK: a FIFO
     * without a reader fails at once instead of waiting */
    int fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ELOOP)
        return pt_fail(err, PT_EINPUT, "'%s' is a symbolic link; logs are written only to "
                       "regular files, never through a link (remove it)", path);
    if (fd < 0 && errno == ENXIO)
        return pt_fail(err, PT_EINPUT, "'%s' exists and is not a regular file (a FIFO); it is "
                       "not written", path);
    /* a place the user named that cannot hold the log is bad input; the
     * system running out of something is not */
    if (fd < 0)
        return pt_fail(err, errno == EISDIR || errno == EACCES || errno == EPERM || errno == EROFS ||
                       errno == ENOTDIR || errno == ENOENT ? PT_EINPUT : PT_ESYS, "cannot open '%s' for "
                       "appending: %s", path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = pt_fail(err, PT_ESYS, "cannot stat '%s': %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = pt_fail(err, PT_EINPUT, "'%s' exists and is not a regular file (%s); it is not "
                     "written", path, S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) ||
                     S_ISBLK(st.st_mode) ? "a device" : S_ISSOCK(st.st_mode) ? "a socket" :
                     "not a file");
    else if (st.st_nlink > 1) /* a hard link: what is cut or appended would be another file's */
        rc = pt_fail(err, PT_EINPUT, "'%s' is a hard link to another name; logs are written only "
                     "to files of their own (remove it)", path);
    else if (fcntl(fd, F_SETFL, O_APPEND) != 0)
        rc = pt_fail(err, PT_ESYS, "'%s': %s", path, strerror(errno));
    FILE *f = rc == 0 ? fdopen(fd, "a") : NULL;
    if (rc == 0 && !f)
        rc = pt_fail(err, PT_ENOMEM, "'%s': %s", path, strerror(errno));
    if (rc) {
        close(fd);
        return rc;
    }
    *out = f;
    return 0;
}

int pt_log_cut(FILE *f, const char *path, int64_t *cut, pt_err *err)
{
    *cut = 0;
    const int fd = fileno(f);
    struct stat st;
    if (fflush(f) != 0 || fstat(fd, &st) != 0)
        return pt_fail(err, PT_ESYS, "cannot stat '%s': %s", path, strerror(errno));
    if (st.st_size == 0)
        return 0;
    const off_t keep = after_last_newline(fd, st.st_size);
    if (keep < 0)
        return pt_fail(err, PT_ESYS, "cannot read '%s': %s", path, strerror(errno));
    if (keep < st.st_size && ftruncate(fd, keep) != 0)
        return pt_fail(err, PT_ESYS, "cannot remove the cut last line of '%s': %s", path,
                       strerror(errno));
    *cut = (int64_t)(st.st_size - keep);
    return 0;
}

/* PT_EINPUT when a '.' or '..' component of path follows a component that
 * does not exist yet: 'new/..' names the directory above one this call
 * would create, and whoever takes back what it made, climbing the name,
 * would take that one for its own. */
int pt_path_dots_after_missing(const char *path, pt_err *err)
{
    char *dir = copy_string(path);
    if (!dir)
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory", path);
    size_t missing = 0; /* the length of the first prefix that is not there */
    int rc = 0;
    for (char *p = dir + 1, *start = dir + (dir[0] == '/'); !rc; p++) {
        if (*p && *p != '/')
            continue;
        const char end = *p;
        *p = '\0';
        const size_t len = strlen(start);
        if (len > 0 && missing && (strcmp(start, ".") == 0 || strcmp(start, "..") == 0))
            rc = pt_fail(err, PT_EINPUT, "'%s': '%s' follows '%.*s', which does not exist yet; "
                         "name the directory without it", path, start, (int)missing, dir);
        struct stat st;
        if (!rc && len > 0 && !missing && lstat(dir, &st) != 0 && errno == ENOENT)
            missing = strlen(dir);
        *p = end;
        if (!end)
            break;
        start = p + 1;
    }
    free(dir);
    return rc;
}

int pt_mkdir_p_made(const char *path, mode_t mode, size_t *made, int *slot, pt_err *err)
{
    *made = 0;
    if (slot)
        *slot = -1;
    if (!path || !*path)
        return pt_fail(err, PT_EINPUT, "cannot create a directory with an empty path");
    int rc = pt_path_dots_after_missing(path, err);
    if (rc)
        return rc;
    char *dir = copy_string(path);
    if (!dir)
        return pt_fail(err, PT_ENOMEM, "'%s': out of memory", path);
    if (slot) /* before anything is made: a signal takes back every level made */
        *slot = track(path, MADE_NONE);
    /* every proper prefix ending before a '/', skipping the root and empty
     * components, then the whole path; the first one this call created is
     * where the made ones start */
    for (char *p = dir + 1; !rc; p++) {
        if (*p && (*p != '/' || p[-1] == '/'))
            continue;
        const char end = *p;
        *p = '\0';
        int created;
        rc = make_one_directory(dir, mode, &created, slot ? *slot : -1, err);
        if (created && !*made)
            *made = strlen(dir);
        *p = end;
        if (!end)
            break;
    }
    free(dir);
    return rc;
}

int pt_mkdir_p(const char *path, mode_t mode, pt_err *err)
{
    size_t made;
    return pt_mkdir_p_made(path, mode, &made, NULL, err);
}

size_t pt_made_either(size_t a, size_t b)
{
    return !a ? b : !b ? a : a < b ? a : b;
}

void pt_rmdir_made(const char *path, size_t made)
{
    char *dir = made ? copy_string(path) : NULL;
    if (dir)
        rmdir_up(dir, made);
    free(dir);
}

int pt_fsync_dir(const char *dir, pt_err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return pt_fail(err, PT_ESYS, "cannot open directory '%s' to fsync it: %s", dir,
                       strerror(errno));
    int rc = 0;
    if (fsync(fd) != 0 && errno != EINVAL)
        rc = pt_fail(err, PT_ESYS, "cannot fsync directory '%s': %s", dir, strerror(errno));
    close(fd);
    return rc;
}
