/*
 * cpu_attention.c: multi-head scaled dot-product attention for the CPU
 * backend (compiled for float32 and float64, see cpu_real.h).
 *
 * One (example, head) pair at a time, a few pairs a task on the backend's
 * thread pool (nn/cpu_pool.h), with scratch per thread. Every product of a
 * pair is one small matrix product of the same form (tile()
 * below):
 *
 *     C[r][l] = sum over t of A[r][t] * B[t][l]
 *
 * with l running along a row of B that is read as whole vectors, and A read
 * one element at a time (a broadcast). Vectors run along the head dimension
 * (outputs, and the gradients of q, k and v) or along the queries (scores,
 * the gradient of the probabilities); the latter read B from a transposed,
 * zero-padded copy of q or of the output's gradient ([hd][Tp], Tp = T rounded
 * up to the vector width VW). A tile keeps up to MAXMR x MAXNV accumulators
 * in registers, two per (row, vector), so its multiply-adds form that many
 * independent chains, and no lane ever holds a partial sum that a horizontal
 * reduction would have to combine. Rows of q, k, v and the output's gradient
 * are first copied out of their strided tensors into packed scratch.
 *
 * Scores and probabilities are kept transposed, st[j][i] = k_j . q_i * scale
 * (key rows, query columns), so the softmax over keys j runs down columns: its
 * max and sum are vertical vector operations. probs [n, H, T, T] keeps the
 * same layout, P^T[j][i] = P[i][j], row length T, zero above the diagonal
 * when causal (that is, at i < j). With dropout on the probabilities, the
 * forward multiplies them by the mask into the score scratch before the
 * weighted sum of values (probs keeps them undropped), and the backward
 * makes the same dropped probabilities again from the mask's hash: dV takes
 * them, and dP is the dropped one times the mask.
 *
 * Determinism: each element of every product is the same two chains of
 * multiply-adds (even and odd t, ascending, from 0) whatever the tile it
 * falls in (tiles cut rows and vectors, never t; terms a tile adds past a
 * row's own range have an exact 0 weight, which leaves a nonzero sum
 * unchanged). Each pair writes only its own rows of out and its own columns
 * of dqkv, so the result does not depend on the thread count or on which
 * thread runs a pair, nor a pair's forward on the other pairs of the batch:
 * the tiling and every vector/scalar path is fixed by T and hd,
 * and the scratch that the compiler-vectorised softmax loops run over is
 * 64-byte aligned (pt_cpu_scratch), so no path depends on where a thread's
 * scratch sits.
 */
#include "nn/cpu_real.h"
#include "nn/cpu_lanes.h"
#include "nn/cpu_transpose.h"

#include <stdlib.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

/* VW: the elements of one vector register of the build's instruction set;
 * MAXMR x MAXNV vectors: a tile's most rows and vectors, about half the
 * registers (each needs two accumulators). Nothing about an element's
 * arithmetic depends on them. */
#if defined(__AVX512F__)
#define VBYTES 64
#define MAXMR_8 1
enum { MAXMR = 8 };
#elif defined(__AVX__)
#define VBYTES 32
#define MAXMR_8 0
enum { MAXMR = 6 };
#else
#define VBYTES 16
#define MAXMR_8 0
enum { MAXMR = 6 };
#endif
enum { VW = VBYTES / (int)sizeof(real), MAXNV = 4 };

#define INLINE static inline __attribute__((always_inline))

/* VW elements in registers: GCC keeps these accumulators out of memory, which
 * it does not do for an array indexed in an `omp simd` loop. */
typedef real vreal __attribute__((vector_size(VW * sizeof(real))));
/* the same, for unaligned loads and stores through any pointer */
typedef real vreal_u __attribute__((vector_size(VW * sizeof(real)), aligned(sizeof(real)),
                                     may_alias));

INLINE vreal vload(const real *p) { return *(const vreal_u *)p; }
INLINE void vstore(real *p, vreal v) { *(vreal_u *)p = v; }

#if VBYTES == 32 && !defined(PT_REAL_F64)
/* the mask of lanes [0, n) for AVX's masked loads, n in [0, 8] */
INLINE __m256i first_lanes(int n)
{
    static const int32_t ones_then_zeros[16] = {-1, -1, -1, -1, -1, -1, -1, -1};
    return _mm256_loadu_si256((const __m256i *)(ones_then_zeros + 8 - n));
}
#endif

/* p[0 .. n) and 0 past it, for n in [1, VW]; nothing past n is read */
INLINE vreal vload_part(const real *p, int n)
{
    if (n >= VW)
        return vload(p);
#if VBYTES == 64 && !defined(PT_REAL_F64)
    return (vreal)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
#elif VBYTES == 32 && !defined(PT_REAL_F64)
    return (vreal)_mm256_maskload_ps(p, first_lanes(n));
#else
    vreal v = {0};
    for (int l = 0; l < n; l++)
        v[l] = p[l];
    return v;
#endif
}

/* p[0 .. n) = v[0 .. n), for n in [1, VW]; nothing past n is written */
INLINE void vstore_part(real *p, vreal v, int n)
{
    if (n >= VW) {
        vstore(p, v);
        return;
    }
#if VBYTES == 64 && !defined(PT_REAL_F64)
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), (__m512)v);
#else /* not AVX's masked store: on the AMD cores measured, it made attention
       * slower than this loop (its masked load made it faster) */
    for (int l = 0; l < n; l++)
        p[l] = v[l];
