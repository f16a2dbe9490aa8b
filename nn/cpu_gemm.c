/*
 * cpu_gemm.c: y = init + x w^T for the float32 CPU backend's forward linear,
 * and y = x w for its backward's dx = dy w, with the per-element arithmetic
 * that nn/cpu_gemm.h promises: one accumulator per output, starting at 0, a
 * fused multiply-add per k in ascending order, init (if any) added last.
 * Nothing below may change that sequence for any element, which is what
 * makes every path agree bit for bit:
 *
 *  - vectors run across output columns o, never across k, so no lane ever
 *    holds a partial sum that a horizontal reduction would have to combine;
 *  - the multiply-adds are explicit fused intrinsics (or fmaf), never a*b+c
 *    left to the compiler's contraction, which may or may not fuse;
 *  - edges cost no special arithmetic: a panel of w is padded with zero
 *    columns (their results are computed and dropped), and a block of fewer
 *    rows runs the same k loop with fewer rows;
 *  - the output is split into (row chunk, panel) tasks, run on the thread
 *    pool given (nn/cpu_pool.h); which thread computes an element, and which
 *    tile shape it sits in, changes no operation on it.
 *
 * Blocking: w is packed per call (at most PACK_BYTES of it at a time, into
 * the calling thread's area, nn/cpu_pool.h pt_pool_area) into panels of FNR
 * = FNV vectors of columns (4 with AVX-512, 2 otherwise), k-major
 * ([k][FNR], 64-byte aligned), so the micro-kernel loads FNV vectors per k
 * and broadcasts one x per row from x itself (x is not packed: it is read
 * row by row with unit stride).
 * The forward's w [out][in] is transposed into its panels 16 x 16 at a
 * time; the backward's w [out][in] is already k-major for dx = dy w (k =
 * out, its columns are dx's), so a panel is a plain copy of FNR columns of
 * each row. The micro-kernel keeps MR x FNV accumulators in registers for
 * all of k, then adds init (or, for the backward of a layer after GELU,
 * multiplies by GELU's derivative) and stores straight from them. With
 * AVX-512 that is 6 x 4 zmm: 24 independent chains, and 10 loads (4 of the
 * panel, 6 broadcasts of x) per 24 multiply-adds. The tile was 6 x 2 (12
 * chains, 8 loads per 12) until 2026-12-02: with the operands in L1 that
 * ran at about 82% of the core's FMA peak, 6 x 4 at about 87%, and on the
 * wide ViT's shapes from memory 6 x 4 was 1.05-1.16x as fast (FNV below).
 * AVX2's 16 registers hold 6 x 2 (12 accumulators, 2 panel vectors, a
 * broadcast).
 * A long k is walked in steps of at most KC_MAX (below): a panel of k =
 * 1536 is 192 KiB, which no L1 holds, so every tile read it from L2; a
 * step's slice of it stays in L1 for all the row blocks of a chunk. Between
 * steps a tile's accumulators wait in a buffer on the task's stack: storing
 * a float and loading it again is exact, so the chain over k is the same
 * chain however k is stepped, and init is added after the last step only.
 * Rows are grouped into chunks (CHUNK_BYTES below says how big and how
 * they become tasks).
 *
 * Built for AVX-512 (zmm), AVX2 + FMA (ymm) or neither (fmaf on arrays); the
 * build machine's flags choose (nn/cpu_gemm_vec.h). tests/nn/test_gemm.c
 * compiles this file again for the other two and checks that all three give
 * the same bits.
 */
