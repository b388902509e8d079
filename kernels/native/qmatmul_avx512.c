/* AVX-512 VNNI path of q4_1 (q4_0's is q4_0_avx512.c, with the exact block sums of the other paths).
 * Weights stay 4-bit: vpdpbusd multiplies unsigned weight quants by
 * the int8 activation quants (lb_act) and sums four products per 32-bit lane, exactly. A "unit" is four
 * blocks: their 16 nibble bytes in the four 128-bit lanes of one register (one two-table byte permute
 * of the unit's bytes), low nibbles (elements 0..15) and high nibbles (16..31) each against their half
 * of the activations. Each lane's sum is exact; it is scaled in float32 by its block's d_w * d_x (exact)
 * and q4_1's minimum comes in through lb_act's sxe. C weight rows share each load of x. q8_0 (q8_vtile
 * below) gives lb_qmatmul_generic's bits, as qmatmul_avx2.c's kernels do, so below 7 rows of x it runs
 * theirs: its decode tile of 8 weight rows read a 178 MB head at 29 GB/s on a Zen 4, where this file's
 * former q8_0 units of two blocks, 4 weight rows a tile, read it at 8.6 GB/s. */
#if defined(__x86_64__)
#include "qmatmul_impl.h"

#ifdef LB_SIMDE_AVX512
#include "simde_avx512.h"      /* a test build: the same code on emulated intrinsics */
#define TGT
#else
#include <immintrin.h>
#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")))
#endif
#define INLINE static inline __attribute__((always_inline)) TGT
#ifndef PREFETCH
#define PREFETCH 4096   /* bytes ahead of a tile's pace through its weight rows */
#endif

/* Byte i of a q4 unit's lane L (nibble byte i of block L) sits at L * bb + off + i of the unit's bytes. */
#define G4(bb, off, L) (L) * (bb) + (off) + 0, (L) * (bb) + (off) + 1, (L) * (bb) + (off) + 2, (L) * (bb) + (off) + 3, \
    (L) * (bb) + (off) + 4, (L) * (bb) + (off) + 5, (L) * (bb) + (off) + 6, (L) * (bb) + (off) + 7, \
    (L) * (bb) + (off) + 8, (L) * (bb) + (off) + 9, (L) * (bb) + (off) + 10, (L) * (bb) + (off) + 11, \
    (L) * (bb) + (off) + 12, (L) * (bb) + (off) + 13, (L) * (bb) + (off) + 14, (L) * (bb) + (off) + 15
static const uint8_t NIBBLES_Q4_1[64] = {G4(20, 4, 0), G4(20, 4, 1), G4(20, 4, 2), G4(20, 4, 3)};
/* 16-bit word of each 32-bit lane's block scale (d, or q4_1's m one word later) in the unit's bytes. */
#define W4(bb, o) (o), (o), (o), (o), (bb) / 2 + (o), (bb) / 2 + (o), (bb) / 2 + (o), (bb) / 2 + (o), \
    (bb) + (o), (bb) + (o), (bb) + (o), (bb) + (o), 3 * (bb) / 2 + (o), 3 * (bb) / 2 + (o), 3 * (bb) / 2 + (o), 3 * (bb) / 2 + (o)
static const int16_t D_Q4_1[32] = {W4(20, 0)}, M_Q4_1[32] = {W4(20, 1)};

/* One unit of a weight row from block b (valid: its blocks inside the row): the unsigned quants that
 * meet the activations' first and second 64 bytes, each lane's d_w, and (q4_1) each lane's m. The unit's
 * bytes are contiguous; the second 64 are loaded under a mask, so nothing past the row's end is read. */