#endif
}

/* lanes of a vector's width as integers, for masks */
#ifdef PT_REAL_F64
typedef int64_t vint __attribute__((vector_size(VW * sizeof(real))));
#else
typedef int32_t vint __attribute__((vector_size(VW * sizeof(real))));
#endif

INLINE vreal vset(real a) { return (vreal){0} + a; }

/* m ? a : b lane by lane, m all ones or all zeros (a comparison's result) */
INLINE vreal vsel(vint m, vreal a, vreal b) { return (vreal)((m & (vint)a) | (~m & (vint)b)); }

static int padded(int T) { return (T + VW - 1) / VW * VW; }

/* Rows r < mr of C (row stride ldc), NV vectors each, the last `cols` lanes
 * wide (cols in [1, VW]):
 *
 *     C[r][l] = scale * sum_{t0 <= t < t1} A[r * ars + t * ats] * B[t * bts + l]
 *
 * two accumulators per (row, vector): term t goes to accumulator t % 2, each
 * a chain of multiply-adds in ascending t from 0, and the two are added at
 * the end (which halves the chains, and so the rounding error, of a long
 * sum). mr and NV are constants wherever this is inlined (run_tile), so the
 * loops over them unroll and the accumulators live in registers. Lanes of
 * the last vector past `cols` are neither read from B nor written to C;
 * scale 1 is exact. */
INLINE void tile(const int mr, const int NV, real *C, size_t ldc, int cols, const real *A,
                 size_t ars, size_t ats, const real *B, size_t bts, int t0, int t1, real scale)
{
    vreal acc[2][MAXMR][MAXNV];
#pragma GCC unroll 2
    for (int e = 0; e < 2; e++)
#pragma GCC unroll 8
        for (int r = 0; r < MAXMR; r++)
#pragma GCC unroll 4
            for (int v = 0; v < MAXNV; v++)
                acc[e][r][v] = (vreal){0};
    /* term t of every element goes to accumulator t % 2 */
#define TILE_TERM(E, T_)                                                                           \
    do {                                                                                           \
        const real *b = B + (size_t)(T_) * bts;                                                    \
        vreal bv[MAXNV];                                                                           \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) bv[v] =                               \
            v == NV - 1 ? vload_part(b + v * VW, cols) : vload(b + v * VW);                        \
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)                                       \
        {                                                                                          \
            const real a = A[(size_t)r * ars + (size_t)(T_) * ats];                                \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[E][r][v] += a * bv[v];        \
        }                                                                                          \
    } while (0)
    int t = t0;
    if (t < t1 && (t & 1)) {
        TILE_TERM(1, t);
        t++;
    }
    for (; t + 1 < t1; t += 2) {
        TILE_TERM(0, t);
        TILE_TERM(1, t + 1);
    }
    if (t < t1)
        TILE_TERM(0, t);
#undef TILE_TERM
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            real *c = C + (size_t)r * ldc + v * VW;
            const vreal sum = (acc[0][r][v] + acc[1][r][v]) * scale;
            if (v == NV - 1)
                vstore_part(c, sum, cols);
            else
                vstore(c, sum);
        }
}

/* One instance of tile() per (rows, vectors): constants inside. The float64
 * oracle, which has no speed to keep, runs every tile as single rows and
 * vectors (each element's arithmetic is the same in any tile), which spares
 * its compilation the 32 instances. */
static void run_tile(int m, int nv, real *C, size_t ldc, int cols, const real *A, size_t ars,
                     size_t ats, const real *B, size_t bts, int t0, int t1, real scale)
{
#ifdef PT_REAL_F64
    for (int r = 0; r < m; r++)
        for (int v = 0; v < nv; v++)
            tile(1, 1, C + (size_t)r * ldc + (size_t)v * VW, ldc, v == nv - 1 ? cols : VW,
                 A + (size_t)r * ars, ars, ats, B + (size_t)v * VW, bts, t0, t1, scale);
#else
#define TILE_NV(M)                                                                                 \
    switch (nv) {                                                                                  \
    case 1:                                                                                        \
        tile(M, 1, C, ldc, cols, A, ars, ats, B, bts, t0, t1, scale);                              \
        break;                                                                                     \
    case 2:                                                                                        \
        tile(M, 2, C, ldc, cols, A, ars, ats, B, bts, t0, t1, scale);                              \
        break;                                                                                     \
    case 3:                                                                                        \
        tile(M, 3, C, ldc, cols, A, ars, ats, B, bts, t0, t1, scale);                              \
        break;                                                                                     \
    default:                                                                                       \
        tile(M, 4, C, ldc, cols, A, ars, ats, B, bts, t0, t1, scale);                              \
        break;                                                                                     \
    }
    switch (m) {
    case 1:
        TILE_NV(1)
        break;
    case 2:
        TILE_NV(2)
        break;
    case 3:
        TILE_NV(3)
        break;
    case 4:
        TILE_NV(4)
        break;
    case 5:
        TILE_NV(5)
        break;
#if MAXMR_8
    case 6:
        TILE_NV(6)
        break;
    case 7:
        TILE_NV(7)
        break;
    default:
        TILE_NV(8)
        break;
#else
    default:
        TILE_NV(6)
        break;
#endif
    }
#undef TILE_NV
#endif
}

