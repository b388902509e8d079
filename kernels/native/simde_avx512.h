/* Test builds only (-DLB_SIMDE_AVX512, tests/kernels/test_avx512_emulated.py): the AVX-512 path compiled against
 * SIMDe's portable definitions of the intrinsics (Debian's libsimde-dev), so that its code runs and
 * is checked bit for bit on a CPU without AVX-512. The intrinsics the path uses that SIMDe 0.7
 * lacks are defined here from ones it has. Never part of the shipped library. */
#ifndef LB_SIMDE_AVX512_H
#define LB_SIMDE_AVX512_H

/* Compiled at -O1, not setup.py's -O3: this build is checked for its bits, which no optimization
 * level changes (-ffp-contract=off, no fast-math), never timed; at -O3 GCC spends a minute of a CI
 * run inlining and scheduling SIMDe's 512-bit intrinsics, at -O1 a third of that. */
#pragma GCC optimize("O1")
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#include <math.h>
#include <stdint.h>

static inline simde__m512i lb_emu_maskz_loadu_epi8(uint64_t k, const void *p) {
    int8_t b[64];
    for (int i = 0; i < 64; i++) b[i] = (k >> i) & 1 ? ((const int8_t *)p)[i] : 0;   /* reads only the masked-in bytes */
    return simde_mm512_loadu_si512(b);
}

static inline simde__m512i lb_emu_maskz_loadu_epi32(uint16_t k, const void *p) {
    int32_t v[16];
    for (int i = 0; i < 16; i++) v[i] = (k >> i) & 1 ? ((const int32_t *)p)[i] : 0;
    return simde_mm512_loadu_si512(v);
}

static inline simde__m512 lb_emu_maskz_loadu_ps(uint16_t k, const void *p) {
    float v[16];
    for (int i = 0; i < 16; i++) v[i] = (k >> i) & 1 ? ((const float *)p)[i] : 0.0f;
    return simde_mm512_loadu_ps(v);
}

static inline simde__m512i lb_emu_cvtepu32_epi64(simde__m256i a) {
    uint32_t u[8];
    uint64_t v[8];
    simde_mm256_storeu_si256((simde__m256i *)u, a);
    for (int i = 0; i < 8; i++) v[i] = u[i];
    return simde_mm512_loadu_si512(v);
}

static inline simde__m512 lb_emu_cvtph_ps(simde__m256i h) {
    const simde__m256 lo = simde_mm256_cvtph_ps(simde_mm256_castsi256_si128(h));
    const simde__m256 hi = simde_mm256_cvtph_ps(simde_mm256_extracti128_si256(h, 1));
    return simde_mm512_insertf32x8(simde_mm512_castps256_ps512(lo), hi, 1);
}

/* Lane by lane through memory; the float reductions pair lanes as GCC's own do (halves, then
 * quarters, then [0]+[2], [1]+[3], then the two), so the sums round as on the hardware path. */
static inline simde__m512 lb_emu_cvtepi32_ps(simde__m512i a) {
    int32_t i32[16];
    float f[16];
    simde_mm512_storeu_si512(i32, a);
    for (int i = 0; i < 16; i++) f[i] = (float)i32[i];
    return simde_mm512_loadu_ps(f);
}

/* fused, as vfmadd231ps: SIMDe 0.7 takes a * b + c with two roundings where the build has no FMA macro */
static inline simde__m512 lb_emu_fmadd_ps(simde__m512 a, simde__m512 b, simde__m512 c) {
    float x[16], y[16], z[16];
    simde_mm512_storeu_ps(x, a);
    simde_mm512_storeu_ps(y, b);
    simde_mm512_storeu_ps(z, c);
    for (int i = 0; i < 16; i++) z[i] = fmaf(x[i], y[i], z[i]);
    return simde_mm512_loadu_ps(z);
}

static inline simde__m512i lb_emu_cvtps_epi32(simde__m512 a) {   /* round to nearest even, as MXCSR's default */
    float f[16];
    int32_t r[16];
    simde_mm512_storeu_ps(f, a);
    for (int i = 0; i < 16; i++) {
        const float n = simde_math_nearbyintf(f[i]);
        r[i] = n >= -2147483648.0f && n < 2147483648.0f ? (int32_t)n : INT32_MIN;   /* "integer indefinite" */
    }
    return simde_mm512_loadu_si512(r);
}

