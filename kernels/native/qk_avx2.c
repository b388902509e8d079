/* AVX2 path of the K-quant and 5-bit kinds. vpmaddubsw multiplies the unsigned weight quants (Q4_K
 * 0..15, Q5_K 0..31, Q6_K 0..63 before its -32) by the int8 x quants into 16-bit pairs (at most
 * 2 * 63 * 127, exact) and vpmaddwd applies each group's scale into 32-bit lanes. A K block's
 * integers are summed across lanes before any float is touched, so each output is the same float
 * operations in the same order as qk_generic.c: the same bits. Q6_K's -32 comes back as
 * -32 * scale . bsums. Q5_0/Q5_1 also sum a block's integers first, in qk_generic.c's order (see
 * q5_tile8), the fifth bit spread from qh to bytes, 16 weight rows at a time. The K kinds take
 * batches 8 rows of x at a time in the batch tiles below (4 rows a vector, 8 or 16 a tile), and up
 * to 4 rows (decode, and a batch's rest) against 8 weight rows at a time in qk_tiles.h's tiles,
 * shared with AVX-512. */
#if defined(__x86_64__)
#include <immintrin.h>

#include "avx2.h"
#include "qk.h"

/* One K weight block as 8 chunks of 32 unsigned quants in x's order, a 16-bit scale vector per chunk
 * (two 16-groups: low and high 128 bits), Q6_K's 16 scales widened, the mins per 16-group (its d and
 * dmin: k_d, k_dmin in qk_tiles.h). */
typedef struct {
    __m256i u[8], sc[8], sc16, mn16;
} kblock;

/* Q4_K/Q5_K's 12 scale bytes as lb_k4_scales reads them: bytes sc[0..7] then mn[0..7]. */
INLINE __m128i k4_scales(const uint8_t *s) {
    uint32_t w[4];
    lb_k4_scale_words(s, w);
    return _mm_set_epi32((int)w[3], (int)w[2], (int)w[1], (int)w[0]);
}

INLINE void unpack_k(int kind, const uint8_t *blk, kblock *k) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    if (kind == LB_Q6_K) {
        const __m256i m30 = _mm256_set1_epi8(0x30);
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
            /* bits 2i, 2i+1 of qh to bits 4, 5 of each byte (the masks drop what crosses bytes) */
            k->u[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
            k->u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
            k->u[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
            k->u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                              _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
        }
        /* the 16 int8 scales as int16, 8 in each of two vectors (both halves alike); chunk c takes
         * scale 2c into its low half and 2c + 1 into its high half with one byte shuffle */
        const __m128i s8 = _mm_loadu_si128((const __m128i *)(blk + 192));
        k->sc16 = _mm256_cvtepi8_epi16(s8);
        const __m256i half[2] = {_mm256_broadcastsi128_si256(_mm256_castsi256_si128(k->sc16)),
                                 _mm256_broadcastsi128_si256(_mm256_extracti128_si256(k->sc16, 1))};
        for (int c = 0; c < 8; c++) {
            const int lo = 4 * (c & 3), hi = lo + 2;
            k->sc[c] = _mm256_shuffle_epi8(half[c >> 2], _mm256_set_m128i(_mm_set1_epi16((short)((hi + 1) << 8 | hi)),
                                                                         _mm_set1_epi16((short)((lo + 1) << 8 | lo))));
        }
        return;
    }
    const __m256i scales = _mm256_broadcastsi128_si256(k4_scales(blk + 4));   /* bytes sc[0..7] mn[0..7], twice */
    for (int c = 0; c < 8; c++) k->sc[c] = _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short)(0x8000 | c)));
    /* 16-bit lane g: mn[g / 2] (mins are per 32, bsums per 16) */
    k->mn16 = _mm256_shuffle_epi8(scales, _mm256_setr_epi8(8, -128, 8, -128, 9, -128, 9, -128, 10, -128, 10, -128,
                                                            11, -128, 11, -128, 12, -128, 12, -128, 13, -128, 13, -128,
                                                            14, -128, 14, -128, 15, -128, 15, -128));
    const uint8_t *qs = blk + (kind == LB_Q5_K ? 48 : 16);
    const __m256i qh = kind == LB_Q5_K ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
    const __m256i one = _mm256_set1_epi8(1);
    for (int j = 0; j < 4; j++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
        k->u[2 * j] = _mm256_and_si256(q, m4);
        k->u[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (kind == LB_Q5_K) {
            const __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one);
            const __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one);
            k->u[2 * j] = _mm256_or_si256(k->u[2 * j], _mm256_slli_epi16(b0, 4));
            k->u[2 * j + 1] = _mm256_or_si256(k->u[2 * j + 1], _mm256_slli_epi16(b1, 4));
        }
    }
}

