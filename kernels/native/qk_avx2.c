/* AVX2 path of the K-quant and 5-bit kinds. vpmaddubsw multiplies the unsigned weight quants (Q4_K
 * 0..15, Q5_K 0..31, Q6_K 0..63 before its -32) by the int8 x quants into 16-bit pairs (at most
 * 2 * 63 * 127, exact) and vpmaddwd applies each group's scale into 32-bit lanes. A K block's
 * integers are summed across lanes before any float is touched, so each output is the same float
 * operations in the same order as qk_generic.c: the same bits. Q6_K's -32 comes back as
 * -32 * scale . bsums. Q5_0/Q5_1 also sum a block's integers first, in qk_generic.c's order (see
 * q5_tile8), the fifth bit spread from qh to bytes. Up to 16 rows of x (for Q5, 16 weight rows at a
 * time) share each unpacked weight block, so a batch of 16 streams the weights once; up to 4 take the
 * K kinds' weight rows 8 at a time (the K kinds' tiles are qk_tiles.h's, shared with AVX-512). */
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

/* Q5_0 and Q5_1 as one kind, in qk_generic.c's operations (so its bits): per block the exact integer
 * sum p of (quant - offset) * x, then acc + p * (d_w * d_x), and Q5_1's + m * side_x (side_x = d_x *
 * sum(q_x), exact). The unsigned 5-bit quants u (0..31) meet x's quants in vpmaddubsw; Q5_0's -16 comes
 * back in the integers as -16 * sum(q_x). Each tile below does those operations, so a row's bits do
 * not depend on its tile. */

/* A block's 32 quants, unsigned, in element order (x is rounded in that order for these kinds). */
INLINE __m256i q5_quants(const uint8_t *p, int head) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), b16 = _mm256_set1_epi8(0x10);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bits = _mm256_set1_epi64x(0x8040201008040201LL);
    /* low nibbles in the low half, high nibbles (shifted down 4) in the high half */
    const __m256i qs = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p + head + 4)));
    const __m256i u = _mm256_and_si256(_mm256_srlv_epi32(qs, _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0)), m4);
    __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32((int)lb_u32(p + head)), spread);
    h = _mm256_cmpeq_epi8(_mm256_and_si256(h, bits), bits);          /* byte i: 0xff where bit i of qh */
    return _mm256_or_si256(u, _mm256_and_si256(h, b16));
}

/* A block's products of unsigned quants u and x's quants in 8 int32 lanes. */
INLINE __m256i q5_dot(__m256i u, const int8_t *x) {
    const __m256i p16 = _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)x));   /* |pair| <= 2 * 31 * 127 */
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* R (<= 6) rows of x (R = 1: a decode step) against 8 weight rows, lane c for weight row c: the 8 rows'
 * blocks unpacked once for the R, their scales converted in one vector, per row their sums met in one
 * vector (sum8_epi32). */
INLINE void q5_tile8(int kind, int R, const lb_act *a, int64_t t0, const uint8_t *w0, int64_t row_bytes, float *out0, int64_t N) {
    const int64_t nb = a->nb, nbp = a->nbp, bb = lb_qk_block_bytes(kind), head = kind == LB_Q5_1 ? 4 : 2, ts = a->T + 8;
    __m256 acc[6];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w0 + b * bb;
        /* each weight row is a few cache lines: too short a stream for the hardware prefetcher */
        const char *ahead = (const char *)w0 + PREFETCH + b * 8 * bb;
        for (int l = 0; l < 8 * bb; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
        __m256 dw, mw;
        scales_f16x8(p, row_bytes, &dw, &mw);
        __m256i u[8];
        for (int c = 0; c < 8; c++) u[c] = q5_quants(p + c * row_bytes, head);
        for (int r = 0; r < R; r++) {
            const int64_t i = (t0 + r) * nbp + b;
            __m256i s[8];
            for (int c = 0; c < 8; c++) s[c] = q5_dot(u[c], a->q + i * QK);
            __m256i sum = sum8_epi32(s);
            if (kind == LB_Q5_0) sum = _mm256_sub_epi32(sum, _mm256_set1_epi32(16 * a->sq_t[b * ts + t0 + r]));
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dw, _mm256_broadcast_ss(a->d + i))));
            if (kind == LB_Q5_1) acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(mw, _mm256_broadcast_ss(a->side + i)));
        }
    }
    for (int r = 0; r < R; r++) _mm256_storeu_ps(out0 + r * N, acc[r]);
}

