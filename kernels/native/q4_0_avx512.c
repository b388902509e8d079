/* Q4_0 on the AVX-512 VNNI path: 16 weight rows a tile, one in each 32-bit lane. A block's quants of
 * the 16 rows are transposed (16-byte loads, then 32- and 64-bit unpacks, as q32_tiles.h's q32_wtile
 * does for 8), so lane c of wq[k] holds quants 4k .. 4k + 3 of row c, unsigned; each quad of a row
 * of x, broadcast, meets all 16 rows in one vpdpbusd, and 8 of them give each lane its block's exact
 * sum, started from -8 * sum(q_x) (lb_act's sq8_t), which takes away what the unsigned form adds. The
 * float steps are then q32_tiles.h's (qk.h's lb_q4_0_step): acc + p * (d_w * d_x) a block, fused, so
 * Q4_0 gives the same bits on this path as on AVX2 and in plain C, whatever tile a row falls in.
 * Against the per-lane tiles this path ran before (4 blocks a register, 2 weight rows against 8 rows
 * of x, a float conversion, product and FMA for every 2 vpdpbusd) a block costs 8 vpdpbusd and 4 float
 * operations per row of x, and its unpacking is shared by up to 8 rows of x. LB_Q4_0_T16 (q4_0_tiles.c)
 * keeps each block of 16 rows as these lanes take it: its tiles (tile16t) load d and the quants in
 * five plain loads, one stream to prefetch where GGUF's order takes a gather, 16 loads and 8 unpacks
 * from 16 streams; on an 8B model's layers 1.16x as fast for 1 row of x and 1.30x for 8. */
#if defined(__x86_64__)

#include "qk.h"

#include "avx512.h"
#ifdef LB_SIMDE_AVX512
/* the test build checks bits only: one tile for every shape, its loops as written (GCC took minutes
 * over 16 fully unrolled tiles of emulated intrinsics) */
#define TILE static TGT __attribute__((noinline))
#define UNROLL(n)
#else
#define TILE INLINE
#define UNROLL(n) _Pragma(#n)
#endif

/* Blocks ahead that a tile prefetches each weight row (q32_tiles.h's Q32_AHEAD: 3 KB of a row). */
#define AHEAD 170
/* Blocks ahead that a tile of LB_Q4_0_T16 prefetches its one stream: 9 KB. On 8B's layers (against
 * GGUF's order, bench/qmatmul_ab.py --tiles: none, 1.1, 4.5, 9, 18, 36 and 72 KB ahead read 1 row of
 * x at 0.81, 0.99, 1.09, 1.13, 1.11-1.12, 1.12 and 1.07x its speed; 8 rows at 1.03, 1.25, 1.23, 1.30,
 * 1.29-1.31, 1.31 and 1.30x), then tiled against tiled (--tiled, 8 layers streamed from memory, 1 and
 * 2 threads): 9 KB read 1 row 1.02-1.05x and 8 rows 1.02-1.03x as fast as 18 KB, 4.5 KB as 9, 36 KB
 * 1 row at 0.92x. */
#define AHEAD_T 32

/* 16-bit word 2i of a vector, for i < 16: each 32-bit lane's low half */
static const int16_t LOW16[32] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                                  0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};

/* Block b of 16 weight rows (d4[k]: lane c holds row c's quant bytes 4k .. 4k + 3; dw: their d) into
 * acc[r] for R (<= 8) rows of x from t0: each quad of a row of x, broadcast, meets all 16 rows in one
 * vpdpbusd, the block's exact sum started from -8 * sum(q_x), then acc + p * (d_w * d_x), fused. */
INLINE void block_rows(int R, const __m512i d4[4], __m512 dw, const lb_act *a, int64_t t0, int64_t b, __m512 acc[8]) {
    const int64_t nb = a->nb, nbp = a->nbp, ts = a->T + 8;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i wq[8];                  /* quad k: elements 4k .. 4k + 3 of each lane's row */
UNROLL(GCC unroll 4)
    for (int k = 0; k < 4; k++) {
        wq[k] = _mm512_and_si512(d4[k], m4);
        wq[4 + k] = _mm512_and_si512(_mm512_srli_epi16(d4[k], 4), m4);
    }
    /* x's block b: one row's quants (a decode step), or 8 rows' interleaved (lb_act's qv: quad k of
     * row r at 32 k + 4 r), and the rows' d and -8 sum(q) side by side (d_t, sq8_t) */
    const uint8_t *xb = R == 1 ? (const uint8_t *)(a->q + (t0 * nbp + b) * QK) : (const uint8_t *)(a->qv + (t0 / 8 * nb + b) * 8 * QK);
    const float *dx = a->d_t + b * ts + t0;
    const int32_t *c8 = a->sq8_t + b * ts + t0;
UNROLL(GCC unroll 8)
    for (int r = 0; r < R; r++) {
        /* two chains of 4: each vpdpbusd waits for the one before it in its chain */
        __m512i s = _mm512_set1_epi32(c8[r]), s2 = _mm512_setzero_si512();
UNROLL(GCC unroll 8)
        for (int k = 0; k < 8; k++) {
            const __m512i xk = _mm512_set1_epi32((int)lb_u32(xb + (R == 1 ? 4 * k : 32 * k + 4 * r)));
            if (k & 1) s2 = _mm512_dpbusd_epi32(s2, wq[k], xk);
            else s = _mm512_dpbusd_epi32(s, wq[k], xk);
        }
        s = _mm512_add_epi32(s, s2);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(dx[r])), acc[r]);
    }
}

