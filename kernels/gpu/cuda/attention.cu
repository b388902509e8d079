// Causal attention of each query row over its sequence's keys in the paged KV cache, every row of
// a batch in one launch: decode rows and prompt chunks alike (a row at position p sees keys
// 0..p, written before this kernel runs), grouped KV heads (query head h reads KV head
// h / (n_heads / n_kv), as llama.cpp), and a sliding window (a row seeing `len` keys reads only
// the last `window` of them, itself included). The page table is read here, in the kernel.
//
// One block per (row, head), ATT_WARPS warps taking the keys ATT_UNROLL at a time in turn, each
// keeping a running softmax (max, sum of weights, weighted sum of values); the warps' partial
// results are merged at the end. A lane holds dims lane, lane + 32, ... of the head (head_dim <= 256).
// q is rounded to float16 first, as the keys are (the CPU's attention, and llama.cpp's flash
// attention, do the same).
#include "common.cuh"

#define ATT_WARPS 8
#define ATT_UNROLL 4
#define ATT_MAX_DIM_PER_LANE 8

// grid (t_rows, n_heads), block 32 * ATT_WARPS. q, out (t_rows, n_heads, dh) float32; caches
// (num_pages * page_size, n_kv, dh) float16; table (., table_stride): row s lists sequence s's
// pages; row_seq[t] the sequence of row t, row_len[t] the keys it sees (0: a padding row, out 0).
extern "C" __global__ void paged_attention(const float* q, const unsigned short* k_cache,
                                           const unsigned short* v_cache, const int* table, int table_stride,
                                           const int* row_seq, const int* row_len, int t_rows, int n_heads,
                                           int n_kv, int dh, int page_size, int window, float scale,
                                           float* out) {
    __shared__ float sm_max[ATT_WARPS], sm_sum[ATT_WARPS];
    __shared__ float sm_acc[ATT_WARPS][ATT_MAX_DIM_PER_LANE * 32];
    const int t = blockIdx.x, h = blockIdx.y;
    if (t >= t_rows) return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int kvh = h / (n_heads / n_kv);
    const int len = row_len[t];
    const int lo = (window > 0 && len > window) ? len - window : 0;
    const int* pages = table + (long long)row_seq[t] * table_stride;
    const float* qr = q + ((long long)t * n_heads + h) * dh;
    float qv[ATT_MAX_DIM_PER_LANE], acc[ATT_MAX_DIM_PER_LANE];
#pragma unroll
    for (int i = 0; i < ATT_MAX_DIM_PER_LANE; i++) {
        const int d = lane + 32 * i;
        qv[i] = d < dh ? lb_half_to_float(lb_float_to_half(qr[d])) : 0.0f;   // float16, as the keys
        acc[i] = 0.0f;
    }
    // Each warp takes ATT_UNROLL keys at a time (its loads of all of them first, so that they are in
    // flight together: a decode row's loop is bound by memory latency, not arithmetic), the warps
    // ATT_UNROLL * ATT_WARPS keys apart.
    float m = -LB_INF, l = 0.0f;
    for (int j0 = lo + warp * ATT_UNROLL; j0 < len; j0 += ATT_WARPS * ATT_UNROLL) {
        float kf[ATT_UNROLL][ATT_MAX_DIM_PER_LANE], vf[ATT_UNROLL][ATT_MAX_DIM_PER_LANE], s[ATT_UNROLL];
#pragma unroll
        for (int u = 0; u < ATT_UNROLL; u++) {
            const int j = j0 + u < len ? j0 + u : j0;        // past the end: a valid key, its weight 0
            const long long base = (((long long)pages[j / page_size] * page_size + j % page_size) * n_kv + kvh) * dh;
#pragma unroll
            for (int i = 0; i < ATT_MAX_DIM_PER_LANE; i++) {
                const int d = lane + 32 * i;
                kf[u][i] = d < dh ? lb_half_to_float(k_cache[base + d]) : 0.0f;
                vf[u][i] = d < dh ? lb_half_to_float(v_cache[base + d]) : 0.0f;
            }
        }
        float m_new = m;
#pragma unroll
        for (int u = 0; u < ATT_UNROLL; u++) {
            float dot = 0.0f;
#pragma unroll
            for (int i = 0; i < ATT_MAX_DIM_PER_LANE; i++) dot += qv[i] * kf[u][i];
            s[u] = lb_warp_sum(dot) * scale;
            if (j0 + u < len) m_new = fmaxf(m_new, s[u]);
        }
        const float corr = expf(m - m_new);                  // 0 at the first keys (m = -inf)
        l *= corr;
#pragma unroll
        for (int i = 0; i < ATT_MAX_DIM_PER_LANE; i++) acc[i] *= corr;
#pragma unroll
        for (int u = 0; u < ATT_UNROLL; u++) {
            const float p = j0 + u < len ? expf(s[u] - m_new) : 0.0f;
            l += p;
#pragma unroll
            for (int i = 0; i < ATT_MAX_DIM_PER_LANE; i++) acc[i] += p * vf[u][i];
        }
        m = m_new;
    }
    if (lane == 0) {
        sm_max[warp] = m;
        sm_sum[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < ATT_MAX_DIM_PER_LANE; i++) {
        const int d = lane + 32 * i;
        if (d < dh) sm_acc[warp][d] = acc[i];
    }
    __syncthreads();
    if (warp != 0) return;
    float mx = -LB_INF;
    for (int w = 0; w < ATT_WARPS; w++) mx = fmaxf(mx, sm_max[w]);
    float f[ATT_WARPS], total = 0.0f;
    for (int w = 0; w < ATT_WARPS; w++) {
        f[w] = sm_sum[w] > 0.0f ? expf(sm_max[w] - mx) : 0.0f;     // a warp that saw no key adds nothing
        total += sm_sum[w] * f[w];
    }
    float* o = out + ((long long)t * n_heads + h) * dh;
#pragma unroll
    for (int i = 0; i < ATT_MAX_DIM_PER_LANE; i++) {
        const int d = lane + 32 * i;
        if (d >= dh) continue;
        float v = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) v += sm_acc[w][d] * f[w];
        o[d] = total > 0.0f ? v / total : 0.0f;
    }
}
