/*
 * cuda_arena.h (internal to nn/): the CUDA backend's device-memory arena, as
 * plain host bookkeeping so it can be tested without a GPU.
 *
 * Memory comes from a few large chunks (cudaMalloc in the backend, any
 * callback in tests) and is handed out in blocks of multiples of 256 bytes,
 * so every block is 256-byte aligned (what cuBLASLt and 128-bit loads want).
 *
 * Policy: best fit over all free blocks (smallest that fits, lowest address
 * on ties); a block larger than asked for is split and the tail stays free; a
 * freed block merges at once with free neighbours of the same chunk. When no
 * free block fits, a new chunk of max(request, min_chunk) bytes (2 MiB
 * granules) is reserved; if that fails, exactly the request is tried. Chunks
 * go back to the driver only at release.
 *
 * Fragmentation: a training run allocates almost everything once (segment
 * blobs, slots, scratch) and frees little, so free space sits mostly at the
 * ends of chunks. What can fragment is a pattern of frees and larger
 * re-allocations (freezing units re-allocates the gradient and moment blobs
 * smaller while the old ones are still live; scratch buffers grow): a request
 * that fits in no single free block costs a new chunk even when the sum of
 * free blocks would hold it. Merging on free bounds this to holes between
 * live blocks; cuda_arena_stats reports reserved, used and the largest hole.
 *
 * Invariants: blocks[] is sorted by address; the blocks of a chunk tile it
 * exactly, in order; no two adjacent blocks of one chunk are both free.
 */
#ifndef PT_NN_CUDA_ARENA_H
#define PT_NN_CUDA_ARENA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { CUDA_ARENA_ALIGN = 256 };

typedef struct cuda_arena_block {
    uintptr_t addr;
    size_t size;
    int chunk; /* index into chunks[] */
    int free;
} cuda_arena_block;

typedef struct cuda_arena_chunk {
    void *base;
    size_t size;
} cuda_arena_chunk;

/* Chunk source: returns a region of at least `bytes` aligned to 256, or NULL. */
typedef void *(*cuda_arena_get_fn)(void *ctx, size_t bytes);
typedef void (*cuda_arena_put_fn)(void *ctx, void *base);

typedef struct cuda_arena {
    cuda_arena_block *blocks;
    int n_blocks, cap_blocks;
    cuda_arena_chunk *chunks;
    int n_chunks, cap_chunks;
    size_t min_chunk;
    size_t reserved, used, peak_used;
    cuda_arena_get_fn get;
    cuda_arena_put_fn put;
    void *ctx;
} cuda_arena;

typedef struct cuda_arena_stats {
    size_t reserved, used, peak_used, largest_free;
    int chunks, blocks;
} cuda_arena_stats;

void cuda_arena_init(cuda_arena *a, size_t min_chunk, cuda_arena_get_fn get, cuda_arena_put_fn put,
                     void *ctx);
/* A block of at least `bytes` (a zero-byte request gets 256); NULL when no
 * chunk can be had. Contents are undefined. */
void *cuda_arena_alloc(cuda_arena *a, size_t bytes);
/* 0, or -1 when p is not a live block of this arena (nothing changes then). */
int cuda_arena_free(cuda_arena *a, void *p);
/* Returns every chunk through `put`; the arena is empty and reusable after. */
void cuda_arena_release(cuda_arena *a);
void cuda_arena_get_stats(const cuda_arena *a, cuda_arena_stats *out);
/* Checks the invariants above; 0 when they hold (for tests). */
int cuda_arena_check(const cuda_arena *a);

#ifdef __cplusplus
}
#endif

#endif