/* Rows in a tile of nv vectors: about 12 accumulators, enough independent
 * chains to cover the multiply-add latency. */
static int max_rows(int nvec)
{
#if VBYTES == 64
    static const int mr[MAXNV + 1] = {8, 8, 6, 4, 3}; /* 32 registers */
#else
    static const int mr[MAXNV + 1] = {6, 6, 3, 2, 1}; /* 16 */
#endif
    return mr[nvec < MAXNV ? nvec : MAXNV];
}

/* Rows of the next tile from row r0 of rows: the rows left split evenly
 * into tiles of at most mr (17 rows by 8: 6, 6, 5, not 8, 8, 1). */
static int tile_rows(int r0, int rows, int mr)
{
    const int left = rows - r0, tiles = (left + mr - 1) / mr;
    return (left + tiles - 1) / tiles;
}

/* m rows of C, vectors vb0 .. nvec (the last one cols lanes wide), in
 * chunks of at most MAXNV vectors: tile() for each. */
static void row_tile(int m, real *C, size_t ldc, int vb0, int nvec, int cols, const real *A,
                     size_t ars, size_t ats, const real *B, size_t bts, int t0, int t1, real scale)
{
    for (int vb = vb0; vb < nvec; vb += MAXNV) {
        const int nv = nvec - vb < MAXNV ? nvec - vb : MAXNV;
        run_tile(m, nv, C + (size_t)vb * VW, ldc, vb + nv == nvec ? cols : VW, A, ars, ats,
                 B + (size_t)vb * VW, bts, t0, t1, scale);
    }
}

/* bt[c][j] = rows[j][c] for c < hd and j < T, and 0 for j in [T, Tp); rows
 * have the given stride. */
INLINE void transpose_in(real *bt, const real *rows, size_t stride, int T, int Tp, int hd)
{
#if VBYTES == 64 && !defined(PT_REAL_F64)
    for (int c0 = 0; c0 < hd; c0 += VW) {
        const int cn = hd - c0 < VW ? hd - c0 : VW;
        const __mmask16 m = (__mmask16)((1u << cn) - 1);
        for (int j0 = 0; j0 < T; j0 += VW) {
            __m512 r[16];
            for (int j = 0; j < 16; j++)
                r[j] = j0 + j < T ? _mm512_maskz_loadu_ps(m, rows + (size_t)(j0 + j) * stride + c0)
                                  : _mm512_setzero_ps();
            pt_transpose16(r);
            for (int c = 0; c < cn; c++)
                _mm512_store_ps(bt + (size_t)(c0 + c) * Tp + j0, r[c]);
        }
    }
#elif VBYTES == 32 && !defined(PT_REAL_F64)
    for (int c0 = 0; c0 < hd; c0 += VW) {
        const int cn = hd - c0 < VW ? hd - c0 : VW;
        const __m256i m = first_lanes(cn);
        for (int j0 = 0; j0 < T; j0 += VW) {
            __m256 r[8];
            for (int j = 0; j < 8; j++)
                r[j] = j0 + j < T ? _mm256_maskload_ps(rows + (size_t)(j0 + j) * stride + c0, m)
                                  : _mm256_setzero_ps();
            pt_transpose8(r);
            for (int c = 0; c < cn; c++)
                _mm256_storeu_ps(bt + (size_t)(c0 + c) * Tp + j0, r[c]);
        }
    }
#else
    for (int c = 0; c < hd; c++)
        for (int j = 0; j < Tp; j++)
            bt[(size_t)c * Tp + j] = j < T ? rows[(size_t)j * stride + c] : 0;
#endif
}

/* dst[j][0 .. hd) = rows[j][0 .. hd) for j < T, dst's rows hdp long: rows of
 * q, k and v lie 3 * H * hd apart, which for some widths (a multiple of 1024
 * bytes) puts all of a pair's rows into the same few sets of the L1 cache;
 * the products read them many times, so they read a packed copy. */
INLINE void pack_rows(real *dst, int hdp, const real *rows, size_t stride, int T, int hd)
{
    for (int j = 0; j < T; j++)
        memcpy(dst + (size_t)j * hdp, rows + (size_t)j * stride, (size_t)hd * sizeof *dst);
}

/* The rows a thread's next pair will read, asked for (into L2) a few lines
 * at a time while this pair computes. A pair's rows of q, k, v (and in
 * backward of the output's gradient) lie 3 H hd (H hd) elements apart,
 * farther than the hardware's prefetchers look, and its probabilities were
 * written long before: unasked, packing them and reading the
 * probabilities waited on memory for about half of the time outside the
 * products. The next pair is guessed: a thread claims the tasks of its own
 * range in increasing order (pt_pool_stride: 1 apart; the thread count
 * apart where threads share one counter). A hint: no result depends on
 * it. */
