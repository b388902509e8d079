/* AVX-512 path of the K kinds (Q4_K, Q5_K, Q6_K): qk_avx2.c's integer work on 64 quants an
 * instruction. vpmaddubsw multiplies the unsigned weight quants (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63
 * before its -32) by x's int8 quants into 16-bit pairs and vpdpwssd applies each group's scale and
 * adds into 32-bit lanes. A block's integers are summed across lanes before any float is touched, so
 * each output is qk_generic.c's float operations in its order: the same bits on every path. The
 * tiles over these blocks are qk_tiles.h's, as on AVX2. Q5_0 and Q5_1 run qk_avx2.c's code. */
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

TGT void lb_qk_matmul_avx512(int kind, const lb_act_k *a, const uint8_t *w, int64_t N, float *out) {
    k_tiles(kind, a, w, N, out);
}
#endif
