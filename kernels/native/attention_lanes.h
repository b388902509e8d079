/* Blocks of 16 keys for the paged attention (attention.c): scores, exp, maxima and sums in lanes.
 *
 * Every function here fixes the float operations of each result by its inputs alone: a score's
 * products and its tree of adds, a row's sum over its keys, exp's polynomial. So a query row gets
 * the same bits however many rows share a call. Built with -ffp-contract=off: nothing is fused
 * into an FMA, so the vector code and the scalar code for the same lanes round alike.
 *
 * Keys are float16 bits (the KV cache's), widened to float as they are loaded: KVF(p) one, KV8(p)
 * eight, and KV16(p) sixteen where the includer's path defines it (attention_avx512.c). Widening is
 * exact, so a score is what it would be over float32 keys of the same values.
 */
#ifndef LB_ATTENTION_LANES_H
#define LB_ATTENTION_LANES_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define LANES 16

/* Widening a float16 of the cache, where the includer's path has no instruction for it: lb_f16, one
 * at a time (exact for every half). */
#ifndef KVF
#include "qmatmul_impl.h"
#define KVF(p) lb_f16(*(p))
#define KV8(p) ({ const uint16_t *kp_ = (p);                                                       \
                  (v8){lb_f16(kp_[0]), lb_f16(kp_[1]), lb_f16(kp_[2]), lb_f16(kp_[3]),             \
                       lb_f16(kp_[4]), lb_f16(kp_[5]), lb_f16(kp_[6]), lb_f16(kp_[7])}; })
#endif

/* Helpers are forced inline: one left out of line is compiled for the baseline ISA, not for the
 * target_clones variant calling it (GCC did that to weighted_sum: 2.5x slower). */
#if defined(__GNUC__)
#define HOT static inline __attribute__((always_inline))
#else
#define HOT static inline
#endif

/* GCC 12 brought __builtin_shufflevector; LB_LANES_SCALAR forces the plain C lanes (same bits). */
#if defined(__GNUC__) && (__GNUC__ >= 12 || defined(__clang__)) && !defined(LB_LANES_SCALAR)
#define LB_LANES_VECTOR 1
/* The vector helpers are always inlined, so no v16 crosses a call: GCC's note that passing one
 * would differ between the baseline and AVX-512 ABIs does not apply. */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

/* exp(x) for x <= 0 as Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, then a polynomial times 2^n
 * (within 0.98 ulp of exp over [-87.3, 0], and glibc's expf to the bit for 99.2% of the floats
 * there). Below ln(FLT_MIN) it is 0: no weight that small changes a softmax, and subnormal
 * products would stall the value sums. */
#define EXP_LO (-87.33654f)
#define EXP_LOG2E 1.44269504088896341f
#define EXP_ROUND 12582912.0f                     /* 1.5 * 2^23: adding it rounds to an integer */
#define EXP_C1 0.693359375f                       /* ln2 in two parts: n * C1 is exact */
#define EXP_C2 (-2.12194440e-4f)
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f

/* One lane of exp8 below, for compilers without vector types: the same operations. */
HOT float exp_lane(float x)
{
    float t = x * EXP_LOG2E + EXP_ROUND, n = t - EXP_ROUND;
    float r = (x - n * EXP_C1) - n * EXP_C2, r2 = r * r;
    float y = ((((EXP_P0 * r + EXP_P1) * r + EXP_P2) * r + EXP_P3) * r + EXP_P4) * r + EXP_P5;
    y = (y * r2 + r) + 1.0f;
    uint32_t e;
    memcpy(&e, &t, 4);
    e = (e - 0x4B400000u + 127u) << 23;           /* t's low bits hold n: 2^n as float bits */
    float two_n;
    memcpy(&two_n, &e, 4);
    return x < EXP_LO ? 0.0f : y * two_n;         /* NaN stays NaN: the comparison is false */
}

/* Dot product of n floats in 16 lanes (lane j sums products j, j+16, ... in order; a tail past
 * the last 16 goes to lane 0), then the lanes summed as a tree: 8 pairs, 4, 2, 1. */