INLINE void load_unit(int kind, const uint8_t *p, int valid, __m512i *lo, __m512i *hi, __m512 *d, __m512 *m) {
    const int64_t bytes = (int64_t)valid * lb_block_bytes(kind);
    const __m512i A = bytes >= 64 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8((((__mmask64)1) << bytes) - 1, p);
    const __m512i B = bytes > 64 ? _mm512_maskz_loadu_epi8((((__mmask64)1) << (bytes - 64)) - 1, p + 64)
                                 : _mm512_setzero_si512();
    *d = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_loadu_si512(D_Q4_1), A)));
    *m = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_loadu_si512(M_Q4_1), A)));
    const __m512i v = _mm512_permutex2var_epi8(A, _mm512_loadu_si512(NIBBLES_Q4_1), B);
    const __m512i mask = _mm512_set1_epi8(0x0f);
    *lo = _mm512_and_si512(v, mask);
    *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
}

/* out[r, c] for r < R rows of the activations from t0 and c < C weight rows from w0 (constants after
 * inlining). Every (r, c) sums in the same order whatever R and C are, so a row's result does not
 * depend on the batch around it. Per unit and lane: acc += (d_w d_x) P, and for q4_1 then m sxe. */
INLINE void tile(int kind, int R, int C, const lb_act *a, int64_t t0, const uint8_t *w0, int64_t row_bytes,
                 float *out0, int64_t N) {
    const int unit = 4, lanes = a->lanes;
    const int64_t nb = a->nb, nbp = a->nbp, bb = lb_block_bytes(kind);
    __m512 acc[8][4];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += unit) {
        const int valid = nb - b < unit ? (int)(nb - b) : unit;
        __m512i lo[4], hi[4];
        __m512 dw[4], mw[4];
        /* The tile's C rows are contiguous and read at C units' bytes a step: prefetch that stretch,
         * PREFETCH bytes ahead of the pace (as qmatmul_avx2.c's tile8). Prefetching each row's own
         * bytes ahead instead left rows of more than a few cache lines to memory latency: ffn_down
         * (K = 1536, 15 lines a row, 4 rows read side by side) streamed at 9 GB/s on a Zen 4, this way
         * at 23 GB/s. */
        const char *ahead = (const char *)w0 + PREFETCH + b * C * bb;
        for (int l = 0; l < C * unit * bb; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
        for (int c = 0; c < C; c++) load_unit(kind, w0 + c * row_bytes + b * bb, valid, &lo[c], &hi[c], &dw[c], &mw[c]);
        for (int r = 0; r < R; r++) {
            const int8_t *xq = a->q + (t0 + r) * nbp * QK + b * QK;
            const __m512 dx = _mm512_loadu_ps(a->dxe + (t0 + r) * nbp * lanes + b * lanes);
            const __m512 sx = _mm512_loadu_ps(a->sxe + (t0 + r) * nbp * lanes + b * lanes);
            const __m512i x0 = _mm512_loadu_si512(xq);
            const __m512i x1 = _mm512_loadu_si512(xq + 64);
            for (int c = 0; c < C; c++) {
                __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[c], x0);
                p = _mm512_dpbusd_epi32(p, hi[c], x1);
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw[c], dx), acc[r][c]);
                acc[r][c] = _mm512_fmadd_ps(mw[c], sx, acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) out0[r * N + c] = _mm512_reduce_add_ps(acc[r][c]);
}

/* nn outputs (weight rows from w) for R rows, out0's rows N apart: C weight rows at a time, then the
 * leftover rows one by one. */
INLINE void rows(int kind, int R, int C, const lb_act *a, int64_t t0, const uint8_t *w, int64_t nn, int64_t N, float *out0) {
    const int64_t row_bytes = a->nb * lb_block_bytes(kind);
    int64_t n = 0;
    for (; n + C <= nn; n += C) tile(kind, R, C, a, t0, w + n * row_bytes, row_bytes, out0 + n, N);
    for (; n < nn; n++) tile(kind, R, 1, a, t0, w + n * row_bytes, row_bytes, out0 + n, N);
}

/* One instantiation per (kind, R), so the tile's shape is known to the compiler and its accumulators
 * stay in registers. */
