/* The 32-weight kinds whose blocks are summed exactly before any float (Q4_0, Q5_0, Q5_1) on the AVX2
 * path (which AVX-512 machines run for Q5_0 and Q5_1; their Q4_0 has its own 16-lane tiles with the
 * same float steps: q4_0_avx512.c). qk_avx2.c includes it after its TGT, INLINE, sum8_epi32,
 * scales_f16x8, prefetch_rows8 and three integer steps:
 *   q32_dot(u, x): a block's products of unsigned quants u and one row's quants x in 8 int32 lanes;
 *   q32_quads(sum, wq, x): sum + 8 rows' products (lane r for row r) of 4 quads of a block's quants
 *     (wq[k]: quad k broadcast) and the rows' own quads (x + k * 32, lb_act's interleaved qv);
 *   q32_lanes8(w, x): the 8 lanes' sums of products of 8 quads of Q4_0 quants w[k] (a weight row's
 *     in each lane) and x[k] (one row's, broadcast), in int32.
 * Every output takes qk_generic.c's float steps in its order: per block the exact integer sum p of
 * (quant - offset) * x, then acc + p * (d_w * d_x) (fused for Q4_0: qk.h's lb_q4_0_step, q32_step),
 * and Q5_1's + m * side_x (side_x = d_x * sum(q_x), exact). The unsigned quants u (0..15 or 0..31)
 * meet x's quants as unsigned bytes; Q4_0's -8 and Q5_0's -16 come back in the integers as -offset *
 * sum(q_x). So every path, and every tile a row falls in,
 * gives the same bits. */
#ifndef LB_Q32_TILES_H
#define LB_Q32_TILES_H

/* Bytes before a block's quants (its d, Q5_1's m), and the offset its quants are stored above. */
INLINE int q32_head(int kind) { return kind == LB_Q5_1 ? 4 : 2; }
INLINE int q32_off(int kind) { return kind == LB_Q5_0 ? 16 : kind == LB_Q4_0 ? 8 : 0; }
INLINE int q32_shift(int kind) { return kind == LB_Q5_0 ? 4 : 3; }     /* log2 of q32_off */

/* acc + p * prod (prod = d_w * d_x): Q4_0's fused step (qk.h's lb_q4_0_step), the Q5 kinds' unfused. */
INLINE __m256 q32_step(int kind, __m256 acc, __m256i p, __m256 prod) {
    const __m256 f = _mm256_cvtepi32_ps(p);
    return kind == LB_Q4_0 ? _mm256_fmadd_ps(f, prod, acc) : _mm256_add_ps(acc, _mm256_mul_ps(f, prod));
}

/* A block's 32 quants, unsigned, in element order (x is rounded in that order for these kinds): low
 * nibbles (elements 0..15) in the low half, high nibbles (16..31) in the high half, Q5's fifth bits
 * spread from qh to bytes. */
INLINE __m256i q32_quants(int kind, const uint8_t *p) {
    const int head = q32_head(kind);
    const __m256i m4 = _mm256_set1_epi8(0x0f), b16 = _mm256_set1_epi8(0x10);
    const __m256i qs = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p + head + (kind == LB_Q4_0 ? 0 : 4))));
    const __m256i u = _mm256_and_si256(_mm256_srlv_epi32(qs, _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0)), m4);
    if (kind == LB_Q4_0) return u;
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bits = _mm256_set1_epi64x(0x8040201008040201LL);
    __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32((int)lb_u32(p + head)), spread);
    h = _mm256_cmpeq_epi8(_mm256_and_si256(h, bits), bits);          /* byte i: 0xff where bit i of qh */
    return _mm256_or_si256(u, _mm256_and_si256(h, b16));
}

/* R (<= 6) rows of x (R = 1: a decode step) against 8 weight rows, lane c for weight row c: the 8 rows'
 * blocks unpacked once for the R, their scales converted in one vector, per row their sums met in one
 * vector (sum8_epi32). */
INLINE void q32_tile8(int kind, int R, const lb_act *a, int64_t t0, const uint8_t *w0, int64_t row_bytes, float *out0, int64_t N) {
    const int64_t nb = a->nb, nbp = a->nbp, bb = lb_qk_block_bytes(kind), ts = a->T + 8;
    __m256 acc[8];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w0 + b * bb;
        prefetch_rows8(p, b, nb, bb, row_bytes);
        __m256 dw, mw;
        scales_f16x8(p, row_bytes, &dw, &mw);
        __m256i u[8];
        for (int c = 0; c < 8; c++) u[c] = q32_quants(kind, p + c * row_bytes);
        for (int r = 0; r < R; r++) {
            const int64_t i = (t0 + r) * nbp + b;
            __m256i s[8];
            for (int c = 0; c < 8; c++) s[c] = q32_dot(u[c], a->q + i * QK);
            __m256i sum = sum8_epi32(s);
            if (q32_off(kind)) sum = _mm256_sub_epi32(sum, _mm256_set1_epi32(q32_off(kind) * a->sq_t[b * ts + t0 + r]));
            acc[r] = q32_step(kind, acc[r], sum, _mm256_mul_ps(dw, _mm256_broadcast_ss(a->d + i)));
            if (kind == LB_Q5_1) acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(mw, _mm256_broadcast_ss(a->side + i)));
        }
    }
    for (int r = 0; r < R; r++) _mm256_storeu_ps(out0 + r * N, acc[r]);
}