#ifdef LB_LANES_VECTOR
/* Lanes as one vector value: accumulators stay in registers and the tree is vector shuffles. */
typedef float v16 __attribute__((vector_size(64), aligned(4)));
typedef float v8 __attribute__((vector_size(32)));
typedef int32_t i8 __attribute__((vector_size(32)));
typedef uint32_t u8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));
typedef float v2 __attribute__((vector_size(8)));
#define SHUF __builtin_shufflevector
#define LOAD(p) (*(const v16 *)(p))
/* x in 16 lanes, through memory: GCC builds a 16-lane splat (scalar * vector too) with 16 scalar
 * stores on AVX2, where 16 lanes are two registers. */
HOT v16 splat(float x)
{
    float a[LANES];
    for (int j = 0; j < LANES; j++)
        a[j] = x;
    return LOAD(a);
}

/* A 16-lane value's lanes j + j+8. Halves by memcpy, not a shuffle: GCC lowers a shuffle of 16-lane
 * vectors on AVX2 to scalar moves through the stack (it made AVX2 attention 10x slower). */
HOT v8 fold8(v16 a)
{
    v8 lo, hi;
    memcpy(&lo, &a, sizeof lo);
    memcpy(&hi, (const char *)&a + sizeof lo, sizeof hi);
    return lo + hi;
}

HOT float lanes_sum8(v8 s8)          /* lanes_sum after its first step */
{
    v4 s4 = SHUF(s8, s8, 0, 1, 2, 3) + SHUF(s8, s8, 4, 5, 6, 7);
    v2 s2 = SHUF(s4, s4, 0, 1) + SHUF(s4, s4, 2, 3);
    return s2[0] + s2[1];
}

HOT float lanes_sum(v16 acc) { return lanes_sum8(fold8(acc)); }

typedef float v8u __attribute__((vector_size(32), aligned(4)));
#define LOAD8(p) (*(const v8u *)(p))

/* The tree of lanes_sum run on 16 keys' lanes at once (a transpose): each step adds lane j to
 * lane j + w of every key, as lanes_sum does; after fold8, 8-lane vectors each pack two inputs'
 * results. */
HOT v8 fold4(v8 a, v8 b)            /* one key each (8 lanes) -> two keys, 4 lanes each */
{
    return SHUF(a, b, 0, 1, 2, 3, 8, 9, 10, 11) + SHUF(a, b, 4, 5, 6, 7, 12, 13, 14, 15);
}

HOT v8 fold2(v8 a, v8 b)            /* two keys each -> four keys, 2 lanes each */
{
    return SHUF(a, b, 0, 1, 4, 5, 8, 9, 12, 13) + SHUF(a, b, 2, 3, 6, 7, 10, 11, 14, 15);
}

HOT v8 fold1(v8 a, v8 b)            /* four keys each -> eight keys' sums */
{
    return SHUF(a, b, 0, 2, 4, 6, 8, 10, 12, 14) + SHUF(a, b, 1, 3, 5, 7, 9, 11, 13, 15);
}

/* The rest of lanes_sum's tree for 16 keys, each already folded to 8 lanes (x[j]): their 16 sums,
 * times scale, stored at out as two 8-lane halves. Never joined into one 16-lane value: on AVX-512
 * GCC joins halves through the stack, two 32-byte stores read back by one 64-byte load, and on AVX2
 * a 16-lane splat of scale is 16 scalar stores read back as two vectors; the store buffer forwards
 * neither, and a 1024-token prompt's attention ran 6% (AVX-512) and 12% (AVX2) slower for them. */
HOT void fold16_store(float *out, const v8 x[16], float scale)
{
    v8 y[8], z[4];
    for (int i = 0; i < 8; i++)
        y[i] = fold4(x[2 * i], x[2 * i + 1]);
    for (int i = 0; i < 4; i++)
        z[i] = fold2(y[2 * i], y[2 * i + 1]);
    *(v8u *)out = fold1(z[0], z[1]) * scale;
    *(v8u *)(out + 8) = fold1(z[2], z[3]) * scale;
}

