/* AVX-512 path of the K kinds (Q4_K, Q5_K, Q6_K): qk_avx2.c's integer work on 64 quants an
 * instruction. vpmaddubsw multiplies the unsigned weight quants (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63
 * before its -32) by x's int8 quants into 16-bit pairs and vpdpwssd applies each group's scale and
 * adds into 32-bit lanes. A block's integers are summed across lanes before any float is touched, so
 * each output is qk_generic.c's float operations in its order: the same bits on every path. Up to 4
 * rows of x (decode, and a batch's rest) run qk_tiles.h's tiles over these blocks, as on AVX2;
 * batches, 8 rows at a time, the batch tiles below. Q5_0 and Q5_1 run qk_avx2.c's code. */
#if defined(__x86_64__)

#include "qk.h"

#include "avx512.h"

static const int16_t IOTA[32] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};

/* One K block: u[j] the unsigned quants of elements 64j .. 64j + 63 (x's order), sc[j] the scale of
 * each 16-bit lane's group; Q6_K's 16 scales as int16 (sc16), Q4_K/Q5_K's min of each 16-group (mn16). */
typedef struct {
    __m512i u[4], sc[4];
    __m256i sc16, mn16;
} kblock;

/* Lanes 0..15 of a 16-bit vector hold lo, lanes 16..31 hi. */
INLINE __m512i halves16(short lo, short hi) {
    return _mm512_inserti64x4(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi), 1);
}

INLINE void unpack_k(int kind, const uint8_t *blk, kblock *k) {
    const __m512i iota = _mm512_loadu_si512(IOTA), m4 = _mm512_set1_epi8(0x0f);
    if (kind == LB_Q6_K) {
        /* ql's 64 bytes per half give elements 128h .. +63 (low nibbles) and +64 .. +127 (high); qh's
         * 32 bytes, in both 256-bit halves, give bits 4, 5 of each: pairs 0, 1 then 2, 3 (low
         * nibbles), 4, 5 then 6, 7 (high), as qk_avx2.c shifts them (the masks drop what crosses bytes) */
        const __m512i m30 = _mm512_set1_epi8(0x30), shl = halves16(4, 2), shr = halves16(0, 2);
        for (int h = 0; h < 2; h++) {
            const __m512i l = _mm512_loadu_si512(blk + 64 * h);
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
            k->u[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, shl), m30));
            k->u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                              _mm512_and_si512(_mm512_srlv_epi16(qh, shr), m30));
        }
        k->sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
        const __m512i s = _mm512_zextsi256_si512(k->sc16);
        for (int j = 0; j < 4; j++)        /* lane i: elements 64j + 2i, +1, group 4j + i / 8 */
            k->sc[j] = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_set1_epi16((short)(4 * j)),
                                                                 _mm512_srli_epi16(iota, 3)), s);
        k->mn16 = _mm256_setzero_si256();
        return;
    }
    uint32_t words[4];
    lb_k4_scale_words(blk + 4, words);
    const __m256i s16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)words));   /* sc[0..7], mn[0..7] */
    const __m512i s = _mm512_zextsi256_si512(s16);
    for (int j = 0; j < 4; j++)            /* lane i: sub-block of 32 2j + i / 16 */
        k->sc[j] = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_set1_epi16((short)(2 * j)),
                                                             _mm512_srli_epi16(iota, 4)), s);
    k->mn16 = _mm256_permutexvar_epi16(_mm256_add_epi16(_mm256_set1_epi16(8), _mm256_srli_epi16(_mm512_castsi512_si256(iota), 1)),
                                       s16);                                /* 16-group g: mn[g / 2] */
    /* 32 bytes of qs in both halves: low nibbles give elements 64j .. +31, high nibbles +32 .. +63;
     * Q5_K's fifth bits are bits 2j and 2j + 1 of qh */
    const uint8_t *qs = blk + (kind == LB_Q5_K ? 48 : 16);
    const __m512i nib = halves16(0, 4), one = _mm512_set1_epi8(1);
    const __m512i qh = kind == LB_Q5_K ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16)))
                                       : _mm512_setzero_si512();
    for (int j = 0; j < 4; j++) {
        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * j)));
        k->u[j] = _mm512_and_si512(_mm512_srlv_epi16(q, nib), m4);
        if (kind == LB_Q5_K) {
            const __m512i bit = _mm512_and_si512(_mm512_srlv_epi16(qh, halves16((short)(2 * j), (short)(2 * j + 1))), one);
            k->u[j] = _mm512_or_si512(k->u[j], _mm512_slli_epi16(bit, 4));
        }
    }
}

