/*
 * cache.c: the shared activation cache (cache.h) in a POSIX shared-memory
 * segment, plus an optional file for what the segment cannot hold.
 *
 * Segment layout: a header (magic, version, geometry, the creating process
 * and job, the disk file's path, two allocation counters), then one 64-bit
 * slot word per sample, then the memory tier's entries. A slot word packs
 * state (empty / writing / ready), depth, tier and location, and changes only
 * by atomic compare-and-swap, so ranks fill and read the cache concurrently
 * without locks:
 *  - a writer first claims the slot (-> writing), then allocates a location
 *    if the sample has none, writes the data and publishes (-> ready) with a
 *    release store; a sample keeps its location for life, so a deeper entry
 *    overwrites the shallower one in place;
 *  - a reader loads the slot (acquire), copies the data, and loads it again:
 *    if it changed, a writer got in between and the read counts as a miss.
 * Locations come from two bump counters (memory, then disk); when both are
 * exhausted a put reports no room and the sample is computed every time.
 *
 * Lifetime: who may remove a segment. The segment is /dev/shm/pipetrain-UID-JOB
 * (JOB: rank 0's pid, start time and a random part, then the node's index,
 * so names are not reused), mode 0600. Every
 * process that uses it holds a shared flock(2) on it: the creator from before
 * the segment has a name until after it has removed it, each attached rank
 * from attach to close. The kernel drops a process's locks however it dies,
 * so "nobody holds the lock" means "nobody is using the segment", whatever
 * the header says. flock, not fcntl record locks: those belong to a process,
 * so a sweep inside a process that uses a segment would not conflict with its
 * own lock, and closing any descriptor of the file would drop it. Descriptors
 * are close-on-exec; a forked child that keeps one keeps the segment (in the
 * safe direction).
 *
 * Creation never shows a half-made segment under its name: the creator opens
 * an unnamed file in /dev/shm (O_TMPFILE), locks it, sizes it, writes the
 * header (creator, geometry, disk path: all but the magic), and only then
 * links it to its name; linkat fails if the name exists, the O_EXCL of
 * shm_open. Then it creates the disk file (O_EXCL) and writes the magic last,
 * which tells attaching ranks the segment is complete.
 *
 * pt_cache_sweep removes a segment only when all of these hold:
 *  1. the name is pipetrain-UID-JOB with this process's uid and JOB made of
 *     the characters segment names use (so a disk file NAME.cache kept in
 *     /dev/shm is never taken for a segment), and it is a regular file owned
 *     by this uid (root can open other users' files: the name is not enough);
 *  2. flock(LOCK_EX | LOCK_NB) on it succeeds: no process uses it;
 *  3. with that lock held, the name still names the file locked: a sweeper
 *     that opened a dead segment and was overtaken (another sweeper removed
 *     it, a new creator took the name) leaves the new one alone;
 *  4. the header does not name a creator that is alive by pid and start time.
 *     Creators of this version are covered by 2; this keeps segments of
 *     pipetrain builds that locked nothing (version 1), and a reused pid can
 *     only keep a segment, never remove one. A zero header names no creator,
 *     so for it 2 alone decides, and 2 does not read the header. (A version 1
 *     creator running beside this version is exposed only where it always
 *     was: between its shm_open and its first header write.)
 * While the sweeper holds the exclusive lock and the name names that file, no
 * one else can remove or replace the name (removing takes the lock, creating
 * finds the name taken), so the unlink removes exactly what was checked. The
 * disk file named in the header goes first, and only if it is NAME.cache,
 * regular and owned by this uid; the segment after it. A sweeper that dies
 * between the two leaves a segment without its disk file, which the next sweep
 * removes: never a disk file that no segment names. The creator's close keeps
 * the same order, and removes the name only if it still names its segment.
 *
 * Attaching takes the shared lock without waiting: it fails only while a
 * sweeper holds the exclusive one, i.e. when every user, creator included, is
 * gone and the segment is being removed.
 */
#define _GNU_SOURCE /* O_TMPFILE, AT_EMPTY_PATH */
#include "cache/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Where Linux keeps POSIX shared memory; the protocol above needs its files
 * (O_TMPFILE, linkat, flock), so the segment is handled as one. */
#define SHM_DIR "/dev/shm"
/* Version 2: the segment is locked by its users (version 1 was not, and its
 * sweep took any unlocked segment with a zero header for dead). A new magic,
 * so a version 1 sweep never takes a complete version 2 segment for its own
 * kind; before the magic, the creator's pid in the header keeps it off. */
#define MAGIC "PTCACHE2"
enum { VERSION = 2, ALIGN = 4096 };
enum { ST_EMPTY = 0, ST_WRITING = 1, ST_READY = 2 };

