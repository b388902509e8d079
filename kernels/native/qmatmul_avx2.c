/* AVX2 path (no VNNI) of q4_1 and q8_0 (q4_0 runs qk_avx2.c's exact-sum tiles: qmatmul.c): one block at a
 * time in 256-bit registers. vpmaddubsw multiplies unsigned by signed bytes into 16-bit pairs and
 * vpmaddwd sums them to 8 int32 lanes, exactly: q4_1's nibbles go in as they are (at most 15); q8_0's
 * quants go in as |q| against x with q's sign, as ggml does. For a batch, up to 4 rows of activations
 * share each q4_1 weight block and 2 weight rows go together. A single row of activations (a decode step) goes against 8 weight rows, whose kernel is
 * otherwise bound by converting each block's scales. Every output's float operations are the same
 * whatever the tile, so the bits are too.
 * q8_0 (a tied output head: most of a batch step of Gemma 3) takes each block's exact integer sum per
 * output before any float operation, as lb_qmatmul_generic does, and its bits: per 8 outputs one
 * conversion, product and sum instead of one an output. A batch of 7 rows or more goes 8 (or 16)
 * activation rows against one weight row with a lane a row (lb_act's interleaved qv), so no sum
 * crosses lanes; fewer rows go against 8 weight rows, whose lanes vphaddd sums (blends and shuffles
 * instead ran 10% slower). */
#if defined(__x86_64__)
#include <immintrin.h>

#include "avx2.h"

/* Block b of one activation row, in the byte order q4_1's quants come in (low nibbles' 16 activations,
 * then the high nibbles'). */
INLINE __m256i act_block(int kind, const int8_t *row, int64_t b) {
    return _mm256_loadu2_m128i((const __m128i *)(row + lb_act_index(kind, b, 16)),
                               (const __m128i *)(row + lb_act_index(kind, b, 0)));
}

/* A block's exact integer dot product of q4_1's nibbles u (unsigned) and activations x, in 8 float lanes. */
INLINE __m256 block_dot(__m256i u, __m256i x, __m256i ones) {
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, x), ones));
}

/* out[r, c] for r < R rows of the activations from t0 and c < C weight rows from w0. Per block and
 * (r, c): the block's exact integer sum in 8 lanes, acc += p * (d_w * d_x); q4_1's minimum sums
 * m_w * side_x over the blocks in order beside it, added after the lanes. For R > 1 those sums run
 * in one vector, lane c * 4 + r (the same float operations as one scalar per (r, c)). */
INLINE void tile(int kind, int R, int C, const lb_act *a, int64_t t0, const uint8_t *w0, int64_t row_bytes,
                 float *out0, int64_t N) {
    const int64_t nb = a->nb, nbp = a->nbp, bb = lb_block_bytes(kind), ts = a->T + 8;
    const __m256i ones = _mm256_set1_epi16(1), mask = _mm256_set1_epi8(0x0f);
    __m256 acc[8][2], sides = _mm256_setzero_ps();
    float side[8][2];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps(), side[r][c] = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        __m256i u[2];
        __m256 dw[2];
        float sw[2] = {0.0f, 0.0f};
        for (int c = 0; c < C; c++) {
            const uint8_t *p = w0 + c * row_bytes + b * bb;
            dw[c] = _mm256_set1_ps(_cvtsh_ss(lb_u16(p)));
            const __m128i qs = _mm_loadu_si128((const __m128i *)(p + 4));
            u[c] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), mask);
            sw[c] = _cvtsh_ss(lb_u16(p + 2));
        }
        for (int r = 0; r < R; r++) {
            const int8_t *row = a->q + (t0 + r) * nbp * QK;
            const __m256 dx = _mm256_broadcast_ss(a->d + (t0 + r) * nbp + b);
            const __m256i x = act_block(kind, row, b);
            for (int c = 0; c < C; c++) {
                const __m256 p = block_dot(u[c], x, ones);
                acc[r][c] = _mm256_fmadd_ps(p, _mm256_mul_ps(dw[c], dx), acc[r][c]);
                if (kind == LB_Q4_1 && R == 1) side[r][c] += sw[c] * a->side[(t0 + r) * nbp + b];
            }
        }
        if (kind == LB_Q4_1 && R > 1) {             /* rows t0 .. t0+3 of side_t at once (padded past T) */
            const __m256 sx = _mm256_broadcast_ps((const __m128 *)(a->side_t + b * ts + t0));
            sides = _mm256_add_ps(sides, _mm256_mul_ps(_mm256_set_m128(_mm_set1_ps(sw[1]), _mm_set1_ps(sw[0])), sx));
        }
    }
    float lane[8];
    _mm256_storeu_ps(lane, sides);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) out0[r * N + c] = hsum8(acc[r][c]) + (R > 1 ? lane[c * 4 + r] : side[r][c]);
}