/* One row of x against a block: the lanes of sum over groups of scale * (u . x), Q6_K's -32 * scale .
 * bsums included; *m: the lanes of min . bsums (Q4_K/Q5_K; 0 for Q6_K). Exact in any lane order. */
INLINE __m256i k_dot(int kind, const kblock *k, const int8_t *xq, const int16_t *bsums, __m256i *m) {
    const __m256i bs = _mm256_loadu_si256((const __m256i *)bsums);
    __m512i s = _mm512_setzero_si512();
    if (kind == LB_Q6_K)
        s = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(),
                                                    _mm256_slli_epi32(_mm256_madd_epi16(bs, k->sc16), 5)));
    for (int j = 0; j < 4; j++)
        s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(k->u[j], _mm512_loadu_si512(xq + 64 * j)), k->sc[j]);
    *m = kind == LB_Q6_K ? _mm256_setzero_si256() : _mm256_madd_epi16(bs, k->mn16);
    return _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
}

#include "qk_tiles.h"

/* Batches: 8 rows of x a vector, in lb_qk_pairs' layout. vpdpbusd multiplies a pair of a weight
 * row's quads (broadcast: quads 16i + j and 16i + 8 + j) by 8 rows' own pair, 4 products a 32-bit
 * lane; lane 2r + e holds row r's quad e. Sums of a lane stay within int16 while they cover one
 * scale of each quad (Q4_K: 4 pairs, 16 quants of a sub-block, at most 16 * 15 * 127; Q5_K: 2 pairs;
 * Q6_K: 1), so two such sums A, B meet in vpackssdw (exact) and vpdpwssd applies the scales, a's and
 * b's: per 128-bit lane k the 32-bit lanes 4k + 2h + m add row 2k + m's A (h = 0) or B (h = 1)
 * products, scaled. Min (Q4_K, Q5_K) and Q6_K's -32 come from x's bsums by vpmaddwd into the same
 * lanes; the halves h are added once a block, then qk_generic.c's float steps for every row in its
 * lane: the same bits as every path. */

/* A weight block for the batch tiles: u[8i + j] its quants of pair 8i + j (a's 4 bytes, then b's);
 * sc[p]: (a's scale, b's scale) of pack p as two int16 (Q4_K, Q5_K: p = i, sub-blocks 2i, 2i + 1;
 * Q6_K: p = 2i + t, 16-groups 4i + t, 4i + 2 + t for pairs j = 4t ..); pat[8v ..]: for 16-groups
 * 4v .. 4v + 3 the factors f0 f1 f0 f1 f2 f3 f2 f3 of their bsums (Q4_K, Q5_K: the mins; Q6_K: the
 * scales, for its -32). */
typedef struct {
    uint64_t u[32];
    int16_t pat[32];
    int32_t sc[8];
    float d, dmin;
} __attribute__((aligned(64))) vblock;

static const int16_t PAT4[32] = {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11,
                                 12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15};
static const int16_t PAT6[32] = {0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7,
                                 8, 9, 8, 9, 10, 11, 10, 11, 12, 13, 12, 13, 14, 15, 14, 15};
static const int16_t SC6[32] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};

INLINE __m512i zext_q(const uint8_t *p) { return _mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)p)); }