typedef struct header {
    char magic[8];
    uint32_t version, uid;
    uint64_t samples, entry_bytes, memory_entries, disk_entries;
    uint64_t slots_offset, data_offset, size;
    int64_t creator_pid;
    uint64_t creator_start;
    char job[64];
    char disk_path[1024];
    _Atomic uint64_t memory_next, disk_next;
} header;

struct pt_cache {
    char name[128];
    int fd, disk_fd;
    int linked;   /* the creator gave the segment its name: it removes the name at close */
    int own_disk; /* the creator made the disk file: it removes it at close */
    header *h;
    _Atomic uint64_t *slot;
    char *data;
    size_t map_bytes;
};

/* ------------------------------------------------------------ slot words */

static uint64_t make_slot(int state, int depth, int tier, uint64_t loc_plus_1)
{
    return (uint64_t)state | (uint64_t)(depth & 0xffff) << 2 | (uint64_t)(tier & 1) << 18 |
           loc_plus_1 << 19;
}
static int slot_state(uint64_t s) { return (int)(s & 3); }
static int slot_depth(uint64_t s) { return (int)(s >> 2 & 0xffff); }
static int slot_tier(uint64_t s) { return (int)(s >> 18 & 1); }
static uint64_t slot_loc(uint64_t s) { return s >> 19; } /* location + 1; 0 = none */

/* ------------------------------------------------------------ processes */

/* Start time of a process in clock ticks since boot (field 22 of
 * /proc/PID/stat), so a reused pid is not taken for the process that made a
 * segment; 0 if unknown. *state gets field 3 ('Z' for a zombie, '?' if
 * unknown). */
static uint64_t process_start(pid_t pid, char *state)
{
    *state = '?';
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
    unsigned long long start = 0;
    if (p && p[1] == ' ' && p[2])
        *state = p[2];
    if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                    &start) == 1)
        return start;
    return 0;
}

/* Whether the process that recorded (pid, start) may still run; when in
 * doubt (a start time unknown then or now) it says yes, which only ever keeps
 * a segment. A zombie (or a process being torn down) is not running: it has
 * closed every descriptor, and where nothing reaps the orphans of a killed
 * job (a container whose first process does not wait for them) it stays a
 * zombie for good, which kept its segments from ever being swept. */
static int process_alive(int64_t pid, uint64_t start)
{
    if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno != EPERM))
        return 0;
    char state;
    const uint64_t now = process_start((pid_t)pid, &state);
    if (state == 'Z' || state == 'X' || state == 'x')
        return 0;
    return start == 0 || now == 0 || now == start;
}

/* ----------------------------------------------------------------- names */

/* The characters segment_name leaves in a job: a name with any other (a
 * disk file's ".cache") is not a segment. */
static int job_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
           ch == '_';
}

static int segment_name(const char *job, char *out, size_t n, pt_err *err)
{
    char clean[64];
    size_t k = 0;
    for (const char *p = job; *p && k + 1 < sizeof clean; p++)
        clean[k++] = job_char(*p) ? *p : '_';
    clean[k] = '\0';
    if (!k)
        return pt_fail(err, PT_EINTERNAL, "the cache needs a job identifier");
    snprintf(out, n, "/pipetrain-%u-%s", (unsigned)getuid(), clean);
    return 0;
}

static void shm_path(const char *name, char *out, size_t n) { snprintf(out, n, SHM_DIR "%s", name); }

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* -------------------------------------------------------- create / attach */

/* Maps the segment, whose header holds its offsets. */
static int map_segment(pt_cache *c, size_t bytes, pt_err *err)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);
    if (p == MAP_FAILED)
        return pt_fail(err, PT_ESYS, "cannot map the cache segment %s: %s", c->name, strerror(errno));
    c->h = p;
    c->map_bytes = bytes;
    c->slot = (_Atomic uint64_t *)((char *)p + c->h->slots_offset);
    c->data = (char *)p + c->h->data_offset;
    return 0;
}