#define ROWS_FN(KIND, R, C) \
    static TGT void rows_##KIND##_##R(const lb_act *a, int64_t t0, const uint8_t *w, int64_t nn, int64_t N, float *out0) { \
        rows(KIND, R, C, a, t0, w, nn, N, out0); }
#define ROWS_ALL(KIND) \
    ROWS_FN(KIND, 1, 4) ROWS_FN(KIND, 2, 4) ROWS_FN(KIND, 3, 2) ROWS_FN(KIND, 4, 2) \
    ROWS_FN(KIND, 5, 2) ROWS_FN(KIND, 6, 2) ROWS_FN(KIND, 7, 2) ROWS_FN(KIND, 8, 2) \
    static void (*const rows_##KIND[9])(const lb_act *, int64_t, const uint8_t *, int64_t, int64_t, float *) = { \
        0, rows_##KIND##_1, rows_##KIND##_2, rows_##KIND##_3, rows_##KIND##_4, \
        rows_##KIND##_5, rows_##KIND##_6, rows_##KIND##_7, rows_##KIND##_8};

ROWS_ALL(3)

/* lb_act_round_generic with 16 lanes: the same IEEE operations (cvtps2dq rounds ties to even like
 * nearbyintf; vcvtps2ph like lb_to_f16), so the same bits. */
TGT void lb_act_round_avx512(lb_act *a, const float *x) {
    const __m512 big = _mm512_set1_ps(3.4028235e38f);
    for (int64_t t = 0; t < a->T; t++) {
        int8_t *q = a->q + t * a->nbp * QK;
        float *d = a->d + t * a->nbp, *side = a->side + t * a->nbp;
        for (int64_t b = 0; b < a->nb; b++) {
            const float *xb = x + t * a->K + b * QK;
            const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
            const __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
            const int64_t e = (t * a->nbp + b) * a->lanes;
            if (_mm512_cmp_ps_mask(a0, big, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(a1, big, _CMP_NLE_UQ)) {
                d[b] = side[b] = __builtin_nanf("");       /* NaN or inf in the block: quants stay 0 */
                for (int l = 0; l < a->lanes; l++) a->dxe[e + l] = a->sxe[e + l] = d[b];
                continue;
            }
            const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
            const float dd = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
            const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
            const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
            const __m128i b0 = _mm512_cvtepi32_epi8(q0), b1 = _mm512_cvtepi32_epi8(q1);
            _mm_storeu_si128((__m128i *)(q + lb_act_index(a->kind, b, 0)), b0);
            _mm_storeu_si128((__m128i *)(q + lb_act_index(a->kind, b, 16)), b1);
            d[b] = _cvtsh_ss(_cvtss_sh(dd, _MM_FROUND_TO_NEAREST_INT));
            side[b] = d[b] * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
            /* expand (qact.c) with vectors: sums of 4 quants by vpdpbusd against ones */
            const __m128i ones = _mm_set1_epi8(1);
            const __m128i s0 = _mm_dpbusd_epi32(_mm_setzero_si128(), ones, b0);
            const __m128i s1 = _mm_dpbusd_epi32(_mm_setzero_si128(), ones, b1);
            if (a->lanes == 4) {
                _mm_storeu_ps(a->dxe + e, _mm_set1_ps(d[b]));
                _mm_storeu_ps(a->sxe + e, _mm_set1_ps(side[b] * 0.25f));
                _mm_storeu_si128((__m128i *)(a->corr + e), a->kind == LB_Q4_0
                                 ? _mm_mullo_epi32(_mm_add_epi32(s0, s1), _mm_set1_epi32(-8)) : _mm_setzero_si128());
            } else {
                _mm256_storeu_ps(a->dxe + e, _mm256_set1_ps(d[b]));
                _mm256_storeu_ps(a->sxe + e, _mm256_set1_ps(side[b] * 0.125f));
                _mm256_storeu_si256((__m256i *)(a->corr + e),
                                    _mm256_mullo_epi32(_mm256_set_m128i(s1, s0), _mm256_set1_epi32(-128)));
            }
        }
    }
}

/* q8_0, 7 to 16 rows of x (G = 1 or 2 groups of lb_act's qv from t0) against one weight row, lane r for
 * row t0 + r: each 4 weight quants, made unsigned (+ 128) and broadcast, meet 4 of every row's in one
 * vpdpbusd, so a block's sums come out one a lane, exact once 128 * sum(q_x) is taken away; then acc +
 * p * (d_w * d_x), qmatmul_avx2.c's q8_vtile's operations (lb_qmatmul_generic's, so its bits). */
INLINE void q8_vtile(int G, int R, const lb_act *a, int64_t t0, const uint8_t *w, float *out0, int64_t N) {
    const int64_t nb = a->nb, ts = a->T + 8;
    const __mmask16 lanes = G == 2 ? 0xffff : 0x00ff;
    const int8_t *xv = a->qv + t0 / 8 * nb * 8 * QK;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + b * 34;
        const int8_t *x0 = xv + b * 8 * QK, *x1 = G == 2 ? xv + (nb + b) * 8 * QK : x0;
        __m512i s = _mm512_setzero_si512();
        for (int k = 0; k < 8; k++) {
            const __m512i u = _mm512_xor_si512(_mm512_set1_epi32((int)lb_u32(p + 2 + 4 * k)), flip);
            const __m256i lo = _mm256_loadu_si256((const __m256i *)(x0 + k * QK));
            const __m512i x = G == 2 ? _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256((const __m256i *)(x1 + k * QK)), 1)
                                     : _mm512_zextsi256_si512(lo);
            s = _mm512_dpbusd_epi32(s, u, x);
        }
        const __m512i sq = _mm512_maskz_loadu_epi32(lanes, a->sq_t + b * ts + t0);
        s = _mm512_sub_epi32(s, _mm512_slli_epi32(sq, 7));
        const __m512 prod = _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(lb_u16(p))), _mm512_maskz_loadu_ps(lanes, a->d_t + b * ts + t0));
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_cvtepi32_ps(s), prod));
    }
    float lane[16];
    _mm512_storeu_ps(lane, acc);
    for (int r = 0; r < R; r++) out0[r * N] = lane[r];
}

