/* Internals of the K-quant (Q4_K, Q5_K, Q6_K) and 5-bit (Q5_0, Q5_1) kernels: block sizes, the
 * activations rounded to Q8_K, and the code paths. qmatmul.c rounds, multiplies and splits these
 * kinds over threads through lb_qk_round / lb_qk_multiply / lb_qk_free. */
#ifndef LB_QK_H
#define LB_QK_H

#include <math.h>
#include <stdint.h>

#include "qmatmul_impl.h"

#define QKK 256               /* weights per K-quant super-block */

static inline int lb_is_qk(int kind) { return kind == LB_Q4_K || kind == LB_Q5_K || kind == LB_Q6_K; }
static inline int lb_is_q5(int kind) { return kind == LB_Q4_0 || kind == LB_Q5_0 || kind == LB_Q5_1; }   /* 32 a block, exact sums */

/* Q4_0's float step a block, on every path: acc + p * (d_w * d_x) with one rounding after the sum (a
 * fused multiply-add, as ggml's vector code takes it), the scale product d_w * d_x rounded first; p is
 * the block's exact integer sum. Fused, a vector path saves an operation per block and row of x, and the
 * AVX2 kernel is bound by its operations (q4_0_avx2.c). Q5_0 and Q5_1 keep the unfused acc + p * (d_w *
 * d_x). Where the compiler has no FMA instruction (plain C), fmaf is libm's, exact all the same. */
static inline float lb_q4_0_step(float acc, int32_t p, float dw, float dx) { return fmaf((float)p, dw * dx, acc); }

/* Bytes of one block (elements: QKK for the K kinds, QK for Q5_0/Q5_1); 0 for any other kind. */
static inline int lb_qk_block_bytes(int kind) {
    switch (kind) {
    case LB_Q4_0: return 18;      /* d, qs[16] */
    case LB_Q4_0_T16: return 18;  /* Q4_0's bytes, 16 rows a tile (q4_0_tiles.c) */
    case LB_Q5_0: return 22;      /* d, qh[4], qs[16] */
    case LB_Q5_1: return 24;      /* d, m, qh[4], qs[16] */
    case LB_Q4_K: return 144;     /* d, dmin, scales[12], qs[128] */
    case LB_Q5_K: return 176;     /* d, dmin, scales[12], qh[32], qs[128] */
    case LB_Q6_K: return 210;     /* ql[128], qh[64], scales[16] (int8), d */
    default: return 0;
    }
}

/* x rounded as llama.cpp's quantize_row_q8_K rounds it: per block of 256, max = the element of
 * largest |x| (the first such), q = min(127, rint(x * (-127 / max))), d = 1 / (-127 / max) as float
 * (not float16), and bsums = the sums of each 16 quants. q is in the order of x. */
typedef struct {
    int64_t T, K, nb;
    int8_t *q;                /* T rows of K */
    float *d;                 /* T rows of nb */
    int16_t *bsums;           /* T rows of nb * 16 */
    void *mem;
} lb_act_k;

/* One block of 256 x into q[256], d and bsums[16] (qk.c's round_block_k is the definition). */
typedef void (*lb_k_rounder)(const float *x, int8_t *q, float *d, int16_t *bsums);
#if defined(__x86_64__)
void lb_round_block_k_avx2(const float *x, int8_t *q, float *d, int16_t *bsums);
#endif

static inline void lb_zero_block_k(int8_t *q, int16_t *bsums) {
    memset(q, 0, QKK);
    memset(bsums, 0, 16 * sizeof(int16_t));
}

int lb_act_k_init(lb_act_k *a, const float *x, int64_t T, int64_t K);   /* LB_OK, LB_ENOMEM */
void lb_act_k_free(lb_act_k *a);

/* The batch tiles' layout of x's quants (the vector paths' many-row tiles): rows in groups of 8, and
 * a block's 64 quads (4 quants each) in 32 pairs, pair p = 8i + j (i < 4, j < 8) the quads 16i + j
 * and 16i + 8 + j: elements 64i + 4j .. + 3 (32-element sub-block 2i, 16-group 4i + j / 4) and 32
 * later (sub-block 2i + 1, 16-group 4i + 2 + j / 4). Group g's pair p of block b is the 64 bytes at
 * ((g * nb + b) * 32 + p) * 64: row r's two quads in bytes 8r .. 8r + 7. */
