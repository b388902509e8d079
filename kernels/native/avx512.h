/* What a file of the AVX-512 VNNI path starts with: its target attribute (TGT) and INLINE, or, in a
 * test build (-DLB_SIMDE_AVX512, tests/kernels/test_avx512_emulated.py), the same code on SIMDe's emulated
 * intrinsics. avx2.h is the AVX2 path's. */
#ifndef LB_AVX512_H
#define LB_AVX512_H

#ifdef LB_SIMDE_AVX512
#include "simde_avx512.h"      /* a test build: the same code on emulated intrinsics */
#define TGT
#else
#include <immintrin.h>
#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#endif
#define INLINE static inline __attribute__((always_inline)) TGT

#endif