enum { AHEAD_STREAMS = 5 };
typedef struct {
    const char *base[AHEAD_STREAMS];
    size_t stride[AHEAD_STREAMS];
    int rows[AHEAD_STREAMS], lines[AHEAD_STREAMS];
    int streams, per;
    int s, row, line; /* the next line asked for */
} pair_ahead;

/* rows rows of `bytes` bytes each, `stride` bytes apart, from p */
static void ahead_add(pair_ahead *a, const void *p, size_t stride, int rows, size_t bytes)
{
    const uintptr_t at = (uintptr_t)p, first = at & ~(uintptr_t)63;
    a->base[a->streams] = (const char *)first;
    a->stride[a->streams] = stride;
    a->rows[a->streams] = rows;
    a->lines[a->streams] = (int)((at + bytes - first + 63) / 64);
    a->streams++;
}

/* bytes of contiguous memory from p: a stream of one line per row */
static void ahead_add_span(pair_ahead *a, const void *p, size_t bytes)
{
    const uintptr_t at = (uintptr_t)p, first = at & ~(uintptr_t)63;
    ahead_add(a, (const void *)first, 64, (int)((at + bytes - first + 63) / 64), 64);
}

/* spread the streams' lines over `calls` calls of fetch_next */
static void ahead_spread(pair_ahead *a, int calls)
{
    long total = 0;
    for (int i = 0; i < a->streams; i++)
        total += (long)a->rows[i] * a->lines[i];
    a->per = calls > 0 ? (int)((total + calls - 1) / calls) : (int)total;
}

static inline void fetch_next(pair_ahead *a)
{
    for (int q = 0; q < a->per && a->s < a->streams; q++) {
        __builtin_prefetch(a->base[a->s] + (size_t)a->row * a->stride[a->s] + (size_t)a->line * 64,
                           0, 2);
        if (++a->line == a->lines[a->s]) {
            a->line = 0;
            if (++a->row == a->rows[a->s])
                a->row = 0, a->s++;
        }
    }
}

/* C[j][i] = scale * sum_{c < hd} A[j][c] Bt[c][i] for key rows j < L and all
 * Tp query columns (A's rows hdp apart, Bt [hd][Tp]); when causal, the
 * blocks of columns that lie wholly left of a tile's first row (queries
 * that see none of its keys) are set to `fill`, not computed. */
static void key_rows(real *C, int Tp, int L, int causal, real fill, const real *A, int hdp,
                     const real *Bt, int hd, real scale, pair_ahead *ahead)
{
    const int nb = Tp / VW, mr = max_rows(nb);
    for (int j0 = 0, m; j0 < L; j0 += m) {
        m = tile_rows(j0, L, mr);
        fetch_next(ahead);
        const int vb0 = causal ? j0 / VW : 0;
        for (int j = j0; j < j0 + m; j++)
            for (int i = 0; i < vb0 * VW; i++)
                C[(size_t)j * Tp + i] = fill;
        row_tile(m, C + (size_t)j0 * Tp, (size_t)Tp, vb0, nb, VW, A + (size_t)j0 * hdp,
                 (size_t)hdp, 1, Bt, (size_t)Tp, 0, hd, scale);
    }
}

/* Dropout of one (example, head) pair's probabilities: the example's hash
 * row, the element index of (query 0, key 0), the threshold and the scale
 * of kept elements; on = 0: none. */
typedef struct {
    int on;
    uint64_t row, base;
    uint32_t thr;
    real keep;
} pair_drop;

/* dst[i] = src[i] * mask(query i, key j) for i < T (the pair's probabilities
 * of key j are a row of the transposed layout; element (i, j) is base + i T + j). */
INLINE void drop_row(real *dst, const real *src, const pair_drop *dr, int j, int T)
{
    const uint64_t e0 = dr->base + (uint64_t)j;
#pragma omp simd
    for (int i = 0; i < T; i++)
        dst[i] = src[i] * (pt_dropout_bits(dr->row, e0 + (uint64_t)i * (uint64_t)T) >= dr->thr
                               ? dr->keep
                               : 0);
}

/* Marks a masked score; exp() of it is then replaced by an exact 0. An
 * infinity, not a large finite number: a finite mark (it was -1e30) is
 * above a real score below it, so a column whose every real score lay
 * there took its max from the mark, every real key got weight 0 and the
 * output was NaN (0 / 0), or, causal, the masked later keys got it all
 * instead. A query always sees key 0, so its max is a real score. */
#define MASKED ((real)-INFINITY)

/* exp(x) lane by lane for x <= 0 (a score less its column's max), exactly
 * 0 for a masked score (x = MASKED), and NaN for a NaN (a score that is
 * not a number makes its query's softmax NaN, as the definition and
 * PyTorch say, and the first-query path gives: taking it for a masked key
 * hid it, and gave that key no gradient). float32: cpu_math.h's
 * pt_f16_expf_nonpos (pt_expf's operations lane by lane) on 16 lanes at a
 * time; float64: libm. */
