// Products with weights kept in their GGUF blocks (quant.cuh), for each kind:
//   qmatmul_<kind>  out[t, col0 + n] = sum_k x[t, k] * W[n, k]: a warp per output row, its lanes
//                   taking the row's units of 32 weights in turn, each unit read once for
//                   QM_ROWS activation rows (a decode step, or a short chunk);
//   dequant_<kind>  W's rows as float32, for prompt chunks multiplied by cuBLAS;
//   embed_<kind>    rows ids[t] of W as float32, times scale: the token embedding.
// The weights stay in their blocks in GPU memory: a Q4_0 matrix takes 4.5 bits a weight there.
#include "quant.cuh"

#define QM_WARPS 4        // output rows per block
#define QM_ROWS 8         // activation rows per block

// grid (ceil(n_rows / QM_WARPS), ceil(t_rows / QM_ROWS)), block 32 * QM_WARPS.
// w (n_rows, row bytes) uint8; x (t_rows, ldx) float32, ldx a multiple of 4 and k a multiple of
// 32; out (t_rows, ldo) float32, written in columns [col0, col0 + n_rows).
template <int KIND>
__device__ __forceinline__ void lb_qmatmul(const unsigned char* w, int n_rows, int k, const float* x, int ldx,
                                           int t_rows, float* out, int ldo, int col0) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n = blockIdx.x * QM_WARPS + warp;
    if (n >= n_rows) return;                         // a whole warp: no block-wide sync below
    const int t0 = blockIdx.y * QM_ROWS;
    const unsigned char* row = w + (long long)n * lb_row_bytes<KIND>(k);
    float acc[QM_ROWS];
#pragma unroll
    for (int i = 0; i < QM_ROWS; i++) acc[i] = 0.0f;
    float wv[32];
    for (int u = lane; u < (k >> 5); u += 32) {
        lb_unit<KIND>(row, u, wv);
#pragma unroll
        for (int i = 0; i < QM_ROWS; i++) {
            if (t0 + i < t_rows) {
                const float4* xv = (const float4*)(x + (long long)(t0 + i) * ldx + 32 * u);
                float s = 0.0f;
#pragma unroll
                for (int c = 0; c < 8; c++) {
                    const float4 v = xv[c];
                    s += wv[4 * c] * v.x + wv[4 * c + 1] * v.y + wv[4 * c + 2] * v.z + wv[4 * c + 3] * v.w;
                }
                acc[i] += s;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < QM_ROWS; i++) {
        const float s = lb_warp_sum(acc[i]);
        if (lane == 0 && t0 + i < t_rows) out[(long long)(t0 + i) * ldo + col0 + n] = s;
    }
}

// grid ceil(n_rows * k / 32 / 256), block 256: a thread per unit. out (n_rows, k) float32.
template <int KIND>
__device__ __forceinline__ void lb_dequant(const unsigned char* w, int n_rows, int k, float* out) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int units = k >> 5;
    if (i >= (long long)n_rows * units) return;
    const long long n = i / units;
    const int u = (int)(i % units);
    float wv[32];
    lb_unit<KIND>(w + n * lb_row_bytes<KIND>(k), u, wv);
    float* o = out + n * k + 32 * u;
#pragma unroll
    for (int l = 0; l < 32; l++) o[l] = wv[l];
}

// grid t_rows, block 128. ids (t_rows,) in [0, rows of w); out (t_rows, k) float32.
template <int KIND>
__device__ __forceinline__ void lb_embed(const unsigned char* w, int k, const int* ids, int t_rows, float scale,
                                         float* out) {
    const int t = blockIdx.x;
    if (t >= t_rows) return;
    const unsigned char* row = w + (long long)ids[t] * lb_row_bytes<KIND>(k);
    float wv[32];
    for (int u = threadIdx.x; u < (k >> 5); u += blockDim.x) {
        lb_unit<KIND>(row, u, wv);
        float* o = out + (long long)t * k + 32 * u;
#pragma unroll
        for (int l = 0; l < 32; l++) o[l] = __fmul_rn(wv[l], scale);
    }
}

#define LB_QUANT_KERNELS(KIND, NAME)                                                                         \
    extern "C" __global__ void qmatmul_##NAME(const unsigned char* w, int n_rows, int k, const float* x,     \
                                              int ldx, int t_rows, float* out, int ldo, int col0) {          \
        lb_qmatmul<KIND>(w, n_rows, k, x, ldx, t_rows, out, ldo, col0);                                     \
    }                                                                                                        \
    extern "C" __global__ void dequant_##NAME(const unsigned char* w, int n_rows, int k, float* out) {      \
        lb_dequant<KIND>(w, n_rows, k, out);                                                                 \
    }                                                                                                        \
    extern "C" __global__ void embed_##NAME(const unsigned char* w, int k, const int* ids, int t_rows,      \
                                            float scale, float* out) {                                       \
        lb_embed<KIND>(w, k, ids, t_rows, scale, out);                                                       \
    }

LB_QUANT_KERNELS(LB_KIND_Q4_0, q4_0)
LB_QUANT_KERNELS(LB_KIND_Q4_1, q4_1)
LB_QUANT_KERNELS(LB_KIND_Q8_0, q8_0)
LB_QUANT_KERNELS(LB_KIND_Q4_K, q4_k)
LB_QUANT_KERNELS(LB_KIND_Q5_K, q5_k)
LB_QUANT_KERNELS(LB_KIND_Q6_K, q6_k)
LB_QUANT_KERNELS(LB_KIND_F16, f16)
