/* What both AVX2 kernel files (qmatmul_avx2.c, qk_avx2.c) use: the target attributes, the weight
 * prefetch distance, horizontal sums and the gathered float16 scales of 8 weight rows (scales8.h). */
#ifndef LB_AVX2_H
#define LB_AVX2_H
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

#include "qmatmul_impl.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) TGT
#ifndef PREFETCH
#define PREFETCH 8192   /* bytes ahead in the weight stream */
#endif

/* The 8 lanes summed as a tree: 4 pairs, 2, 1. */
INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

#include "sum8.h"

#include "scales8.h"

#endif
#endif
