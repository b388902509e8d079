/* Lane i of 8 int32 sums met in one vector: for 256-bit code of either x86 path (avx2.h's, and
 * qk_avx512.c's). The includer defines INLINE with its target. */
#ifndef LB_SUM8_H
#define LB_SUM8_H

/* Lane i: the sum of v[i]'s 8 lanes, exact (a block's sums are far from int32's limits). */
INLINE __m256i sum8_epi32(const __m256i v[8]) {
    const __m256i lo = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i hi = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    /* lo: v0..v3's sums over their low 128 bits, then over their high; hi: v4..v7's likewise */
    return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
}

#endif