INLINE vreal softmax_exp(vreal x)
{
    vreal e;
#ifdef PT_REAL_F64
    for (int l = 0; l < VW; l++)
        e[l] = x[l] == MASKED ? 0 : R_EXP(x[l]);
#else
    for (int l = 0; l < VW; l += 16) { /* VW is 16, 8 or 4: one pt_f16, or part of one */
        pt_f16 v = {0};
        memcpy(&v, (const real *)&x + l, (VW < 16 ? VW : 16) * sizeof(real));
        v = pt_f16_sel(pt_f16_gt(v, pt_f16_set(MASKED)), pt_f16_expf_nonpos(v),
                       pt_f16_sel(pt_f16_eq(v, pt_f16_set(MASKED)), pt_f16_set(0.0f), v));
        memcpy((real *)&e + l, &v, (VW < 16 ? VW : 16) * sizeof(real));
    }
#endif
    return e;
}

/*
 * Forward of one pair: q, k, v rows at the given stride, out rows at
 * out_stride, P^T into pt [T][T]; L keys are valid (the padding mask), and
 * when causal query i sees keys j <= i only; dr: the pair's dropout.
 */
INLINE void fwd_pair(real *out, size_t out_stride, real *pt, const real *q, const real *k,
                     const real *v, size_t stride, int T, int L, int hd, int causal,
                     const pair_drop *dr, real *qt, real *st, real *colmax, real *colsum,
                     real *kp, real *vp, pair_ahead *ahead)
{
    const int Tp = padded(T), nb = Tp / VW;
    const int nvh = (hd + VW - 1) / VW, hcols = hd - (nvh - 1) * VW, hdp = nvh * VW;
    const real scale = (real)1 / R_SQRT((real)hd);
    pack_rows(kp, hdp, k, stride, L, hd);
    pack_rows(vp, hdp, v, stride, L, hd);
    transpose_in(qt, q, stride, T, Tp, hd);
    key_rows(st, Tp, L, causal, MASKED, kp, hdp, qt, hd, scale,
             ahead); /* st[j][i] = k_j . q_i scale */
    /* the causal mask (i < j), then the max over the keys of each query */
    for (int b = 0; b < nb; b++) {
        vint lane;
        for (int l = 0; l < VW; l++)
            lane[l] = b * VW + l;
        vreal mx = vset(MASKED);
        for (int j = 0; j < L; j++) {
            real *at = st + (size_t)j * Tp + b * VW;
            vreal sv = vload(at);
            if (causal && b * VW < j) {
                sv = vsel(lane < j, vset(MASKED), sv);
                vstore(at, sv);
            }
            mx = vsel(sv > mx, sv, mx);
        }
        vstore(colmax + b * VW, mx);
    }
    /* e = exp(s - max), masked scores exactly 0, and the sum of each column;
     * then P^T = e / sum into pt */
    for (int b = 0; b < nb; b++) {
        const vreal mx = vload(colmax + b * VW);
        vreal sum = {0};
        for (int j = 0; j < L; j++) {
            real *at = st + (size_t)j * Tp + b * VW;
            const vreal e = softmax_exp(vload(at) - mx);
            vstore(at, e);
            sum += e;
        }
        vstore(colsum + b * VW, (real)1 / sum);
    }
    for (int j = 0; j < L; j++)
        for (int b = 0; b < nb; b++)
            vstore_part(pt + (size_t)j * T + b * VW,
                        vload(st + (size_t)j * Tp + b * VW) * vload(colsum + b * VW), T - b * VW);
    for (int j = L; j < T; j++) /* padded keys: no query sees them */
        memset(pt + (size_t)j * T, 0, (size_t)T * sizeof *pt);
    /* the weights of the values: the probabilities, or (dropout) the dropped
     * ones, over the scores they came from */
    const real *w = pt;
    size_t wstride = (size_t)T;
    if (dr->on) {
        for (int j = 0; j < L; j++)
            drop_row(st + (size_t)j * Tp, pt + (size_t)j * T, dr, j, T);
        w = st;
        wstride = (size_t)Tp;
    }
    /* out_i = sum_j W^T[j][i] v_j over the keys query i sees */
    const int mr_o = max_rows(nvh);
    for (int i0 = 0, m; i0 < T; i0 += m) {
        m = tile_rows(i0, T, mr_o);
        fetch_next(ahead);
        const int nj = causal && i0 + m < L ? i0 + m : L;
        row_tile(m, out + (size_t)i0 * out_stride, out_stride, 0, nvh, hcols, w + i0, 1, wstride,
                 vp, (size_t)hdp, 0, nj, 1);
    }
}

/*
 * Backward of one pair, with P, dP and dS all kept transposed like the
 * scores ([key j][query i]): dP^T[j][i] = v_j . dout_i, dot[i] = sum_j P dP,
 * dS^T = P^T (dP^T - dot) scale, dq_i = sum_j dS^T[j][i] k_j,
 * dk_j = sum_i dS^T[j][i] q_i, dv_j = sum_i P^T[j][i] dout_i.
 * Dropout (mask M, kept elements scaled): v_j . dout_i is the gradient of the
 * dropped probability, dP = that times M, and dv_j takes the dropped
 * probabilities (kept in pd, rows Tp long); dot and dS are as without it.
 */
