// GGUF weight blocks read in units of 32 weights: unit u of a row is its weights 32u .. 32u+31.
// Each kind's lb_unit_<kind>(row, u, w) writes them as float32, with the float steps of ggml's
// dequantize_row_* and of the gguf package (d * sc first, then times q, minus dmin * m), each
// rounded on its own (__fmul_rn, __fsub_rn): the numpy reference kernels/gpu/ref_quant.py
// mirrors this indexing, and tests hold both to the CPU's dequantization bit for bit.
//   q4_0  32 a block, 18 bytes: d (f16), 16 bytes of nibbles (weight i low, i + 16 high), q - 8
//   q4_1  32 a block, 20 bytes: d, m (f16), nibbles; d * q + m
//   q8_0  32 a block, 34 bytes: d (f16), 32 int8
//   q4_k  256 a block, 144 bytes: d, dmin (f16), 12 bytes of 6-bit scales and mins, 128 of nibbles
//   q5_k  256 a block, 176 bytes: as q4_k, with 32 bytes of fifth bits before the nibbles
//   q6_k  256 a block, 210 bytes: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales, d
//   f16   plain float16 rows (a unit is 64 bytes)
#ifndef LLMBUS_QUANT_CUH
#define LLMBUS_QUANT_CUH

#include "common.cuh"

#define LB_KIND_Q4_0 0
#define LB_KIND_Q4_1 1
#define LB_KIND_Q8_0 2
#define LB_KIND_Q4_K 3
#define LB_KIND_Q5_K 4
#define LB_KIND_Q6_K 5
#define LB_KIND_F16 6

// Bytes of one row of k weights.
template <int KIND> __device__ __forceinline__ long long lb_row_bytes(int k);
template <> __device__ __forceinline__ long long lb_row_bytes<LB_KIND_Q4_0>(int k) { return (long long)(k / 32) * 18; }
template <> __device__ __forceinline__ long long lb_row_bytes<LB_KIND_Q4_1>(int k) { return (long long)(k / 32) * 20; }
template <> __device__ __forceinline__ long long lb_row_bytes<LB_KIND_Q8_0>(int k) { return (long long)(k / 32) * 34; }
template <> __device__ __forceinline__ long long lb_row_bytes<LB_KIND_Q4_K>(int k) { return (long long)(k / 256) * 144; }
template <> __device__ __forceinline__ long long lb_row_bytes<LB_KIND_Q5_K>(int k) { return (long long)(k / 256) * 176; }
template <> __device__ __forceinline__ long long lb_row_bytes<LB_KIND_Q6_K>(int k) { return (long long)(k / 256) * 210; }
template <> __device__ __forceinline__ long long lb_row_bytes<LB_KIND_F16>(int k) { return (long long)k * 2; }

// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block.
__device__ __forceinline__ void lb_scale_min_k4(int j, const unsigned char* q, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

template <int KIND> __device__ __forceinline__ void lb_unit(const unsigned char* row, int u, float* w);

template <> __device__ __forceinline__ void lb_unit<LB_KIND_Q4_0>(const unsigned char* row, int u, float* w) {
    const unsigned char* b = row + (long long)u * 18;
    const float d = lb_load_half(b);
    const unsigned char* qs = b + 2;
#pragma unroll
    for (int l = 0; l < 16; l++) {
        w[l] = __fmul_rn(d, (float)((int)(qs[l] & 0xF) - 8));
        w[l + 16] = __fmul_rn(d, (float)((int)(qs[l] >> 4) - 8));
    }
}

template <> __device__ __forceinline__ void lb_unit<LB_KIND_Q4_1>(const unsigned char* row, int u, float* w) {
    // A block is 20 bytes and a row a whole number of them: 4-byte aligned where the matrix is, so
    // read in five 32-bit words (d and m in the first, little endian) rather than 20 bytes.
    const unsigned int* b = (const unsigned int*)(row + (long long)u * 20);
    const unsigned int dm = b[0];
    const float d = lb_half_to_float((unsigned short)(dm & 0xFFFF)), m = lb_half_to_float((unsigned short)(dm >> 16));
    unsigned int qs[4];
#pragma unroll
    for (int i = 0; i < 4; i++) qs[i] = b[1 + i];
#pragma unroll
    for (int l = 0; l < 16; l++) {
        const unsigned int q = (qs[l >> 2] >> (8 * (l & 3))) & 0xFF;
        w[l] = __fadd_rn(__fmul_rn(d, (float)(q & 0xF)), m);
        w[l + 16] = __fadd_rn(__fmul_rn(d, (float)(q >> 4)), m);
    }
}
template <> __device__ __forceinline__ void lb_unit<LB_KIND_Q8_0>(const unsigned char* row, int u, float* w) {
    const unsigned char* b = row + (long long)u * 34;
    const float d = lb_load_half(b);
    const signed char* qs = (const signed char*)(b + 2);
#pragma unroll
    for (int l = 0; l < 32; l++) w[l] = __fmul_rn(d, (float)qs[l]);
}

template <> __device__ __forceinline__ void lb_unit<LB_KIND_Q4_K>(const unsigned char* row, int u, float* w) {
    const unsigned char* b = row + (long long)(u >> 3) * 144;
    const int j = u & 7;
    int sc, mn;
    lb_scale_min_k4(j, b + 4, &sc, &mn);
    const float d1 = __fmul_rn(lb_load_half(b), (float)sc), m1 = __fmul_rn(lb_load_half(b + 2), (float)mn);
    // A block is 144 bytes, its nibbles at 16: 16-byte aligned where the matrix is, so the unit's
    // 32 bytes come in two 16-byte loads rather than 32 one-byte ones.
    const uint4* q16 = (const uint4*)(b + 16 + 32 * (j >> 1));
    const uint4 lo = q16[0], hi = q16[1];
    const unsigned int qs[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int l = 0; l < 32; l++) {
        const unsigned int q = (qs[l >> 2] >> (8 * (l & 3) + shift)) & 0xF;
        w[l] = __fsub_rn(__fmul_rn(d1, (float)q), m1);
    }
}
template <> __device__ __forceinline__ void lb_unit<LB_KIND_Q5_K>(const unsigned char* row, int u, float* w) {
    const unsigned char* b = row + (long long)(u >> 3) * 176;
    const int j = u & 7;
    int sc, mn;
    lb_scale_min_k4(j, b + 4, &sc, &mn);
    const float d1 = __fmul_rn(lb_load_half(b), (float)sc), m1 = __fmul_rn(lb_load_half(b + 2), (float)mn);
    const unsigned char* qh = b + 16;
    const unsigned char* qs = b + 48 + 32 * (j >> 1);
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int l = 0; l < 32; l++) {
        const int q = ((qs[l] >> shift) & 0xF) | (((qh[l] >> j) & 1) << 4);
        w[l] = __fsub_rn(__fmul_rn(d1, (float)q), m1);
    }
}

template <> __device__ __forceinline__ void lb_unit<LB_KIND_Q6_K>(const unsigned char* row, int u, float* w) {
    const unsigned char* b = row + (long long)(u >> 3) * 210;
    const int j = u & 7, half = j >> 2, quarter = j & 3;
    const unsigned char* ql = b + 64 * half + 32 * (quarter & 1);
    const unsigned char* qh = b + 128 + 32 * half;
    const signed char* scales = (const signed char*)(b + 192);
    const float d = lb_load_half(b + 208);
    const int low_shift = quarter < 2 ? 0 : 4, high_shift = 2 * quarter;
    const float d0 = __fmul_rn(d, (float)scales[2 * j]), d1 = __fmul_rn(d, (float)scales[2 * j + 1]);
#pragma unroll
    for (int l = 0; l < 32; l++) {
        const int q = (int)(((ql[l] >> low_shift) & 0xF) | (((qh[l] >> high_shift) & 3) << 4)) - 32;
        w[l] = __fmul_rn(l < 16 ? d0 : d1, (float)q);
    }
}

template <> __device__ __forceinline__ void lb_unit<LB_KIND_F16>(const unsigned char* row, int u, float* w) {
    const unsigned char* p = row + (long long)u * 64;
#pragma unroll
    for (int l = 0; l < 32; l++) w[l] = lb_load_half(p + 2 * l);
}

#endif
