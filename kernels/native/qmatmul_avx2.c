/* AVX2 + FMA + F16C path: a 32-weight block is four 8-lane registers, so one weight row at a time
 * (four registers) feeds a tile of up to 8 rows of x (eight accumulators). */
#if defined(__x86_64__)
#include <immintrin.h>

#include "qmatmul_impl.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) TGT

INLINE __m256 u8_to_ps(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); }
INLINE __m256 i8_to_ps(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)); }

/* w[0..3] = weights 0..7, 8..15, 16..23, 24..31 of the block, ggml-exact. */
INLINE void dequant(int kind, const uint8_t *b, __m256 w[4]) {
    if (kind == 8) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(lb_u16(b)));
        __m128i q0 = _mm_loadu_si128((const __m128i *)(b + 2)), q1 = _mm_loadu_si128((const __m128i *)(b + 18));
        w[0] = _mm256_mul_ps(i8_to_ps(q0), d);
        w[1] = _mm256_mul_ps(i8_to_ps(_mm_srli_si128(q0, 8)), d);
        w[2] = _mm256_mul_ps(i8_to_ps(q1), d);
        w[3] = _mm256_mul_ps(i8_to_ps(_mm_srli_si128(q1, 8)), d);
        return;
    }
    const __m128i mask = _mm_set1_epi8(0x0f);
    int off = kind == 3 ? 4 : 2;
    __m128i qs = _mm_loadu_si128((const __m128i *)(b + off));
    __m128i lo = _mm_and_si128(qs, mask), hi = _mm_and_si128(_mm_srli_epi16(qs, 4), mask);
    __m256 q[4] = {u8_to_ps(lo), u8_to_ps(_mm_srli_si128(lo, 8)), u8_to_ps(hi), u8_to_ps(_mm_srli_si128(hi, 8))};
    __m256 d = _mm256_set1_ps(_cvtsh_ss(lb_u16(b)));
    if (kind == 3) {
        __m256 m = _mm256_set1_ps(_cvtsh_ss(lb_u16(b + 2)));
        for (int i = 0; i < 4; i++) w[i] = _mm256_add_ps(_mm256_mul_ps(q[i], d), m);
    } else {
        __m256 eight = _mm256_set1_ps(8.0f);
        for (int i = 0; i < 4; i++) w[i] = _mm256_mul_ps(_mm256_sub_ps(q[i], eight), d);
    }
}

INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* out0[r * N] for r < R rows of x and one weight row; R is a constant after inlining. */
INLINE void tile(int kind, int R, const float *x0, int64_t K, const uint8_t *wrow, float *out0, int64_t N) {
    const int64_t nb = K / QK, bb = lb_block_bytes(kind);
    __m256 acc[8];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256 w[4];
        _mm_prefetch((const char *)wrow + b * bb + 4096, _MM_HINT_T0);   /* see qmatmul_avx512.c */
        dequant(kind, wrow + b * bb, w);
        for (int r = 0; r < R; r++) {
            const float *xb = x0 + r * K + b * QK;
            for (int i = 0; i < 4; i++) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 8 * i), w[i], acc[r]);
        }
    }
    for (int r = 0; r < R; r++) out0[r * N] = hsum(acc[r]);
}

#define ROWS_FN(KIND, R) \
    static TGT void rows_##KIND##_##R(const float *x0, int64_t K, const uint8_t *w, int64_t N, float *out0) { \
        const int64_t row_bytes = K / QK * lb_block_bytes(KIND); \
        for (int64_t n = 0; n < N; n++) tile(KIND, R, x0, K, w + n * row_bytes, out0 + n, N); }
#define ROWS_ALL(KIND) \
    ROWS_FN(KIND, 1) ROWS_FN(KIND, 2) ROWS_FN(KIND, 3) ROWS_FN(KIND, 4) \
    ROWS_FN(KIND, 5) ROWS_FN(KIND, 6) ROWS_FN(KIND, 7) ROWS_FN(KIND, 8) \
    static void (*const rows_##KIND[9])(const float *, int64_t, const uint8_t *, int64_t, float *) = { \
        0, rows_##KIND##_1, rows_##KIND##_2, rows_##KIND##_3, rows_##KIND##_4, \
        rows_##KIND##_5, rows_##KIND##_6, rows_##KIND##_7, rows_##KIND##_8};

ROWS_ALL(2)
ROWS_ALL(3)
ROWS_ALL(8)

TGT void lb_qmatmul_avx2(int kind, const float *x, int64_t T, int64_t K, const uint8_t *w, int64_t N, float *out) {
    for (int64_t t = 0; t < T; t += 8) {
        int R = T - t < 8 ? (int)(T - t) : 8;
        if (kind == 3) rows_3[R](x + t * K, K, w, N, out + t * N);
        else if (kind == 8) rows_8[R](x + t * K, K, w, N, out + t * N);
        else rows_2[R](x + t * K, K, w, N, out + t * N);
    }
}
#endif