INLINE void bwd_pair(real *dq, real *dk, real *dv, const real *dout, size_t out_stride,
                     const real *pt, const real *q, const real *k, const real *v, size_t stride,
                     int T, int L, int hd, int causal, const pair_drop *dr, real *got, real *ds,
                     real *dot, real *qp, real *kp, real *vp, real *dop, real *pd,
                     pair_ahead *ahead)
{
    const int Tp = padded(T), nb = Tp / VW;
    const int nvh = (hd + VW - 1) / VW, hcols = hd - (nvh - 1) * VW, hdp = nvh * VW;
    const real scale = (real)1 / R_SQRT((real)hd);
    pack_rows(qp, hdp, q, stride, T, hd);
    pack_rows(kp, hdp, k, stride, L, hd);
    pack_rows(vp, hdp, v, stride, L, hd);
    pack_rows(dop, hdp, dout, out_stride, T, hd);
    transpose_in(got, dop, (size_t)hdp, T, Tp, hd);
    key_rows(ds, Tp, L, causal, 0, vp, hdp, got, hd, 1,
             ahead); /* ds[j][i] = dP^T[j][i] = v_j . dout_i */
    if (dr->on)
        for (int j = 0; j < L; j++) {
            real *drow = ds + (size_t)j * Tp;
            drop_row(pd + (size_t)j * Tp, pt + (size_t)j * T, dr, j, T);
            drop_row(drow, drow, dr, j, T);
        }
    for (int b = 0; b < nb; b++) {
        vreal acc = {0};
        for (int j = 0; j < L; j++)
            acc += vload_part(pt + (size_t)j * T + b * VW, T - b * VW) *
                   vload(ds + (size_t)j * Tp + b * VW);
        vstore(dot + b * VW, acc);
    }
    for (int j = 0; j < L; j++) {
        real *row = ds + (size_t)j * Tp;
        for (int b = 0; b < nb; b++) {
            const vreal p = vload_part(pt + (size_t)j * T + b * VW, T - b * VW);
            vstore(row + b * VW, p * (vload(row + b * VW) - vload(dot + b * VW)) * scale);
        }
    }
    /* dq_i = sum_j dS^T[j][i] k_j over the keys query i sees */
    const int mr_h = max_rows(nvh);
    for (int i0 = 0, m; i0 < T; i0 += m) {
        m = tile_rows(i0, T, mr_h);
        fetch_next(ahead);
        const int nj = causal && i0 + m < L ? i0 + m : L;
        row_tile(m, dq + (size_t)i0 * stride, stride, 0, nvh, hcols, ds + i0, 1, (size_t)Tp, kp,
                 (size_t)hdp, 0, nj, 1);
    }
    /* dk_j = sum_i dS^T[j][i] q_i and dv_j = sum_i P^T[j][i] dout_i over the
     * queries that see key j */
    for (int j0 = 0, m; j0 < L; j0 += m) {
        m = tile_rows(j0, L, mr_h);
        fetch_next(ahead);
        const int i0 = causal ? j0 : 0;
        row_tile(m, dk + (size_t)j0 * stride, stride, 0, nvh, hcols, ds + (size_t)j0 * Tp, Tp, 1,
                 qp, (size_t)hdp, i0, T, 1);
        if (dr->on)
            row_tile(m, dv + (size_t)j0 * stride, stride, 0, nvh, hcols, pd + (size_t)j0 * Tp,
                     (size_t)Tp, 1, dop, (size_t)hdp, i0, T, 1);
        else
            row_tile(m, dv + (size_t)j0 * stride, stride, 0, nvh, hcols, pt + (size_t)j0 * T,
                     (size_t)T, 1, dop, (size_t)hdp, i0, T, 1);
    }
    for (int j = L; j < T; j++) { /* padded keys and values: nothing depends on them */
        memset(dk + (size_t)j * stride, 0, (size_t)hd * sizeof *dk);
        memset(dv + (size_t)j * stride, 0, (size_t)hd * sizeof *dv);
    }
}

/* Example b's valid keys: lens[b] clamped to [1, T], or T without a mask. */
static int key_count(const int32_t *lens, int b, int T)
{
    if (!lens)
        return T;
    return lens[b] < 1 ? 1 : lens[b] > T ? T : lens[b];
}

/* Example b, head h's dropout (none without drop or with p = 0). */
static pair_drop pair_dropout(const pt_dropout *drop, int b, int h, int T)
{
    pair_drop dr = {0, 0, 0, 0, 0};
    if (drop && drop->p > 0) {
        dr.on = 1;
        dr.row = pt_dropout_row(drop->key, drop->ids[b]);
        dr.base = (uint64_t)h * (uint64_t)T * (uint64_t)T;
        dr.thr = pt_dropout_threshold(drop->p);
        dr.keep = (real)(1.0 / (1.0 - drop->p));
    }
    return dr;
}

/* Calls body with HD a compile-time constant for the common head sizes. */
#define DISPATCH_HD(hd, body)                                                                      \
    switch (hd) {                                                                                  \
    case 16: {                                                                                     \
        const int HD = 16;                                                                         \
        body;                                                                                      \
    } break;                                                                                       \
    case 32: {                                                                                     \
        const int HD = 32;                                                                         \
        body;                                                                                      \
    } break;                                                                                       \
    case 64: {                                                                                     \
        const int HD = 64;                                                                         \
        body;                                                                                      \
    } break;                                                                                       \
    default: {                                                                                     \
        const int HD = hd;                                                                         \
        body;                                                                                      \
    }                                                                                              \
    }