/* One row of x against one weight row: q5_tile8's operations for one output, in scalars. */
INLINE void q5_one(int kind, const lb_act *a, int64_t t, const uint8_t *w, float *out) {
    const int64_t bb = lb_qk_block_bytes(kind), head = kind == LB_Q5_1 ? 4 : 2, ts = a->T + 8;
    const int8_t *row = a->q + t * a->nbp * QK;
    float acc = 0.0f;
    for (int64_t b = 0; b < a->nb; b++) {
        const uint8_t *p = w + b * bb;
        const __m256i v = q5_dot(q5_quants(p, head), row + b * QK);
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        const int32_t sum = _mm_cvtsi128_si32(h) - (kind == LB_Q5_0 ? 16 * a->sq_t[b * ts + t] : 0);
        acc = acc + (float)sum * (_cvtsh_ss(lb_u16(p)) * a->d[t * a->nbp + b]);
        if (kind == LB_Q5_1) acc = acc + _cvtsh_ss(lb_u16(p + 2)) * a->side[t * a->nbp + b];
    }
    *out = acc;
}

/* Up to 8 G rows of x (G = 1 or 2 groups of qv from t0) against one weight row, lane r of group g for
 * row t0 + 8 g + r: each 4 quants of the block, broadcast, meet 4 of every row's at once, so the sums
 * come out one a lane; 2 groups share the unpacking. Four vpmaddubsw pairs (each at most 2 * 31 * 127)
 * add in 16 bits before widening. */
INLINE void q5_vtile(int kind, int G, int R, const lb_act *a, int64_t t0, const uint8_t *w, float *out0, int64_t N) {
    const int64_t nb = a->nb, bb = lb_qk_block_bytes(kind), head = kind == LB_Q5_1 ? 4 : 2, ts = a->T + 8;
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t *xv = a->qv + t0 / 8 * nb * 8 * QK;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + b * bb;
        const __m256i u = q5_quants(p, head);
        __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int half = 0; half < 2; half++) {          /* elements 0..15, then 16..31, in both 128-bit halves */
            const __m256i uh = _mm256_permute2x128_si256(u, u, half ? 0x11 : 0x00);
            const __m256i q0 = _mm256_shuffle_epi32(uh, 0x00), q1 = _mm256_shuffle_epi32(uh, 0x55);
            const __m256i q2 = _mm256_shuffle_epi32(uh, 0xaa), q3 = _mm256_shuffle_epi32(uh, 0xff);
            for (int g = 0; g < G; g++) {
                const int8_t *x = xv + ((g * nb + b) * 8 + 4 * half) * QK;
#define Q5_QUAD(Q, K) _mm256_maddubs_epi16(Q, _mm256_loadu_si256((const __m256i *)(x + (K) * QK)))
                const __m256i p16 = _mm256_add_epi16(_mm256_add_epi16(Q5_QUAD(q0, 0), Q5_QUAD(q1, 1)),
                                                     _mm256_add_epi16(Q5_QUAD(q2, 2), Q5_QUAD(q3, 3)));
#undef Q5_QUAD
                sum[g] = _mm256_add_epi32(sum[g], _mm256_madd_epi16(p16, ones));
            }
        }
        const __m256 dw = _mm256_set1_ps(_cvtsh_ss(lb_u16(p))), mw = _mm256_set1_ps(_cvtsh_ss(lb_u16(p + 2)));
        for (int g = 0; g < G; g++) {
            const int64_t i = b * ts + t0 + 8 * g;
            if (kind == LB_Q5_0) sum[g] = _mm256_sub_epi32(sum[g], _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(a->sq_t + i)), 4));
            acc[g] = _mm256_add_ps(acc[g], _mm256_mul_ps(_mm256_cvtepi32_ps(sum[g]), _mm256_mul_ps(dw, _mm256_loadu_ps(a->d_t + i))));
            if (kind == LB_Q5_1) acc[g] = _mm256_add_ps(acc[g], _mm256_mul_ps(mw, _mm256_loadu_ps(a->side_t + i)));
        }
    }
    float lane[16];
    _mm256_storeu_ps(lane, acc[0]);
    _mm256_storeu_ps(lane + 8, acc[1]);
    for (int r = 0; r < R; r++) out0[r * N] = lane[r];
}

