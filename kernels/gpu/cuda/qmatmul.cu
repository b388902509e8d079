// Products with weights kept in their GGUF blocks (quant.cuh), for each kind:
//   qmatvec_<kind>  the product of one activation row (a decode step of one sequence): a warp per
//                   output row, its lanes taking the row's units of 32 weights in turn, two at a
//                   time (both units' loads in flight before the sums), x read as float4;
//   qmatmul_<kind>  out[t, col0 + n] = sum_k x[t, k] * W[n, k]: a warp per output row. Its lanes
//                   decode 32 units of 32 weights at a time (a unit each) into a tile in shared
//                   memory, then take the tile's columns: lane l multiplies weight l of every unit
//                   by x[t, 32u + l], so a warp's reads of x are 128 contiguous bytes (read a unit
//                   a lane, they were 32 lines apart), for each of QM_ROWS activation rows;
//   dequant_<kind>  W's rows as float32, for prompt chunks multiplied by cuBLAS;
//   embed_<kind>    rows ids[t] of W as float32, times scale: the token embedding.
// The weights stay in their blocks in GPU memory: a Q4_0 matrix takes 4.5 bits a weight there.
#include "quant.cuh"

#define QM_WARPS 4        // output rows per block
#define QM_ROWS 16        // activation rows per block
#define QM_PAD 33         // a tile row's stride in floats: a lane's row and a column both conflict-free

// A unit's 32 weights times x[32u .. 32u + 31], read as float4.
__device__ __forceinline__ float lb_unit_dot(const float* wv, const float* x) {
    const float4* xv = (const float4*)x;
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < 8; c++) {
        const float4 v = xv[c];
        s += wv[4 * c] * v.x + wv[4 * c + 1] * v.y + wv[4 * c + 2] * v.z + wv[4 * c + 3] * v.w;
    }
    return s;
}

// grid ceil(n_rows / QM_WARPS), block 32 * QM_WARPS. w as below; x (k,) float32, 16-byte aligned;
// out[col0 + n] for n < n_rows (ldo, the width of out's row, is for the reference).
template <int KIND>
__device__ __forceinline__ void lb_qmatvec(const unsigned char* w, int n_rows, int k, const float* x, float* out,
                                           int col0) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n = blockIdx.x * QM_WARPS + warp;
    if (n >= n_rows) return;
    const unsigned char* row = w + (long long)n * lb_row_bytes<KIND>(k);
    const int units = k >> 5;
    float acc0 = 0.0f, acc1 = 0.0f, wa[32], wb[32];
    int u = lane;
    for (; u + 32 < units; u += 64) {
        lb_unit<KIND>(row, u, wa);
        lb_unit<KIND>(row, u + 32, wb);
        acc0 += lb_unit_dot(wa, x + 32 * u);
        acc1 += lb_unit_dot(wb, x + 32 * (u + 32));
    }
    if (u < units) {
        lb_unit<KIND>(row, u, wa);
        acc0 += lb_unit_dot(wa, x + 32 * u);
    }
    const float s = lb_warp_sum(acc0 + acc1);
    if (lane == 0) out[col0 + n] = s;
}

// grid (ceil(n_rows / QM_WARPS), ceil(t_rows / QM_ROWS)), block 32 * QM_WARPS.
// w (n_rows, row bytes) uint8; x (t_rows, ldx) float32, k a multiple of 32; out (t_rows, ldo)
// float32, written in columns [col0, col0 + n_rows).
template <int KIND>
__device__ __forceinline__ void lb_qmatmul(const unsigned char* w, int n_rows, int k, const float* x, int ldx,
                                           int t_rows, float* out, int ldo, int col0) {
    __shared__ float tiles[QM_WARPS][32 * QM_PAD];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n = blockIdx.x * QM_WARPS + warp;
    if (n >= n_rows) return;                         // a whole warp: only warp-wide syncs below
    const int t0 = blockIdx.y * QM_ROWS;
    const int rows = min(QM_ROWS, t_rows - t0);
    const unsigned char* row = w + (long long)n * lb_row_bytes<KIND>(k);
    const float* xt = x + (long long)t0 * ldx + lane;
    float* tile = tiles[warp];
    float acc[QM_ROWS];
#pragma unroll
    for (int i = 0; i < QM_ROWS; i++) acc[i] = 0.0f;
    const int units = k >> 5;
    for (int base = 0; base < units; base += 32) {
        if (base + lane < units) {
            float wv[32];
            lb_unit<KIND>(row, base + lane, wv);
#pragma unroll
            for (int l = 0; l < 32; l++) tile[lane * QM_PAD + l] = wv[l];
        }
        __syncwarp();
        const int nu = min(32, units - base);
#pragma unroll 4
        for (int j = 0; j < nu; j++) {
            const float wj = tile[j * QM_PAD + lane];
            const float* xj = xt + 32 * (base + j);
#pragma unroll
            for (int i = 0; i < QM_ROWS; i++)
                if (i < rows) acc[i] += wj * xj[(long long)i * ldx];
        }
        __syncwarp();                                // the tile is read before the next is written
    }
#pragma unroll
    for (int i = 0; i < QM_ROWS; i++) {
        const float s = lb_warp_sum(acc[i]);
        if (lane == 0 && i < rows) out[(long long)(t0 + i) * ldo + col0 + n] = s;
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
    extern "C" __global__ void qmatvec_##NAME(const unsigned char* w, int n_rows, int k, const float* x,     \
                                              float* out, int ldo, int col0) {                               \
        lb_qmatvec<KIND>(w, n_rows, k, x, out, col0);                                                        \
    }                                                                                                        \
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