/* The 8 rows' d_w * d_x of block b into prod, converted in one vector (each 32-bit word gathered: a row's
 * d in its low half, q4_1's m in its high half); q4_1's m_w * side_x added to its lane of *sides. */
INLINE void scales8(int kind, const uint8_t *p, int64_t row_bytes, float dx, float sx, float *prod, __m256 *sides) {
    __m256 dw, mw;
    scales_f16x8(p, row_bytes, &dw, &mw);
    _mm256_store_ps(prod, _mm256_mul_ps(dw, _mm256_set1_ps(dx)));
    if (kind == LB_Q4_1) *sides = _mm256_add_ps(*sides, _mm256_mul_ps(mw, _mm256_set1_ps(sx)));
}

/* tile(kind, 1, 8, ...) with the same float operations per output in the same order (so the same bits),
 * for one activation row: a decode step's matmul. A block's 8 scale products are formed while the
 * block before it is multiplied (their gather and conversion are a long chain of their own); q4_1's
 * minimum sums m_w * side_x in 8 lanes, one a row. */
INLINE void tile8(int kind, const lb_act *a, int64_t t0, const uint8_t *w0, int64_t row_bytes, float *out0) {
    const int64_t nb = a->nb, nbp = a->nbp, bb = lb_block_bytes(kind);
    const __m256i ones = _mm256_set1_epi16(1), mask = _mm256_set1_epi8(0x0f);
    const __m256i shift = _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0);
    const int8_t *row = a->q + t0 * nbp * QK;
    const float *dxs = a->d + t0 * nbp, *sxs = a->side + t0 * nbp;
    __m256 acc[8], sides = _mm256_setzero_ps();
    float prod[2][8] __attribute__((aligned(32)));
    for (int c = 0; c < 8; c++) acc[c] = _mm256_setzero_ps();
    scales8(kind, w0, row_bytes, dxs[0], sxs[0], prod[0], &sides);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w0 + b * bb;
        prefetch_rows8(p, b, nb, bb, row_bytes);
        if (b + 1 < nb) scales8(kind, p + bb, row_bytes, dxs[b + 1], sxs[b + 1], prod[(b + 1) & 1], &sides);
        const float *pb = prod[b & 1];
        const __m256i x = act_block(kind, row, b);
        for (int c = 0; c < 8; c++) {
            /* low nibbles in the low half, high nibbles (shifted down 4) in the high half */
            __m256i u = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p + c * row_bytes + 4)));
            u = _mm256_and_si256(_mm256_srlv_epi32(u, shift), mask);
            acc[c] = _mm256_fmadd_ps(block_dot(u, x, ones), _mm256_broadcast_ss(pb + c), acc[c]);
        }
    }
    float side[8];
    _mm256_storeu_ps(side, sides);
    for (int c = 0; c < 8; c++) out0[c] = hsum8(acc[c]) + (kind == LB_Q4_1 ? side[c] : 0.0f);
}

