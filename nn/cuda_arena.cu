/*
 * cuda_arena.cu: the bookkeeping of the CUDA backend's device-memory arena
 * (policy and invariants in cuda_arena.h). Host code only: the chunks come
 * from the callbacks, so this file never touches the device and its tests run
 * anywhere.
 */
#include "nn/cuda_arena.h"

#include <stdlib.h>
#include <string.h>

static size_t round_up(size_t x, size_t to)
{
    return (x + to - 1) / to * to;
}

void cuda_arena_init(cuda_arena *a, size_t min_chunk, cuda_arena_get_fn get, cuda_arena_put_fn put, void *ctx)
{
    memset(a, 0, sizeof *a);
    a->min_chunk = round_up(min_chunk ? min_chunk : (size_t)CUDA_ARENA_ALIGN, CUDA_ARENA_ALIGN);
    a->get = get;
    a->put = put;
    a->ctx = ctx;
}

/* Makes room for one more block at index i (shifting the rest up). */
static int insert_block(cuda_arena *a, int i, cuda_arena_block b)
{
    if (a->n_blocks == a->cap_blocks) {
        int cap = a->cap_blocks ? 2 * a->cap_blocks : 64;
        cuda_arena_block *nb = (cuda_arena_block *)realloc(a->blocks, (size_t)cap * sizeof *nb);
        if (!nb)
            return -1;
        a->blocks = nb;
        a->cap_blocks = cap;
    }
    memmove(a->blocks + i + 1, a->blocks + i, (size_t)(a->n_blocks - i) * sizeof *a->blocks);
    a->blocks[i] = b;
    a->n_blocks++;
    return 0;
}

static void remove_block(cuda_arena *a, int i)
{
    memmove(a->blocks + i, a->blocks + i + 1, (size_t)(a->n_blocks - i - 1) * sizeof *a->blocks);
    a->n_blocks--;
}