#include "nn/cpu_gemm.h"
#include "nn/cpu_gemm_vec.h"
#include "nn/cpu_pool.h"
#include "nn/cpu_transpose.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tile: MR rows (nn/cpu_gemm_vec.h) by FNV vectors of columns, FNR
 * floats; a panel is FNR columns wide (its last one 1 to FNV vectors).
 * Measured on the wide ViT's shapes (6400 rows; dx and the forward; old
 * and new kernels linked in one harness, calls alternating, the operands
 * evicted from cache before each, 1 thread, medians of 10 pairs): 6 x 4
 * against 6 x 2 1.09-1.16x as fast (the demo's 2176 x 192 x 64 1.06x), 8 x
 * 3 1.05-1.09x, 9 x 3 (past the 32 registers) 0.86-0.91x
 * (docs/PERFORMANCE.md, "The forward's and dx's tile"). */
#if defined(__AVX512F__)
enum { FNV = 4 };
#else
enum { FNV = 2 };
#endif
enum { FNR = FNV * VL };

/* Below this many multiply-adds the call runs on the caller alone: waking
 * the others costs more than it saves (the result is the same either way). */
#define PARALLEL_WORK (1 << 17)

/* A row chunk holds at most this many bytes of x. With at least
 * WHOLE_CHUNKS chunks (chunks are cut smaller to reach that, down to one
 * row block), a task is a chunk against every panel of the group: the
 * chunk stays in the cache of the one core that runs it, and w's panels
 * (read by every core) come from L2. With fewer (small products), a task
 * is (chunk, panel), so that the threads still have work to share. On the
 * wide ViT's layer shapes, tasks of (128 KiB chunk, panel) ran the forward
 * at 1.6-1.75x the single thread's speed on two threads, whole 32 KiB
 * chunks at 1.8-2.0x, with data from memory (as in a training step). */
#define CHUNK_BYTES (32 * 1024)
#define WHOLE_CHUNKS 32

/* k is walked in steps of at most KC_MAX (k itself if it is no longer),
 * as equal as multiples of 16 allow: a step's slice of a panel, KC_MAX x FNR
 * floats, is what the row blocks of a chunk read in turn. With AVX-512
 * that is 64 KiB, more than the 48 KiB L1 of the cores it was measured on;
 * yet with 6 x 4 tiles a KC_MAX of 128 (32 KiB) was 0-7% slower on the
 * wide ViT's shapes. Measured against the unstepped kernel (6 x 2 tiles
 * then) on bench/gemm_speed's
 * shapes (both linked in one harness, calls alternating, 1 and 2 threads):
 * MiniLM's k = 1536 products 1.2-1.5x as fast, k = 768 and 1024 between
 * -8% and +14% by shape and run, k <= 256 unchanged (not stepped). A
 * chunk's rows are counted by the step's k, so a stepped chunk has at most
 * STEP_BLOCKS row blocks, whose accumulators the task keeps between steps. */
#define KC_MAX 256
#define STEP_BLOCKS (CHUNK_BYTES / (MR * (KC_MAX / 2 + 1) * (int)sizeof(float)))

/* At most this much of w is packed at once (one panel if a panel is more):
 * the buffer lives only for the call, but w may be as large as the model
 * allows, and the planner's memory budget does not count a copy of it. */
#ifndef PT_GEMM_PACK_BYTES /* the test builds one variant with little, to cover groups */
#define PT_GEMM_PACK_BYTES (8 << 20)
#endif
#define PACK_BYTES ((size_t)PT_GEMM_PACK_BYTES)

/* ------------------------------------------------------------------ packing */

/* Panel [k][pw] from columns o0 .. o0 + pw of w^T (rows of w), zero where
 * o >= out. Packing moves bits and computes nothing, so its own vector and
 * scalar paths cannot change a result. */
#if defined(__AVX512F__)
/* 16 rows of w at a time, each read as one stream along k. */
static void pack_panel(float *dst, int pw, const float *w, int o0, int out, int in)
{
    for (int jb = 0; jb < pw; jb += 16) {
        const int have = out - (o0 + jb) < 16 ? out - (o0 + jb) : 16; /* may be <= 0 */
        for (int k0 = 0; k0 < in; k0 += 16) {
            const int kn = in - k0 < 16 ? in - k0 : 16;
            const __mmask16 m = (__mmask16)(kn == 16 ? 0xFFFF : (1u << kn) - 1);
            const float *src = w + (size_t)(o0 + jb) * in + k0;
            __m512 r[16];
            if (have == 16 && kn == 16) {
                for (int j = 0; j < 16; j++)
                    r[j] = _mm512_loadu_ps(src + (size_t)j * in);
            } else {
                for (int j = 0; j < 16; j++)
                    r[j] = j < have ? _mm512_maskz_loadu_ps(m, src + (size_t)j * in)
                                    : _mm512_setzero_ps();
            }
            pt_transpose16(r);
            float *d = dst + (size_t)k0 * pw + jb;
            if (kn == 16) {
                for (int kk = 0; kk < 16; kk++)
                    _mm512_store_ps(d + (size_t)kk * pw, r[kk]);
            } else {
                for (int kk = 0; kk < kn; kk++)
                    _mm512_store_ps(d + (size_t)kk * pw, r[kk]);
            }
        }
    }
}
#else
static void pack_panel(float *dst, int pw, const float *w, int o0, int out, int in)
{
    for (int j = 0; j < pw; j++) {
        const float *src = o0 + j < out ? w + (size_t)(o0 + j) * in : NULL;
        for (int k = 0; k < in; k++)
            dst[(size_t)k * pw + j] = src ? src[k] : 0.0f;
    }
}
#endif

/* The same panel from a w that is already k-major (w [k][n], the layout of
 * the backward's y = x w): row k of the panel is a plain copy of columns
 * n0 .. n0 + pw of row k, zero past n. */
static void pack_panel_kn(float *dst, int pw, const float *w, int n0, int n, int k)
{
    const int have = n - n0 < pw ? n - n0 : pw;
    for (int kk = 0; kk < k; kk++) {
        float *d = dst + (size_t)kk * pw;
        memcpy(d, w + (size_t)kk * n + n0, (size_t)have * sizeof *d);
        memset(d + have, 0, (size_t)(pw - have) * sizeof *d);
    }
}

/* ------------------------------------------------------------ micro-kernel */

/* Where a tile's results go: y (and add, and mul) at row stride ld, b, and
 * how many of the panel's columns are real. */
typedef struct {
    float *y;
    const float *add, *b, *mul;
    size_t ld;
    int cols;
} dest;

/* init + acc for one vector of a row; the same two additions as finish(). */
INLINE vec with_init(vec acc, const float *ar, const float *b)
{
    if (ar && b)
        return v_add(v_add(v_loadu(ar), v_loadu(b)), acc);
    if (ar)
        return v_add(v_loadu(ar), acc);
    if (b)
        return v_add(v_loadu(b), acc);
    return acc;
}

/* with_init's result times mul's row (one rounded product), if there is one */
INLINE vec with_mul(vec v, const float *mr) { return mr ? v_mul(v, v_loadu(mr)) : v; }

/* y = (init + t) * mul for mr rows and d->cols columns, from a tile in
 * memory: the last panel's partial columns. Only additions and a product,
 * each of two floats and rounded once, so however the compiler vectorises
 * this (and whether it checks add against y at run time) the bits are
 * those of with_init and with_mul. add may be y itself: each element is
 * read before it is written. */
static void finish(const dest *d, const float *t, int mr)
{
    for (int i = 0; i < mr; i++) {
        float *yr = d->y + (size_t)i * d->ld;
        const float *ar = d->add ? d->add + (size_t)i * d->ld : NULL, *b = d->b, *ti = t + i * FNR;
        const float *mu = d->mul ? d->mul + (size_t)i * d->ld : NULL;
        for (int j = 0; j < d->cols; j++) {
            float v = ti[j];
            if (ar && b) {
                const float init = ar[j] + b[j];
                v = init + v;
            } else if (ar) {
                v = ar[j] + v;
            } else if (b) {
                v = b[j] + v;
            }
            if (mu)
                v = v * mu[j];
            yr[j] = v;
        }
    }
}

/* Rows x[0 .. mr) times the panel, one fused multiply-add per (element, k),
 * k ascending, into MR x NV vector accumulators, which start at 0 or, for
 * a step of k after the first, at acc_in ([mr][FNR], aligned); then, for a
 * step before the last, the accumulators are stored to acc_out as they
 * are; else init is added and the rows stored, straight from registers
 * when the panel's columns are all real, through finish() when not. mr and
 * NV are constants at every call (see run_tile), so the loops over them
 * unroll and the accumulators live in registers. */
INLINE void tile(const int mr, const int NV, const float *x, size_t ldx, const float *panel,
                 int in, const dest *d, const float *acc_in, float *acc_out)
{
    vec c[MR][FNV];
    const float *xr[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
#pragma GCC unroll 4
        for (int j = 0; j < FNV; j++)
            c[i][j] = acc_in && i < mr && j < NV ? v_load(acc_in + i * FNR + j * VL) : v_zero();
        xr[i] = x + (size_t)(i < mr ? i : 0) * ldx;
    }
#pragma GCC unroll 2
    for (int k = 0; k < in; k++) {
        const float *bk = panel + (size_t)k * NV * VL;
        vec b[FNV];
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            b[j] = v_load(bk + j * VL);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                c[i][j] = v_fma_bcast(xr[i] + k, b[j], c[i][j]);
        }
    }
    if (acc_out) { /* a step before the last: the chain goes on later */
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                v_store(acc_out + i * FNR + j * VL, c[i][j]);
        }
        return;
    }
    if (d->cols == NV * VL) {
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            float *yr = d->y + (size_t)i * d->ld;
            const float *ar = d->add ? d->add + (size_t)i * d->ld : NULL;
            const float *mu = d->mul ? d->mul + (size_t)i * d->ld : NULL;
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                v_storeu(yr + j * VL, with_mul(with_init(c[i][j], ar ? ar + j * VL : NULL,
                                                         d->b ? d->b + j * VL : NULL),
                                               mu ? mu + j * VL : NULL));
        }
        return;
    }
    float t[MR * FNR] __attribute__((aligned(64)));
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            v_store(t + i * FNR + j * VL, c[i][j]);
    }
    finish(d, t, mr);
}

