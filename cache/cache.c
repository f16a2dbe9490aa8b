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
 * The segment is named /pipetrain-UID-JOB, created O_EXCL with mode 0600 by
 * one rank per node and removed by it at close. A process killed before that
 * leaves it behind; pt_cache_sweep, run before every create, removes segments
 * whose creating process (pid and start time) is gone.
 */
#include "cache/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "PTCACHE1"
enum { VERSION = 1, ALIGN = 4096 };
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
    int creator, fd, disk_fd;
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
 * segment; 0 if unknown. */
static uint64_t process_start(pid_t pid)
{
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
    if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                    &start) == 1)
        return start;
    return 0;
}

static int process_alive(int64_t pid, uint64_t start)
{
    if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno != EPERM))
        return 0;
    return start == 0 || process_start((pid_t)pid) == start;
}

/* ----------------------------------------------------------------- names */

static int segment_name(const char *job, char *out, size_t n, pt_err *err)
{
    char clean[64];
    size_t k = 0;
    for (const char *p = job; *p && k + 1 < sizeof clean; p++)
        clean[k++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                                    (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'
                                ? *p
                                : '_');
    clean[k] = '\0';
    if (!k)
        return pt_fail(err, PT_EINTERNAL, "the cache needs a job identifier");
    snprintf(out, n, "/pipetrain-%u-%s", (unsigned)getuid(), clean);
    return 0;
}

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* -------------------------------------------------------- create / attach */

static int map_segment(pt_cache *c, size_t bytes, int prot, pt_err *err)
{
    void *p = mmap(NULL, bytes, prot, MAP_SHARED, c->fd, 0);
    if (p == MAP_FAILED)
        return pt_fail(err, PT_ESYS, "cannot map the cache segment %s: %s", c->name, strerror(errno));
    c->h = p;
    c->map_bytes = bytes;
    c->slot = (_Atomic uint64_t *)((char *)p + c->h->slots_offset);
    c->data = (char *)p + c->h->data_offset;
    return 0;
}

void pt_cache_close(pt_cache *c)
{
    if (!c)
        return;
    char disk[sizeof c->h->disk_path] = "";
    if (c->h) {
        memcpy(disk, c->h->disk_path, sizeof disk);
        disk[sizeof disk - 1] = '\0';
        munmap(c->h, c->map_bytes);
    }
    if (c->fd >= 0)
        close(c->fd);
    if (c->disk_fd >= 0)
        close(c->disk_fd);
    if (c->creator) {
        shm_unlink(c->name);
        if (*disk)
            unlink(disk);
    }
    free(c);
}

static pt_cache *new_cache(void)
{
    pt_cache *c = calloc(1, sizeof *c);
    if (c)
        c->fd = c->disk_fd = -1;
    return c;
}

int pt_cache_create(pt_cache **out, const pt_cache_spec *spec, pt_err *err)
{
    *out = NULL;
    if (spec->samples < 1 || spec->entry_bytes < 1)
        return pt_fail(err, PT_EINTERNAL, "cache of %lld samples of %zu bytes", (long long)spec->samples,
                       spec->entry_bytes);
    pt_err ignored;
    pt_cache_sweep(&ignored);
    pt_cache *c = new_cache();
    if (!c)
        return pt_fail(err, PT_ENOMEM, "out of memory creating the cache");
    int rc = segment_name(spec->job, c->name, sizeof c->name, err);
    if (rc) {
        free(c);
        return rc;
    }
    const uint64_t memory_entries = spec->memory_bytes / spec->entry_bytes;
    const uint64_t disk_entries = spec->disk_dir && *spec->disk_dir ? spec->disk_bytes / spec->entry_bytes : 0;
    const uint64_t slots_offset = round_up(sizeof(header), 64);
    const uint64_t data_offset = round_up(slots_offset + 8 * (uint64_t)spec->samples, ALIGN);
    const uint64_t size = data_offset + memory_entries * spec->entry_bytes;

    c->fd = shm_open(c->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (c->fd < 0) {
        rc = pt_fail(err, PT_ESYS, "cannot create the cache segment %s: %s", c->name, strerror(errno));
        free(c);
        return rc;
    }
    c->creator = 1;
    if (fchmod(c->fd, 0600) != 0 || ftruncate(c->fd, (off_t)size) != 0) {
        rc = pt_fail(err, PT_ESYS, "cannot size the cache segment %s to %llu bytes: %s", c->name,
                     (unsigned long long)size, strerror(errno));
        pt_cache_close(c);
        return rc;
    }
    /* the header fields map_segment reads, and the creator, so a sweep can
     * remove the segment even if this process dies before finishing it */
    header h0 = {.slots_offset = slots_offset, .data_offset = data_offset,
                 .creator_pid = getpid(), .creator_start = process_start(getpid())};
    if (pwrite(c->fd, &h0, sizeof h0, 0) != (ssize_t)sizeof h0 ||
        (rc = map_segment(c, size, PROT_READ | PROT_WRITE, err))) {
        rc = rc ? rc : pt_fail(err, PT_ESYS, "cannot write the cache header: %s", strerror(errno));
        pt_cache_close(c);
        return rc;
    }
    header *h = c->h;
    h->version = VERSION;
    h->uid = (uint32_t)getuid();
    h->samples = (uint64_t)spec->samples;
    h->entry_bytes = spec->entry_bytes;
    h->memory_entries = memory_entries;
    h->disk_entries = disk_entries;
    h->size = size;
    h->creator_pid = getpid();
    h->creator_start = process_start(getpid());
    snprintf(h->job, sizeof h->job, "%s", spec->job);
    atomic_init(&h->memory_next, 0);
    atomic_init(&h->disk_next, 0);
    if (disk_entries) {
        snprintf(h->disk_path, sizeof h->disk_path, "%s%s.cache", spec->disk_dir, c->name);
        c->disk_fd = open(h->disk_path, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (c->disk_fd < 0 || ftruncate(c->disk_fd, (off_t)(disk_entries * spec->entry_bytes)) != 0) {
            rc = pt_fail(err, PT_ESYS, "cannot create the disk cache '%s': %s", h->disk_path,
                         strerror(errno));
            if (c->disk_fd < 0)
                h->disk_path[0] = '\0'; /* not ours to remove */
            pt_cache_close(c);
            return rc;
        }
    }
    /* the slots are zero (empty) from ftruncate; the magic goes in last */
    memcpy(h->magic, MAGIC, 8);
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
    struct stat st;
    if (rc == 0 && ((c->fd = shm_open(c->name, O_RDWR, 0)) < 0 || fstat(c->fd, &st) != 0))
        rc = pt_fail(err, PT_ESYS, "cannot open the cache segment %s: %s", c->name, strerror(errno));
    else if (rc == 0 && (size_t)st.st_size < sizeof(header))
        rc = pt_fail(err, PT_EINTERNAL, "the cache segment %s is too small", c->name);
    else if (rc == 0) {
        header h0;
        if (pread(c->fd, &h0, sizeof h0, 0) != (ssize_t)sizeof h0 || memcmp(h0.magic, MAGIC, 8) ||
            h0.version != VERSION || h0.size != (uint64_t)st.st_size)
            rc = pt_fail(err, PT_EINTERNAL, "%s is not a pipetrain cache of this version", c->name);
        else if (h0.samples != (uint64_t)spec->samples || h0.entry_bytes != spec->entry_bytes)
            rc = pt_fail(err, PT_EINTERNAL, "the cache segment %s holds %llu samples of %llu bytes, not %lld of %zu",
                         c->name, (unsigned long long)h0.samples, (unsigned long long)h0.entry_bytes,
                         (long long)spec->samples, spec->entry_bytes);
        else
            rc = map_segment(c, (size_t)st.st_size, PROT_READ | PROT_WRITE, err);
    }
    if (rc == 0 && c->h->disk_entries && (c->disk_fd = open(c->h->disk_path, O_RDWR)) < 0)
        rc = pt_fail(err, PT_ESYS, "cannot open the disk cache '%s': %s", c->h->disk_path, strerror(errno));
    if (rc) {
        pt_cache_close(c);
        return rc;
    }
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
    return got == (ssize_t)n ? 0 : pt_fail(err, PT_ESYS, "reading the disk cache: %s", got < 0 ? strerror(errno) : "short read");
}

static int copy_in(pt_cache *c, int tier, uint64_t loc, const void *data, pt_err *err)
{
    const size_t n = c->h->entry_bytes;
    if (tier == 0) {
        memcpy(c->data + loc * n, data, n);
        return 0;
    }
    ssize_t put = pwrite(c->disk_fd, data, n, (off_t)(loc * n));
    return put == (ssize_t)n ? 0 : pt_fail(err, PT_ESYS, "writing the disk cache: %s", put < 0 ? strerror(errno) : "short write");
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
        if (m < c->h->memory_entries) {
            tier = 0;
            loc = m + 1;
        } else {
            uint64_t d = atomic_fetch_add_explicit(&c->h->disk_next, 1, memory_order_relaxed);
            if (d < c->h->disk_entries) {
                tier = 1;
                loc = d + 1;
            }
        }
        if (!loc) { /* both tiers full: leave the slot as it was */
            atomic_store_explicit(&c->slot[id], s, memory_order_release);
            return 0;
        }
    }
    if (copy_in(c, tier, loc - 1, data, err)) {
        /* keep the location; the entry is gone */
        atomic_store_explicit(&c->slot[id], make_slot(ST_EMPTY, 0, tier, loc), memory_order_release);
        return -1;
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

int pt_cache_sweep(pt_err *err)
{
    char prefix[64];
    int removed = 0;
    snprintf(prefix, sizeof prefix, "pipetrain-%u-", (unsigned)getuid());
    DIR *d = opendir("/dev/shm"); /* where Linux keeps POSIX shared memory */
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        int fd = shm_open(name, O_RDONLY, 0);
        if (fd < 0)
            continue;
        header h;
        static const char unfinished[8] = {0};
        int dead = pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
                   (memcmp(h.magic, MAGIC, 8) == 0 || memcmp(h.magic, unfinished, 8) == 0) &&
                   !process_alive(h.creator_pid, h.creator_start);
        close(fd);
        if (!dead)
            continue;
        h.disk_path[sizeof h.disk_path - 1] = '\0';
        if (shm_unlink(name) == 0) {
            removed++;
            if (*h.disk_path)
                unlink(h.disk_path);
        }
    }
    closedir(d);
    (void)err;
    return removed;
}
