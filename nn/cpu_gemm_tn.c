/*
 * cpu_gemm_tn.c: c += a^T b for the float32 CPU backend's weight gradient,
 * dw [out, in] += dy^T x, with the per-element arithmetic that
 * nn/cpu_gemm.h promises for it: per element and chunk of k (rows of the
 * batch) one accumulator, starting at 0, a fused multiply-add per k in
 * ascending order over the chunk in one chain; the chunks' accumulators
 * added in chunk order, then c = c + that sum, one rounded addition. As in
 * nn/cpu_gemm.c, vectors run across output columns, never across k, and the
 * multiply-adds are explicit fused operations.
 *
 * Here k (the batch's rows, thousands) is long and the output (the weight)
 * small, the other way round from the forward. At each k, a tile of TR
 * output rows o needs a[k][o .. o + TR) (each broadcast) and a panel of NR
 * columns i needs b[k][i .. i + NR) (two vector loads), so both operands
 * stream along k, each with its own row stride.
 *
 * k is cut into a few chunks of rows (pt_gemm_tn_chunks, from the shape
 * alone), and a task is a block of the output, MB rows by NB columns, over
 * one chunk: its accumulators live in the thread's scratch
 * (nn/cpu_pool.h), and the chunk's rows are walked in steps of
 * KC rows, every tile of the block over one step before the next. A step
 * first copies its rows of a's block into tiles, k-major ([tile][k][TR]),
 * so that a tile's broadcasts read one contiguous run instead of one cache
 * line per k: a's rows are kilobytes apart, those addresses share a few
 * cache sets, and read in place they came from L2 on every tile (the
 * weight gradient ran at about 55% of the core's peak on the wide ViT's
 * shapes that way, and at about 78% with the copy). Then, per panel, the
 * first tile reads the panel's rows from b and stores them, contiguous and
 * aligned, into a copy that the block's other tiles read instead. A panel
 * cut by b's right edge is copied first, with zero columns after it, so
 * that no load runs past b's last row, and a block cut by a's edge has zero
 * columns in its last tile (the zero columns' results are dropped). A
 * tile's micro-kernel loads its accumulators from the buffer, runs its
 * fused multiply-adds for the step's k in order and stores them back:
 * storing a float and loading it again is exact, so the chain over k is the
 * same chain however k is stepped. After the chunk's last step the block
 * is added to c (one chunk) or stored as the chunk's partial sums, which
 * reduction tasks then add up in chunk order and add to c. Tasks never
 * share an element of c or of the partial sums, so the split into tasks
 * (and threads) changes nothing. Tasks are numbered chunk by chunk, so
 * that a thread's contiguous run of them reads the rows of dy and x that
 * the same thread computed (nn/cpu_linear.c, linear_bwd); within a chunk,
 * consecutive tasks share a strip of the larger operand, which then comes
 * from cache the second time.
 *
 * Built per instruction set like nn/cpu_gemm.c (nn/cpu_gemm_vec.h), and
 * tested the same way (tests/nn/test_gemm.c).
 */