/* One instance of tile() per (rows, panel vectors): constants inside. */
static void run_tile(int mr, int nv, const float *x, size_t ldx, const float *panel, int in,
                     const dest *d, const float *acc_in, float *acc_out)
{
#define TILE_CASE(m)                                                                               \
    case m:                                                                                        \
        if (nv == 1)                                                                               \
            tile(m, 1, x, ldx, panel, in, d, acc_in, acc_out);                                     \
        else if (nv == 2 || FNV == 2)                                                              \
            tile(m, 2, x, ldx, panel, in, d, acc_in, acc_out);                                     \
        else if (nv == 3)                                                                          \
            tile(m, FNV > 3 ? 3 : FNV, x, ldx, panel, in, d, acc_in, acc_out);                     \
        else                                                                                       \
            tile(m, FNV, x, ldx, panel, in, d, acc_in, acc_out);                                   \
        break;
    switch (mr) {
        TILE_CASE(1)
        TILE_CASE(2)
        TILE_CASE(3)
        TILE_CASE(4)
        TILE_CASE(5)
        TILE_CASE(6)
    }
#undef TILE_CASE
}

/* ------------------------------------------------------------------ driver */

/* One call's shape and its split into panels, row blocks and row chunks.
 * Panels are packed a group at a time (all of them, unless w is large); a
 * task is every row block of a chunk against every panel of the group
 * (whole_chunks) or against one panel. w is [out][in] (the forward's w^T product) or, with
 * w_kn, [in][out] (k-major: the backward's y = x w). The first run that
 * computes also runs the caller's `extra` tasks (fn, ctx), in
 * extra_groups groups among the product's (caller_task). */
