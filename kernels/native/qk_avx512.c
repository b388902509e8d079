/* AVX-512 path of the K kinds (Q4_K, Q5_K, Q6_K): qk_avx2.c's integer work on 64 quants an
 * instruction. vpmaddubsw multiplies the unsigned weight quants (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63
 * before its -32) by x's int8 quants into 16-bit pairs and vpdpwssd applies each group's scale and
 * adds into 32-bit lanes. A block's integers are summed across lanes before any float is touched, so
 * each output is qk_generic.c's float operations in its order: the same bits on every path. A few
 * rows of x (a decode step has one) take 8 weight rows at a time, whose block sums a transposing sum
 * meets in one vector, so the float steps run 8 weight rows to a vector; 8 and 16 rows of x share each
 * unpacked block, their sums met likewise with a lane per row. Q5_0 and Q5_1 run qk_avx2.c's code. */
#if defined(__x86_64__)
#include "qk.h"

#ifdef LB_SIMDE_AVX512
#include "simde_avx512.h"      /* a test build: the same code on emulated intrinsics */
#define TGT
#else
#include <immintrin.h>
#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#endif
#define INLINE static inline __attribute__((always_inline)) TGT

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

INLINE int32_t sum_lanes(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1)));
}

/* R (<= 4) rows of x against one weight row: tile8_k's operations for one lane. */
INLINE void one(int kind, int R, const lb_act_k *a, int64_t t0, const uint8_t *w, float *out0, int64_t N) {
    const int64_t nb = a->nb, bb = lb_qk_block_bytes(kind);
    float acc[4] = {0}, accm[4] = {0};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * bb;
        kblock k;
        unpack_k(kind, blk, &k);
        const float d = _cvtsh_ss(lb_u16(blk + (kind == LB_Q6_K ? 208 : 0)));
        const float dmin = kind == LB_Q6_K ? 0.0f : _cvtsh_ss(lb_u16(blk + 2));
        for (int r = 0; r < R; r++) {
            const int64_t t = t0 + r;
            __m256i m;
            const int32_t sumi = sum_lanes(k_dot(kind, &k, a->q + t * a->K + b * QKK, a->bsums + (t * nb + b) * 16, &m));
            const float dx = a->d[t * nb + b];
            acc[r] += d * dx * (float)sumi;
            if (kind != LB_Q6_K) accm[r] += dmin * dx * (float)sum_lanes(m);
        }
    }
    for (int r = 0; r < R; r++) out0[r * N] = acc[r] - accm[r];
}

/* Every weight row against R (<= 4) rows of x from t0: 8 weight rows at a time, then one by one. */
INLINE void rows_few(int kind, int R, const lb_act_k *a, int64_t t0, const uint8_t *w, int64_t N, float *out) {
    const int64_t row_bytes = a->nb * lb_qk_block_bytes(kind);
    int64_t n = 0;
    for (; n + 8 <= N; n += 8) tile8_k(kind, R, a, t0, w + n * row_bytes, row_bytes, out + n, N);
    for (; n < N; n++) one(kind, R, a, t0, w + n * row_bytes, out + n, N);
}

/* 8 G rows of x from t0 against each weight row, its blocks unpacked once for all of them; lane r of
 * group g for row t0 + 8 g + r, in the float steps of tile8_k. */
INLINE void rows_many(int kind, int G, const lb_act_k *a, int64_t t0, const uint8_t *w, int64_t N, float *out) {
    const int64_t nb = a->nb, bb = lb_qk_block_bytes(kind), R = 8 * G;
    for (int64_t n = 0; n < N; n++) {
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, accm[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = w + (n * nb + b) * bb;
            kblock k;
            unpack_k(kind, blk, &k);
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(lb_u16(blk + (kind == LB_Q6_K ? 208 : 0))));
            const __m256 dmin = _mm256_set1_ps(kind == LB_Q6_K ? 0.0f : _cvtsh_ss(lb_u16(blk + 2)));
            for (int g = 0; g < G; g++) {
                __m256i sv[8], mv[8];
                float dxs[8];
                for (int r = 0; r < 8; r++) {
                    const int64_t t = t0 + 8 * g + r;
                    sv[r] = k_dot(kind, &k, a->q + t * a->K + b * QKK, a->bsums + (t * nb + b) * 16, &mv[r]);
                    dxs[r] = a->d[t * nb + b];
                }
                const __m256 dx = _mm256_loadu_ps(dxs);
                acc[g] = _mm256_add_ps(acc[g], _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(sum_lanes8(sv))));
                if (kind != LB_Q6_K)
                    accm[g] = _mm256_add_ps(accm[g], _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(sum_lanes8(mv))));
            }
        }
        float lane[16];
        for (int g = 0; g < G; g++) _mm256_storeu_ps(lane + 8 * g, _mm256_sub_ps(acc[g], accm[g]));
        for (int r = 0; r < R; r++) out[r * N + n] = lane[r];
    }
}

/* One instantiation per (kind, rows of x): the shape is known to the compiler. */
#define FEW(KIND, R) static TGT void few_##KIND##_##R(const lb_act_k *a, int64_t t, const uint8_t *w, int64_t N, float *o) { \
        rows_few(KIND, R, a, t, w, N, o); }
#define MANY(KIND, G) static TGT void many_##KIND##_##G(const lb_act_k *a, int64_t t, const uint8_t *w, int64_t N, float *o) { \
        rows_many(KIND, G, a, t, w, N, o); }
#define ROWS(KIND) FEW(KIND, 1) FEW(KIND, 2) FEW(KIND, 3) FEW(KIND, 4) MANY(KIND, 1) MANY(KIND, 2) \
    static void (*const rows_##KIND[17])(const lb_act_k *, int64_t, const uint8_t *, int64_t, float *) = { \
        0, few_##KIND##_1, few_##KIND##_2, few_##KIND##_3, few_##KIND##_4, 0, 0, 0, many_##KIND##_1, \
        0, 0, 0, 0, 0, 0, 0, many_##KIND##_2};

ROWS(12)
ROWS(13)
ROWS(14)

TGT void lb_qk_matmul_avx512(int kind, const lb_act_k *a, const uint8_t *w, int64_t N, float *out) {
    void (*const *fn)(const lb_act_k *, int64_t, const uint8_t *, int64_t, float *) =
        kind == LB_Q4_K ? rows_12 : kind == LB_Q5_K ? rows_13 : rows_14;
    for (int64_t t = 0; t < a->T;) {        /* the widest tile that fits: every row sums alike in any */
        const int64_t left = a->T - t;
        const int R = left >= 16 ? 16 : left >= 8 ? 8 : left >= 4 ? 4 : (int)left;
        fn[R](a, t, w, N, out + t * N);
        t += R;
    }
}
#endif
