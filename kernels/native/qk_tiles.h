/* What the K kinds' vector paths share for up to 4 rows of x at a time (decode, and the rows of a
 * batch past its multiple of 8: the 8s go to each path's own batch tiles, qk_avx2.c's and
 * qk_avx512.c's), written once: qk_avx2.c and qk_avx512.c each include it after their own TGT,
 * INLINE, kblock, unpack_k (a block's quants and scales) and k_dot (a block's integer sums against
 * one row of x in 8 int32 lanes; Q4_K/Q5_K's min sums in *m), so that it is compiled for each path's
 * instructions. Every output takes qk_generic.c's float steps in its order, per block
 * acc += (d * d_x) * sumi and accm += (dmin * d_x) * summin, then out = acc - accm: the same bits
 * on every path, whatever tile its row falls in. */
#ifndef LB_QK_TILES_H
#define LB_QK_TILES_H

#include "scales8.h"
#include "sum8.h"

#define K_D_AT(kind) ((kind) == LB_Q6_K ? 208 : 0)      /* byte of a block's d */

INLINE float k_d(int kind, const uint8_t *blk) { return _cvtsh_ss(lb_u16(blk + K_D_AT(kind))); }
INLINE float k_dmin(int kind, const uint8_t *blk) { return kind == LB_Q6_K ? 0.0f : _cvtsh_ss(lb_u16(blk + 2)); }

/* Both integer sums of a K block at once: *sa = sum of a's lanes, *sb = b's (exact in any order). */
INLINE void hsum2_i32(__m256i a, __m256i b, int32_t *sa, int32_t *sb) {
    const __m256i h = _mm256_hadd_epi32(a, b);                 /* per half: a01 a23 b01 b23 */
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    s = _mm_hadd_epi32(s, s);                                  /* A B A B */
    *sa = _mm_cvtsi128_si32(s);
    *sb = _mm_extract_epi32(s, 1);
}

/* R (<= 4) rows of x from t0 against each of nn weight rows alone, its blocks unpacked once for the
 * R: per row and block qk_generic.c's float steps, acc += (d * d_x) * sumi, accm += (dmin * d_x) *
 * summin. The rows tile8_k leaves. */
INLINE void rows_k(int kind, int R, const lb_act_k *a, int64_t t0, const uint8_t *w, int64_t nn, int64_t N, float *out) {
    const int64_t nb = a->nb, bb = lb_qk_block_bytes(kind);
    kblock k;
    for (int64_t n = 0; n < nn; n++) {
        float acc[4] = {0}, accm[4] = {0};
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = w + (n * nb + b) * bb;
            unpack_k(kind, blk, &k);
            const float d = k_d(kind, blk), dmin = k_dmin(kind, blk);
            for (int r = 0; r < R; r++) {
                __m256i m;
                const __m256i s = k_dot(kind, &k, a->q + (t0 + r) * a->K + b * QKK, a->bsums + ((t0 + r) * nb + b) * 16, &m);
                const float dx = a->d[(t0 + r) * nb + b];
                int32_t sumi, summin;
                hsum2_i32(s, m, &sumi, &summin);
                acc[r] += d * dx * (float)sumi;
                if (kind != LB_Q6_K) accm[r] += dmin * dx * (float)summin;
            }
        }
        for (int r = 0; r < R; r++) out[r * N + n] = acc[r] - accm[r];
    }
}

/* The float16 at p in each of 8 weight rows (row_bytes apart), widened. */
INLINE __m256 f16x8(const uint8_t *p, int64_t row_bytes) {
    return _mm256_cvtph_ps(_mm_setr_epi16((short)lb_u16(p), (short)lb_u16(p + row_bytes), (short)lb_u16(p + 2 * row_bytes),
                                          (short)lb_u16(p + 3 * row_bytes), (short)lb_u16(p + 4 * row_bytes),
                                          (short)lb_u16(p + 5 * row_bytes), (short)lb_u16(p + 6 * row_bytes),
                                          (short)lb_u16(p + 7 * row_bytes)));
}

/* R (<= 4) rows of x from t0 against 8 weight rows from w0, lane c for weight row c: each row's block
 * sums met in one vector, then qk_generic.c's float steps for the 8 at once (so its bits): per block
 * acc += (d * d_x) * sumi, accm += (dmin * d_x) * summin; out = acc - accm. Each step reads a block of
 * every row, all over the tile's bytes: the next tile's (contiguous) are fetched into L2 (into L1 they
 * evicted the tile in use: Q6_K decode ran at 0.35x), 8 blocks' worth a step. */
