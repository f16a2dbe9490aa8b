/*
 * cpu_transpose.h (internal to nn/): float transposes of a block held in
 * vector registers, 16 x 16 where the target has AVX-512 and 8 x 8 where it
 * has AVX, for the CPU kernels that pack a matrix the other way round
 * (nn/cpu_gemm.c's weight panels, nn/cpu_attention.c's transposed q and
 * output gradient). They move bits and compute nothing; callers keep a
 * scalar loop for other targets.
 */
#ifndef PT_NN_CPU_TRANSPOSE_H
#define PT_NN_CPU_TRANSPOSE_H

#if defined(__AVX512F__)
#include <immintrin.h>

/* r[j] = row j of a 16 x 16 block in, column j out: unpack pairs of rows,
 * then pairs of pairs, then exchange 128-bit lanes twice. */
static inline __attribute__((always_inline)) void pt_transpose16(__m512 r[16])
{
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4g + c], 128-bit lane l: column 4l + c of rows 4g .. 4g + 3 */
    for (int g = 0; g < 4; g++) {
        __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
        __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int c = 0; c < 4; c++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
        __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
        __m512 w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
        __m512 w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
        r[c] = _mm512_shuffle_f32x4(v0, w0, 0x88);
        r[4 + c] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
        r[8 + c] = _mm512_shuffle_f32x4(v1, w1, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
    }
}
#endif

#if defined(__AVX__)
#include <immintrin.h>

/* r[j] = row j of an 8 x 8 block in, column j out: unpack pairs of rows,
 * then pairs of pairs (each 128-bit half holds 4 rows of a column), then
 * join the halves. */
static inline __attribute__((always_inline)) void pt_transpose8(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4g + c]: columns c and c + 4 of rows 4g .. 4g + 3 */
    for (int g = 0; g < 2; g++) {
        u[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
        r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
}
#endif

#endif
