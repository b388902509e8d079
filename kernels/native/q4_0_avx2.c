/* Q4_0 in tiles of 16 rows (LB_Q4_0_T16, q4_0_tiles.c) on the AVX2 path: a tile's block as two halves
 * of 8 lanes, lane c of half h for weight row 8 h + c. Quant bytes 4k .. 4k + 3 of the 8 rows are one
 * plain 32-byte load (the tile keeps them side by side), their d one 16-byte load and conversion, where
 * GGUF's order takes q32_wtile 8 loads, 8 unpacks and a gather of 8 scales a block.
 * Per row of x a block's exact integer sum: 4 loads of the 8 rows' quant bytes, each split into low
 * nibbles (quad k: elements 4k .. 4k + 3, at most 15) and high (quad k + 4); each quad of x, broadcast,
 * meets them in vpmaddubsw (unsigned quants by signed x), pairs summed in 16 bits (all 8 quads' at most
 * 8 * 2 * 15 * 128 = 30720: no overflow), widened once, started from -8 * sum(q_x) (lb_act's sq8_t),
 * which takes away what the unsigned form adds. Then Q4_0's float step (qk.h's lb_q4_0_step):
 * acc + p * (d_w * d_x) a block, fused. So Q4_0 has the same bits here as in plain C and on AVX-512,
 * whatever tile a row falls in. The quads go outermost and the rows of x inside them, each row's sum
 * in a 16-bit register of its own: the 8 rows' sums and the tile's two quant vectors fit AVX2's 16
 * registers, where all 8 quads kept for every row (q32_wtile's order) spill.
 * Against q32_wtile on GGUF's order (bench/qmatmul_ab.py --tiles --isa avx2 --layers 8 --threads 2 on
 * 8B's layers, streamed from memory; 2026-11-28, the machine in a slow phase): 1.09x as fast for 1
 * row of x, 1.29x for 2, 1.42x for 4 and 1.35x for 8. Per 256 products (8 weight rows, one row of x,
 * a block) 8 vpmaddubsw, 7 vpaddw, then 5 operations to the float sum (unfused, 6: 9.4-9.6 cycles
 * in-core against 9.15-9.4 fused, and 1.02-1.06x on 8B's layers at 8 rows): about 9 cycles, where the
 * vector ports could do it in 7.2. */
#if defined(__x86_64__)
#include <immintrin.h>

#include "avx2.h"
#include "qk.h"

/* v stays in a register here: GCC otherwise hoists every vpmaddubsw of a block above the sums (64 at
 * 8 rows) and spills them all. */
#define KEEP(v) __asm__("" : "+x"(v))

/* Blocks ahead that a tile prefetches its one stream, into L2 (18 KB): on 8B's layers streamed from
 * memory (bench/qmatmul_ab.py --tiled --isa avx2 --layers 8) 1 row of x ran 1.08x as fast as with
 * q4_0_avx512.c's 9 KB into L1, at 1 and 2 threads; 8 rows the same (1.00-1.01x); 32 or 128 blocks
 * into L1, or 128 into L3, the same or slower. */
#define AHEAD_T 64

/* Block b of the tile's half h (p: the tile's block b) into acc[r] for R (<= 8) rows of x from t0. */
INLINE void half_block(int R, const uint8_t *p, int h, const lb_act *a, int64_t t0, int64_t b, __m256 acc[8]) {
    const int64_t nb = a->nb, nbp = a->nbp, ts = a->T + 8;
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
    /* x's block b: one row's quants (a decode step), or 8 rows' interleaved (lb_act's qv: quad k of
     * row r at 32 k + 4 r) */
    const uint8_t *xb = R == 1 ? (const uint8_t *)(a->q + (t0 * nbp + b) * QK) : (const uint8_t *)(a->qv + (t0 / 8 * nb + b) * 8 * QK);
    /* each half loads its own broadcasts (an address GCC cannot see is the other half's): it kept the
     * first half's 64 for the second in memory, one store each, and ran 1.12x slower at 8 rows */
    __asm__ volatile("" : "+r"(xb));
#define XQ(k, r) _mm256_set1_epi32((int)lb_u32(xb + (R == 1 ? 4 * (k) : 32 * (k) + 4 * (r))))
    __m256i s16[8];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m256i d = _mm256_loadu_si256((const __m256i *)(p + 32 + 64 * k + 32 * h));
        const __m256i lo = _mm256_and_si256(d, m4), hi = _mm256_and_si256(_mm256_srli_epi16(d, 4), m4);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(lo, XQ(k, r)), _mm256_maddubs_epi16(hi, XQ(k + 4, r)));
            s16[r] = k ? _mm256_add_epi16(s16[r], s) : s;
            KEEP(s16[r]);
        }
    }