/* One row's integer work on a K block: the lanes of sum over chunks of scale * (u . x), Q6_K's
 * -32 * scale . bsums included; *m: the lanes of min . bsums (Q4_K/Q5_K). */
INLINE __m256i k_dot(int kind, const kblock *k, const int8_t *xq, const int16_t *bsums, __m256i *m) {
    const __m256i bs = _mm256_loadu_si256((const __m256i *)bsums);
    __m256i s = kind == LB_Q6_K ? _mm256_slli_epi32(_mm256_madd_epi16(bs, k->sc16), 5) : _mm256_setzero_si256();
    s = _mm256_sub_epi32(_mm256_setzero_si256(), s);
    for (int c = 0; c < 8; c++) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + 32 * c));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(k->u[c], x), k->sc[c]));
    }
    *m = kind == LB_Q6_K ? _mm256_setzero_si256() : _mm256_madd_epi16(bs, k->mn16);
    return s;
}

#include "qk_tiles.h"

/* Batches: 4 rows of x a vector, in lb_qk_pairs' layout (a group's pair: rows 0..3, then 4..7).
 * vpmaddubsw multiplies a weight row's pair of quads (broadcast) by 4 rows' own, two products a
 * 16-bit lane, and those lanes add in 16 bits while they cover one scale of each quad (Q4_K: the 8
 * pairs of a sub-block, at most 8 * 2 * 15 * 127; Q5_K: 4; Q6_K: 2); vpmaddwd then applies the
 * scales (32-bit lane 2r + e: row r's quad e), exactly. Mins and Q6_K's -32 come from x's bsums by
 * vpmaddwd into the same lanes; vphaddd meets each row's two lanes (rows 0, 1, 4, 5, 2, 3, 6, 7 in
 * that order) and qk_generic.c's float steps run for every row in its lane: the same bits. */

/* A weight block for the batch tiles: u[8i + j] its quants of pair 8i + j (as on AVX-512); sc[k]
 * the scales of sum k as int16 (a's, a's, b's, b's: Q4_K, Q5_K k = i, sub-blocks 2i and 2i + 1;
 * Q6_K k = 2i + t, 16-groups 4i + t, 4i + 2 + t); pat[v]: the factors of x's bsums of 16-groups
 * 4v .. 4v + 3 (Q4_K, Q5_K: the mins, Q6_K: the scales). */
typedef struct {
    uint64_t u[32];
    uint64_t sc[8];
    uint64_t pat[4];
    float d, dmin;
} __attribute__((aligned(32))) vblock;

#define W2(a, b) (a), -128, (a), -128, (b), -128, (b), -128         /* int16 a, a, b, b from bytes */
static const int8_t SC4_IDX[32] = {W2(0, 1), W2(2, 3), W2(4, 5), W2(6, 7)};
static const int8_t MN4_IDX[32] = {W2(8, 9), W2(10, 11), W2(12, 13), W2(14, 15)};
/* Q6_K from its int16 scales (each 128-bit lane: scales 8h .. 8h + 7): sums 2i + t for i = 2h, 2h + 1 */
#define V2(a, b) 2 * (a), 2 * (a) + 1, 2 * (a), 2 * (a) + 1, 2 * (b), 2 * (b) + 1, 2 * (b), 2 * (b) + 1
static const int8_t SC6_IDX[32] = {V2(0, 2), V2(1, 3), V2(4, 6), V2(5, 7)};

INLINE __m256i zext_q(const uint8_t *p) { return _mm256_cvtepu32_epi64(_mm_loadu_si128((const __m128i *)p)); }

