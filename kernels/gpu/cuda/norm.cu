// RMSNorm as llama.cpp computes it (kernels/norm.py): out = x / sqrt(mean(x^2) + eps) * w, one
// block per row; with the residual add fused in front (add_rms_norm), and the plain adds and row
// gathers around them. Products and sums round one by one (__fmul_rn, __fadd_rn): no fused
// multiply-add, so an element's value is numpy's for the same mean.
#include "common.cuh"

// out (rows, d) = norm(x) * w; out may be x itself.
extern "C" __global__ void rms_norm(const float* x, const float* w, float* out, int rows, int d, float eps) {
    const int r = blockIdx.x;
    if (r >= rows) return;
    const float* xr = x + (long long)r * d;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss = __fadd_rn(ss, __fmul_rn(xr[i], xr[i]));
    ss = lb_block_sum(ss);
    const float inv = 1.0f / sqrtf(__fadd_rn(ss / (float)d, eps));
    float* o = out + (long long)r * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) o[i] = __fmul_rn(__fmul_rn(xr[i], inv), w[i]);
}

// h (rows, d) += delta, then out = norm(h) * w: the residual add and the next norm in one pass.
extern "C" __global__ void add_rms_norm(float* h, const float* delta, const float* w, float* out, int rows, int d,
                                        float eps) {
    const int r = blockIdx.x;
    if (r >= rows) return;
    float* hr = h + (long long)r * d;
    const float* dr = delta + (long long)r * d;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        const float v = __fadd_rn(hr[i], dr[i]);
        hr[i] = v;                                   // read back below by this same thread
        ss = __fadd_rn(ss, __fmul_rn(v, v));
    }
    ss = lb_block_sum(ss);
    const float inv = 1.0f / sqrtf(__fadd_rn(ss / (float)d, eps));
    float* o = out + (long long)r * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) o[i] = __fmul_rn(__fmul_rn(hr[i], inv), w[i]);
}

// h (n,) += delta, flat.
extern "C" __global__ void add_rows(float* h, const float* delta, int n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) h[i] = __fadd_rn(h[i], delta[i]);
}

// dst (n_rows, d) = rows idx[0..n_rows) of src (., d).
extern "C" __global__ void gather_rows(const float* src, const int* idx, float* dst, int n_rows, int d) {
    const int r = blockIdx.x;
    if (r >= n_rows) return;
    const float* s = src + (long long)idx[r] * d;
    float* o = dst + (long long)r * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) o[i] = s[i];
}

// x (n,) = tanh(x / cap) * cap: Gemma's final logit soft-capping.
extern "C" __global__ void softcap(float* x, int n, float cap) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fmul_rn(tanhf(__fdiv_rn(x[i], cap)), cap);
}