/* Whether path names the file open as fd (not one that took its name since). */
static int names_file(const char *path, int fd)
{
    struct stat a, b;
    return fd >= 0 && fstat(fd, &a) == 0 && lstat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* The segment and disk file of the cache this process has open, for
 * pt_cache_release_names, which a signal handler may call: plain globals,
 * filled once the cache is open and emptied (set first) when it closes. */
static struct {
    char path[256], disk[sizeof(((header *)0)->disk_path)];
    int fd;
    volatile sig_atomic_t disk_fd; /* set after disk: -1 while it is written */
    volatile sig_atomic_t set;
} open_names;

/* Whether this process was told to release the names (it is ending), and
 * whether that waits (pt_cache_hold_names) */
static volatile sig_atomic_t names_released, names_held;

static void remember_names(const pt_cache *c)
{
    shm_path(c->name, open_names.path, sizeof open_names.path);
    open_names.fd = c->fd;
    open_names.disk_fd = -1; /* a handler reads no disk name being written */
    atomic_signal_fence(memory_order_seq_cst);
    memcpy(open_names.disk, c->h->disk_path, sizeof open_names.disk);
    open_names.disk[sizeof open_names.disk - 1] = '\0';
    atomic_signal_fence(memory_order_release); /* the names before the descriptors */
    open_names.disk_fd = c->disk_fd;
    open_names.set = 1;
    /* a stop signal that came before the cache was open found no names to
     * take off; they are taken off now, or once the hold ends (taking them
     * off twice is harmless: each unlink first checks that the name still
     * names this file) */
    if (names_released)
        pt_cache_release_names();
}

int pt_cache_names_released(void) { return names_released != 0; }

void pt_cache_hold_names(int hold)
{
    names_held = hold;
    if (!hold && names_released) /* a request that came while held */
        pt_cache_release_names();
}

void pt_cache_release_names_ending(void)
{
    names_held = 0;
    pt_cache_release_names();
}

void pt_cache_release_names(void)
{
    names_released = 1;
    if (names_held || !open_names.set)
        return;
    if (open_names.disk[0] && names_file(open_names.disk, open_names.disk_fd))
        unlink(open_names.disk);
    if (names_file(open_names.path, open_names.fd))
        unlink(open_names.path);
}

/* A file this user owns, opened without following a link: its descriptor or -1. */
static int open_own(const char *path, struct stat *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd >= 0 && (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || st->st_uid != getuid())) {
        close(fd);
        fd = -1;
    }
    return fd;
}

void pt_cache_remove_unattached(const pt_cache_spec *spec)
{
    char name[128], path[256], disk[sizeof(((header *)0)->disk_path)] = "";
    if (segment_name(spec->job, name, sizeof name, NULL) != 0)
        return;
    shm_path(name, path, sizeof path);
    struct stat st;
    const int fd = open_own(path, &st);
    if (fd < 0)
        return;
    /* the disk file its header names, once the header is complete (the
     * magic goes in last; before, a disk file is the next start's sweep's) */
    if ((size_t)st.st_size >= sizeof(header)) {
        const header *h = mmap(NULL, sizeof(header), PROT_READ, MAP_SHARED, fd, 0);
        if (h != MAP_FAILED) {
            if (memcmp(h->magic, MAGIC, sizeof h->magic) == 0 && /* complete */
                memchr(h->disk_path, '\0', sizeof h->disk_path))
                memcpy(disk, h->disk_path, sizeof disk);
            munmap((void *)h, sizeof(header));
        }
    }
    struct stat dst;
    const int dfd = disk[0] ? open_own(disk, &dst) : -1;
    if (dfd >= 0 && names_file(disk, dfd))
        unlink(disk);
    if (names_file(path, fd))
        unlink(path);
    if (dfd >= 0)
        close(dfd);
    close(fd);
}

void pt_cache_close(pt_cache *c)
{
    if (!c)
        return;
    if (open_names.set && open_names.fd == c->fd)
        open_names.set = 0;
    char disk[sizeof c->h->disk_path] = "", path[256];
    if (c->h) {
        memcpy(disk, c->h->disk_path, sizeof disk);
        disk[sizeof disk - 1] = '\0';
        munmap(c->h, c->map_bytes);
    }
    /* the disk file before the segment that names it, both while this
     * process still holds the segment (see the top of this file) */
    if (c->own_disk && names_file(disk, c->disk_fd))
        unlink(disk);
    shm_path(c->name, path, sizeof path);
    if (c->linked && names_file(path, c->fd))
        unlink(path);
    if (c->disk_fd >= 0)
        close(c->disk_fd);
    if (c->fd >= 0)
        close(c->fd); /* drops the lock */
    free(c);
}

static pt_cache *new_cache(void)
{
    pt_cache *c = calloc(1, sizeof *c);
    if (c)
        c->fd = c->disk_fd = -1;
    return c;
}

/* Gives the unnamed file open as fd the name path, or fails with EEXIST if
 * the name is taken. Through /proc, which any user may do; without /proc,
 * directly, which needs CAP_DAC_READ_SEARCH. */
static int link_name(int fd, const char *path)
{
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, self, AT_FDCWD, path, AT_SYMLINK_FOLLOW) == 0)
        return 0;
    return errno == ENOENT ? linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH) : -1;
}

/* flock, where the file system has it: 0 when locked or when it cannot
 * lock at all (Lustre without flock; the disk tier then works but is never
 * swept), -1 when another process holds a conflicting lock. */
static int lock_if_possible(int fd, int how)
{
    if (flock(fd, how) == 0)
        return 0;
    return errno == ENOSYS || errno == ENOLCK || errno == EOPNOTSUPP || errno == EINVAL ? 0 : -1;
}