/* acc[r] (16 lanes) into R rows of out from out0 (rows N apart): the first W lanes. */
INLINE void store_rows(int R, int W, const __m512 acc[8], float *out0, int64_t N) {
UNROLL(GCC unroll 8)
    for (int r = 0; r < R; r++) {
        if (W == 16) {
            _mm512_storeu_ps(out0 + r * N, acc[r]);
            continue;
        }
        float lane[16];
        _mm512_storeu_ps(lane, acc[r]);
        for (int c = 0; c < W; c++) out0[r * N + c] = lane[c];
    }
}

/* R (<= 8) rows of x from t0 against W (<= 16) weight rows from w0, lane c for weight row c (rows past
 * W repeat row W - 1 and are not stored). */
TILE void tile16(int R, int W, const lb_act *a, int64_t t0, const uint8_t *w0, int64_t row_bytes, float *out0, int64_t N) {
    const int64_t nb = a->nb;
    /* row c at p + off(c): a full tile's 16 offsets from four multiples of row_bytes and two bases,
     * as x86 addressing scales them (GCC kept 16 offsets in vector registers, moved back one by one) */
    const int64_t rb = row_bytes, rb3 = 3 * rb, rb5 = 5 * rb, rb7 = 7 * rb;
    int64_t clamp[16];
    for (int c = 0; c < 16; c++) clamp[c] = (c < W ? c : W - 1) * row_bytes;
#define OFF(c) (W < 16 ? clamp[c] : (c) >= 8 ? 8 * rb + OFF8((c) - 8) : OFF8(c))
#define OFF8(c) ((c) == 0 ? 0 : (c) == 1 ? rb : (c) == 2 ? 2 * rb : (c) == 3 ? rb3 : (c) == 4 ? 4 * rb : (c) == 5 ? rb5 \
                 : (c) == 6 ? 2 * rb3 : rb7)
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i gidx = _mm512_mullo_epi32(_mm512_min_epi32(iota, _mm512_set1_epi32(W - 1)), _mm512_set1_epi32((int)row_bytes));
    const __m512i low16 = _mm512_loadu_si512(LOW16);
    __m512 acc[8];
UNROLL(GCC unroll 8)
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w0 + b * 18;
        /* 16 streams a block a step: each row AHEAD blocks on, and near its end 15 rows further on,
         * the next tile's same row (see q32_wtile); half the rows a step, so each row every 36 bytes. */
        const char *ahead = (const char *)p + AHEAD * 18 + (b + AHEAD < nb ? 0 : 15 * row_bytes) + (b & 1) * 8 * row_bytes;
UNROLL(GCC unroll 8)
        for (int c = 0; c < 8; c++) _mm_prefetch(ahead + OFF8(c), _MM_HINT_T0);
        /* the 16 scales in one gather (each lane's 32-bit word at its row's block: d, then 2 quants),
         * their low halves packed: 16 scalar loads became 16 vpinsrw and their joins */
        const __m512i g = _mm512_i32gather_epi32(gidx, (const void *)p, 1);
        const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(low16, g)));
        __m512i y[4];                   /* y[i]: the quants of rows i, i + 4, i + 8, i + 12 in its 128-bit lanes */
UNROLL(GCC unroll 4)
        for (int i = 0; i < 4; i++) {
            __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + OFF(i) + 2)));
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + OFF(i + 4) + 2)), 1);
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + OFF(i + 8) + 2)), 2);
            y[i] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + OFF(i + 12) + 2)), 3);
        }
#undef OFF
#undef OFF8
        const __m512i lo01 = _mm512_unpacklo_epi32(y[0], y[1]), hi01 = _mm512_unpackhi_epi32(y[0], y[1]);
        const __m512i lo23 = _mm512_unpacklo_epi32(y[2], y[3]), hi23 = _mm512_unpackhi_epi32(y[2], y[3]);
        const __m512i d4[4] = {_mm512_unpacklo_epi64(lo01, lo23), _mm512_unpackhi_epi64(lo01, lo23),
                               _mm512_unpacklo_epi64(hi01, hi23), _mm512_unpackhi_epi64(hi01, hi23)};
        block_rows(R, d4, dw, a, t0, b, acc);
    }
    store_rows(R, W, acc, out0, N);
}