INLINE void rows(int kind, int R, int C, const lb_act *a, int64_t t0, const uint8_t *w, int64_t N, float *out0) {
    const int64_t row_bytes = a->nb * lb_block_bytes(kind);
    int64_t n = 0;
    if (R == 1)
        for (; n + 8 <= N; n += 8) tile8(kind, a, t0, w + n * row_bytes, row_bytes, out0 + n);
    for (; n + C <= N; n += C) tile(kind, R, C, a, t0, w + n * row_bytes, row_bytes, out0 + n, N);
    for (; n < N; n++) tile(kind, R, 1, a, t0, w + n * row_bytes, row_bytes, out0 + n, N);
}

/* q8_0 has tiles of its own (see the top): per block every output's exact integer sum p, then
 * acc + p * (d_w * d_x) in float32, lb_qmatmul_generic's operations in its order. */

/* A q8_0 block's products of quants u and activations x in 8 int32 lanes (|u| against x with u's sign). */
INLINE __m256i q8_dot(__m256i u, __m256i x, __m256i ones) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(u, u), _mm256_sign_epi8(x, u)), ones);
}

/* R (<= 6) activation rows against 8 weight rows (R = 1: a decode step), lane c for weight row c: per
 * row the 8 blocks' sums meet in one vector, then one conversion, product and sum for the 8 outputs.
 * The next block's scales are converted while this one is multiplied, and the weights prefetched
 * (prefetch_rows8). */
INLINE void q8_tile8(int R, const lb_act *a, int64_t t0, const uint8_t *w0, int64_t row_bytes, float *out0, int64_t N) {
    const int64_t nb = a->nb, nbp = a->nbp, bb = 34;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[6], dw, mw;
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    scales_f16x8(w0, row_bytes, &dw, &mw);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w0 + b * bb;
        prefetch_rows8(p, b, nb, bb, row_bytes);
        __m256 next = dw;
        if (b + 1 < nb) scales_f16x8(p + bb, row_bytes, &next, &mw);
        for (int r = 0; r < R; r++) {
            const int64_t i = (t0 + r) * nbp + b;
            const __m256i x = _mm256_loadu_si256((const __m256i *)(a->q + i * QK));
            __m256i s[8];
            for (int c = 0; c < 8; c++) s[c] = q8_dot(_mm256_loadu_si256((const __m256i *)(p + c * row_bytes + 2)), x, ones);
            const __m256 prod = _mm256_mul_ps(dw, _mm256_broadcast_ss(a->d + i));
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_cvtepi32_ps(sum8_epi32(s)), prod));
        }
        dw = next;
    }
    for (int r = 0; r < R; r++) _mm256_storeu_ps(out0 + r * N, acc[r]);
}

/* One activation row against one weight row: q8_tile8's operations for one output, in scalars. */
INLINE void q8_one(const lb_act *a, int64_t t, const uint8_t *w, float *out) {
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t *row = a->q + t * a->nbp * QK;
    float acc = 0.0f;
    for (int64_t b = 0; b < a->nb; b++) {
        const __m256i v = q8_dot(_mm256_loadu_si256((const __m256i *)(w + b * 34 + 2)),
                                 _mm256_loadu_si256((const __m256i *)(row + b * QK)), ones);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
        const float prod = _cvtsh_ss(lb_u16(w + b * 34)) * a->d[t * a->nbp + b];
        acc = acc + (float)_mm_cvtsi128_si32(s) * prod;
    }
    *out = acc;
}

/* Up to 8 G activation rows (G = 1 or 2 groups of qv from t0) against one weight row, lane r of group g
 * for row t0 + 8 g + r: each 4 weight quants, broadcast, meet 4 of every row's at once, so a block's
 * sums come out one a lane; 2 groups share the broadcasts and |q|. */