INLINE void unpack_v(int kind, const uint8_t *blk, vblock *v) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    if (kind == LB_Q6_K) {
        const __m256i m30 = _mm256_set1_epi8(0x30);
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 2; k++) {
                const __m256i q = _mm256_or_si256(zext_q(blk + 64 * h + 16 * k), _mm256_slli_epi64(zext_q(blk + 64 * h + 32 + 16 * k), 32));
                const __m256i z = zext_q(blk + 128 + 32 * h + 16 * k), hh = _mm256_or_si256(z, _mm256_slli_epi64(z, 32));
                const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4),
                                                   _mm256_and_si256(_mm256_sllv_epi32(hh, _mm256_set1_epi64x(2ll << 32 | 4)), m30));
                const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi64(q, 4), m4),
                                                   _mm256_and_si256(_mm256_srlv_epi32(hh, _mm256_set1_epi64x(2ll << 32 | 0)), m30));
                _mm256_store_si256((__m256i *)(v->u + 16 * h + 4 * k), lo);
                _mm256_store_si256((__m256i *)(v->u + 16 * h + 8 + 4 * k), hi);
            }
        const __m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
        const __m256i idx = _mm256_loadu_si256((const __m256i *)SC6_IDX);
        _mm256_store_si256((__m256i *)v->sc, _mm256_shuffle_epi8(_mm256_permute4x64_epi64(s, 0x44), idx));
        _mm256_store_si256((__m256i *)(v->sc + 4), _mm256_shuffle_epi8(_mm256_permute4x64_epi64(s, 0xee), idx));
        _mm256_store_si256((__m256i *)v->pat, s);
        v->d = _cvtsh_ss(lb_u16(blk + 208));
        v->dmin = 0.0f;
        return;
    }
    const __m256i s = _mm256_broadcastsi128_si256(k4_scales(blk + 4));     /* bytes sc[0..7] mn[0..7], twice */
    _mm256_store_si256((__m256i *)v->sc, _mm256_shuffle_epi8(s, _mm256_loadu_si256((const __m256i *)SC4_IDX)));
    _mm256_store_si256((__m256i *)v->pat, _mm256_shuffle_epi8(s, _mm256_loadu_si256((const __m256i *)MN4_IDX)));
    const uint8_t *qs = blk + (kind == LB_Q5_K ? 48 : 16);
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 2; k++) {
            const __m256i q = zext_q(qs + 32 * i + 16 * k);
            __m256i u = _mm256_and_si256(_mm256_or_si256(q, _mm256_slli_epi64(q, 28)), m4);
            if (kind == LB_Q5_K) {
                const __m256i t = _mm256_srli_epi64(zext_q(blk + 16 + 16 * k), 2 * i);
                u = _mm256_or_si256(u, _mm256_slli_epi64(_mm256_and_si256(_mm256_or_si256(t, _mm256_slli_epi64(t, 31)),
                                                                          _mm256_set1_epi8(1)), 4));
            }
            _mm256_store_si256((__m256i *)(v->u + 8 * i + 4 * k), u);
        }
    v->d = _cvtsh_ss(lb_u16(blk));
    v->dmin = _cvtsh_ss(lb_u16(blk + 2));
}

/* 32-bit lane 2r + e of a vector of 4 rows (rows 4h .. 4h + 3 in half h of a group's bsum vector):
 * row r's 16-groups 4v + 2e, + 1; d_x lanes: rows 0, 1, 4, 5, 2, 3, 6, 7 (vphaddd's order). */
static const lb_lanes LANES = {{0, 1, 4, 5, 2, 3, 6, 7, 0, 1, 4, 5, 2, 3, 6, 7},
                               {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7},
                               {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}};