typedef struct {
    float *y;
    const float *x, *w, *b, *add, *mul;
    int rows, out, in, w_kn;
    float *packed; /* the group's panels */
    int panels, last_pw, group, blocks, chunk_blocks, chunks, whole_chunks;
    int g0, g1; /* the group being packed or used: panels [g0, g1) */
    long extra;
    int extra_groups;
    pt_pool_fn extra_fn;
    void *extra_ctx;
    int kc; /* k's step (in, if in <= KC_MAX) */
} plan;

static int panel_width(const plan *pl, int p) { return p == pl->panels - 1 ? pl->last_pw : FNR; }

/* panel p of the group that starts at panel g0 */
static float *panel_at(const plan *pl, int g0, int p)
{
    return pl->packed + (size_t)(p - g0) * FNR * pl->in;
}

static void pack_one(const plan *pl, int g0, int p)
{
    if (pl->w_kn)
        pack_panel_kn(panel_at(pl, g0, p), panel_width(pl, p), pl->w, p * FNR, pl->out, pl->in);
    else
        pack_panel(panel_at(pl, g0, p), panel_width(pl, p), pl->w, p * FNR, pl->out, pl->in);
}

/* The next block's rows of add or mul (m, at rows r0 .. r0 + MR, columns
 * o0 .. o0 + cols), asked for while this block computes: the epilogue
 * reads them at the tile's end, and rows of the output lie `out` floats
 * apart, too far for the hardware's prefetchers, so unasked they came from
 * memory there, with every multiply-add of the tile waiting on them. A
 * hint: no result depends on it. */
