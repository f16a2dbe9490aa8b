/*
 * cache.h: the cache module's public interface: a per-node store of the
 * frozen prefix's output activation for each training sample, shared by every
 * rank of the node, so a frozen prefix is computed once per sample instead of
 * once per epoch.
 *
 * An entry is (sample id, depth): the activation after the first `depth`
 * units. Each sample has at most one entry; storing a deeper one reuses the
 * shallower one's space, which is how the old depth's memory is freed when the
 * frozen prefix grows. Entries live in a POSIX shared-memory segment up to a
 * byte budget, then in a file on disk up to another; when both are full the
 * rest is computed, not cached. The cache decides nothing about what is
 * frozen.
 */
#ifndef PT_CACHE_H
#define PT_CACHE_H

#include "nn/nn.h"

#include <stddef.h>
#include <stdint.h>

typedef struct pt_cache pt_cache;

typedef struct pt_cache_spec {
    const char *job;       /* identifies the job; the same on every rank of the node */
    int64_t samples;       /* sample ids are 0 .. samples - 1 */
    size_t entry_bytes;    /* bytes of one cached activation */
    uint64_t memory_bytes; /* shared-memory tier: bytes of entries it may hold */
    const char *disk_dir;  /* disk tier directory; NULL or "" for none */
    uint64_t disk_bytes;   /* disk tier: bytes of entries it may hold */
} pt_cache_spec;

typedef struct pt_cache_stats {
    uint64_t memory_entries, disk_entries; /* capacity */
    uint64_t memory_used, disk_used;       /* entries allocated so far */
} pt_cache_stats;

/* The node's first rank creates the segment (mode 0600, named after the
 * user and the job; it fails if the name is taken) after sweeping segments of
 * jobs that died; the other ranks of the node attach to it, after the creator
 * is done. Every process with the cache open holds a shared flock(2) on the
 * segment until it closes or dies: that, not the segment's contents, is what
 * tells a sweep the segment is in use (cache.c). */
int pt_cache_create(pt_cache **out, const pt_cache_spec *spec, pt_err *err);
int pt_cache_attach(pt_cache **out, const pt_cache_spec *spec, pt_err *err);
/* Detaches; the creator also removes the names of the disk file and the
 * segment. Ranks that still have the cache open keep using it (their mapping
 * and descriptors hold it) until they close; none can attach after.
 * NULL-safe. */
void pt_cache_close(pt_cache *c);

/* For a job that is ending (a stop signal, an abort): removes the names of
 * the segment and disk file this process has open, if they still name them,
 * so that the kernel frees both once the last process using them is gone,
 * however it ends (the next job's sweep is then not needed, where there is
 * one). What is mapped and open stays usable; no rank can attach any more.
 * Async-signal-safe; does nothing when no cache is open. */
void pt_cache_release_names(void);
/* For a rank of a job that is failing before it attached (its node's first
 * rank created the cache, then stopped answering): removes the names of the
 * job's segment and of the disk file its header names, where they are this
 * user's and still name what was opened, since the creator cannot. Not
 * async-signal-safe; never fails. */
void pt_cache_remove_unattached(const pt_cache_spec *spec);
/* Whether pt_cache_release_names was called in this process (it is ending). */
int pt_cache_names_released(void);
/* Holds (1) or lets go (0) the release: while held, pt_cache_release_names
 * only records the request, and letting go carries it out. A node's ranks
 * hold it while they open the node's cache, so that a stop signal then does
 * not take the names off before every rank has attached (the job stops as
 * the signal asks, after its next step, instead of failing to open).
 * Async-signal-safe. */
void pt_cache_hold_names(int hold);
/* For a process that ends now (a second stop signal, a fatal one): the
 * hold no longer protects anything this process will do, so the names go
 * at once whatever it is. Async-signal-safe. */
void pt_cache_release_names_ending(void);

/* Copies the entry of sample id into out if it has depth `depth`: 1 (hit)
 * or 0 (miss). A concurrent store makes it a miss, never a torn read. */
int pt_cache_get(pt_cache *c, int64_t id, int depth, void *out, pt_err *err);
/* The depth of id's entry, 0 if none (or being written). */
int pt_cache_depth(pt_cache *c, int64_t id);
/* Stores id's activation at depth (> 0) unless an entry at least as deep
 * exists or is being written: 1 stored or already present, 0 no room, <0 error. */
int pt_cache_put(pt_cache *c, int64_t id, int depth, const void *data, pt_err *err);

void pt_cache_stats_get(const pt_cache *c, pt_cache_stats *out);
/* The shared-memory object's name ("/pipetrain-UID-JOB"). */
const char *pt_cache_name(const pt_cache *c);

/* Removes the segments (and their disk files) of this user's pipetrain jobs
 * that no live process holds; returns how many were removed. Never removes a
 * segment in use, at any point of its creation included, nor a file that is
 * not this user's segment. Safe to run at any time, concurrently with other
 * sweeps and with jobs creating caches; run at every start of the program on
 * one rank per node. Costs one name comparison per file in /dev/shm that is
 * not one. It cannot fail (a segment it cannot examine is left alone): err
 * may be NULL and is not written. */
int pt_cache_sweep(pt_err *err);

/* The disk files in dir (cache.disk_dir) of this user's jobs that are gone
 * while their segment was already gone too (a per-container /dev/shm, a
 * reboot): removed when no process holds them (every user of a disk file
 * holds a shared flock on it). Returns how many; never fails. Called by
 * pt_cache_create with its disk_dir. */
int pt_cache_sweep_disk(const char *dir);

#endif