#define Q8_FN(G) static TGT void q8_rows_##G(int R, const lb_act *a, int64_t t0, const uint8_t *w, int64_t N, float *out0) { \
        for (int64_t n = 0; n < N; n++) q8_vtile(G, R, a, t0, w + n * a->nb * 34, out0 + n, N); }
Q8_FN(1)
Q8_FN(2)

TGT void lb_qmatmul_avx512(int kind, const lb_act *a, const uint8_t *w, int64_t N, float *out) {
    if (kind == LB_Q8_0) {          /* 16 rows at a time; fewer than 7 on AVX2's tiles (see the top) */
        for (int64_t t = 0; t < a->T; t += 16) {
            const int R = a->T - t < 16 ? (int)(a->T - t) : 16;
            if (R < 7) lb_q8_rows_avx2(R, a, t, w, N, out + t * N);
            else (R > 8 ? q8_rows_2 : q8_rows_1)(R, a, t, w, N, out + t * N);
        }
        return;
    }
    /* Past 8 rows of x, NB weight rows at a time (in L2) against every 8 rows of x, so the weights
     * stream from memory once rather than once every 8 rows. */
    const int64_t row_bytes = a->nb * lb_block_bytes(kind), NB = a->T > 8 ? 64 : N;
    for (int64_t n = 0; n < N; n += NB) {
        const int64_t nn = N - n < NB ? N - n : NB;
        for (int64_t t = 0; t < a->T; t += 8) {
            const int R = a->T - t < 8 ? (int)(a->T - t) : 8;
            rows_3[R](a, t, w + n * row_bytes, nn, N, out + t * N + n);
        }
    }
}
#endif