static inline void fetch_rows(const plan *pl, const float *m, int r0, int o0, int cols)
{
    const int r1 = r0 + MR < pl->rows ? r0 + MR : pl->rows;
    for (int r = r0; r < r1; r++) {
        const char *row = (const char *)(m + (size_t)r * pl->out + o0);
        for (int b = 0; b < cols * (int)sizeof(float); b += 64)
            __builtin_prefetch(row + b, 0, 3);
    }
}

/* task t of the group [g0, g1): with whole_chunks, chunk t against every
 * panel of the group, else (chunk, panel) */
static void run_task(const plan *pl, int g0, int g1, long t)
{
    const int c = (int)(pl->whole_chunks ? t : t / (g1 - g0));
    const int p0 = pl->whole_chunks ? g0 : g0 + (int)(t % (g1 - g0));
    const int p1 = pl->whole_chunks ? g1 : p0 + 1;
    const int end = (c + 1) * pl->chunk_blocks < pl->blocks ? (c + 1) * pl->chunk_blocks
                                                            : pl->blocks;
    /* the chunk's accumulators between steps of k (unused with one step) */
    float acc[STEP_BLOCKS * MR * FNR] __attribute__((aligned(64)));
    const int b0 = c * pl->chunk_blocks;
    for (int p = p0; p < p1; p++) {
        const int o0 = p * FNR, cols = pl->out - o0 < FNR ? pl->out - o0 : FNR;
        const int pw = panel_width(pl, p);
        for (int k0 = 0; k0 == 0 || k0 < pl->in; k0 += pl->kc) {
            const int kn = pl->in - k0 < pl->kc ? pl->in - k0 : pl->kc;
            const int first = k0 == 0, last = k0 + pl->kc >= pl->in;
            for (int blk = b0; blk < end; blk++) {
                const int r0 = blk * MR, mr = pl->rows - r0 < MR ? pl->rows - r0 : MR;
                const size_t at = (size_t)r0 * pl->out + o0;
                float *ab = acc + (size_t)(blk - b0) * MR * FNR;
                if (last && pl->add)
                    fetch_rows(pl, pl->add, r0 + MR, o0, cols);
                if (last && pl->mul)
                    fetch_rows(pl, pl->mul, r0 + MR, o0, cols);
                const dest d = {pl->y + at, pl->add ? pl->add + at : NULL,
                                pl->b ? pl->b + o0 : NULL, pl->mul ? pl->mul + at : NULL,
                                (size_t)pl->out, cols};
                run_tile(mr, pw / VL, pl->x + (size_t)r0 * pl->in + k0, (size_t)pl->in,
                         panel_at(pl, g0, p) + (size_t)k0 * pw, kn, &d, first ? NULL : ab,
                         last ? NULL : ab);
            }
        }
    }
}