/* Blocks ahead that q32_wtile prefetches each weight row: 3 KB of a row, 24 KB of a tile's 8. */
#define Q32_AHEAD 170

/* Q4_0, R (<= 6) rows of x against 8 weight rows, lane c for weight row c, as q32_tile8 but with the
 * 8 rows' quants transposed (four 32-bit unpacks, then two 64-bit ones): each lane holds 4 quants of
 * its own row, and each quad of x, broadcast, meets them all, so a block's sums come out one a lane
 * with no sum across lanes (sum8_epi32's 6 vphaddd a row of x). */
INLINE void q32_wtile(int R, const lb_act *a, int64_t t0, const uint8_t *w0, int64_t row_bytes, float *out0, int64_t N) {
    const int64_t nb = a->nb, nbp = a->nbp, bb = 18, ts = a->T + 8;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[8];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w0 + b * bb;
        /* The 8 rows are 8 streams, a block a step: each row is prefetched Q32_AHEAD blocks on, and
         * within that of its end 7 rows further on, the next tile's same row (the tiles run on
         * through the weights 8 rows at a time; a row shorter than Q32_AHEAD blocks gets a later
         * tile's). A linear prefetch of the tile's bytes, PREFETCH ahead, reached rows 4..7 (K = 4096)
         * or 2..7 (K = 14336) of a tile only after they had been read. Half the rows a step, so each
         * row every 2 blocks (36 bytes): no line is missed. */
        const char *ahead = (const char *)p + Q32_AHEAD * bb + (b + Q32_AHEAD < nb ? 0 : 7 * row_bytes) + (b & 1) * 4 * row_bytes;
        for (int c = 0; c < 4; c++) _mm_prefetch(ahead + c * row_bytes, _MM_HINT_T0);
        __m256 dw, mw;
        scales_f16x8(p, row_bytes, &dw, &mw);
        __m256i y[4];                   /* y[i]: the quants of row i (low half) and of row i + 4 (high) */
        for (int i = 0; i < 4; i++)
            y[i] = _mm256_loadu2_m128i((const __m128i *)(p + (i + 4) * row_bytes + 2), (const __m128i *)(p + i * row_bytes + 2));
        const __m256i lo01 = _mm256_unpacklo_epi32(y[0], y[1]), hi01 = _mm256_unpackhi_epi32(y[0], y[1]);
        const __m256i lo23 = _mm256_unpacklo_epi32(y[2], y[3]), hi23 = _mm256_unpackhi_epi32(y[2], y[3]);
        const __m256i d4[4] = {_mm256_unpacklo_epi64(lo01, lo23), _mm256_unpackhi_epi64(lo01, lo23),
                               _mm256_unpacklo_epi64(hi01, hi23), _mm256_unpackhi_epi64(hi01, hi23)};
        __m256i wq[8];                  /* quad k: elements 4k .. 4k + 3 of each lane's row */
        for (int k = 0; k < 4; k++) {
            wq[k] = _mm256_and_si256(d4[k], m4);
            wq[4 + k] = _mm256_and_si256(_mm256_srli_epi16(d4[k], 4), m4);
        }
        for (int r = 0; r < R; r++) {
            const int64_t i = (t0 + r) * nbp + b;
            const int8_t *x = a->q + i * QK;
            __m256i xq[8];
            for (int k = 0; k < 8; k++) xq[k] = _mm256_set1_epi32((int)lb_u32((const uint8_t *)x + 4 * k));
            __m256i sum = q32_lanes8(wq, xq);
            sum = _mm256_sub_epi32(sum, _mm256_set1_epi32(8 * a->sq_t[b * ts + t0 + r]));
            acc[r] = q32_step(LB_Q4_0, acc[r], sum, _mm256_mul_ps(dw, _mm256_broadcast_ss(a->d + i)));
        }
    }
    for (int r = 0; r < R; r++) _mm256_storeu_ps(out0 + r * N, acc[r]);
}