/* First index whose address is >= addr. */
static int lower_bound(const cuda_arena *a, uintptr_t addr)
{
    int lo = 0, hi = a->n_blocks;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (a->blocks[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Reserves a chunk of at least `bytes` and enters it as one free block;
 * returns the block's index or -1. */
static int add_chunk(cuda_arena *a, size_t bytes)
{
    const size_t granule = (size_t)2 << 20;
    size_t want = round_up(bytes, granule);
    if (want < a->min_chunk)
        want = round_up(a->min_chunk, granule);
    void *base = a->get(a->ctx, want);
    if (!base && want > round_up(bytes, granule)) {
        want = round_up(bytes, granule);
        base = a->get(a->ctx, want);
    }
    if (!base)
        return -1;
    if (a->n_chunks == a->cap_chunks) {
        int cap = a->cap_chunks ? 2 * a->cap_chunks : 8;
        cuda_arena_chunk *nc = (cuda_arena_chunk *)realloc(a->chunks, (size_t)cap * sizeof *nc);
        if (!nc) {
            a->put(a->ctx, base);
            return -1;
        }
        a->chunks = nc;
        a->cap_chunks = cap;
    }
    cuda_arena_block b = {(uintptr_t)base, want, a->n_chunks, 1};
    int i = lower_bound(a, b.addr);
    if (insert_block(a, i, b)) {
        a->put(a->ctx, base);
        return -1;
    }
    a->chunks[a->n_chunks].base = base;
    a->chunks[a->n_chunks].size = want;
    a->n_chunks++;
    a->reserved += want;
    return i;
}

void *cuda_arena_alloc(cuda_arena *a, size_t bytes)
{
    size_t size = round_up(bytes ? bytes : 1, CUDA_ARENA_ALIGN);
    if (size < bytes) /* overflow */
        return NULL;
    int best = -1;
    for (int i = 0; i < a->n_blocks; i++) {
        const cuda_arena_block *b = &a->blocks[i];
        if (b->free && b->size >= size && (best < 0 || b->size < a->blocks[best].size))
            best = i;
    }
    if (best < 0 && (best = add_chunk(a, size)) < 0)
        return NULL;
    cuda_arena_block *b = &a->blocks[best];
    if (b->size > size) {
        cuda_arena_block rest = {b->addr + size, b->size - size, b->chunk, 1};
        if (insert_block(a, best + 1, rest))
            return NULL; /* nothing changed: b is still one free block */
        b = &a->blocks[best];
        b->size = size;
    }
    b->free = 0;
    a->used += size;
    if (a->used > a->peak_used)
        a->peak_used = a->used;
    return (void *)b->addr;
}

int cuda_arena_free(cuda_arena *a, void *p)
{
    uintptr_t addr = (uintptr_t)p;
    int i = lower_bound(a, addr);
    if (i >= a->n_blocks || a->blocks[i].addr != addr || a->blocks[i].free)
        return -1;
    a->blocks[i].free = 1;
    a->used -= a->blocks[i].size;
    /* merge with the next block, then with the previous one */
    if (i + 1 < a->n_blocks && a->blocks[i + 1].free && a->blocks[i + 1].chunk == a->blocks[i].chunk) {
        a->blocks[i].size += a->blocks[i + 1].size;
        remove_block(a, i + 1);
    }
    if (i > 0 && a->blocks[i - 1].free && a->blocks[i - 1].chunk == a->blocks[i].chunk) {
        a->blocks[i - 1].size += a->blocks[i].size;
        remove_block(a, i);
    }
    return 0;
}

void cuda_arena_release(cuda_arena *a)
{
    for (int c = 0; c < a->n_chunks; c++)
        a->put(a->ctx, a->chunks[c].base);
    free(a->blocks);
    free(a->chunks);
    a->blocks = NULL;
    a->chunks = NULL;
    a->n_blocks = a->cap_blocks = a->n_chunks = a->cap_chunks = 0;
    a->reserved = a->used = 0;
}

void cuda_arena_get_stats(const cuda_arena *a, cuda_arena_stats *out)
{
    memset(out, 0, sizeof *out);
    out->reserved = a->reserved;
    out->used = a->used;
    out->peak_used = a->peak_used;
    out->chunks = a->n_chunks;
    out->blocks = a->n_blocks;
    for (int i = 0; i < a->n_blocks; i++)
        if (a->blocks[i].free && a->blocks[i].size > out->largest_free)
            out->largest_free = a->blocks[i].size;
}

int cuda_arena_check(const cuda_arena *a)
{
    size_t used = 0, total = 0;
    for (int i = 0; i < a->n_blocks; i++) {
        const cuda_arena_block *b = &a->blocks[i];
        if (b->chunk < 0 || b->chunk >= a->n_chunks || b->size == 0 || b->size % CUDA_ARENA_ALIGN ||
            b->addr % CUDA_ARENA_ALIGN)
            return -1;
        if (i > 0 && a->blocks[i - 1].addr + a->blocks[i - 1].size > b->addr)
            return -2; /* unsorted or overlapping */
        const cuda_arena_chunk *c = &a->chunks[b->chunk];
        uintptr_t cb = (uintptr_t)c->base;
        if (b->addr < cb || b->addr + b->size > cb + c->size)
            return -3;
        int first = i == 0 || a->blocks[i - 1].chunk != b->chunk;
        if (first && b->addr != cb)
            return -4; /* a chunk must start with a block */
        if (!first && a->blocks[i - 1].addr + a->blocks[i - 1].size != b->addr)
            return -5; /* a hole inside a chunk */
        if (!first && b->free && a->blocks[i - 1].free)
            return -6; /* two free neighbours not merged */
        int last = i + 1 == a->n_blocks || a->blocks[i + 1].chunk != b->chunk;
        if (last && b->addr + b->size != cb + c->size)
            return -7;
        used += b->free ? 0 : b->size;
        total += b->size;
    }
    if (used != a->used || total != a->reserved)
        return -8;
    return 0;
}
