// The gate of the feed-forward block (kernels/ffn.py): gu (rows, 2f) = [gate | up] from one fused
// matmul -> act(gate) * up (rows, f). SwiGLU's act is SiLU, GeGLU's llama.cpp's GELU-tanh, whose
// CPU version looks the value up in a float16 table: x rounded to float16, the GELU of that,
// rounded to float16 again; exact past |x| >= 10.
#include "common.cuh"

extern "C" __global__ void swiglu(const float* gu, float* out, int rows, int f) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * f) return;
    const long long r = i / f, j = i % f;
    const float g = gu[r * 2 * f + j], u = gu[r * 2 * f + f + j];
    const float act = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));     // x / (1 + exp(-x)), as kernels.ffn.silu
    out[i] = __fmul_rn(act, u);
}

__device__ __forceinline__ float lb_gelu_tanh(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float x16 = lb_half_to_float(lb_float_to_half(x));
    const float inner = __fmul_rn(__fmul_rn(0.7978845608028654f, x16),
                                  __fadd_rn(1.0f, __fmul_rn(__fmul_rn(0.044715f, x16), x16)));
    const float y = __fmul_rn(__fmul_rn(0.5f, x16), __fadd_rn(1.0f, tanhf(inner)));
    return lb_half_to_float(lb_float_to_half(y));
}

extern "C" __global__ void geglu(const float* gu, float* out, int rows, int f) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * f) return;
    const long long r = i / f, j = i % f;
    out[i] = __fmul_rn(lb_gelu_tanh(gu[r * 2 * f + j]), gu[r * 2 * f + f + j]);
}