#undef XQ
    const float *dx = a->d_t + b * ts + t0;
    const int32_t *c8 = a->sq8_t + b * ts + t0;
    /* likewise for the rows' d_x and sums: GCC kept the first half's 16 broadcasts of them for the
     * second on the stack, a store each */
    __asm__ volatile("" : "+r"(dx), "+r"(c8));
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(s16[r], ones), _mm256_set1_epi32(c8[r]));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(dx[r])), acc[r]);
    }
}

/* R (<= 8) rows of x from t0 against a tile (16 weight rows), into out0 (rows N apart): both halves of
 * each block in turn, so the tile is read once, in order (half by half, the second from L2, ran 0.76x
 * as fast at 2 rows of x and 0.81x at 4; the same at 8). The 16 accumulators of 8 rows live in memory
 * (loaded and stored once a block and row: load and store ports, not the vector ALUs). */
INLINE void tile16t(int R, const lb_act *a, int64_t t0, const uint8_t *tile, float *out0, int64_t N) {
    __m256 acc0[8], acc1[8];
    for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < a->nb; b++) {
        const uint8_t *p = tile + b * 288;
        const char *ahead = (const char *)p + AHEAD_T * 288;
        for (int l = 0; l < 5; l++) _mm_prefetch(ahead + 64 * l, _MM_HINT_T1);
        /* GCC 12 unrolls this loop all the same, but schedules it otherwise than two calls or the
         * loop without the pragma: 9.3 cycles per 256 products in-core at 8 rows against 9.5 and 9.7,
         * 1.02-1.03x on 8B's layers streamed from memory (bench/qmatmul_ab.py --tiled --isa avx2
         * --rows 8, 3 runs). A compiler's choice, so measure again after a change here. */
#pragma GCC unroll 1
        for (int h = 0; h < 2; h++) half_block(R, p, h, a, t0, b, h ? acc1 : acc0);
    }
    for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(out0 + r * N, acc0[r]);
        _mm256_storeu_ps(out0 + r * N + 8, acc1[r]);
    }
}

/* The rows after the last whole tile (GGUF's order): qk_generic.c's Q4_0 steps one output at a time. */
static void tail(const lb_act *a, const uint8_t *w, int64_t n0, int64_t N, float *out) {
    const int64_t nb = a->nb;
    for (int64_t n = n0; n < N; n++)
        for (int64_t t = 0; t < a->T; t++) {
            const int8_t *xq = a->q + t * a->nbp * QK;
            const float *dx = a->d + t * a->nbp;
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = w + (n * nb + b) * 18;
                int32_t p = 0;
                for (int j = 0; j < QK / 2; j++)
                    p += ((blk[2 + j] & 0x0f) - 8) * xq[b * QK + j] + ((blk[2 + j] >> 4) - 8) * xq[b * QK + j + 16];
                acc = lb_q4_0_step(acc, p, lb_f16(lb_u16(blk)), dx[b]);
            }
            out[t * N + n] = acc;
        }
}

typedef void (*rows_fn)(const lb_act *, int64_t, const uint8_t *, float *, int64_t);
#define ROWS(R) static TGT void rows_##R(const lb_act *a, int64_t t, const uint8_t *tile, float *o, int64_t N) { \
        tile16t(R, a, t, tile, o, N); }
ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7) ROWS(8)
#undef ROWS
static const rows_fn ROWS_T[9] = {0, rows_1, rows_2, rows_3, rows_4, rows_5, rows_6, rows_7, rows_8};

/* out (T, N): a tile at a time (in L2) against every 8 rows of x, so the weights stream from memory
 * once; a single row (a decode step) streams them all at once (q4_0_avx512.c's order). */
TGT void lb_q4_0t_matmul_avx2(const lb_act *a, const uint8_t *w, int64_t N, float *out) {
    const int64_t row_bytes = a->nb * 18, full = N / 16 * 16, step = a->T == 1 ? full : 16;
    for (int64_t n = 0; n < full; n += step) {
        const int64_t nn = full - n < step ? full - n : step;
        for (int64_t t = 0; t < a->T; t += 8) {
            const int R = a->T - t < 8 ? (int)(a->T - t) : 8;
            for (int64_t i = 0; i < nn; i += 16) ROWS_T[R](a, t, w + (n + i) * row_bytes, out + t * N + n + i, N);
        }
    }
    tail(a, w, full, N, out);
}
#endif