/* One row of x against one weight row: q32_tile8's operations for one output, in scalars. */
INLINE void q32_one(int kind, const lb_act *a, int64_t t, const uint8_t *w, float *out) {
    const int64_t bb = lb_qk_block_bytes(kind), ts = a->T + 8;
    const int8_t *row = a->q + t * a->nbp * QK;
    float acc = 0.0f;
    for (int64_t b = 0; b < a->nb; b++) {
        const uint8_t *p = w + b * bb;
        const __m256i v = q32_dot(q32_quants(kind, p), row + b * QK);
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        const int32_t sum = _mm_cvtsi128_si32(h) - q32_off(kind) * a->sq_t[b * ts + t];
        if (kind == LB_Q4_0) acc = lb_q4_0_step(acc, sum, _cvtsh_ss(lb_u16(p)), a->d[t * a->nbp + b]);
        else acc = acc + (float)sum * (_cvtsh_ss(lb_u16(p)) * a->d[t * a->nbp + b]);
        if (kind == LB_Q5_1) acc = acc + _cvtsh_ss(lb_u16(p + 2)) * a->side[t * a->nbp + b];
    }
    *out = acc;
}

/* Up to 8 G rows of x (G <= 4 groups of lb_act's qv from t0) against one weight row, lane r of group g
 * for row t0 + 8 g + r: each quad of the block's quants, broadcast (from a copy of the unpacked block:
 * loads, not shuffles), meets the quad of every row at once, so the sums come out one a lane; the G
 * groups share the unpacking. */
INLINE void q32_vtile(int kind, int G, int R, const lb_act *a, int64_t t0, const uint8_t *w, float *out0, int64_t N) {
    const int64_t nb = a->nb, bb = lb_qk_block_bytes(kind), ts = a->T + 8;
    const int8_t *xv = a->qv + t0 / 8 * nb * 8 * QK;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    uint32_t quads[8] __attribute__((aligned(32)));
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + b * bb;
        _mm256_store_si256((__m256i *)quads, q32_quants(kind, p));
        __m256i sum[4], part[4];
        for (int half = 0; half < 2; half++) {          /* elements 0..15, then 16..31: two sums to add (exact) */
            const __m256i wq[4] = {_mm256_set1_epi32((int)quads[4 * half]), _mm256_set1_epi32((int)quads[4 * half + 1]),
                                   _mm256_set1_epi32((int)quads[4 * half + 2]), _mm256_set1_epi32((int)quads[4 * half + 3])};
            for (int g = 0; g < G; g++)
                (half ? part : sum)[g] = q32_quads(_mm256_setzero_si256(), wq, xv + ((g * nb + b) * 8 + 4 * half) * QK);
        }
        for (int g = 0; g < G; g++) sum[g] = _mm256_add_epi32(sum[g], part[g]);
        const __m256 dw = _mm256_set1_ps(_cvtsh_ss(lb_u16(p))), mw = _mm256_set1_ps(_cvtsh_ss(lb_u16(p + 2)));
        for (int g = 0; g < G; g++) {
            const int64_t i = b * ts + t0 + 8 * g;
            if (q32_off(kind))
                sum[g] = _mm256_sub_epi32(sum[g], _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(a->sq_t + i)), q32_shift(kind)));
            acc[g] = q32_step(kind, acc[g], sum[g], _mm256_mul_ps(dw, _mm256_loadu_ps(a->d_t + i)));
            if (kind == LB_Q5_1) acc[g] = _mm256_add_ps(acc[g], _mm256_mul_ps(mw, _mm256_loadu_ps(a->side_t + i)));
        }
    }
    float lane[32];
    for (int g = 0; g < G; g++) _mm256_storeu_ps(lane + 8 * g, acc[g]);
    for (int r = 0; r < R; r++) out0[r * N] = lane[r];
}

/* nn weight rows from w against R (<= 8; Q5 kinds: <= 6) rows of x from t0, into out (rows N apart): 8
 * weight rows at a time, then the rest one by one. */
INLINE void q32_rows_few(int kind, int R, const lb_act *a, int64_t t0, const uint8_t *w, int64_t nn, int64_t N, float *out) {
    const int64_t row_bytes = a->nb * lb_qk_block_bytes(kind);
    int64_t n = 0;
    for (; n + 8 <= nn; n += 8) {
        if (kind == LB_Q4_0) q32_wtile(R, a, t0, w + n * row_bytes, row_bytes, out + n, N);
        else q32_tile8(kind, R, a, t0, w + n * row_bytes, row_bytes, out + n, N);
    }
    for (; n < nn; n++)
        for (int r = 0; r < R; r++) q32_one(kind, a, t0 + r, w + n * row_bytes, out + r * N + n);
}