/* The name a disk file has while it is made where there is no O_TMPFILE:
 * NAME.cache.creating. A creator killed before it renamed it leaves it;
 * the sweeps remove it with its segment, or (pt_cache_sweep_disk) once
 * unlocked, its segment gone and at least CREATING_AGE_S seconds old: its
 * creator holds no lock between the open and the flock of it. */
#define CREATING ".creating"
enum { CREATING_AGE_S = 60 };

/* The disk file, created locked before it has its name, so a sweep (which
 * takes an unlocked file for a dead job's) never sees it unlocked: an
 * unnamed file linked to path, or where the file system has no O_TMPFILE
 * (NFS), a file of a name no sweep matches, locked, then linked to path.
 * Fails with EEXIST if path exists, as O_EXCL. */
static int create_disk_file(const char *path, uint64_t bytes)
{
    char dir[sizeof ((header *)0)->disk_path], tmp[sizeof dir + 32];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[slash == dir] = '\0';
    int fd = open(slash ? dir : ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600), named = 0;
    if (fd < 0) {
        snprintf(tmp, sizeof tmp, "%s" CREATING, path);
        fd = open(tmp, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        named = 1;
    }
    int e = 0;
    if (fd < 0)
        return -1;
    /* known to a release before it has its name: a signal that ends the
     * process as the link returns takes the name off (the release unlinks
     * only a name that names this file) */
    open_names.disk_fd = -1;
    atomic_signal_fence(memory_order_seq_cst);
    snprintf(open_names.disk, sizeof open_names.disk, "%s", path);
    atomic_signal_fence(memory_order_release); /* the name before the descriptor */
    open_names.disk_fd = fd;
    if (lock_if_possible(fd, LOCK_SH) != 0 || ftruncate(fd, (off_t)bytes) != 0 ||
        (named ? link(tmp, path) : link_name(fd, path)) != 0)
        e = errno;
    if (named)
        unlink(tmp);
    if (e) {
        open_names.disk_fd = -1;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int pt_cache_create(pt_cache **out, const pt_cache_spec *spec, pt_err *err)
{
    *out = NULL;
    if (spec->samples < 1 || spec->entry_bytes < 1)
        return pt_fail(err, PT_EINTERNAL, "cache of %lld samples of %zu bytes", (long long)spec->samples,
                       spec->entry_bytes);
    pt_cache_sweep(NULL);
    if (spec->disk_dir && *spec->disk_dir)
        pt_cache_sweep_disk(spec->disk_dir);
    pt_cache *c = new_cache();
    if (!c)
        return pt_fail(err, PT_ENOMEM, "out of memory creating the cache");
    int rc = segment_name(spec->job, c->name, sizeof c->name, err);
    if (rc) {
        free(c);
        return rc;
    }
    /* no tier holds more entries than there are samples, whatever the budget */
    const uint64_t samples = (uint64_t)spec->samples;
    uint64_t memory_entries = spec->memory_bytes / spec->entry_bytes;
    uint64_t disk_entries = spec->disk_dir && *spec->disk_dir ? spec->disk_bytes / spec->entry_bytes : 0;
    memory_entries = memory_entries < samples ? memory_entries : samples;
    disk_entries = disk_entries < samples ? disk_entries : samples; /* the memory tier may close early */
    const uint64_t slots_offset = round_up(sizeof(header), 64);
    const uint64_t data_offset = round_up(slots_offset + 8 * (uint64_t)spec->samples, ALIGN);
    const uint64_t size = data_offset + memory_entries * spec->entry_bytes;
    /* everything but the magic, so that from the moment the segment has a
     * name a sweep finds its disk file, and an older pipetrain's sweep its
     * creator */
    header h0 = {.version = VERSION, .uid = (uint32_t)getuid(), .samples = (uint64_t)spec->samples,
                 .entry_bytes = spec->entry_bytes, .memory_entries = memory_entries,
                 .disk_entries = disk_entries, .slots_offset = slots_offset, .data_offset = data_offset,
                 .size = size, .creator_pid = getpid(), .creator_start = process_start(getpid(), &(char){0})};
    snprintf(h0.job, sizeof h0.job, "%s", spec->job);
    /* the disk file by its absolute path: a sweep or an attaching rank in
     * another working directory must find the same file */
    char *dir = disk_entries ? realpath(spec->disk_dir, NULL) : NULL;
    if (disk_entries && !dir) {
        const int why = errno;
        free(c);
        return pt_fail(err, PT_ESYS, "cannot resolve the disk cache directory '%s' (cache.disk_dir): %s",
                       spec->disk_dir, strerror(why));
    }
    const int too_long = disk_entries && snprintf(h0.disk_path, sizeof h0.disk_path, "%s%s.cache", dir,
                                                  c->name) >= (int)sizeof h0.disk_path;
    free(dir);
    if (too_long) {
        free(c);
        return pt_fail(err, PT_EINPUT, "the disk cache directory '%s' is too long a path", spec->disk_dir);
    }

    /* unnamed and locked first, named when its header is written */
    c->fd = open(SHM_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (c->fd < 0) {
        const int why = errno;
        rc = pt_fail(err, PT_ESYS, "cannot create the cache segment %s: %s%s", c->name, strerror(why),
                     why == ENOSPC ? " (" SHM_DIR " has no room or no inode left for it: make room, or "
                                     "set cache.enabled false)"
                     : why == EOPNOTSUPP || why == EISDIR || why == EINVAL
                         ? " (it needs " SHM_DIR " to be a tmpfs with O_TMPFILE, Linux 3.11 or later)"
                     : why == EROFS || why == EACCES || why == EPERM
                         ? " (" SHM_DIR " must be writable by this user; or set cache.enabled false)"
                     : why == ENOENT || why == ENOTDIR
                         ? " (this machine has no " SHM_DIR " directory: mount a tmpfs there, or "
                           "set cache.enabled false)"
                         : " (or set cache.enabled false)");
        pt_cache_close(c);
        return rc;
    }
    /* the header and slot table are reserved now (entries as they are
     * stored, reserve_entry): a full /dev/shm is an error here, never a
     * SIGBUS later */
    int e = 0;
    if (flock(c->fd, LOCK_SH) != 0 || fchmod(c->fd, 0600) != 0 || ftruncate(c->fd, (off_t)size) != 0 ||
        (e = posix_fallocate(c->fd, 0, (off_t)data_offset)) != 0 ||
        pwrite(c->fd, &h0, sizeof h0, 0) != (ssize_t)sizeof h0) {
        rc = pt_fail(err, PT_ESYS, "cannot make the cache segment %s of %llu bytes: %s%s", c->name,
                     (unsigned long long)size, strerror(e ? e : errno),
                     e == ENOSPC ? " (" SHM_DIR " cannot hold even its table of samples: make it "
                                   "larger, or set cache.enabled false)"
                                 : "");
        pt_cache_close(c);
        return rc;
    }
    char path[256];
    shm_path(c->name, path, sizeof path);
    if ((rc = map_segment(c, size, err)) ||
        (link_name(c->fd, path) != 0 &&
         (rc = pt_fail(err, PT_ESYS, "cannot create the cache segment %s: %s", c->name, strerror(errno))))) {
        pt_cache_close(c);
        return rc;
    }
    c->linked = 1;
    /* the segment's name now, the disk file's as it is made: a signal that
     * ends the process while the names are held takes them off */
    remember_names(c);
    header *h = c->h;
    if (disk_entries) {
        /* locked by every user, as the segment is (pt_cache_sweep_disk) */
        c->disk_fd = create_disk_file(h->disk_path, disk_entries * spec->entry_bytes);
        c->own_disk = c->disk_fd >= 0;
        if (c->disk_fd < 0) {
            rc = pt_fail(err, PT_ESYS, "cannot create the disk cache '%s' (in cache.disk_dir): %s",
                         h->disk_path, strerror(errno));
            if (!c->own_disk)
                h->disk_path[0] = '\0'; /* someone else's file: no sweep may take it for ours */
            pt_cache_close(c);
            return rc;
        }
    }
    /* the slots are zero (empty) from ftruncate; the magic goes in last and
     * tells attaching ranks the segment is complete */
    atomic_thread_fence(memory_order_release);
    memcpy(h->magic, MAGIC, 8);
    remember_names(c);
    *out = c;
    return 0;
}

int pt_cache_attach(pt_cache **out, const pt_cache_spec *spec, pt_err *err)
{
    *out = NULL;
    pt_cache *c = new_cache();
    if (!c)
        return pt_fail(err, PT_ENOMEM, "out of memory attaching the cache");
    int rc = segment_name(spec->job, c->name, sizeof c->name, err);
    char path[256];
    shm_path(c->name, path, sizeof path);
    struct stat st;
    if (rc == 0 && (c->fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        if (errno == ENOENT)
            rc = pt_fail(err, PT_ESYS, "the cache segment %s is gone: the node's first rank took "
                         "its name off (it is stopping, or it died)", c->name);
        else
            rc = pt_fail(err, PT_ESYS, "cannot open the cache segment %s: %s", c->name,
                         strerror(errno));
    }
    /* hold it before reading it; only a sweeper removing it (every user,
     * creator included, is gone) holds it exclusively */
    else if (rc == 0 && (flock(c->fd, LOCK_SH | LOCK_NB) != 0 || fstat(c->fd, &st) != 0 || st.st_nlink == 0))
        rc = pt_fail(err, PT_ESYS, "the cache segment %s is being removed: the job that created it is gone",
                     c->name);
    else if (rc == 0 && (size_t)st.st_size < sizeof(header))
        rc = pt_fail(err, PT_EINTERNAL, "the cache segment %s is too small", c->name);
    else if (rc == 0) {
        header h0;
        if (pread(c->fd, &h0, sizeof h0, 0) != (ssize_t)sizeof h0 || memcmp(h0.magic, MAGIC, 8) ||
            h0.version != VERSION || h0.size != (uint64_t)st.st_size ||
            !memchr(h0.disk_path, '\0', sizeof h0.disk_path))
            rc = pt_fail(err, PT_EINTERNAL, "%s is not a complete pipetrain cache of this version", c->name);
        else if (h0.samples != (uint64_t)spec->samples || h0.entry_bytes != spec->entry_bytes)
            rc = pt_fail(err, PT_EINTERNAL, "the cache segment %s holds %llu samples of %llu bytes, not %lld of %zu",
                         c->name, (unsigned long long)h0.samples, (unsigned long long)h0.entry_bytes,
                         (long long)spec->samples, spec->entry_bytes);
        else
            rc = map_segment(c, (size_t)st.st_size, err);
    }
    if (rc == 0 && c->h->disk_entries && (c->disk_fd = open(c->h->disk_path, O_RDWR | O_CLOEXEC)) < 0)
        rc = pt_fail(err, PT_ESYS, "cannot open the disk cache '%s': %s", c->h->disk_path, strerror(errno));
    else if (rc == 0 && c->h->disk_entries && lock_if_possible(c->disk_fd, LOCK_SH | LOCK_NB) != 0)
        rc = pt_fail(err, PT_ESYS, "the disk cache '%s' is being removed: the job that created it "
                     "is gone", c->h->disk_path);
    if (rc) {
        pt_cache_close(c);
        return rc;
    }
    remember_names(c);
    *out = c;
    return 0;
}

/* -------------------------------------------------------------- get / put */

static int copy_out(pt_cache *c, int tier, uint64_t loc, void *out, pt_err *err)
{
    const size_t n = c->h->entry_bytes;
    if (tier == 0) {
        memcpy(out, c->data + loc * n, n);
        return 0;
    }
    ssize_t got = pread(c->disk_fd, out, n, (off_t)(loc * n));
    return got == (ssize_t)n ? 0 : pt_fail(err, PT_ESYS, "reading the disk cache '%s': %s",
                                           c->h->disk_path, got < 0 ? strerror(errno) : "short read");
}

/* 0; 1 when the disk tier's file system has no room (reserving the entry's
 * blocks does not guarantee it everywhere; a disk filling up mid-entry gives
 * a short write; CIFS makes the other users' shared locks mandatory, which
 * writes see as EACCES); -1 with err on another error. */
static int copy_in(pt_cache *c, int tier, uint64_t loc, const void *data, pt_err *err)
{
    const size_t n = c->h->entry_bytes;
    if (tier == 0) {
        memcpy(c->data + loc * n, data, n);
        return 0;
    }
    ssize_t put = pwrite(c->disk_fd, data, n, (off_t)(loc * n));
    if (put == (ssize_t)n)
        return 0;
    if (put >= 0 || errno == ENOSPC || errno == EDQUOT || errno == EFBIG || errno == EACCES)
        return 1;
    pt_fail(err, PT_ESYS, "writing the disk cache '%s': %s", c->h->disk_path, strerror(errno));
    return -1;
}

int pt_cache_depth(pt_cache *c, int64_t id)
{
    if (id < 0 || (uint64_t)id >= c->h->samples)
        return 0;
    uint64_t s = atomic_load_explicit(&c->slot[id], memory_order_acquire);
    return slot_state(s) == ST_READY ? slot_depth(s) : 0;
}

int pt_cache_get(pt_cache *c, int64_t id, int depth, void *out, pt_err *err)
{
    if (id < 0 || (uint64_t)id >= c->h->samples)
        return 0;
    uint64_t s = atomic_load_explicit(&c->slot[id], memory_order_acquire);
    if (slot_state(s) != ST_READY || slot_depth(s) != depth || !slot_loc(s))
        return 0;
    if (copy_out(c, slot_tier(s), slot_loc(s) - 1, out, err))
        return -1;
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&c->slot[id], memory_order_relaxed) == s;
}

/* The segment is sparse: its entries' pages are taken from the tmpfs as
 * they are first written, and a store into a page the tmpfs cannot give
 * (a /dev/shm smaller than cache.memory_gib, as containers often have)
 * would kill the process with SIGBUS. So entry m's pages are reserved
 * before its first write; when /dev/shm is full, the memory tier is closed
 * to new entries (the disk tier, or computing, takes the rest). */
static int reserve_entry(pt_cache *c, uint64_t m)
{
    const uint64_t bytes = c->h->entry_bytes;
    int e;
    do /* a stop signal may interrupt it: that is no reason to close the tier */
        e = posix_fallocate(c->fd, (off_t)(c->h->data_offset + m * bytes), (off_t)bytes);
    while (e == EINTR);
    if (e == 0)
        return 1;
    atomic_store_explicit(&c->h->memory_next, c->h->memory_entries, memory_order_relaxed);
    return 0;
}

/* The disk file is sparse too, and its file system may fill up under it
 * (other files, other jobs): entry d's blocks are reserved before its first
 * write, and when they cannot be, the disk tier is closed to new entries
 * (computing takes the rest), as the memory tier is. */
static int reserve_disk_entry(pt_cache *c, uint64_t d)
{
    const uint64_t bytes = c->h->entry_bytes;
    int e;
    do
        e = posix_fallocate(c->disk_fd, (off_t)(d * bytes), (off_t)bytes);
    while (e == EINTR);
    if (e == 0)
        return 1;
    atomic_store_explicit(&c->h->disk_next, c->h->disk_entries, memory_order_relaxed);
    return 0;
}

int pt_cache_put(pt_cache *c, int64_t id, int depth, const void *data, pt_err *err)
{
    if (id < 0 || (uint64_t)id >= c->h->samples || depth < 1 || depth > 0xffff)
        return pt_fail(err, PT_EINTERNAL, "cache put of sample %lld at depth %d", (long long)id, depth);
    uint64_t s;
    for (;;) { /* claim the slot */
        s = atomic_load_explicit(&c->slot[id], memory_order_acquire);
        if (slot_state(s) == ST_WRITING)
            return 0; /* another rank is storing this sample */
        if (slot_state(s) == ST_READY && slot_depth(s) >= depth)
            return 1;
        uint64_t claim = make_slot(ST_WRITING, slot_depth(s), slot_tier(s), slot_loc(s));
        if (atomic_compare_exchange_weak_explicit(&c->slot[id], &s, claim, memory_order_acq_rel,
                                                  memory_order_acquire))
            break;
    }
    int tier = slot_tier(s);
    uint64_t loc = slot_loc(s);
    if (!loc) { /* first entry of this sample: memory tier, then disk tier */
        uint64_t m = atomic_fetch_add_explicit(&c->h->memory_next, 1, memory_order_relaxed);
        if (m < c->h->memory_entries && reserve_entry(c, m)) {
            tier = 0;
            loc = m + 1;
        } else {
            uint64_t d = atomic_fetch_add_explicit(&c->h->disk_next, 1, memory_order_relaxed);
            if (d < c->h->disk_entries && reserve_disk_entry(c, d)) {
                tier = 1;
                loc = d + 1;
            }
        }
        if (!loc) { /* both tiers full: leave the slot as it was */
            atomic_store_explicit(&c->slot[id], s, memory_order_release);
            return 0;
        }
    }
    const int put = copy_in(c, tier, loc - 1, data, err);
    if (put) {
        /* keep the location; the entry is gone */
        atomic_store_explicit(&c->slot[id], make_slot(ST_EMPTY, 0, tier, loc), memory_order_release);
        if (put < 0)
            return -1;
        /* no room after all: the disk tier takes no new samples (this one
         * keeps its location, which a later put tries again) */
        atomic_store_explicit(&c->h->disk_next, c->h->disk_entries, memory_order_relaxed);
        return 0;
    }
    atomic_store_explicit(&c->slot[id], make_slot(ST_READY, depth, tier, loc), memory_order_release);
    return 1;
}

void pt_cache_stats_get(const pt_cache *c, pt_cache_stats *out)
{
    out->memory_entries = c->h->memory_entries;
    out->disk_entries = c->h->disk_entries;
    uint64_t m = atomic_load(&c->h->memory_next), d = atomic_load(&c->h->disk_next);
    out->memory_used = m < out->memory_entries ? m : out->memory_entries;
    out->disk_used = d < out->disk_entries ? d : out->disk_entries;
}

const char *pt_cache_name(const pt_cache *c) { return c->name; }

/* ------------------------------------------------------------------ sweep */

/* Removes the disk file a dead segment's header names, if it is that
 * segment's (named NAME.cache, as create names it) and this user's, and
 * the NAME.cache.creating a creator without O_TMPFILE died with. */
static void remove_disk_file(header *h, const char *name, uid_t uid)
{
    h->disk_path[sizeof h->disk_path - 1] = '\0';
    const size_t n = strlen(h->disk_path), k = strlen(name);
    const char *tail = h->disk_path + n - (k + 7);
    struct stat st;
    if (n < k + 7 || tail[0] != '/' || strncmp(tail + 1, name, k) != 0 || strcmp(tail + 1 + k, ".cache") != 0)
        return;
    if (lstat(h->disk_path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == uid)
        unlink(h->disk_path);
    char creating[sizeof h->disk_path + 16];
    snprintf(creating, sizeof creating, "%s" CREATING, h->disk_path);
    if (lstat(creating, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == uid)
        unlink(creating);
}

/* Removes SHM_DIR/name (already known to carry this user's prefix) if the
 * rules at the top of this file allow it; 1 if removed. */
static int sweep_one(int dir, const char *name, uid_t uid)
{
    struct stat seen, held;
    /* only regular files of this user are opened at all: another user's
     * file is not ours whatever its name, and opening a FIFO can block */
    if (fstatat(dir, name, &seen, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(seen.st_mode) || seen.st_uid != uid)
        return 0;
    int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    header h;
    memset(&h, 0, sizeof h); /* a short segment reads as a zero header: no creator named */
    int removed = 0;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &held) == 0 &&
        fstatat(dir, name, &seen, AT_SYMLINK_NOFOLLOW) == 0 && seen.st_dev == held.st_dev &&
        seen.st_ino == held.st_ino && held.st_uid == uid && pread(fd, &h, sizeof h, 0) >= 0 &&
        !process_alive(h.creator_pid, h.creator_start)) {
        remove_disk_file(&h, name, uid);
        removed = unlinkat(dir, name, 0) == 0;
    }
    close(fd); /* drops the lock */
    return removed;
}

/* For a name "pipetrain-UID-JOB..." (prefix: its first k bytes): one past
 * JOB's last character, or NULL if the name does not start so or JOB is
 * empty. */
static const char *job_end(const char *name, const char *prefix, size_t k)
{
    if (strncmp(name, prefix, k) != 0 || !job_char(name[k]))
        return NULL;
    const char *end = name + k;
    while (job_char(*end))
        end++;
    return end;
}

int pt_cache_sweep(pt_err *err)
{
    (void)err; /* nothing to report: a segment that cannot be examined is left alone */
    const uid_t uid = getuid();
    char prefix[64];
    const size_t k = (size_t)snprintf(prefix, sizeof prefix, "pipetrain-%u-", (unsigned)uid);
    DIR *d = opendir(SHM_DIR);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    /* a name comparison is all that other files cost */
    while ((e = readdir(d))) {
        const char *end = job_end(e->d_name, prefix, k);
        if (end && !*end && (e->d_type == DT_REG || e->d_type == DT_UNKNOWN))
            removed += sweep_one(dirfd(d), e->d_name, uid);
    }
    closedir(d);
    return removed;
}

/* Disk files whose segment is gone from this node's SHM_DIR but not the file
 * (a job killed where SHM_DIR is per container, emptied at a reboot, or
 * cleaned by hand): dir/pipetrain-UID-JOB.cache of this user, removed
 * when nobody holds its lock (every user of a disk file holds a shared
 * flock on it, as on the segment), the name still names the file locked,
 * and no segment of that name exists here (whose own sweep decides); and
 * the NAME.cache.creating of a creator that died making it (see CREATING).
 * A directory that nodes share relies on flock seeing the other nodes'
 * locks: on a file system that keeps them per node (Lustre mounted with
 * localflock, NFS with local_lock=flock), a job's sweep would take a live
 * job's file on another node for dead; such nodes need a cache.disk_dir
 * each (the README says so). */
int pt_cache_sweep_disk(const char *dir)
{
    const uid_t uid = getuid();
    char prefix[64];
    const size_t k = (size_t)snprintf(prefix, sizeof prefix, "pipetrain-%u-", (unsigned)uid);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *end = job_end(e->d_name, prefix, k);
        const int creating = end && strcmp(end, ".cache" CREATING) == 0;
        if (!end || (strcmp(end, ".cache") != 0 && !creating))
            continue;
        char segment[300];
        struct stat seen, held;
        snprintf(segment, sizeof segment, SHM_DIR "/%.*s", (int)(end - e->d_name), e->d_name);
        if (lstat(segment, &seen) == 0 || errno != ENOENT)
            continue;
        if (fstatat(dirfd(d), e->d_name, &seen, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(seen.st_mode) ||
            seen.st_uid != uid || (creating && time(NULL) - seen.st_mtime < CREATING_AGE_S))
            continue;
        /* for writing: NFS emulates flock with POSIX locks, whose exclusive
         * kind needs it */
        int fd = openat(dirfd(d), e->d_name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &held) == 0 &&
            fstatat(dirfd(d), e->d_name, &seen, AT_SYMLINK_NOFOLLOW) == 0 &&
            seen.st_dev == held.st_dev && seen.st_ino == held.st_ino)
            removed += unlinkat(dirfd(d), e->d_name, 0) == 0;
        close(fd);
    }
    closedir(d);
    return removed;
}
