/*
 * test_cuda_arena.c (labels gpu, unit): the CUDA backend's device-memory
 * arena (nn/cuda_arena.h) is host bookkeeping over chunks from a callback, so
 * it runs here for real, with host memory standing in for cudaMalloc: blocks
 * are 256-byte aligned, disjoint and inside their chunk; free merges
 * neighbours; best fit reuses holes before reserving; an exhausted chunk
 * source gives NULL and changes nothing; a bad free is refused.
 */
#include "tests/common/cunit_main.h"

#include "nn/cuda_arena.h"

#include <stdint.h>
#include <stdlib.h>

typedef struct source {
    size_t limit, reserved;
    int gets, puts;
} source;

static void *get(void *ctx, size_t bytes)
{
    source *s = ctx;
    if (s->reserved + bytes > s->limit)
        return NULL;
    void *p = aligned_alloc(256, bytes);
    if (p) {
        s->reserved += bytes;
        s->gets++;
    }
    return p;
}

static void put(void *ctx, void *base)
{
    source *s = ctx;
    s->puts++;
    free(base);
}

static void basics(void)
{
    source src = {(size_t)64 << 20, 0, 0, 0};
    cuda_arena a;
    cuda_arena_init(&a, (size_t)4 << 20, get, put, &src);
    char *p = cuda_arena_alloc(&a, 1000), *q = cuda_arena_alloc(&a, 1), *z = cuda_arena_alloc(&a, 0);
    CU_ASSERT_FATAL(p && q && z);
    CU_ASSERT_EQUAL((uintptr_t)p % 256, 0);
    CU_ASSERT_EQUAL((uintptr_t)q % 256, 0);
    CU_ASSERT(q >= p + 1000 || q + 256 <= p);
    CU_ASSERT(z != q && z != p);
    CU_ASSERT_EQUAL(src.gets, 1); /* one chunk holds all three */
    CU_ASSERT_EQUAL(cuda_arena_check(&a), 0);
    CU_ASSERT_EQUAL(cuda_arena_free(&a, p + 256), -1); /* not a block's start */
    CU_ASSERT_EQUAL(cuda_arena_free(&a, p), 0);
    CU_ASSERT_EQUAL(cuda_arena_free(&a, p), -1); /* already free */
    CU_ASSERT_EQUAL(cuda_arena_check(&a), 0);
    /* the hole is reused by a request that fits */
    char *r = cuda_arena_alloc(&a, 700);
    CU_ASSERT_PTR_EQUAL(r, p);
    cuda_arena_free(&a, r);
    cuda_arena_free(&a, q);
    cuda_arena_free(&a, z);
    cuda_arena_stats st;
    cuda_arena_get_stats(&a, &st);
    CU_ASSERT_EQUAL(st.used, 0);
    CU_ASSERT_EQUAL(st.blocks, 1); /* everything merged back into one free block */
    CU_ASSERT_EQUAL(st.largest_free, st.reserved);
    /* larger than a chunk: a chunk of its own */
    char *big = cuda_arena_alloc(&a, (size_t)9 << 20);
    CU_ASSERT_FATAL(big != NULL);
    CU_ASSERT_EQUAL(src.gets, 2);
    /* beyond what the source has: NULL, and nothing changes */
    cuda_arena_get_stats(&a, &st);
    CU_ASSERT_PTR_NULL(cuda_arena_alloc(&a, (size_t)100 << 20));
    cuda_arena_stats st2;
    cuda_arena_get_stats(&a, &st2);
    CU_ASSERT_EQUAL(st2.reserved, st.reserved);
    CU_ASSERT_EQUAL(st2.used, st.used);
    CU_ASSERT_EQUAL(cuda_arena_check(&a), 0);
    cuda_arena_release(&a);
    CU_ASSERT_EQUAL(src.puts, src.gets);
}

/* Random allocations and frees, with contents written and checked, against
 * the invariants after every operation. */
static void random_traffic(void)
{
    source src = {(size_t)256 << 20, 0, 0, 0};
    cuda_arena a;
    cuda_arena_init(&a, (size_t)8 << 20, get, put, &src);
    enum { SLOTS = 200, OPS = 20000 };
    unsigned char *ptr[SLOTS] = {0};
    size_t len[SLOTS] = {0};
    uint64_t x = 88172645463325252ull;
    int bad = 0, failed_checks = 0;
    for (int op = 0; op < OPS; op++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int k = (int)(x % SLOTS);
        if (ptr[k]) {
            for (size_t i = 0; i < len[k]; i += 97)
                bad += ptr[k][i] != (unsigned char)(k + i);
            bad += cuda_arena_free(&a, ptr[k]) != 0;
            ptr[k] = NULL;
        } else {
            len[k] = (x >> 20) % 4 == 0 ? (size_t)((x >> 24) % (3u << 20)) : (size_t)((x >> 24) % 5000);
            ptr[k] = cuda_arena_alloc(&a, len[k]);
            if (!ptr[k]) {
                bad++;
                continue;
            }
            bad += (uintptr_t)ptr[k] % 256 != 0;
            for (size_t i = 0; i < len[k]; i += 97)
                ptr[k][i] = (unsigned char)(k + i);
        }
        if (op % 97 == 0)
            failed_checks += cuda_arena_check(&a) != 0;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(failed_checks, 0);
    cuda_arena_stats st;
    cuda_arena_get_stats(&a, &st);
    /* best fit with merging keeps the reservation near the peak of live bytes */
    CU_ASSERT(st.reserved <= 3 * st.peak_used + ((size_t)16 << 20));
    for (int k = 0; k < SLOTS; k++)
        if (ptr[k])
            cuda_arena_free(&a, ptr[k]);
    CU_ASSERT_EQUAL(cuda_arena_check(&a), 0);
    cuda_arena_get_stats(&a, &st);
    CU_ASSERT_EQUAL(st.used, 0);
    CU_ASSERT_EQUAL(st.blocks, st.chunks); /* one free block per chunk */
    cuda_arena_release(&a);
}

static const pt_test tests[] = {{"basics", basics}, {"random_traffic", random_traffic}, {NULL, NULL}};

static const pt_test_suite suites[] = {{"cuda_arena", tests}, {NULL, NULL}};