/* The caller's task t, if t is one of them; else the product's task that
 * t stands for. The caller's tasks are extra_groups groups, group e the
 * tasks [extra e / groups, extra (e + 1) / groups), placed ahead of the
 * product's tasks of row chunks [chunks e / groups, chunks (e + 1) /
 * groups), per_chunk tasks each: numbered by rows, all of them, so a
 * thread's contiguous run of tasks is one run of rows. */
static int caller_task(const plan *pl, long *t, int thread, long per_chunk)
{
    const long groups = pl->extra_groups;
    long at = 0; /* tasks before group e, the caller's and the product's */
    for (long e = 0; e < groups; e++) {
        const long c0 = pl->extra * e / groups, c1 = pl->extra * (e + 1) / groups;
        if (*t < at + (c1 - c0)) {
            pl->extra_fn(pl->extra_ctx, c0 + (*t - at), thread);
            return 1;
        }
        at += c1 - c0;
        const long p0 = (long)pl->chunks * e / groups * per_chunk;
        const long p1 = (long)pl->chunks * (e + 1) / groups * per_chunk;
        if (*t < at + (p1 - p0)) {
            *t = p0 + (*t - at);
            return 0;
        }
        at += p1 - p0;
    }
    /* not reached: the run has extra + chunks * per_chunk tasks, and the
     * groups' shares add up to both */
    *t -= pl->extra;
    return 0;
}

/* The pool's tasks: panel p of the group packed; task t of the group run;
 * with one chunk and one group, panel p packed and then run. */
static void pack_task(void *ctx, long p, int thread)
{
    (void)thread;
    const plan *pl = ctx;
    pack_one(pl, pl->g0, pl->g0 + (int)p);
}

static void group_task(void *ctx, long t, int thread)
{
    const plan *pl = ctx;
    if (pl->extra && caller_task(pl, &t, thread, pl->whole_chunks ? 1 : pl->g1 - pl->g0))
        return;
    run_task(pl, pl->g0, pl->g1, t);
}

static void panel_task(void *ctx, long p, int thread)
{
    const plan *pl = ctx;
    if (pl->extra && caller_task(pl, &p, thread, pl->panels))
        return;
    pack_one(pl, 0, (int)p);
    run_task(pl, 0, pl->panels, p);
}

/* Panels packed at a time: as many as PACK_BYTES holds, at least one, at
 * most all. */
static int pack_group(int out, int in)
{
    const int panels = (out + FNR - 1) / FNR;
    const size_t panel_bytes = (size_t)FNR * (size_t)(in > 0 ? in : 1) * sizeof(float);
    const int group = PACK_BYTES / panel_bytes < 1 ? 1 : (int)(PACK_BYTES / panel_bytes);
    return group > panels ? panels : group;
}

size_t GEMM_FN(pt_gemm_pack_bytes)(int out, int in)
{
    if (out <= 0)
        return 0;
    const size_t panel_bytes = (size_t)FNR * (size_t)(in > 0 ? in : 1) * sizeof(float);
    return ((size_t)pack_group(out, in) * panel_bytes + 63) / 64 * 64;
}

/* y [rows, out] = (init + x [rows, in] times w^T ([out][in]) or, with
 * w_kn, times w ([in][out])) times mul [rows, out] if given; pool as the
 * caller chose it, extra tasks as in plan. */
