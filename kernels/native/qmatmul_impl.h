/* Internals shared by the code paths of qmatmul.c: block layouts, float16, the rounded activations. */
#ifndef LB_QMATMUL_IMPL_H
#define LB_QMATMUL_IMPL_H

#include <stdint.h>
#include <string.h>

#include "qmatmul.h"

#define QK 32
#define LB_CHUNK 16          /* activation rows are padded to a multiple of this many blocks (zeros) */

/* x rounded as llama.cpp rounds it before a quantized dot product (quantize_row_q8_0 / q8_1): per block
 * of 32, d = max|x| / 127 and q = rint(x * 127 / max|x|) in int8; the product then uses d as float16.
 * The quants are laid out for the weight kind's kernel: q4 kinds take 4 blocks at a time, their
 * elements 0..15 (low nibbles) in the first 64 bytes and 16..31 in the next 64; q8_0 keeps the order. */
typedef struct {
    int kind;
    int64_t T, K, nb, nbp;   /* rows; width; blocks per row, and padded to a multiple of LB_CHUNK */
    int lanes;               /* copies of each d in dxe: one per 32-bit lane a block covers in a kernel */
    int8_t *q;               /* T rows of nbp * 32 (padding: 0) */
    float *d;                /* T rows of nbp: d as float16, widened (padding: 0) */
    float *dxe;              /* T rows of nbp * lanes: each d repeated `lanes` times */
    float *side;             /* T rows of nbp: d * sum(q) of the block, exact in float32 (q4_1's m multiplies it) */
    float *sxe;              /* T rows of nbp * lanes: side / lanes (exact), so lanes sum to q4_1's m * side */
    int32_t *corr;           /* T rows of nbp * lanes: minus what a kernel's unsigned weight quants add per lane:
                              * -8 * (its 8 x quants) for q4_0, -128 * (its 4) for q8_0; 0 for q4_1 */
    float *side_t;           /* side transposed: nb rows of T + 8 (padding: 0), so a kernel loads a few rows' at once */
    float *d_t;              /* q8_0 only (else 0): d transposed likewise */
    int32_t *sq_t;           /* q8_0 only (else 0): sum(q) of each block, transposed likewise */
    int32_t *sq8_t;          /* q8_0 only (else 0): -8 * sq_t, where Q4_0's block sums start on AVX-512 */
    int8_t *qv;              /* q8_0 with T > 1 (else NULL): q of 8 rows at a time interleaved, 4 quants a row in
                              * turn (group g, block b, quad k at ((g * nb + b) * 8 + k) * 32): a 32-bit lane per
                              * row, so a batch kernel needs no sum across lanes (rows past T: 0) */
    void *mem;
} lb_act;

/* Fills every array of an lb_act from x (the padding blocks are already zero): one per code path. */
typedef void (*lb_rounder)(lb_act *a, const float *x);
void lb_act_round_generic(lb_act *a, const float *x);
#if defined(__x86_64__)
void lb_act_round_avx2(lb_act *a, const float *x);     /* leaves dxe, sxe and corr unfilled */
void lb_act_round_avx512(lb_act *a, const float *x);
#endif
int lb_act_init(lb_act *a, int kind, const float *x, int64_t T, int64_t K, lb_rounder round);   /* LB_OK, LB_ENOMEM */
void lb_act_free(lb_act *a);
lb_rounder lb_chosen_rounder(void);        /* the code path lb_set_isa picked */
int lb_chosen_isa(void);                    /* LB_ISA_*: the path lb_set_isa picked (attention follows it) */

static inline int64_t lb_act_index(int kind, int64_t b, int j) {   /* element j of block b in a row of q */
    if (kind == LB_Q8_0) return b * QK + j;
    return (b >> 2) * 128 + (j >= 16 ? 64 : 0) + (b & 3) * 16 + (j & 15);
}

typedef void (*lb_kernel)(int kind, const lb_act *a, const uint8_t *w, int64_t N, float *out);

void lb_qmatmul_generic(int kind, const lb_act *a, const uint8_t *w, int64_t N, float *out);
#if defined(__x86_64__)
void lb_qmatmul_avx2(int kind, const lb_act *a, const uint8_t *w, int64_t N, float *out);
void lb_qmatmul_avx512(int kind, const lb_act *a, const uint8_t *w, int64_t N, float *out);
/* q8_0, AVX2: rows t0 .. t0 + R - 1 (R <= 16) of x against N weight rows (the AVX-512 path runs it below 7) */
void lb_q8_rows_avx2(int R, const lb_act *a, int64_t t0, const uint8_t *w, int64_t N, float *out0);
#endif

static inline int lb_block_bytes(int kind) {
    return kind == LB_Q4_0 ? 18 : kind == LB_Q4_1 ? 20 : kind == LB_Q8_0 ? 34 : 0;
}

static inline uint16_t lb_u16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t lb_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* IEEE half -> float, exact for every input (subnormals, inf, nan) without F16C. */
static inline float lb_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {                                   /* subnormal: normalise the mantissa */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* float -> IEEE half, rounding to nearest even as F16C's _cvtss_sh(x, 0) does (overflow -> inf). */
static inline uint16_t lb_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));   /* inf, nan */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);          /* rounds past 65504: inf */
    if (ax < 0x38800000u) {                                           /* below 2^-14: subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign;                  /* under half the smallest subnormal */
        uint32_t man = (ax & 0x7fffff) | 0x800000, shift = 126 - (ax >> 23);   /* x = man 2^(e-150), h = x 2^24 */
        uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((ax - 0x38000000u) >> 13), rem = ax & 0x1fff;      /* rebias 127 -> 15 */
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

/* float -> IEEE half as numpy's cast rounds it (npy_floatbits_to_halfbits): to nearest, ties to even,
 * past 65504 infinity, as lb_to_f16; but a NaN keeps its sign and its payload's top 10 bits (1 if those
 * are 0), unquieted. Without a branch (checked against lb_to_f16 on every float): a normal half rounds
 * by adding 0xfff plus the kept bit's parity below the cut, a subnormal one by adding 0.5, whose float
 * ulp there is the half's (2^-24). */
static inline uint16_t lb_f16_np(float x) {
    uint32_t f, sb;
    memcpy(&f, &x, 4);
    const uint32_t a = f & 0x7fffffffu, m = (a & 0x7fffffu) >> 13;
    float fa, s;
    memcpy(&fa, &a, 4);
    s = fa + 0.5f;
    memcpy(&sb, &s, 4);
    uint32_t r = a < 0x38800000u ? sb - 0x3f000000u : (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
    r = a >= 0x47800000u ? 0x7c00u : r;                   /* 65536 and past, infinity: infinity */
    r = a > 0x7f800000u ? 0x7c00u | (m ? m : 1u) : r;     /* NaN */
    return (uint16_t)(((f >> 16) & 0x8000u) | r);
}

#endif