/* exp_lane on 8 lanes. */
HOT v8 exp8(v8 x)
{
    v8 t = x * EXP_LOG2E + EXP_ROUND, n = t - EXP_ROUND;
    v8 r = (x - n * EXP_C1) - n * EXP_C2, r2 = r * r;
    v8 y = ((((EXP_P0 * r + EXP_P1) * r + EXP_P2) * r + EXP_P3) * r + EXP_P4) * r + EXP_P5;
    y = (y * r2 + r) + 1.0f;
    u8 e = ((u8)t - 0x4B400000u + 127u) << 23;
    i8 res = (i8)(y * (v8)e);
    return (v8)(res & ~(x < EXP_LO));           /* comparisons give all-ones lanes where true */
}
#endif

#ifdef LB_LANES_VECTOR
/* Lanes 0-7 and 8-15 as two 8-lane vectors: lanes_sum's first step is their sum. */
HOT float dot(const float *a, const uint16_t *b, int64_t n)
{
    v8 lo = {0}, hi = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        lo += LOAD8(a + i) * KV8(b + i);
        hi += LOAD8(a + i + 8) * KV8(b + i + 8);
    }
    for (; i < n; i++)
        lo[0] += a[i] * KVF(b + i);
    return lanes_sum8(lo + hi);
}

/* One key's 16 lanes of dot(q, a, dh), dh a multiple of 16, folded to 8 (lane j + lane j+8): lane j
 * sums products j, j+16, ... in order. Where the path widens 16 halves at once (KV16, AVX-512) and dh
 * is a constant (64, 128, 256), as one 16-lane sum in registers. Otherwise lanes 0-7 and 8-15 are
 * summed as two 8-lane vectors, then added: the same bits. (With dh not a constant, GCC kept 16-lane
 * sums in a loop of unknown length out of registers on AVX2: 7x slower.) */
HOT v8 key_lanes(const float *q, const uint16_t *a, int64_t dh, int any)
{
#ifdef KV16
    if (!any) {
        v16 sa = LOAD(q) * KV16(a);
        for (int64_t d = LANES; d < dh; d += LANES)
            sa += LOAD(q + d) * KV16(a + d);
        return fold8(sa);
    }
#else
    (void)any;
#endif
    v8u lo = LOAD8(q) * KV8(a), hi = LOAD8(q + 8) * KV8(a + 8);
    for (int64_t d = LANES; d < dh; d += LANES) {
        lo += LOAD8(q + d) * KV8(a + d);
        hi += LOAD8(q + d + 8) * KV8(a + d + 8);
    }
    return lo + hi;
}

/* dot(q, k + at[j], dh) * scale for 16 keys j: each key's lanes and lanes_sum's tree, so the bits of
 * dot times scale (but for the sign of a zero sum: lanes start at the first product, not at 0 + it). */
HOT void dots16_store(float *out, const float *q, const uint16_t *k, const int64_t *at, int64_t dh, int any,
                      float scale)
{
    v8 x[16];
    for (int i = 0; i < 16; i++)
        x[i] = key_lanes(q, k + at[i], dh, any);
    fold16_store(out, x, scale);
}

#else
HOT float dot(const float *a, const uint16_t *b, int64_t n)
{
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++)
            acc[j] += a[i + j] * KVF(b + i + j);
    for (; i < n; i++)
        acc[0] += a[i] * KVF(b + i);
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++)
            acc[j] += acc[j + w];
    return acc[0];
}
#endif

/* Scores of one query head over 16 keys: dot(q, k + at[j]) * scale. */
HOT void scores16(float *out, const float *q, const uint16_t *k, const int64_t *at, int64_t dh, float scale)
{
#ifdef LB_LANES_VECTOR
    /* The models' head sizes as constants: GCC then keeps key_lanes' sums in registers. With dh a
     * variable it did not (Gemma 3's 256 ran at 4 GFLOP/s, not 30, on AVX2): other sizes go 8 lanes
     * at a time (key_lanes' any). */
    switch (dh) {
    case 64: dots16_store(out, q, k, at, 64, 0, scale); return;
    case 128: dots16_store(out, q, k, at, 128, 0, scale); return;
    case 256: dots16_store(out, q, k, at, 256, 0, scale); return;
    }
    if (dh % LANES == 0) {
        dots16_store(out, q, k, at, dh, 1, scale);
        return;
    }
#endif
    for (int j = 0; j < LANES; j++)
        out[j] = dot(q, k + at[j], dh) * scale;
}