INLINE void unpack_v(int kind, const uint8_t *blk, vblock *v) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i s;                     /* int16 factors: sc[0..7] mn[0..7], or Q6_K's 16 scales */
    if (kind == LB_Q6_K) {
        const __m512i m30 = _mm512_set1_epi8(0x30);
        for (int h = 0; h < 2; h++) {
            const __m512i q = _mm512_or_si512(zext_q(blk + 64 * h), _mm512_slli_epi64(zext_q(blk + 64 * h + 32), 32));
            const __m512i z = zext_q(blk + 128 + 32 * h), hh = _mm512_or_si512(z, _mm512_slli_epi64(z, 32));
            /* i = 2h: low nibbles, qh bits 0-1 (a) and 2-3 (b); i = 2h + 1: high nibbles, bits 4-5, 6-7 */
            const __m512i lo = _mm512_or_si512(_mm512_and_si512(q, m4),
                                               _mm512_and_si512(_mm512_sllv_epi32(hh, _mm512_set1_epi64(2ll << 32 | 4)), m30));
            const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi64(q, 4), m4),
                                               _mm512_and_si512(_mm512_srlv_epi32(hh, _mm512_set1_epi64(2ll << 32 | 0)), m30));
            _mm512_store_si512(v->u + 16 * h, lo);
            _mm512_store_si512(v->u + 16 * h + 8, hi);
        }
        s = _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192))));
        _mm256_store_si256((__m256i *)v->sc, _mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_loadu_si512(SC6), s)));
        _mm512_store_si512(v->pat, _mm512_permutexvar_epi16(_mm512_loadu_si512(PAT6), s));
        v->d = _cvtsh_ss(lb_u16(blk + 208));
        v->dmin = 0.0f;
        return;
    }
    uint32_t words[4];
    lb_k4_scale_words(blk + 4, words);
    s = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)words)));
    _mm_store_si128((__m128i *)v->sc, _mm512_castsi512_si128(s));           /* (sc[2i], sc[2i + 1]) */
    _mm512_store_si512(v->pat, _mm512_permutexvar_epi16(_mm512_loadu_si512(PAT4), s));
    const uint8_t *qs = blk + (kind == LB_Q5_K ? 48 : 16);
    const __m512i qh = kind == LB_Q5_K ? zext_q(blk + 16) : _mm512_setzero_si512();
    for (int i = 0; i < 4; i++) {
        /* a: the low nibbles of qs[32i + 4j ..], b: their high nibbles (shifted into the high dword) */
        const __m512i q = zext_q(qs + 32 * i);
        __m512i u = _mm512_and_si512(_mm512_or_si512(q, _mm512_slli_epi64(q, 28)), m4);
        if (kind == LB_Q5_K) {     /* fifth bits: qh bit 2i (a), 2i + 1 (b) of the same bytes */
            const __m512i t = _mm512_srli_epi64(qh, 2 * i);
            u = _mm512_or_si512(u, _mm512_slli_epi64(_mm512_and_si512(_mm512_or_si512(t, _mm512_slli_epi64(t, 31)),
                                                                       _mm512_set1_epi8(1)), 4));
        }
        _mm512_store_si512(v->u + 8 * i, u);
    }
    v->d = _cvtsh_ss(lb_u16(blk));
    v->dmin = _cvtsh_ss(lb_u16(blk + 2));
}

/* The lanes of the sums (lb_lanes): 32-bit lane 4k + 2h + m holds row 2k + m's products of half h
 * (A or B); once the halves are added, lane 4k + 2q + m row 2k + m of group q of the tile. */
static const lb_lanes LANES = {{0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7},
                               {0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7},
                               {0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1}};

