/* The float16 scales at the head of 8 weight rows' blocks, gathered and widened: for 256-bit code of
 * either x86 path (avx2.h's, and qk_avx512.c's). The includer defines INLINE with its target. */
#ifndef LB_SCALES8_H
#define LB_SCALES8_H

/* The 32-bit words at p + i * stride for i < 8: rows 0..3 in *lo, 4..7 in *hi. */
INLINE void gather_u32(const uint8_t *p, int64_t stride, __m128i *lo, __m128i *hi) {
    __m128i l = _mm_cvtsi32_si128((int)lb_u32(p)), h = _mm_cvtsi32_si128((int)lb_u32(p + 4 * stride));
    l = _mm_insert_epi32(l, (int)lb_u32(p + stride), 1), h = _mm_insert_epi32(h, (int)lb_u32(p + 5 * stride), 1);
    l = _mm_insert_epi32(l, (int)lb_u32(p + 2 * stride), 2), h = _mm_insert_epi32(h, (int)lb_u32(p + 6 * stride), 2);
    l = _mm_insert_epi32(l, (int)lb_u32(p + 3 * stride), 3), h = _mm_insert_epi32(h, (int)lb_u32(p + 7 * stride), 3);
    *lo = l, *hi = h;
}

/* The two float16 at the head of each of 8 weight rows' blocks (p + i * stride), widened: *d gets
 * the first of each row (its scale), *m the second (q4_1's and q5_1's minimum). */
INLINE void scales_f16x8(const uint8_t *p, int64_t stride, __m256 *d, __m256 *m) {
    __m128i lo, hi;
    gather_u32(p, stride, &lo, &hi);
    const __m128i low16 = _mm_set1_epi32(0xffff);
    *d = _mm256_cvtph_ps(_mm_packus_epi32(_mm_and_si128(lo, low16), _mm_and_si128(hi, low16)));
    *m = _mm256_cvtph_ps(_mm_packus_epi32(_mm_srli_epi32(lo, 16), _mm_srli_epi32(hi, 16)));
}

#endif