#ifdef LB_LANES_VECTOR
/* key_lanes of NH heads (q, q + dh, ...) that share the key a, the key widened once for all of them:
 * each head's lanes are its own chain of products in key_lanes' order, so the same bits. */
#define KEY_LANES_N(NAME, NH)                                                                       \
    HOT void NAME(v8 *out, const float *q, const uint16_t *a, int64_t dh, int any)                  \
    {                                                                                               \
        KEY_LANES_N_WIDE(NH)                                                                        \
        v8u lo[NH], hi[NH];                                                                         \
        {                                                                                           \
            const v8u k0 = KV8(a), k1 = KV8(a + 8);                                                 \
            for (int m = 0; m < NH; m++) {                                                          \
                lo[m] = LOAD8(q + m * dh) * k0;                                                     \
                hi[m] = LOAD8(q + m * dh + 8) * k1;                                                 \
            }                                                                                       \
        }                                                                                           \
        for (int64_t d = LANES; d < dh; d += LANES) {                                               \
            const v8u k0 = KV8(a + d), k1 = KV8(a + d + 8);                                         \
            for (int m = 0; m < NH; m++) {                                                          \
                lo[m] += LOAD8(q + m * dh + d) * k0;                                                \
                hi[m] += LOAD8(q + m * dh + d + 8) * k1;                                            \
            }                                                                                       \
        }                                                                                           \
        for (int m = 0; m < NH; m++)                                                                \
            out[m] = lo[m] + hi[m];                                                                 \
    }
#ifdef KV16
#define KEY_LANES_N_WIDE(NH)                                                                        \
        if (!any) {                                                                                 \
            v16 sa[NH];                                                                             \
            const v16 k0 = KV16(a);                                                                 \
            for (int m = 0; m < NH; m++)                                                            \
                sa[m] = LOAD(q + m * dh) * k0;                                                      \
            for (int64_t d = LANES; d < dh; d += LANES) {                                           \
                const v16 kd = KV16(a + d);                                                         \
                for (int m = 0; m < NH; m++)                                                        \
                    sa[m] += LOAD(q + m * dh + d) * kd;                                             \
            }                                                                                       \
            for (int m = 0; m < NH; m++)                                                            \
                out[m] = fold8(sa[m]);                                                              \
            return;                                                                                 \
        }
#else
#define KEY_LANES_N_WIDE(NH) (void)any;
#endif
KEY_LANES_N(key_lanes_4, 4)
KEY_LANES_N(key_lanes_2, 2)

#define HEADS_AT_ONCE 16
HOT void heads_block(float *out, int64_t ostride, const float *q, const uint16_t *k, const int64_t *at,
                     int64_t dh, int any, int64_t h0, int64_t h1, int64_t g, float scale)
{
    for (int64_t hb = h0; hb < h1; hb += HEADS_AT_ONCE) {
        const int64_t he = hb + HEADS_AT_ONCE < h1 ? hb + HEADS_AT_ONCE : h1;
        v8 x[HEADS_AT_ONCE][16];
        for (int i = 0; i < 16; i++)
            for (int64_t h = hb; h < he;) {
                /* the heads from h on that read h's KV head, 4 or 2 at a time where they can */
                const int64_t group_end = (h / g + 1) * g < he ? (h / g + 1) * g : he;
                const uint16_t *key = k + h / g * dh + at[i];
                v8 y[4];
                if (group_end - h >= 4) {
                    key_lanes_4(y, q + h * dh, key, dh, any);
                    for (int m = 0; m < 4; m++)
                        x[h - hb + m][i] = y[m];
                    h += 4;
                } else if (group_end - h >= 2) {
                    key_lanes_2(y, q + h * dh, key, dh, any);
                    x[h - hb][i] = y[0];
                    x[h - hb + 1][i] = y[1];
                    h += 2;
                } else {
                    x[h - hb][i] = key_lanes(q + h * dh, key, dh, any);
                    h += 1;
                }
            }
        for (int64_t h = hb; h < he; h++)
            fold16_store(out + h * ostride, x[h - hb], scale);
    }
}
#endif