/* Rows 8 g .. 8 (g + H) - 1 of x (H groups) against C weight rows from w0: out0's rows N apart. */
INLINE void vtile(int kind, int C, int H, const lb_batch_x *x, int64_t g, const uint8_t *w0, int64_t row_bytes, float *out0, int64_t N) {
    const int64_t nb = x->nb, bb = lb_qk_block_bytes(kind);
    const int M = kind == LB_Q4_K ? 8 : kind == LB_Q5_K ? 4 : 2;     /* pairs a 16-bit sum covers */
    vblock vbs[2][2];
    __m256 acc[2][2], accm[2][2];
    for (int c = 0; c < C; c++)
        for (int q = 0; q < H; q++) acc[c][q] = accm[c][q] = _mm256_setzero_ps();
    for (int c = 0; c < C; c++) unpack_v(kind, w0 + c * row_bytes, &vbs[0][c]);
    for (int64_t b = 0; b < nb; b++) {
        if (b + 1 < nb)            /* a block ahead, as qk_avx512.c's */
            for (int c = 0; c < C; c++) unpack_v(kind, w0 + c * row_bytes + (b + 1) * bb, &vbs[(b + 1) & 1][c]);
        const vblock *vb = vbs[b & 1];
        const char *ahead = (const char *)w0 + C * row_bytes + b * C * bb;
        for (int l = 0; l < C * bb; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T1);
        __m256i sumi[2][2][2];     /* [c][q][h]: weight row, group, its rows 4h .. 4h + 3 */
        for (int c = 0; c < C; c++)
            for (int q = 0; q < H; q++) sumi[c][q][0] = sumi[c][q][1] = _mm256_setzero_si256();
        for (int i = 0; i < 4; i++)
            for (int s = 0; s < 8; s += M) {
                __m256i p16[2][2][2];
                for (int jj = 0; jj < M; jj++) {
                    const int p = 8 * i + s + jj;
                    __m256i xs[2][2];
                    for (int q = 0; q < H; q++)
                        for (int h = 0; h < 2; h++)
                            xs[q][h] = _mm256_load_si256((const __m256i *)(x->xv + (((g + q) * nb + b) * 32 + p) * LB_PAIR_BYTES + 32 * h));
                    for (int c = 0; c < C; c++) {
                        const __m256i wv = _mm256_set1_epi64x((long long)vb[c].u[p]);
                        for (int q = 0; q < H; q++)
                            for (int h = 0; h < 2; h++) {
                                const __m256i a = _mm256_maddubs_epi16(wv, xs[q][h]);
                                p16[c][q][h] = jj ? _mm256_add_epi16(p16[c][q][h], a) : a;
                                /* in this order: GCC otherwise reassociates the sums into a tree and spills */
                                __asm__("" : "+x"(p16[c][q][h]));
                            }
                    }
                }
                for (int c = 0; c < C; c++) {
                    const __m256i sc = _mm256_set1_epi64x((long long)vb[c].sc[kind == LB_Q6_K ? 2 * i + s / 4 : i]);
                    for (int q = 0; q < H; q++)
                        for (int h = 0; h < 2; h++) sumi[c][q][h] = _mm256_add_epi32(sumi[c][q][h], _mm256_madd_epi16(p16[c][q][h], sc));
                }
            }
        for (int q = 0; q < H; q++) {
            __m256i mins[2][2];
            const int32_t *bs = x->bs + ((g + q) * nb + b) * 64;
            for (int v = 0; v < 4; v++)
                for (int h = 0; h < 2; h++) {
                    const __m256i bv = _mm256_load_si256((const __m256i *)(bs + 16 * v + 8 * h));
                    for (int c = 0; c < C; c++) {
                        const __m256i m = _mm256_madd_epi16(bv, _mm256_set1_epi64x((long long)vb[c].pat[v]));
                        mins[c][h] = v ? _mm256_add_epi32(mins[c][h], m) : m;
                    }
                }
            const __m256 dx = _mm256_load_ps(x->dx + ((g + q) * nb + b) * 16);
            for (int c = 0; c < C; c++) {
                if (kind == LB_Q6_K)
                    for (int h = 0; h < 2; h++) sumi[c][q][h] = _mm256_sub_epi32(sumi[c][q][h], _mm256_slli_epi32(mins[c][h], 5));
                const __m256i si = _mm256_hadd_epi32(sumi[c][q][0], sumi[c][q][1]);
                acc[c][q] = _mm256_add_ps(acc[c][q], _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(vb[c].d), dx), _mm256_cvtepi32_ps(si)));
                if (kind != LB_Q6_K) {
                    const __m256i sm = _mm256_hadd_epi32(mins[c][0], mins[c][1]);
                    accm[c][q] = _mm256_add_ps(accm[c][q], _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(vb[c].dmin), dx), _mm256_cvtepi32_ps(sm)));
                }
            }
        }
    }
    for (int c = 0; c < C; c++)
        for (int q = 0; q < H; q++) {
            float lane[8];
            _mm256_storeu_ps(lane, _mm256_sub_ps(acc[c][q], accm[c][q]));
            for (int L = 0; L < 8; L++) out0[(8 * q + LANES.dx_row[L]) * N + c] = lane[L];
        }
}

/* one weight row a tile: with 2 (8 rows) GCC spilled, and 8 rows ran 1.10x slower */
#define QK_BATCH_C8 1
#define QK_BATCH_C16 1
#include "qk_batch.h"

/* A block's products of unsigned quants u and x's quants in 8 int32 lanes. */
INLINE __m256i q32_dot(__m256i u, const int8_t *x) {
    const __m256i p16 = _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)x));   /* |pair| <= 2 * 31 * 127 */
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* sum + each row's products of 4 quads of a block's quants (wq[k], broadcast) and its own (x + k * 32):
 * four vpmaddubsw pairs (each at most 2 * 31 * 127) add in 16 bits before widening. */