/* The last W (< 16) weight rows of a matrix: a tile whose lanes past W repeat row W - 1. */
static TGT __attribute__((noinline)) void tail16(int R, int W, const lb_act *a, int64_t t0, const uint8_t *w0, int64_t row_bytes,
                                                 float *out0, int64_t N) {
    switch (R) {
#define TAIL(RR) case RR: tile16(RR, W, a, t0, w0, row_bytes, out0, N); break;
    TAIL(1) TAIL(2) TAIL(3) TAIL(4) TAIL(5) TAIL(6) TAIL(7) TAIL(8)
#undef TAIL
    }
}

/* R (<= 8) rows of x from t0 against a tile of LB_Q4_0_T16 (16 weight rows, q4_0_tiles.c): a block's d
 * and quants in five plain loads, which tile16 gathers and transposes from 16 rows. */
TILE void tile16t(int R, const lb_act *a, int64_t t0, const uint8_t *tile, float *out0, int64_t N) {
    const int64_t nb = a->nb;
    __m512 acc[8];
UNROLL(GCC unroll 8)
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = tile + b * 288;
        const char *ahead = (const char *)p + AHEAD_T * 288;      /* a block AHEAD_T on (its last line, where it
                                                                    * spans six, with the block after it) */
UNROLL(GCC unroll 5)
        for (int l = 0; l < 5; l++) _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        const __m512i d4[4] = {_mm512_loadu_si512(p + 32), _mm512_loadu_si512(p + 96), _mm512_loadu_si512(p + 160),
                               _mm512_loadu_si512(p + 224)};
        block_rows(R, d4, dw, a, t0, b, acc);
    }
    store_rows(R, 16, acc, out0, N);
}

/* nn weight rows from w against R rows of x from t0, into out (rows N apart): 16 at a time, then the rest
 * in one narrower tile; `tiled`: w is LB_Q4_0_T16 (its rest in GGUF's order, as tail16 reads it). */
INLINE void rows16(int R, int tiled, const lb_act *a, int64_t t0, const uint8_t *w, int64_t nn, int64_t N, float *out) {
    const int64_t row_bytes = a->nb * 18;
    int64_t n = 0;
    for (; n + 16 <= nn; n += 16) {
        if (tiled) tile16t(R, a, t0, w + n * row_bytes, out + n, N);
        else tile16(R, 16, a, t0, w + n * row_bytes, row_bytes, out + n, N);
    }
    if (n < nn) tail16(R, (int)(nn - n), a, t0, w + n * row_bytes, row_bytes, out + n, N);
}

typedef void (*rows_fn)(const lb_act *, int64_t, const uint8_t *, int64_t, int64_t, float *);
#define ROWS16(R) static TGT void rows16_##R(const lb_act *a, int64_t t, const uint8_t *w, int64_t nn, int64_t N, \
                                             float *o) { rows16(R, 0, a, t, w, nn, N, o); } \
                  static TGT void rows16t_##R(const lb_act *a, int64_t t, const uint8_t *w, int64_t nn, int64_t N, \
                                              float *o) { rows16(R, 1, a, t, w, nn, N, o); }
ROWS16(1)
ROWS16(2)
ROWS16(3)
ROWS16(4)
ROWS16(5)
ROWS16(6)
ROWS16(7)
ROWS16(8)
static const rows_fn ROWS[9] = {0, rows16_1, rows16_2, rows16_3, rows16_4, rows16_5, rows16_6, rows16_7, rows16_8};
static const rows_fn ROWS_T[9] = {0, rows16t_1, rows16t_2, rows16t_3, rows16t_4, rows16t_5, rows16t_6, rows16t_7, rows16t_8};

/* out (T, N): 16 weight rows at a time (in L2) against every 8 rows of x, so the weights stream from
 * memory once; a single row (a decode step) streams them all at once (q32_matmul's order). */
INLINE void matmul(const rows_fn *rows, const lb_act *a, const uint8_t *w, int64_t N, float *out) {
    const int64_t row_bytes = a->nb * 18, step = a->T == 1 ? N : 16;
    for (int64_t n = 0; n < N; n += step) {
        const int64_t nn = N - n < step ? N - n : step;
        for (int64_t t = 0; t < a->T; t += 8) {
            const int R = a->T - t < 8 ? (int)(a->T - t) : 8;
            rows[R](a, t, w + n * row_bytes, nn, N, out + t * N + n);
        }
    }
}

TGT void lb_q4_0_matmul_avx512(const lb_act *a, const uint8_t *w, int64_t N, float *out) { matmul(ROWS, a, w, N, out); }

TGT void lb_q4_0t_matmul_avx512(const lb_act *a, const uint8_t *w, int64_t N, float *out) { matmul(ROWS_T, a, w, N, out); }
#endif