INLINE void q8_vtile(int G, int R, const lb_act *a, int64_t t0, const uint8_t *w, float *out0, int64_t N) {
    const int64_t nb = a->nb, ts = a->T + 8;
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t *xv = a->qv + t0 / 8 * nb * 8 * QK;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + b * 34;
        __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int k = 0; k < 8; k++) {
            const __m256i u = _mm256_set1_epi32((int)lb_u32(p + 2 + 4 * k)), au = _mm256_sign_epi8(u, u);
            for (int g = 0; g < G; g++) {
                const __m256i x = _mm256_loadu_si256((const __m256i *)(xv + ((g * nb + b) * 8 + k) * QK));
                s[g] = _mm256_add_epi32(s[g], _mm256_madd_epi16(_mm256_maddubs_epi16(au, _mm256_sign_epi8(x, u)), ones));
            }
        }
        const __m256 dw = _mm256_set1_ps(_cvtsh_ss(lb_u16(p)));
        for (int g = 0; g < G; g++) {
            const __m256 prod = _mm256_mul_ps(dw, _mm256_loadu_ps(a->d_t + b * ts + t0 + 8 * g));
            acc[g] = _mm256_add_ps(acc[g], _mm256_mul_ps(_mm256_cvtepi32_ps(s[g]), prod));
        }
    }
    float lane[16];
    _mm256_storeu_ps(lane, acc[0]);
    _mm256_storeu_ps(lane + 8, acc[1]);
    for (int r = 0; r < R; r++) out0[r * N] = lane[r];
}

/* Rows t0 .. t0 + R - 1 (R <= 16) against N weight rows: up to 6 rows by the 8-weight-row tiles (an
 * 8-lane tile of few rows mostly computes empty lanes: 0.5x at 2 rows, 0.9x at 5); 7 and 8 in one
 * group, 10 to 16 in one pass of 2 groups, 9 as 8 and 1. */
INLINE void q8_rows(int R, const lb_act *a, int64_t t0, const uint8_t *w, int64_t N, float *out0) {
    const int64_t row_bytes = a->nb * 34;
    if (R <= 6) {
        int64_t n = 0;
        for (; n + 8 <= N; n += 8) q8_tile8(R, a, t0, w + n * row_bytes, row_bytes, out0 + n, N);
        for (; n < N; n++)
            for (int r = 0; r < R; r++) q8_one(a, t0 + r, w + n * row_bytes, out0 + r * N + n);
    } else if (R >= 10) {
        for (int64_t n = 0; n < N; n++) q8_vtile(2, R, a, t0, w + n * row_bytes, out0 + n, N);
    } else if (R > 8) {
        const int head = 8;
        q8_rows(head, a, t0, w, N, out0);
        q8_rows(R - head, a, t0 + head, w, N, out0 + head * N);
    } else {
        for (int64_t n = 0; n < N; n++) q8_vtile(1, R, a, t0, w + n * row_bytes, out0 + n, N);
    }
}

/* Activation rows a batch tile takes (weight rows: 2 for q4 kinds, 1 for q8_0; see the top). */
#define ROWS_Q4 4
#define ROWS_Q8 16
#define Q8_FN(R) static TGT void rows_8_##R(const lb_act *a, int64_t t0, const uint8_t *w, int64_t N, float *out0) { \
        q8_rows(R, a, t0, w, N, out0); }
#define ROWS_FN(KIND, R, C) \
    static TGT void rows_##KIND##_##R(const lb_act *a, int64_t t0, const uint8_t *w, int64_t N, float *out0) { \
        rows(KIND, R, C, a, t0, w, N, out0); }
