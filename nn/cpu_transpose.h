/*
 * cpu_transpose.h (internal to nn/): a 16 x 16 float transpose in AVX-512
 * registers, for the CPU kernels that pack a matrix the other way round
 * (nn/cpu_gemm.c's weight panels, nn/cpu_attention.c's transposed q and
 * output gradient). It moves bits and computes nothing. Only where the
 * target has AVX-512; callers keep a scalar loop for other targets.
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

#endif