/* The same for R rows of x in G groups of 8 (R > 8 (G - 1)), one weight row at a time. */
INLINE void q32_rows_many(int kind, int G, int R, const lb_act *a, int64_t t0, const uint8_t *w, int64_t nn, int64_t N, float *out) {
    const int64_t row_bytes = a->nb * lb_qk_block_bytes(kind);
    for (int64_t n = 0; n < nn; n++) q32_vtile(kind, G, R, a, t0, w + n * row_bytes, out + n, N);
}

/* One instantiation per (kind, rows of x): shapes the compiler knows. */
#define Q32_FEW(KIND, R) static TGT void q32_few_##KIND##_##R(const lb_act *a, int64_t t, const uint8_t *w, int64_t nn, \
                                                            int64_t N, float *o) { q32_rows_few(KIND, R, a, t, w, nn, N, o); }
#define Q32_MANY(KIND, G) static TGT void q32_many_##KIND##_##G(int R, const lb_act *a, int64_t t, const uint8_t *w, int64_t nn, \
                                                              int64_t N, float *o) { q32_rows_many(KIND, G, R, a, t, w, nn, N, o); }
typedef void (*q32_rows_fn)(int R, const lb_act *a, int64_t t, const uint8_t *w, int64_t nn, int64_t N, float *o);

/* Q4_0: every 8 rows of x through the transposed tile (against the tile of groups of 8 it ran 1.15-1.6x
 * at 8 to 16 rows, the same at 32 and 128). */
#define Q32_Q4_0 Q32_FEW(2, 1) Q32_FEW(2, 2) Q32_FEW(2, 3) Q32_FEW(2, 4) Q32_FEW(2, 5) Q32_FEW(2, 6) Q32_FEW(2, 7) \
    Q32_FEW(2, 8) \
    static TGT void q32_rows_2(int R, const lb_act *a, int64_t t, const uint8_t *w, int64_t nn, int64_t N, float *o) { \
        static void (*const few[9])(const lb_act *, int64_t, const uint8_t *, int64_t, int64_t, float *) = { \
            0, q32_few_2_1, q32_few_2_2, q32_few_2_3, q32_few_2_4, q32_few_2_5, q32_few_2_6, q32_few_2_7, q32_few_2_8}; \
        for (int r = 0; r < R; r += 8) few[R - r < 8 ? R - r : 8](a, t + r, w, nn, N, o + r * N); }

/* Q5_0, Q5_1: up to 6 rows of x against 8 weight rows (an 8-lane tile of few rows mostly computes empty
 * lanes), more in one pass of as many groups of 8 as they fill. */
#define Q32_Q5(KIND) Q32_FEW(KIND, 1) Q32_FEW(KIND, 2) Q32_FEW(KIND, 3) Q32_FEW(KIND, 4) Q32_FEW(KIND, 5) Q32_FEW(KIND, 6) \
    Q32_MANY(KIND, 1) Q32_MANY(KIND, 2) Q32_MANY(KIND, 3) Q32_MANY(KIND, 4) \
    static TGT void q32_rows_##KIND(int R, const lb_act *a, int64_t t, const uint8_t *w, int64_t nn, int64_t N, float *o) { \
        static void (*const few[7])(const lb_act *, int64_t, const uint8_t *, int64_t, int64_t, float *) = { \
            0, q32_few_##KIND##_1, q32_few_##KIND##_2, q32_few_##KIND##_3, q32_few_##KIND##_4, \
            q32_few_##KIND##_5, q32_few_##KIND##_6}; \
        static void (*const many[5])(int, const lb_act *, int64_t, const uint8_t *, int64_t, int64_t, float *) = { \
            0, q32_many_##KIND##_1, q32_many_##KIND##_2, q32_many_##KIND##_3, q32_many_##KIND##_4}; \
        if (R <= 6) few[R](a, t, w, nn, N, o); \
        else many[(R + 7) / 8](R, a, t, w, nn, N, o); }

/* out (T, N) by `rows` (the kind's q32_rows_*): a few weight rows at a time (in L1) against every group
 * of up to 32 rows of x, so the weights stream from memory once; a single row (a decode step) streams
 * them all at once. A group's rows past R are computed on qv's zero padding and never stored. */
INLINE void q32_matmul(q32_rows_fn rows, int kind, const lb_act *a, const uint8_t *w, int64_t N, float *out) {
    const int64_t row_bytes = a->nb * lb_qk_block_bytes(kind), step = a->T == 1 ? N : 16;
    for (int64_t n = 0; n < N; n += step) {
        const int64_t nn = N - n < step ? N - n : step;
        for (int64_t t = 0; t < a->T; t += 32) {
            const int R = a->T - t < 32 ? (int)(a->T - t) : 32;
            rows(R, a, t, w + n * row_bytes, nn, N, out + t * N + n);
        }
    }
}

#endif