/* nn weight rows from w against R (<= 16) rows of x from t0, into out (rows N apart): up to 6 rows by
 * the 8-weight-row tiles (an 8-lane tile of few rows mostly computes empty lanes); 7 and 8 in one
 * group, 10 to 16 in one pass of 2 groups, 9 as 8 and 1. */
INLINE void rows_q5(int kind, int R, const lb_act *a, int64_t t0, const uint8_t *w, int64_t nn, int64_t N, float *out) {
    const int64_t row_bytes = a->nb * lb_qk_block_bytes(kind);
    if (R <= 6) {
        int64_t n = 0;
        for (; n + 8 <= nn; n += 8) q5_tile8(kind, R, a, t0, w + n * row_bytes, row_bytes, out + n, N);
        for (; n < nn; n++)
            for (int r = 0; r < R; r++) q5_one(kind, a, t0 + r, w + n * row_bytes, out + r * N + n);
    } else if (R >= 10) {
        for (int64_t n = 0; n < nn; n++) q5_vtile(kind, 2, R, a, t0, w + n * row_bytes, out + n, N);
    } else if (R > 8) {
        const int head = 8;
        rows_q5(kind, head, a, t0, w, nn, N, out);
        rows_q5(kind, R - head, a, t0 + head, w, nn, N, out + head * N);
    } else {
        for (int64_t n = 0; n < nn; n++) q5_vtile(kind, 1, R, a, t0, w + n * row_bytes, out + n, N);
    }
}

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

/* One instantiation per (kind, R): the row count is known to the compiler. */
#define Q5_FN(KIND, R) static TGT void rows_q5_##KIND##_##R(const lb_act *a, int64_t t, const uint8_t *w, int64_t nn, \
                                                          int64_t N, float *o) { rows_q5(KIND, R, a, t, w, nn, N, o); }
#define ROWS_Q5(KIND) Q5_FN(KIND, 1) Q5_FN(KIND, 2) Q5_FN(KIND, 3) Q5_FN(KIND, 4) Q5_FN(KIND, 5) Q5_FN(KIND, 6) \
    Q5_FN(KIND, 7) Q5_FN(KIND, 8) Q5_FN(KIND, 9) Q5_FN(KIND, 10) Q5_FN(KIND, 11) Q5_FN(KIND, 12) Q5_FN(KIND, 13) \
    Q5_FN(KIND, 14) Q5_FN(KIND, 15) Q5_FN(KIND, 16) \
    static void (*const rows_q5_##KIND[17])(const lb_act *, int64_t, const uint8_t *, int64_t, int64_t, float *) = { \
        0, rows_q5_##KIND##_1, rows_q5_##KIND##_2, rows_q5_##KIND##_3, rows_q5_##KIND##_4, rows_q5_##KIND##_5, \
        rows_q5_##KIND##_6, rows_q5_##KIND##_7, rows_q5_##KIND##_8, rows_q5_##KIND##_9, rows_q5_##KIND##_10, \
        rows_q5_##KIND##_11, rows_q5_##KIND##_12, rows_q5_##KIND##_13, rows_q5_##KIND##_14, rows_q5_##KIND##_15, \
        rows_q5_##KIND##_16};

ROWS_Q5(6)
ROWS_Q5(7)

TGT void lb_qk_matmul_avx2(int kind, const lb_act_k *ak, const lb_act *a5, const uint8_t *w, int64_t N, float *out) {
    if (!lb_is_qk(kind)) {
        /* a few weight rows at a time (in L1) against every group of 16 rows of x: the weights stream once */
        const int64_t row_bytes = a5->nb * lb_qk_block_bytes(kind), step = a5->T == 1 ? N : 16;
        for (int64_t n = 0; n < N; n += step) {
            const int64_t nn = N - n < step ? N - n : step;
            for (int64_t t = 0; t < a5->T; t += 16) {
                const int R = a5->T - t < 16 ? (int)(a5->T - t) : 16;
                (kind == LB_Q5_0 ? rows_q5_6 : rows_q5_7)[R](a5, t, w + n * row_bytes, nn, N, out + t * N + n);
            }
        }
        return;
    }
    k_tiles(kind, ak, w, N, out);
}
#endif