/* scores16 for heads h0 .. h1-1 of one query row (head h: q + h * dh, its keys k + (h / g) * dh +
 * at[j], its scores out + h * ostride), key by key: a key's slot, every KV head side by side, is
 * read once front to back. Head by head, a block read its slots in pieces one KV head wide, one
 * head group after another, and a cold cache served that at 9 GB/s where it serves this at 16
 * (Zen 4, 1000 keys, 3 KV heads). Each score's operations are scores16's: the same bits. */
HOT void scores16_heads(float *out, int64_t ostride, const float *q, const uint16_t *k, const int64_t *at,
                        int64_t dh, int64_t h0, int64_t h1, int64_t g, float scale)
{
#ifdef LB_LANES_VECTOR
    switch (dh) {      /* constants, as in scores16 */
    case 64: heads_block(out, ostride, q, k, at, 64, 0, h0, h1, g, scale); return;
    case 128: heads_block(out, ostride, q, k, at, 128, 0, h0, h1, g, scale); return;
    case 256: heads_block(out, ostride, q, k, at, 256, 0, h0, h1, g, scale); return;
    }
    if (dh % LANES == 0) {
        heads_block(out, ostride, q, k, at, dh, 1, h0, h1, g, scale);
        return;
    }
#endif
    for (int64_t h = h0; h < h1; h++)
        scores16(out + h * ostride, q + h * dh, k + h / g * dh, at, dh, scale);
}

/* Softmax in place of one head's scores p[0 .. len-1], p padded to npad (a multiple of 16): the
 * maximum over lanes (order-free), exp, the sum in 16 lanes over blocks in order and a tree,
 * then each weight times the sum's reciprocal (within 1.5 ulp of kernels.softmax's quotient; a
 * division per key was 9% of the time). Padding becomes weight 0. */
HOT void softmax16(float *p, int64_t len, int64_t npad)
{
    for (int64_t c = len; c < npad; c++)
        p[c] = -INFINITY;
#ifdef LB_LANES_VECTOR
    /* 16 lanes as two 8-lane halves: GCC compares 16-lane vectors lane by lane in scalar code on AVX2,
     * and joining halves into one 16-lane value stalls AVX-512 on the store buffer (fold16_store). */
    v8 m[2] = {LOAD8(p), LOAD8(p + 8)}, sum[2] = {{0}, {0}};
    for (int64_t c = LANES; c < npad; c += LANES)
        for (int i = 0; i < 2; i++) {
            const v8 b = LOAD8(p + c + 8 * i);
            m[i] = (v8)(((i8)b & (b > m[i])) | ((i8)m[i] & ~(b > m[i])));
        }
    float mx = m[0][0];
    for (int j = 1; j < LANES; j++)
        mx = m[j / 8][j % 8] > mx ? m[j / 8][j % 8] : mx;
    for (int64_t c = 0; c < npad; c += LANES)
        for (int i = 0; i < 2; i++) {
            const v8 e = exp8(LOAD8(p + c + 8 * i) - mx);
            *(v8u *)(p + c + 8 * i) = e;
            sum[i] += e;
        }
    const v16 r = splat(1.0f / lanes_sum8(sum[0] + sum[1]));     /* lanes_sum of the 16 lanes */
    for (int64_t c = 0; c < npad; c += LANES)
        *(v16 *)(p + c) = LOAD(p + c) * r;
#else
    float mx = p[0], sum[LANES] = {0};
    for (int64_t c = 1; c < len; c++)
        mx = p[c] > mx ? p[c] : mx;
    for (int64_t c = 0; c < npad; c += LANES)
        for (int j = 0; j < LANES; j++) {
            p[c + j] = exp_lane(p[c + j] - mx);
            sum[j] += p[c + j];
        }
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++)
            sum[j] += sum[j + w];
    float r = 1.0f / sum[0];
    for (int64_t c = 0; c < npad; c++)
        p[c] *= r;
#endif
}

#endif