INLINE __m256i q32_quads(__m256i sum, const __m256i wq[4], const int8_t *x) {
#define Q32_QUAD(K) _mm256_maddubs_epi16(wq[K], _mm256_loadu_si256((const __m256i *)(x + (K) * QK)))
    const __m256i p16 = _mm256_add_epi16(_mm256_add_epi16(Q32_QUAD(0), Q32_QUAD(1)), _mm256_add_epi16(Q32_QUAD(2), Q32_QUAD(3)));
#undef Q32_QUAD
    return _mm256_add_epi32(sum, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

/* The 8 lanes' sums of 8 quads of Q4_0 quants (w[k], at most 15) times x's (x[k]): vpmaddubsw pairs (each
 * at most 2 * 15 * 127) add in 16 bits, all 8 within int16's range, then widen once. */
INLINE __m256i q32_lanes8(const __m256i w[8], const __m256i x[8]) {
    __m256i p[8];
    for (int k = 0; k < 8; k++) p[k] = _mm256_maddubs_epi16(w[k], x[k]);
    const __m256i s = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3])),
                                       _mm256_add_epi16(_mm256_add_epi16(p[4], p[5]), _mm256_add_epi16(p[6], p[7])));
    return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

#include "q32_tiles.h"

Q32_Q4_0
Q32_Q5(6)
Q32_Q5(7)

/* round_block_k (qk.c) with 8 lanes: the same IEEE operations in every lane (vcvtps2dq rounds ties to
 * even like nearbyintf under the default rounding mode), the first element of largest |x| found by
 * comparing each with the maximum, so the same bits. */
TGT void lb_round_block_k_avx2(const float *x, int8_t *q, float *d, int16_t *bsums) {
    const __m256 sign = _mm256_set1_ps(-0.0f), big = _mm256_set1_ps(3.4028235e38f);
    __m256 v[32], m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int i = 0; i < 32; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        const __m256 av = _mm256_andnot_ps(sign, v[i]);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(av, big, _CMP_NLE_UQ));      /* NaN or inf */
        m = _mm256_max_ps(m, av);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    const int finite = !_mm256_movemask_ps(bad);
    float max = 0.0f;
    if (finite && amax != 0.0f) {
        const __m256 am = _mm256_set1_ps(amax);
        for (int i = 0;; i++) {
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, v[i]), am, _CMP_EQ_OQ));
            if (hit) {
                max = x[8 * i + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
    }
    const float iscale = finite && amax != 0.0f ? -127.0f / max : __builtin_inff();
    if (!(__builtin_fabsf(iscale) <= 3.4028235e38f)) {
        lb_zero_block_k(q, bsums);
        *d = finite ? 0.0f : __builtin_nanf("");
        return;
    }
    const __m256 is = _mm256_set1_ps(iscale);
    const __m256i top = _mm256_set1_epi32(127), order = _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0);
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256i s[8];                   /* s[c] lanes 0..3: 16-group 2c's partial sums, 4..7: group 2c + 1's */
    for (int c = 0; c < 8; c++) {
        __m256i qi[4];
        for (int i = 0; i < 4; i++) qi[i] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, v[4 * c + i])), top);
        const __m256i bytes = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3])), order);
        _mm256_storeu_si256((__m256i *)(q + 32 * c), bytes);
        s[c] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, bytes), ones16);
    }
    for (int h = 0; h < 2; h++) {   /* groups 8h .. 8h+7: hadds leave evens in the low half, odds in the high */
        const __m256i e = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4 * h], s[4 * h + 1]),
                                            _mm256_hadd_epi32(s[4 * h + 2], s[4 * h + 3]));
        const __m128i lo = _mm256_castsi256_si128(e), hi = _mm256_extracti128_si256(e, 1);
        _mm_storeu_si128((__m128i *)(bsums + 8 * h), _mm_packs_epi32(_mm_unpacklo_epi32(lo, hi), _mm_unpackhi_epi32(lo, hi)));
    }
    *d = 1.0f / iscale;
}

TGT void lb_qk_matmul_avx2(int kind, const lb_act_k *ak, const lb_act *a5, const uint8_t *w, int64_t N, float *out) {
    if (!lb_is_qk(kind)) {
        q32_matmul(kind == LB_Q4_0 ? q32_rows_2 : kind == LB_Q5_0 ? q32_rows_6 : q32_rows_7, kind, a5, w, N, out);
        return;
    }
    const int64_t G = ak->T / 8;
    if (G && batch(kind, ak, G, w, N, out) == LB_OK) {
        k_tiles(kind, ak, 8 * G, w, N, out);
        return;
    }
    k_tiles(kind, ak, 0, w, N, out);
}
#endif