#define LB_PAIR_BYTES 64
void lb_qk_pairs(const lb_act_k *a, int64_t groups, int8_t *xv);

/* Where a path's batch tile keeps each row of a group of 8 in its vectors of sums: d_x lane L is
 * row dx_row[L]'s, and 32-bit lane L of bsum vector v (16 lanes, 16-groups 4v .. 4v + 3) meets row
 * bs_row[L]'s bsums of 16-groups 4v + 2 bs_e[L] and the one after, as two int16. */
typedef struct {
    int8_t dx_row[16], bs_row[16], bs_e[16];
} lb_lanes;

/* x's side of a batch tile for groups of 8 rows: the pairs (xv, lb_qk_pairs), and per group g and
 * block b d_x by lane (dx + (g * nb + b) * 16) and the bsum vectors (bs + ((g * nb + b) * 4 + v) * 16). */
typedef struct {
    int8_t *xv;
    float *dx;
    int32_t *bs;
    int64_t nb;
    void *mem;
} lb_batch_x;

int lb_batch_x_init(lb_batch_x *x, const lb_act_k *a, int64_t groups, const lb_lanes *map);   /* LB_OK, LB_ENOMEM */
void lb_batch_x_free(lb_batch_x *x);

/* x rounded for one of these kinds: Q8_K (ak) for the K kinds, Q8_0 / Q8_1 (a5) for Q5_0 / Q5_1. */
typedef union {
    lb_act_k ak;
    lb_act a5;
} lb_qk_act;

/* The three steps lb_qmatmul runs (and splits over threads) for these kinds, as for its own: round x
 * (LB_OK, LB_ENOMEM), multiply rows of weights by it on the chosen code path, free it. */
int lb_qk_round(int kind, const float *x, int64_t T, int64_t K, lb_qk_act *a);
void lb_qk_multiply(int kind, const lb_qk_act *a, const uint8_t *w, int64_t N, float *out);
void lb_qk_free(int kind, lb_qk_act *a);

/* The scales of a Q4_K/Q5_K block's eight sub-blocks of 32: 6 bits each, packed in 12 bytes. */
static inline void lb_k4_scales(const uint8_t *s, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0f) | ((s[j] >> 6) << 4);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
}

/* lb_k4_scales as four 32-bit words, the bytes in order: sc[0..3], sc[4..7], mn[0..3], mn[4..7]. */
static inline void lb_k4_scale_words(const uint8_t *s, uint32_t w[4]) {
    const uint32_t a0 = lb_u32(s), a1 = lb_u32(s + 4), a2 = lb_u32(s + 8), low6 = 0x3f3f3f3fu, top2 = 0x03030303u;
    w[0] = a0 & low6;
    w[1] = (a2 & 0x0f0f0f0fu) | (((a0 >> 6) & top2) << 4);
    w[2] = a1 & low6;
    w[3] = ((a2 >> 4) & 0x0f0f0f0fu) | (((a1 >> 6) & top2) << 4);
}

/* out (T, N) for a weight of kind lb_is_qk/lb_is_q5 (K checked by the caller); a: the kind's rounding. */
void lb_qk_matmul_generic(int kind, const lb_act_k *ak, const lb_act *a5, const uint8_t *w, int64_t N, float *out);
#if defined(__x86_64__)
void lb_qk_matmul_avx2(int kind, const lb_act_k *ak, const lb_act *a5, const uint8_t *w, int64_t N, float *out);
void lb_qk_matmul_avx512(int kind, const lb_act_k *ak, const uint8_t *w, int64_t N, float *out);   /* K kinds */
void lb_q4_0_matmul_avx512(const lb_act *a, const uint8_t *w, int64_t N, float *out);              /* q4_0_avx512.c */
void lb_q4_0t_matmul_avx512(const lb_act *a, const uint8_t *w, int64_t N, float *out);             /* LB_Q4_0_T16 */
void lb_q4_0t_matmul_avx2(const lb_act *a, const uint8_t *w, int64_t N, float *out);               /* q4_0_avx2.c */
#endif
void lb_q4_0t_matmul_generic(const lb_act *a, const uint8_t *w, int64_t N, float *out);             /* q4_0_tiles.c */

#endif
