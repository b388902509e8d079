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

/* Bytes ahead that a tile of 8 weight rows prefetches each of them (170 Q4_0 blocks: 24 KB a tile). */
#define ROW_AHEAD 3060

/* The 8 weight rows of a tile (p: row 0's block b of nb, bb bytes a block, rows row_bytes apart) are 8
 * streams a block a step, each too short for the hardware prefetcher: each row is prefetched
 * ROW_AHEAD bytes on, and within that of its end 7 rows further on, the next tile's same row (the
 * tiles run on through the weights 8 rows at a time; a row shorter than that gets a later tile's).
 * Half the rows a step where two blocks fit in a line, else all 8, so no line is missed. A linear
 * prefetch of the tile's bytes PREFETCH ahead reached rows 4..7 (K = 4096) or 2..7 (K = 14336) of a
 * tile only after they had been read. Rows of a few lines (SHORT_ROW: the 135M model's), whose 8 make
 * one short stretch, keep that linear prefetch, which they read as fast or faster. q32_wtile (Q4_0)
 * keeps its own copy of the long-row case, no length test in its loop: through this helper its AVX2
 * decode A/B read 0.97-0.99x, with its copy 0.98-1.02x (noise about 3%). */
#define SHORT_ROW 1024
INLINE void prefetch_rows8(const uint8_t *p, int64_t b, int64_t nb, int64_t bb, int64_t row_bytes) {
    if (row_bytes < SHORT_ROW) {        /* the tile's bytes, PREFETCH ahead of its pace (8 blocks a block) */
        const char *ahead = (const char *)p + 7 * b * bb + PREFETCH;
        for (int64_t l = 0; l < 8 * bb; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
        return;
    }
    const int64_t blocks = ROW_AHEAD / bb;
    const char *ahead = (const char *)p + blocks * bb + (b + blocks < nb ? 0 : 7 * row_bytes);
    if (2 * bb <= 64) {
        ahead += (b & 1) * 4 * row_bytes;
        for (int c = 0; c < 4; c++) _mm_prefetch(ahead + c * row_bytes, _MM_HINT_T0);
    } else {
        for (int c = 0; c < 8; c++) _mm_prefetch(ahead + c * row_bytes, _MM_HINT_T0);
    }
}

#include "scales8.h"

#endif
#endif