static void gemm(pt_pool *pool, float *y, const float *x, const float *w, int w_kn,
                 const float *b, const float *add, const float *mul, int rows, int out, int in,
                 long extra, int extra_groups, pt_pool_fn fn, void *ctx)
{
    if (rows <= 0 || out <= 0) {
        pt_pool_run(pool, extra, fn, ctx);
        return;
    }
    plan pl = {y, x, w, b, add, mul, rows, out, in < 0 ? 0 : in, w_kn, NULL, 0, 0, 0, 0, 0, 0, 0,
               0, 0, extra, extra_groups < 1 ? 1 : extra_groups, fn, ctx, 0};
    pl.panels = (out + FNR - 1) / FNR;
    /* the last panel is as many vectors wide as cover its columns */
    pl.last_pw = (out - (pl.panels - 1) * FNR + VL - 1) / VL * VL;
    pl.group = pack_group(out, pl.in);
    /* the calling thread's, kept between calls (pt_pool_area) */
    pl.packed = pt_pool_area(PT_AREA_PACK, GEMM_FN(pt_gemm_pack_bytes)(out, pl.in),
                             "packing a linear layer's weights");
    pl.blocks = (rows + MR - 1) / MR;
    const int steps = (pl.in + KC_MAX - 1) / KC_MAX;
    pl.kc = steps <= 1 ? (pl.in ? pl.in : 1) : ((pl.in + steps - 1) / steps + 15) / 16 * 16;
    int per = (int)(CHUNK_BYTES / ((size_t)MR * pl.kc * sizeof(float)));
    if (steps > 1 && per > STEP_BLOCKS) /* not so: a stepped kc is above KC_MAX / 2 */
        per = STEP_BLOCKS;
    per = per > pl.blocks / WHOLE_CHUNKS ? pl.blocks / WHOLE_CHUNKS : per;
    pl.chunk_blocks = per < 1 ? 1 : per;
    pl.chunks = (pl.blocks + pl.chunk_blocks - 1) / pl.chunk_blocks;
    pl.whole_chunks = pl.chunks >= WHOLE_CHUNKS;

    if (pl.chunks == 1 && pl.group == pl.panels) {
        /* task p is panel p: whoever packs a panel uses it, no barrier */
        pt_pool_run(pool, pl.extra + pl.panels, panel_task, &pl);
    } else {
        for (pl.g0 = 0; pl.g0 < pl.panels; pl.g0 += pl.group) {
            pl.g1 = pl.g0 + pl.group < pl.panels ? pl.g0 + pl.group : pl.panels;
            /* each run returns when all its tasks have: every panel of the
             * group is packed before any is used, and used before the next
             * group overwrites it */
            pt_pool_run(pool, pl.g1 - pl.g0, pack_task, &pl);
            pt_pool_run(pool, pl.extra + (long)pl.chunks * (pl.whole_chunks ? 1 : pl.g1 - pl.g0),
                        group_task, &pl);
            pl.extra = 0;
        }
    }
}

/* Small products run on the caller alone (the same tasks, the same bits). */
static pt_pool *pool_for(pt_pool *pool, int rows, int out, int in)
{
    return (double)rows * out * (in > 0 ? in : 1) <= PARALLEL_WORK ? NULL : pool;
}

void GEMM_FN(pt_gemm_nt_f32)(pt_pool *pool, float *y, const float *x, const float *w,
                             const float *b, const float *add, int rows, int out, int in)
{
    gemm(pool_for(pool, rows, out, in), y, x, w, 0, b, add, NULL, rows, out, in, 0, 1, NULL,
         NULL);
}

void GEMM_FN(pt_gemm_nn_f32)(pt_pool *pool, float *y, const float *x, const float *w, int rows,
                             int n, int k)
{
    gemm(pool_for(pool, rows, n, k), y, x, w, 1, NULL, NULL, NULL, rows, n, k, 0, 1, NULL, NULL);
}

void GEMM_FN(pt_gemm_nn_f32_with)(pt_pool *pool, float *y, const float *x, const float *w,
                                  const float *mul, int rows, int n, int k, long extra,
                                  int extra_groups, pt_pool_fn fn, void *ctx)
{
    gemm(pool, y, x, w, 1, NULL, NULL, mul, rows, n, k, extra, extra_groups, fn, ctx);
}

const char *GEMM_FN(pt_gemm_f32_isa)(void) { return ISA; }