#define ROWS_Q4_ALL(KIND) \
    ROWS_FN(KIND, 1, 2) ROWS_FN(KIND, 2, 2) ROWS_FN(KIND, 3, 2) ROWS_FN(KIND, 4, 2) \
    static void (*const rows_##KIND[ROWS_Q4 + 1])(const lb_act *, int64_t, const uint8_t *, int64_t, float *) = { \
        0, rows_##KIND##_1, rows_##KIND##_2, rows_##KIND##_3, rows_##KIND##_4};

ROWS_Q4_ALL(3)
Q8_FN(1) Q8_FN(2) Q8_FN(3) Q8_FN(4) Q8_FN(5) Q8_FN(6) Q8_FN(7) Q8_FN(8)
Q8_FN(9) Q8_FN(10) Q8_FN(11) Q8_FN(12) Q8_FN(13) Q8_FN(14) Q8_FN(15) Q8_FN(16)
static void (*const rows_8[ROWS_Q8 + 1])(const lb_act *, int64_t, const uint8_t *, int64_t, float *) = {
    0, rows_8_1, rows_8_2, rows_8_3, rows_8_4, rows_8_5, rows_8_6, rows_8_7, rows_8_8,
    rows_8_9, rows_8_10, rows_8_11, rows_8_12, rows_8_13, rows_8_14, rows_8_15, rows_8_16};

TGT void lb_q8_rows_avx2(int R, const lb_act *a, int64_t t0, const uint8_t *w, int64_t N, float *out0) {
    rows_8[R](a, t0, w, N, out0);
}

/* lb_act_round_generic with 8 lanes: the same IEEE operations (cvtps2dq rounds ties to even like
 * nearbyintf; vcvtps2ph like lb_to_f16), so the same bits. Only what this path's kernels read (q, d,
 * side; lb_act_init transposes side): the AVX-512 kernels' per-lane copies are left unfilled. */
TGT void lb_act_round_avx2(lb_act *a, const float *x) {
    const __m256 big = _mm256_set1_ps(3.4028235e38f), sign = _mm256_set1_ps(-0.0f);
    const __m256i order = _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0);
    for (int64_t t = 0; t < a->T; t++) {
        int8_t *q = a->q + t * a->nbp * QK;
        float *d = a->d + t * a->nbp, *side = a->side + t * a->nbp;
        for (int64_t b = 0; b < a->nb; b++) {
            const float *xb = x + t * a->K + b * QK;
            __m256 v[4], m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
            for (int i = 0; i < 4; i++) {
                v[i] = _mm256_loadu_ps(xb + 8 * i);
                const __m256 av = _mm256_andnot_ps(sign, v[i]);
                bad = _mm256_or_ps(bad, _mm256_cmp_ps(av, big, _CMP_NLE_UQ));
                m = _mm256_max_ps(m, av);
            }
            if (_mm256_movemask_ps(bad)) {
                d[b] = side[b] = __builtin_nanf("");       /* NaN or inf in the block: quants stay 0 */
                continue;
            }
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
            const float dd = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
            __m256i qi[4];
            for (int i = 0; i < 4; i++) qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(id)));
            const __m256i bytes = _mm256_permutevar8x32_epi32(
                _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3])), order);
            _mm_storeu_si128((__m128i *)(q + lb_act_index(a->kind, b, 0)), _mm256_castsi256_si128(bytes));
            _mm_storeu_si128((__m128i *)(q + lb_act_index(a->kind, b, 16)), _mm256_extracti128_si256(bytes, 1));
            const __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
            d[b] = _cvtsh_ss(_cvtss_sh(dd, _MM_FROUND_TO_NEAREST_INT));
            side[b] = d[b] * (float)_mm_cvtsi128_si32(s4);
        }
    }
}

TGT void lb_qmatmul_avx2(int kind, const lb_act *a, const uint8_t *w, int64_t N, float *out) {
    const int most = kind == LB_Q8_0 ? ROWS_Q8 : ROWS_Q4;
    for (int64_t t = 0; t < a->T; t += most) {
        const int R = a->T - t < most ? (int)(a->T - t) : most;
        if (kind == LB_Q4_1) rows_3[R](a, t, w, N, out + t * N);
        else rows_8[R](a, t, w, N, out + t * N);       /* Q8_0 (Q4_0 runs qk_avx2.c's tiles: qmatmul.c) */
    }
}
#endif