/* The arguments of a call, and each thread's scratch (made by the thread's
 * first pair, zeroed then and only then). */
typedef struct {
    real *out, *probs; /* backward: dqkv, NULL */
    const real *qkv, *dout, *saved_probs;
    const int32_t *lens;
    int n, T, H, hd, causal;
    const pt_dropout *drop; /* NULL: none */
    long per;       /* pairs per task */
    real **scratch; /* [pool threads] */
    int ahead;      /* pairs from a thread's pair to its next one, as a guess */
} attn_job;

static real *thread_scratch(const attn_job *j, int thread, size_t elems)
{
    if (!j->scratch[thread])
        j->scratch[thread] = CPU_FN(pt_cpu_scratch)(elems * sizeof(real));
    return j->scratch[thread];
}

/* Multiply-adds per task: a pair of the demo ViT (T 17, hd 16) takes about
 * a microsecond, and claiming a task about a tenth of that, so a task holds
 * a dozen such pairs. */
enum { PAIR_TASK_WORK = 1 << 16 };

/* Runs fn on every (example, head) pair of the job, PAIR_TASK_WORK's worth a
 * task (so the pairs of a task are set by the shapes alone), then frees the
 * scratch. */
static void run_pairs(pt_backend *be, attn_job *j, pt_pool_fn fn)
{
    pt_pool *pool = PAR_POOL(be, (size_t)j->n * j->H * j->T * j->T * j->hd);
    const int threads = pt_pool_threads(pool);
    j->scratch = CPU_FN(pt_cpu_scratch)((size_t)threads * sizeof *j->scratch);
    /* a task of several pairs runs them in order: the next pair is the
     * following one; a task of one, the one the pool's stride on */
    const size_t pair = (size_t)j->T * j->T * j->hd;
    j->per = pair < PAIR_TASK_WORK ? (long)(PAIR_TASK_WORK / (pair ? pair : 1)) : 1;
    j->ahead = j->per > 1 ? 1 : pt_pool_stride(pool);
    pt_pool_run(pool, tasks_for((long)j->n * j->H, j->per), fn, j);
    for (int i = 0; i < threads; i++)
        free(j->scratch[i]);
    free(j->scratch);
}

/* Rows closer than this many bytes are left to the hardware's prefetchers.
 * The demo ViT's rows of qkv (768 bytes apart) are asked for too: its qkv
 * (1.7 MB a block at batch 128) is past L2, and without the hint the
 * packing of k and v and of the output's gradient waited on L3 for about
 * half of the time outside the products (with it, on an AVX2 core, 1
 * thread, medians of 5 alternating runs: forward 6%, backward 12% less
 * time). */
#define AHEAD_STRIDE 256

static int tiles_of(int rows, int mr) { return (rows + mr - 1) / mr; }

/* The ahead of the pair `ahead` pairs after bh: its rows of q, k and v,
 * and in backward (probs, dout not NULL) of the output's gradient and its
 * probabilities, spread over the tiles of a pair of L keys. */
static pair_ahead next_pair(const attn_job *j, long bh, const real *probs, const real *dout, int L)
{
    pair_ahead a = {{0}, {0}, {0}, {0}, 0, 0, 0, 0, 0};
    const int T = j->T, H = j->H, hd = j->hd, d = H * hd;
    const size_t stride = 3 * (size_t)d * sizeof(real);
    const long nx = bh + j->ahead;
    if (stride < AHEAD_STRIDE || nx >= (long)j->n * H)
        return a;
    const int b = (int)(nx / H), h = (int)(nx % H), Ln = key_count(j->lens, b, T);
    const real *base = j->qkv + (size_t)b * T * 3 * d + (size_t)h * hd;
    const size_t row = (size_t)hd * sizeof(real);
    ahead_add(&a, base, stride, T, row);
    ahead_add(&a, base + d, stride, Ln, row);
    ahead_add(&a, base + 2 * d, stride, Ln, row);
    const int nb = padded(T) / VW, nvh = (hd + VW - 1) / VW;
    int calls = tiles_of(L, max_rows(nb)) + tiles_of(T, max_rows(nvh));
    if (dout) {
        ahead_add(&a, dout + (size_t)b * T * d + (size_t)h * hd, (size_t)d * sizeof(real), T, row);
        ahead_add_span(&a, probs + (size_t)nx * T * T, (size_t)T * T * sizeof(real));
        calls += tiles_of(L, max_rows(nvh));
    }
    ahead_spread(&a, calls);
    return a;
}