INLINE void tile8_k(int kind, int R, const lb_act_k *a, int64_t t0, const uint8_t *w0, int64_t row_bytes, float *out0, int64_t N) {
    const int64_t nb = a->nb, bb = lb_qk_block_bytes(kind);
    __m256 acc[4], accm[4];
    for (int r = 0; r < R; r++) acc[r] = accm[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *ahead = (const char *)w0 + 8 * row_bytes + b * 8 * bb;
        for (int l = 0; l < 8 * bb; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T1);
        __m256i sv[4][8], mv[4][8];
        for (int c = 0; c < 8; c++) {
            kblock k;
            unpack_k(kind, w0 + c * row_bytes + b * bb, &k);
            for (int r = 0; r < R; r++) {
                const int64_t t = t0 + r;
                sv[r][c] = k_dot(kind, &k, a->q + t * a->K + b * QKK, a->bsums + (t * nb + b) * 16, &mv[r][c]);
            }
        }
        const uint8_t *head = w0 + b * bb;
        __m256 d, dmin;
        if (kind == LB_Q6_K) {             /* d is the block's last 2 bytes: a word read would pass its end */
            d = f16x8(head + K_D_AT(kind), row_bytes);
            dmin = _mm256_setzero_ps();
        } else {
            scales_f16x8(head, row_bytes, &d, &dmin);      /* d and dmin: one 32-bit word a row */
        }
        for (int r = 0; r < R; r++) {
            const __m256 dx = _mm256_set1_ps(a->d[(t0 + r) * nb + b]);
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(sum8_epi32(sv[r]))));
            if (kind != LB_Q6_K)
                accm[r] = _mm256_add_ps(accm[r], _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(sum8_epi32(mv[r]))));
        }
    }
    for (int r = 0; r < R; r++) _mm256_storeu_ps(out0 + r * N, _mm256_sub_ps(acc[r], accm[r]));
}

/* Every weight row against R (<= 4) rows of x: 8 weight rows at a time, then the rest one by one. */
INLINE void rows_few_k(int kind, int R, const lb_act_k *a, int64_t t0, const uint8_t *w, int64_t N, float *out) {
    const int64_t row_bytes = a->nb * lb_qk_block_bytes(kind);
    int64_t n = 0;
    for (; n + 8 <= N; n += 8) tile8_k(kind, R, a, t0, w + n * row_bytes, row_bytes, out + n, N);
    if (n < N) rows_k(kind, R, a, t0, w + n * row_bytes, N - n, N, out + n);
}

/* One instantiation per (kind, rows of x): the shape is known to the compiler. */
#define K_FEW(KIND, R) static TGT void rows_k_##KIND##_##R(const lb_act_k *a, int64_t t, const uint8_t *w, int64_t N, \
                                                           float *o) { rows_few_k(KIND, R, a, t, w, N, o); }
#define K_ROWS(KIND) K_FEW(KIND, 1) K_FEW(KIND, 2) K_FEW(KIND, 3) K_FEW(KIND, 4) \
    static void (*const rows_k_##KIND[5])(const lb_act_k *, int64_t, const uint8_t *, int64_t, float *) = { \
        0, rows_k_##KIND##_1, rows_k_##KIND##_2, rows_k_##KIND##_3, rows_k_##KIND##_4};
K_ROWS(12)
K_ROWS(13)
K_ROWS(14)

/* out (T, N) for a K kind from row t0 (the rows before it are the caller's batch tiles'; all of
 * them if those could not get their memory): 4 rows of x at a time, then the rest (every row sums
 * alike in any tile). */
INLINE void k_tiles(int kind, const lb_act_k *a, int64_t t0, const uint8_t *w, int64_t N, float *out) {
    void (*const *fn)(const lb_act_k *, int64_t, const uint8_t *, int64_t, float *) =
        kind == LB_Q4_K ? rows_k_12 : kind == LB_Q5_K ? rows_k_13 : rows_k_14;
    for (int64_t t = t0; t < a->T;) {
        const int R = a->T - t >= 4 ? 4 : (int)(a->T - t);
        fn[R](a, t, w, N, out + t * N);
        t += R;
    }
}

#endif
