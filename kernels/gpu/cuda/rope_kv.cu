// From the fused q|k|v projection to what attention reads, in one pass per (token, head):
// the q/k/v bias (qwen2), the per-head q/k RMSNorm (qwen3, gemma3), RoPE on q and k in llama.cpp's
// normal pairing (dims 2i, 2i+1: kernels/rope.py), then q into q_out (float32) and k, v into the
// token's KV slot (float16). The angle pos * freq is formed and its cos/sin taken in double, then
// scaled by mscale and rounded to float, as kernels.rope.rope_tables does; no table crosses to the
// device per step, only positions.
#include "common.cuh"

#define LB_MAX_HEAD_DIM 256

// grid (t_rows, n_heads + 2 n_kv), block: head_dim rounded up to a multiple of 32 (<= 256).
// qkv (t_rows, (n_heads + 2 n_kv) dh); bias the same width; q_norm, k_norm (dh,); pos, slot
// (t_rows,): slot = page * page_size + offset in the page, < 0 for a padding row (nothing written);
// freqs (n_rot / 2,); caches (num_pages * page_size, n_kv, dh); q_out (t_rows, n_heads, dh).
extern "C" __global__ void qkv_rope_kv(const float* qkv, const float* bias, int has_bias, const float* q_norm,
                                       const float* k_norm, int has_qk_norm, float eps, const int* pos,
                                       const int* slot, const double* freqs, double mscale, int n_rot, int t_rows,
                                       int n_heads, int n_kv, int dh, float* q_out, unsigned short* k_cache,
                                       unsigned short* v_cache) {
    __shared__ float vals[LB_MAX_HEAD_DIM];
    const int t = blockIdx.x, hi = blockIdx.y, j = threadIdx.x;
    if (t >= t_rows) return;
    const int kind = hi < n_heads ? 0 : (hi < n_heads + n_kv ? 1 : 2);     // q, k or v head
    const int s = slot[t];
    if (kind != 0 && s < 0) return;                  // the whole block: no KV for a padding row
    const long long width = (long long)(n_heads + 2 * n_kv) * dh;
    float v = 0.0f;
    if (j < dh) {
        v = qkv[t * width + (long long)hi * dh + j];
        if (has_bias) v = __fadd_rn(v, bias[hi * dh + j]);
    }
    if (kind == 2) {
        if (j < dh) v_cache[((long long)s * n_kv + (hi - n_heads - n_kv)) * dh + j] = lb_float_to_half(v);
        return;
    }
    if (has_qk_norm) {                               // the same for every thread of the block
        const float ss = lb_block_sum(j < dh ? __fmul_rn(v, v) : 0.0f);
        const float inv = 1.0f / sqrtf(__fadd_rn(ss / (float)dh, eps));
        if (j < dh) v = __fmul_rn(__fmul_rn(v, inv), (kind == 0 ? q_norm : k_norm)[j]);
    }
    if (j < dh) vals[j] = v;
    __syncthreads();
    float r = v;
    if (j < n_rot) {
        const double a = (double)pos[t] * freqs[j >> 1];
        const float c = (float)(cos(a) * mscale), sn = (float)(sin(a) * mscale);
        const float x0 = vals[j & ~1], x1 = vals[j | 1];
        r = (j & 1) ? __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c))
                    : __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
    }
    if (j >= dh) return;
    if (kind == 0) q_out[((long long)t * n_heads + hi) * dh + j] = r;
    else k_cache[((long long)s * n_kv + (hi - n_heads)) * dh + j] = lb_float_to_half(r);
}