static void fwd_task(void *ctx, long task, int thread)
{
    const attn_job *j = ctx;
    real *out = j->out, *probs = j->probs;
    const real *qkv = j->qkv;
    const int32_t *lens = j->lens;
    const int T = j->T, H = j->H, hd = j->hd, causal = j->causal;
    const int d = H * hd, Tp = padded(T), hdp = padded(hd);
    const size_t stride = 3 * (size_t)d;
    {
        /* zeroed once: the padding columns of qt and of the packed rows are
         * never written */
        real *qt = thread_scratch(j, thread,
                                  (size_t)hd * Tp + (size_t)T * Tp + 2 * (size_t)Tp +
                                      2 * (size_t)T * hdp);
        real *st = qt + (size_t)hd * Tp, *colmax = st + (size_t)T * Tp, *colsum = colmax + Tp;
        real *kp = colsum + Tp, *vp = kp + (size_t)T * hdp;
        long bh0, bh1;
        task_items(task, j->per, (long)j->n * H, &bh0, &bh1);
        for (int bh = (int)bh0; bh < bh1; bh++) {
            const int b = bh / H, h = bh % H;
            const real *base = qkv + (size_t)b * T * stride + (size_t)h * hd;
            real *o = out + (size_t)b * T * d + (size_t)h * hd;
            real *P = probs + (size_t)bh * T * T;
            const int L = key_count(lens, b, T);
            const pair_drop dr = pair_dropout(j->drop, b, h, T);
            pair_ahead ahead = next_pair(j, bh, NULL, NULL, L);
            DISPATCH_HD(hd, fwd_pair(o, d, P, base, base + d, base + 2 * d, stride, T, L, HD,
                                     causal, &dr, qt, st, colmax, colsum, kp, vp, &ahead));
        }
    }
}

void CPU_FN(pt_cpu_attention_fwd)(pt_backend *be, void *out_, void *probs_, const void *qkv_,
                                  int n, int T, int H, int hd, int causal, const int32_t *lens,
                                  const pt_dropout *drop)
{
    attn_job j = {out_, probs_, qkv_, NULL, NULL, lens, n, T, H, hd, causal, drop, 0, NULL, 0};
    run_pairs(be, &j, fwd_task);
}

/* Each thread's scratch of fwd_task and bwd_task (the larger), times the
 * threads that run pairs: what run_pairs allocates beside the unit's own
 * memory, a score tile of T x T per thread among it. */
size_t CPU_FN(pt_cpu_attention_work_bytes)(const pt_backend *be, int n, int T, int H, int hd,
                                          int dropout)
{
    const size_t Tp = (size_t)padded(T), hdp = (size_t)padded(hd), t = (size_t)T;
    const size_t fwd = hd * Tp + t * Tp + 2 * Tp + 2 * t * hdp;
    const size_t bwd = hd * Tp + t * Tp + Tp + 4 * t * hdp + (dropout ? t * Tp : 0);
    const size_t pairs = (size_t)n * H;
    const size_t threads = be->threads < 1 ? 1 : (size_t)be->threads;
    return (threads < pairs ? threads : pairs) * (fwd > bwd ? fwd : bwd) * sizeof(real) +
           threads * sizeof(real *);
}

static void bwd_task(void *ctx, long task, int thread)
{
    const attn_job *j = ctx;
    real *dqkv = j->out;
    const real *dout = j->dout, *qkv = j->qkv, *probs = j->saved_probs;
    const int32_t *lens = j->lens;
    const int T = j->T, H = j->H, hd = j->hd, causal = j->causal;
    const int d = H * hd, Tp = padded(T), hdp = padded(hd);
    const size_t stride = 3 * (size_t)d;
    const size_t dropped = j->drop && j->drop->p > 0 ? (size_t)T * Tp : 0; /* pd */
    {
        /* zeroed once: the padding columns of got and of the packed rows are
         * never written */
        real *got = thread_scratch(j, thread,
                                   (size_t)hd * Tp + (size_t)T * Tp + Tp + 4 * (size_t)T * hdp +
                                       dropped);
        real *ds = got + (size_t)hd * Tp, *dot = ds + (size_t)T * Tp;
        real *qp = dot + Tp, *kp = qp + (size_t)T * hdp, *vp = kp + (size_t)T * hdp,
             *dop = vp + (size_t)T * hdp, *pd = dop + (size_t)T * hdp;
        long bh0, bh1;
        task_items(task, j->per, (long)j->n * H, &bh0, &bh1);
        for (int bh = (int)bh0; bh < bh1; bh++) {
            const int b = bh / H, h = bh % H;
            const real *base = qkv + (size_t)b * T * stride + (size_t)h * hd;
            const real *go = dout + (size_t)b * T * d + (size_t)h * hd;
            real *dbase = dqkv + (size_t)b * T * stride + (size_t)h * hd;
            const real *P = probs + (size_t)bh * T * T;
            const int L = key_count(lens, b, T);
            const pair_drop dr = pair_dropout(j->drop, b, h, T);
            pair_ahead ahead = next_pair(j, bh, probs, dout, L);
            DISPATCH_HD(hd, bwd_pair(dbase, dbase + d, dbase + 2 * d, go, d, P, base, base + d,
                                     base + 2 * d, stride, T, L, HD, causal, &dr, got, ds, dot,
                                     qp, kp, vp, dop, pd, &ahead));
        }
    }
}

void CPU_FN(pt_cpu_attention_bwd)(pt_backend *be, void *dqkv_, const void *dout_,
                                  const void *qkv_, const void *probs_, const void *out_, int n,
                                  int T, int H, int hd, int causal, const int32_t *lens,
                                  const pt_dropout *drop)
{
    (void)out_; /* the saved probabilities give everything backward needs */
    attn_job j = {dqkv_, NULL, qkv_, dout_, probs_, lens, n, T, H, hd, causal, drop, 0, NULL, 0};
    run_pairs(be, &j, bwd_task);
}
