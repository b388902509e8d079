/* Internals shared by the code paths of qmatmul.c. */
#ifndef LB_QMATMUL_IMPL_H
#define LB_QMATMUL_IMPL_H

#include <stdint.h>
#include <string.h>

#define QK 32

typedef void (*lb_kernel)(int kind, const float *x, int64_t T, int64_t K, const uint8_t *w, int64_t N,
                          float *out);

void lb_qmatmul_generic(int kind, const float *x, int64_t T, int64_t K, const uint8_t *w, int64_t N, float *out);
#if defined(__x86_64__)
void lb_qmatmul_avx2(int kind, const float *x, int64_t T, int64_t K, const uint8_t *w, int64_t N, float *out);
void lb_qmatmul_avx512(int kind, const float *x, int64_t T, int64_t K, const uint8_t *w, int64_t N, float *out);
#endif

static inline int lb_block_bytes(int kind) {
    return kind == 2 ? 18 : kind == 3 ? 20 : kind == 8 ? 34 : 0;
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

#endif