static inline simde__m128i lb_emu_cvtepi32_epi8(simde__m512i a) {     /* truncates, as vpmovdb */
    int32_t i32[16];
    int8_t r[16];
    simde_mm512_storeu_si512(i32, a);
    for (int i = 0; i < 16; i++) r[i] = (int8_t)(uint8_t)(uint32_t)i32[i];
    return simde_mm_loadu_si128((const simde__m128i *)r);
}

#define LB_EMU_REDUCE(name, type, op)                                             \
    static inline type name(const type *a) {                                      \
        type s8[8], s4[4], s2[2];                                                 \
        for (int i = 0; i < 8; i++) s8[i] = op(a[i + 8], a[i]);                   \
        for (int i = 0; i < 4; i++) s4[i] = op(s8[i + 4], s8[i]);                 \
        for (int i = 0; i < 2; i++) s2[i] = op(s4[i], s4[i + 2]);                 \
        return op(s2[0], s2[1]);                                                  \
    }
#define LB_EMU_ADD(x, y) ((x) + (y))
#define LB_EMU_MAX(x, y) ((x) > (y) ? (x) : (y))      /* maxps: the second operand when either is NaN */
LB_EMU_REDUCE(lb_emu_sum_f, float, LB_EMU_ADD)
LB_EMU_REDUCE(lb_emu_max_f, float, LB_EMU_MAX)
LB_EMU_REDUCE(lb_emu_sum_i, int32_t, LB_EMU_ADD)

static inline float lb_emu_reduce_add_ps(simde__m512 a) {
    float f[16];
    simde_mm512_storeu_ps(f, a);
    return lb_emu_sum_f(f);
}

static inline float lb_emu_reduce_max_ps(simde__m512 a) {
    float f[16];
    simde_mm512_storeu_ps(f, a);
    return lb_emu_max_f(f);
}

static inline int32_t lb_emu_reduce_add_epi32(simde__m512i a) {
    int32_t i32[16];
    simde_mm512_storeu_si512(i32, a);
    return lb_emu_sum_i(i32);
}

static inline float lb_emu_cvtsh_ss(uint16_t h) {
    return simde_mm_cvtss_f32(simde_mm_cvtph_ps(simde_mm_cvtsi32_si128(h)));
}

static inline uint16_t lb_emu_cvtss_sh(float f) {          /* round to nearest even */
    return (uint16_t)simde_mm_cvtsi128_si32(simde_mm_cvtps_ph(simde_mm_set_ss(f), 0));
}

/* vpgatherdd (scale 1): the 32-bit word at base + idx[i] into lane i */
static inline simde__m512i lb_emu_i32gather_epi32(simde__m512i idx, const void *base) {
    int32_t i32[16], out[16];
    simde_mm512_storeu_si512(i32, idx);
    for (int i = 0; i < 16; i++) memcpy(&out[i], (const char *)base + i32[i], 4);
    return simde_mm512_loadu_si512(out);
}

#undef __mmask64
#define __mmask64 simde__mmask64
#undef __mmask16
#define __mmask16 simde__mmask16
#define _mm512_maskz_loadu_epi8(k, p) lb_emu_maskz_loadu_epi8((k), (p))
#define _mm512_maskz_loadu_epi32(k, p) lb_emu_maskz_loadu_epi32((k), (p))
#define _mm512_maskz_loadu_ps(k, p) lb_emu_maskz_loadu_ps((k), (p))
#define _mm512_cvtph_ps(h) lb_emu_cvtph_ps(h)
#define _mm512_cvtepu32_epi64(a) lb_emu_cvtepu32_epi64(a)
#define _mm512_cvtepi32_ps(a) lb_emu_cvtepi32_ps(a)
#undef _mm512_fmadd_ps
#define _mm512_fmadd_ps(a, b, c) lb_emu_fmadd_ps((a), (b), (c))
#define _mm512_cvtps_epi32(a) lb_emu_cvtps_epi32(a)
#define _mm512_cvtepi32_epi8(a) lb_emu_cvtepi32_epi8(a)
#define _mm512_reduce_add_ps(a) lb_emu_reduce_add_ps(a)
#define _mm512_reduce_max_ps(a) lb_emu_reduce_max_ps(a)
#define _mm512_reduce_add_epi32(a) lb_emu_reduce_add_epi32(a)
#define _cvtsh_ss(h) lb_emu_cvtsh_ss(h)
#define _cvtss_sh(f, mode) lb_emu_cvtss_sh(f)
#define _mm512_i32gather_epi32(idx, base, scale) lb_emu_i32gather_epi32((idx), (base))
#define _mm512_zextsi256_si512(a) simde_mm512_inserti64x4(simde_mm512_setzero_si512(), (a), 0)

#endif