#include "nn/cpu_gemm.h"
#include "nn/cpu_gemm_vec.h"
#include "nn/cpu_pool.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tile's rows: with AVX-512 8 (16 accumulators of 32 registers, 10 loads
 * per 16 multiply-adds), otherwise MR (AVX2's 16 registers hold 12). */
#if defined(__AVX512F__)
enum { TR = 8 };
#else
enum { TR = MR };
#endif

/* A task's block of the output: MB rows (of a's columns) by NB columns (of
 * b's), and the rows of k per step. The accumulators (MB x NB) and a step's
 * copies of a (KC x MB) and of b's panels (KC x NB), and a's column sums
 * (MB), are the thread's scratch: 249 KiB with AVX-512.
 * Measured on the models' shapes (bench/gemm_speed): smaller blocks copy
 * the operands more often, and with longer steps the copies leave L1. */
enum { MB = 24 * TR, NB = 8 * NR, KC = 32 };
_Static_assert((MB * NB + KC * MB + KC * NB + MB) * sizeof(float) <= PT_POOL_SCRATCH,
               "a task's blocks fit the thread's scratch");

/* Below this many multiply-adds pt_gemm_tn_f32 runs on the caller alone. */
#define PARALLEL_WORK (1 << 17)

/* acc[i][0 .. NV VL) += a[k][i] b[k][0 .. NV VL) for i < TR, k < kn in
 * ascending order; acc at row stride ldt; a is a copied tile ([kn][TR]) and
 * b a panel at row stride ldb. With COPY, b's rows are also stored to copy
 * ([kn][NV VL], aligned) as they are loaded, for the next tiles to read. NV
 * and COPY are constants at every call (run_tile), so the loops unroll and
 * the accumulators live in registers. */
INLINE void tile(const int NV, const int COPY, const float *a, const float *b, size_t ldb,
                 int kn, float *acc, size_t ldt, float *copy)
{
    vec c0[TR], c1[TR];
#pragma GCC unroll 8
    for (int i = 0; i < TR; i++) {
        c0[i] = v_load(acc + (size_t)i * ldt);
        c1[i] = NV > 1 ? v_load(acc + (size_t)i * ldt + VL) : v_zero();
    }
#pragma GCC unroll 2
    for (int k = 0; k < kn; k++) {
        const vec b0 = v_loadu(b);
        const vec b1 = NV > 1 ? v_loadu(b + VL) : v_zero();
        if (COPY) {
            v_store(copy, b0);
            if (NV > 1)
                v_store(copy + VL, b1);
            copy += NV * VL;
        }
#pragma GCC unroll 8
        for (int i = 0; i < TR; i++) {
            c0[i] = v_fma_bcast(a + i, b0, c0[i]);
            if (NV > 1)
                c1[i] = v_fma_bcast(a + i, b1, c1[i]);
        }
        a += TR;
        b += ldb;
    }
#pragma GCC unroll 8
    for (int i = 0; i < TR; i++) {
        v_store(acc + (size_t)i * ldt, c0[i]);
        if (NV > 1)
            v_store(acc + (size_t)i * ldt + VL, c1[i]);
    }
}

/* One instance of tile() per (panel vectors, copy). */
static void run_tile(int nv, int copy_b, const float *a, const float *b, size_t ldb, int kn,
                     float *acc, size_t ldt, float *copy)
{
    if (nv > 1 && copy_b)
        tile(2, 1, a, b, ldb, kn, acc, ldt, copy);
    else if (nv > 1)
        tile(2, 0, a, b, ldb, kn, acc, ldt, copy);
    else if (copy_b)
        tile(1, 1, a, b, ldb, kn, acc, ldt, copy);
    else
        tile(1, 0, a, b, ldb, kn, acc, ldt, copy);
}

long GEMM_FN(pt_gemm_tn_plan)(pt_gemm_tn *p, float *c, float *colsum, const float *a,
                              const float *b, int k, int m, int n)
{
    *p = (pt_gemm_tn){c, colsum, a, b, k, m, n, 0, 0, 0, 1, NULL};
    if (k <= 0 || m <= 0 || n <= 0)
        return 0;
    p->mblocks = (m + MB - 1) / MB;
    p->nblocks = (n + NB - 1) / NB;
    /* adjacent tasks share a strip of the larger operand (an access order:
     * no task's arithmetic depends on it) */
    p->by_b = n > m;
    p->chunks = pt_gemm_tn_chunks(k, m, n);
    if (p->chunks > 1) {
        /* the calling thread's, kept between calls (pt_pool_area) */
        p->part = pt_pool_area(PT_AREA_PARTS, pt_gemm_tn_part_bytes(k, m, n),
                               "a weight gradient's partial sums");
    }
    return (long)p->chunks * p->mblocks * p->nblocks;
}

void GEMM_FN(pt_gemm_tn_done)(pt_gemm_tn *p)
{
    p->part = NULL; /* the thread's area, kept for its next call */
}

/* Rows of c per reduction task: about RED_ELEMS elements of c. */
enum { RED_ELEMS = 8192, RED_COLS = 64 };

static int reduce_rows(const pt_gemm_tn *p)
{
    const int r = RED_ELEMS / p->n;
    return r < 1 ? 1 : r;
}

long GEMM_FN(pt_gemm_tn_reduce_tasks)(const pt_gemm_tn *p)
{
    if (p->chunks <= 1 || p->m <= 0 || p->n <= 0)
        return 0;
    const int rr = reduce_rows(p);
    return (p->m + rr - 1) / rr;
}

/* c[o][i] = c[o][i] + (((part_0 + part_1) + ...) + part_{C-1})[o][i] for the
 * rows o of task t, and the same for colsum from the chunks' column sums */
void GEMM_FN(pt_gemm_tn_reduce_task)(const pt_gemm_tn *p, long t)
{
    const int m = p->m, n = p->n, C = p->chunks, rr = reduce_rows(p);
    const int o0 = (int)t * rr, o1 = o0 + rr < m ? o0 + rr : m;
    const size_t plane = (size_t)m * n;
    for (int o = o0; o < o1; o++)
        for (int i0 = 0; i0 < n; i0 += RED_COLS) {
            const int w = n - i0 < RED_COLS ? n - i0 : RED_COLS;
            const size_t at = (size_t)o * n + i0;
            float s[RED_COLS];
            memcpy(s, p->part + at, (size_t)w * sizeof *s);
            for (int ch = 1; ch < C; ch++) {
                const float *q = p->part + (size_t)ch * plane + at;
                for (int i = 0; i < w; i++)
                    s[i] = s[i] + q[i];
            }
            float *cr = p->c + at;
            for (int i = 0; i < w; i++)
                cr[i] = cr[i] + s[i];
        }
    if (p->colsum) {
        const float *sums = p->part + (size_t)C * plane;
        for (int o = o0; o < o1; o++) {
            float s = sums[o];
            for (int ch = 1; ch < C; ch++)
                s = s + sums[(size_t)ch * m + o];
            p->colsum[o] = p->colsum[o] + s;
        }
    }
}

/* A step's rows of a's columns [o0, o0 + mb) into tiles of TR columns,
 * k-major ([tile][kn][TR]); columns past mb are zero (their results are
 * dropped). Row by row, so that each of a's lines is read once and in
 * order: going tile by tile read the step's rows TR columns at a time, and
 * where a's rows are a multiple of 4 KiB apart (out = 1024) their lines
 * share one set of L1 and were gone before the next tile came back to them
 * (the copy took a seventh of the weight gradient's time on such shapes;
 * bench/gemm_speed). The stores go to 24 tiles' areas, all in L1. */
static void copy_a(float *dst, const float *a, size_t lda, int kn, int mb)
{
    const int whole = mb / TR * TR;
    for (int kk = 0; kk < kn; kk++) {
        const float *ar = a + (size_t)kk * lda;
        float *d = dst + (size_t)kk * TR;
        int t0 = 0;
        for (; t0 < whole; t0 += TR) /* a constant size: a few moves, not a call */
            memcpy(d + (size_t)t0 * KC, ar + t0, TR * sizeof *d);
        if (t0 < mb) {
            memcpy(d + (size_t)t0 * KC, ar + t0, (size_t)(mb - t0) * sizeof *d);
            memset(d + (size_t)t0 * KC + (mb - t0), 0, (size_t)(TR - (mb - t0)) * sizeof *d);
        }
    }
}

/* sums[o] += tiles[o / TR][kk][o % TR] for kk < kn in ascending order, o <
 * mb: a's column sums from a step's copy, a chain of additions per column
 * (the vectors run across columns, never along k) */
static void add_rows(float *sums, const float *tiles, int kn, int mb)
{
    for (int t0 = 0; t0 < mb; t0 += TR) {
        const float *tl = tiles + (size_t)t0 * KC;
        float s[TR];
        memcpy(s, sums + t0, sizeof s);
        for (int kk = 0; kk < kn; kk++)
#pragma GCC unroll 8
            for (int i = 0; i < TR; i++)
                s[i] = s[i] + tl[(size_t)kk * TR + i];
        memcpy(sums + t0, s, sizeof s);
    }
}

/* Prefetching of a block's rows: both operands' rows are far apart, so no
 * hardware prefetcher fetches a step's rows ahead of it, and reading them
 * when the step starts (copy_a, and the first tile of each panel) waited
 * on memory: about 15% of the weight gradient's time on the wide ViT's
 * shapes with data from memory, as in a training step. So while a step
 * computes, the next step's rows are asked for (into L1) a few lines
 * before each tile, `per` at a time, all of them by the step's end. A
 * hint: it changes no result. Rows closer than AHEAD_STRIDE bytes are left
 * to the hardware (asking cost more than it saved on the demo ViT's
 * shapes, whose operands sit in cache). */
#define AHEAD_STRIDE 1024
typedef struct {
    const char *p;
    size_t ld;
    int rows, lines, per, row, line;
} ahead;

static ahead ahead_of(const float *p, int ld, int rows, int cols, int tile_runs)
{
    const int lines = (int)((cols * sizeof(float) + 63) / 64);
    if (rows < 0 || (size_t)ld * sizeof(float) < AHEAD_STRIDE)
        rows = 0;
    const long total = (long)rows * lines;
    return (ahead){(const char *)p, (size_t)ld * sizeof(float), rows, lines,
                   (int)((total + tile_runs - 1) / tile_runs), 0, 0};
}

static inline void fetch_ahead(ahead *f)
{
    for (int q = 0; q < f->per && f->row < f->rows; q++) {
        __builtin_prefetch(f->p + (size_t)f->row * f->ld + (size_t)f->line * 64, 0, 3);
        if (++f->line == f->lines)
            f->line = 0, f->row++;
    }
}

void GEMM_FN(pt_gemm_tn_task)(const pt_gemm_tn *p, long t)
{
    const int m = p->m, n = p->n;
    /* chunk-major: a thread's run of tasks covers a contiguous run of rows */
    const long blocks = (long)p->mblocks * p->nblocks, chunk = t / blocks;
    t %= blocks;
    const int K0 = (int)((long long)p->k * chunk / p->chunks);
    const int K = (int)((long long)p->k * (chunk + 1) / p->chunks);
    const long mi = p->by_b ? t % p->mblocks : t / p->nblocks;
    const long ni = p->by_b ? t / p->mblocks : t % p->nblocks;
    const int o0 = (int)mi * MB, i0 = (int)ni * NB;
    const int mb = m - o0 < MB ? m - o0 : MB, nb = n - i0 < NB ? n - i0 : NB;
    const int tiles = (mb + TR - 1) / TR, tile_runs = tiles * ((nb + NR - 1) / NR);
    float *acc = pt_pool_scratch();  /* MB x NB, aligned */
    float *acopy = acc + MB * NB;    /* the step's tiles of a */
    float *copy = acopy + KC * MB;   /* the step's panels of b */
    float *sums = copy + KC * NB;    /* a's column sums, in the blocks of c's first columns */
    const int with_sums = p->colsum && ni == 0;
    /* the accumulators the tiles use: rows up to a whole tile, columns up
     * to a whole panel */
    const int used_rows = tiles * TR, used_cols = (nb + NR - 1) / NR * NR;
    for (int r = 0; r < used_rows; r++)
        memset(acc + (size_t)r * NB, 0, (size_t)used_cols * sizeof *acc);
    if (with_sums)
        memset(sums, 0, (size_t)MB * sizeof *sums);
    for (int k0 = K0; k0 < K; k0 += KC) {
        const int kn = K - k0 < KC ? K - k0 : KC;
        copy_a(acopy, p->a + (size_t)k0 * m + o0, (size_t)m, kn, mb);
        if (with_sums)
            add_rows(sums, acopy, kn, mb);
        /* the next step's blocks of a and b, a few lines before each tile
         * of this step, all of them by the step's end */
        const int next = K - k0 - KC < KC ? K - k0 - KC : KC;
        ahead pa = ahead_of(p->a + (size_t)(k0 + KC) * m + o0, m, next, mb, tile_runs);
        ahead pb = ahead_of(p->b + (size_t)(k0 + KC) * n + i0, n, next, nb, tile_runs);
        for (int j0 = 0; j0 < nb; j0 += NR) {
            const int cols = nb - j0 < NR ? nb - j0 : NR, nv = cols > VL ? 2 : 1;
            const float *bp = p->b + (size_t)k0 * n + i0 + j0;
            float *cp = copy + (size_t)j0 * KC;
            int r = 0;
            if (cols == nv * VL) {
                /* the first tile reads the panel from b and leaves a copy */
                fetch_ahead(&pa);
                fetch_ahead(&pb);
                run_tile(nv, 1, acopy, bp, (size_t)n, kn, acc + j0, NB, cp);
                r = 1;
            } else {
                /* cut by b's right edge: copied first, with zero columns */
                for (int kk = 0; kk < kn; kk++) {
                    float *d = cp + (size_t)kk * nv * VL;
                    memcpy(d, bp + (size_t)kk * n, (size_t)cols * sizeof *d);
                    memset(d + cols, 0, (size_t)(nv * VL - cols) * sizeof *d);
                }
            }
            for (; r < tiles; r++) {
                fetch_ahead(&pa);
                fetch_ahead(&pb);
                run_tile(nv, 0, acopy + (size_t)r * KC * TR, cp, (size_t)nv * VL, kn,
                         acc + (size_t)r * TR * NB + j0, NB, NULL);
            }
        }
    }
    if (p->chunks > 1) {
        /* the chunk's partial sums, for pt_gemm_tn_reduce_task to add up */
        float *part = p->part + (size_t)chunk * m * n;
        for (int r = 0; r < mb; r++)
            memcpy(part + (size_t)(o0 + r) * n + i0, acc + (size_t)r * NB,
                   (size_t)nb * sizeof *part);
        if (with_sums)
            memcpy(p->part + (size_t)p->chunks * m * n + (size_t)chunk * m + o0, sums,
                   (size_t)mb * sizeof *sums);
        return;
    }
    if (with_sums)
        for (int r = 0; r < mb; r++)
            p->colsum[o0 + r] = p->colsum[o0 + r] + sums[r];
    /* c = c + acc, one rounded addition per element */
    for (int r = 0; r < mb; r++) {
        float *cr = p->c + (size_t)(o0 + r) * n + i0;
        const float *ar = acc + (size_t)r * NB;
        for (int j = 0; j < nb; j++)
            cr[j] = cr[j] + ar[j];
    }
}

static void tn_task(void *ctx, long t, int thread)
{
    (void)thread;
    GEMM_FN(pt_gemm_tn_task)(ctx, t);
}

static void tn_reduce_task(void *ctx, long t, int thread)
{
    (void)thread;
    GEMM_FN(pt_gemm_tn_reduce_task)(ctx, t);
}

void GEMM_FN(pt_gemm_tn_f32)(pt_pool *pool, float *c, float *colsum, const float *a, const float *b,
                             int k, int m, int n)
{
    pt_gemm_tn p;
    const long tasks = GEMM_FN(pt_gemm_tn_plan)(&p, c, colsum, a, b, k, m, n);
    if (!tasks && colsum && k > 0 && m > 0) { /* no product (n = 0): the sums alone */
        const int C = pt_gemm_tn_chunks(k, m, n);
        for (int o = 0; o < m; o++) {
            float s = 0.0f;
            for (int ch = 0; ch < C; ch++) {
                float acc = 0.0f;
                const int r1 = (int)((long long)k * (ch + 1) / C);
                for (int r = (int)((long long)k * ch / C); r < r1; r++)
                    acc = acc + a[(size_t)r * m + o];
                s = ch ? s + acc : acc;
            }
            colsum[o] = colsum[o] + s;
        }
    }
    pt_pool *run = (double)k * m * n <= PARALLEL_WORK ? NULL : pool;
    pt_pool_run(run, tasks, tn_task, &p);
    pt_pool_run(run, GEMM_FN(pt_gemm_tn_reduce_tasks)(&p), tn_reduce_task, &p);
    GEMM_FN(pt_gemm_tn_done)(&p);
}