/* Rows 8 g0 .. 8 (g0 + H) - 1 of x (H groups) against C weight rows from w0: out0's rows N apart. */
INLINE void vtile(int kind, int C, int H, const lb_batch_x *x, int64_t g0, const uint8_t *w0, int64_t row_bytes, float *out0, int64_t N) {
    const int64_t nb = x->nb, bb = lb_qk_block_bytes(kind);
    const int m = kind == LB_Q4_K ? 4 : kind == LB_Q5_K ? 2 : 1;     /* pairs a sum of a lane covers */
    vblock vbs[2][4];
    __m512 acc[4], accm[4];
    for (int c = 0; c < C; c++) acc[c] = accm[c] = _mm512_setzero_ps();
    for (int c = 0; c < C; c++) unpack_v(kind, w0 + c * row_bytes, &vbs[0][c]);
    for (int64_t b = 0; b < nb; b++) {
        /* the next block unpacked a block ahead: its stores are done before their loads */
        if (b + 1 < nb)
            for (int c = 0; c < C; c++) unpack_v(kind, w0 + c * row_bytes + (b + 1) * bb, &vbs[(b + 1) & 1][c]);
        const vblock *vb = vbs[b & 1];
        /* the next tile's rows (contiguous after this one's) fetched into L2 at this tile's pace */
        const char *ahead = (const char *)w0 + C * row_bytes + b * C * bb;
        for (int l = 0; l < C * bb; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T1);
        const int8_t *xp[2];
        for (int q = 0; q < H; q++) xp[q] = x->xv + ((g0 + q) * nb + b) * 32 * LB_PAIR_BYTES;
        __m512i sumi[4][2];
        for (int c = 0; c < C; c++)
            for (int q = 0; q < H; q++) sumi[c][q] = _mm512_setzero_si512();
        for (int i = 0; i < 4; i++)
            for (int s = 0; s < 8; s += 2 * m) {
                __m512i A[4][2], B[4][2];
                for (int jj = 0; jj < m; jj++) {
                    const int pa = 8 * i + s + jj, pb = pa + m;
                    __m512i xa[2], xb[2];
                    for (int q = 0; q < H; q++) {
                        xa[q] = _mm512_load_si512(xp[q] + pa * LB_PAIR_BYTES);
                        xb[q] = _mm512_load_si512(xp[q] + pb * LB_PAIR_BYTES);
                    }
                    for (int c = 0; c < C; c++) {
                        const __m512i wa = _mm512_set1_epi64((long long)vb[c].u[pa]), wb = _mm512_set1_epi64((long long)vb[c].u[pb]);
                        for (int q = 0; q < H; q++) {
                            A[c][q] = _mm512_dpbusd_epi32(jj ? A[c][q] : _mm512_setzero_si512(), wa, xa[q]);
                            B[c][q] = _mm512_dpbusd_epi32(jj ? B[c][q] : _mm512_setzero_si512(), wb, xb[q]);
                        }
                    }
                }
                for (int c = 0; c < C; c++) {
                    const __m512i sc = _mm512_set1_epi32(vb[c].sc[kind == LB_Q6_K ? 2 * i + s / 4 : i]);
                    for (int q = 0; q < H; q++)
                        sumi[c][q] = _mm512_dpwssd_epi32(sumi[c][q], _mm512_packs_epi32(A[c][q], B[c][q]), sc);
                }
            }
        __m512i mins[4][2];
        for (int q = 0; q < H; q++) {
            const int32_t *bs = x->bs + ((g0 + q) * nb + b) * 64;
            for (int v = 0; v < 4; v++) {
                const __m512i bv = _mm512_load_si512(bs + 16 * v);
                for (int c = 0; c < C; c++) {
                    const __m512i f = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(vb[c].pat + 8 * v)));
                    mins[c][q] = _mm512_dpwssd_epi32(v ? mins[c][q] : _mm512_setzero_si512(), bv, f);
                }
            }
        }
        __m512 dx = _mm512_load_ps(x->dx + (g0 * nb + b) * 16);
        if (H == 2) dx = _mm512_mask_blend_ps(0xcccc, dx, _mm512_load_ps(x->dx + ((g0 + 1) * nb + b) * 16));
        for (int c = 0; c < C; c++) {
            if (kind == LB_Q6_K)
                for (int q = 0; q < H; q++) sumi[c][q] = _mm512_sub_epi32(sumi[c][q], _mm512_slli_epi32(mins[c][q], 5));
            /* the halves h added: lane 4k + 2q + m holds row 8q + 2k + m's block sums */
            const __m512i si = _mm512_add_epi32(_mm512_unpacklo_epi64(sumi[c][0], sumi[c][H - 1]),
                                                _mm512_unpackhi_epi64(sumi[c][0], sumi[c][H - 1]));
            acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(vb[c].d), dx), _mm512_cvtepi32_ps(si)));
            if (kind != LB_Q6_K) {
                const __m512i sm = _mm512_add_epi32(_mm512_unpacklo_epi64(mins[c][0], mins[c][H - 1]),
                                                    _mm512_unpackhi_epi64(mins[c][0], mins[c][H - 1]));
                accm[c] = _mm512_add_ps(accm[c], _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(vb[c].dmin), dx), _mm512_cvtepi32_ps(sm)));
            }
        }
    }
    for (int c = 0; c < C; c++) {
        float lane[16];
        _mm512_storeu_ps(lane, _mm512_sub_ps(acc[c], accm[c]));
        for (int q = 0; q < H; q++)
            for (int r = 0; r < 8; r++) out0[(8 * q + r) * N + c] = lane[4 * (r / 2) + 2 * q + r % 2];
    }
}

/* 8 rows: 4 weight rows a tile (5 ran 0.95x); 16: 3 (1.07-1.10x over 2) */
#define QK_BATCH_C8 4
#define QK_BATCH_C16 3
#include "qk_batch.h"

TGT void lb_qk_matmul_avx512(int kind, const lb_act_k *a, const uint8_t *w, int64_t N, float *out) {
    const int64_t G = a->T / 8;
    if (G && batch(kind, a, G, w, N, out) == LB_OK) {
        k_tiles(kind, a, 8 * G, w, N, out);
        return;
    }
    k_tiles(kind, a, 0, w, N, out);
}
#endif
