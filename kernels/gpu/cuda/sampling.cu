// The greedy rows of the last shard's sampler (kernels/sampling.py) on the device, one block per
// row: the argmax (lowest id among equal logits), the raw log-softmax's log-sum-exp, the chosen
// token's log-probability and the n_top most likely ids (value descending, ties by lowest id),
// without the logits leaving the GPU. rowmax is NaN for a row holding NaN (the host then fails
// it, as kernels.sampling.sample does, with the rows whose max is +-inf).
#include "common.cuh"

#define TOP_THREADS 1024

// Whether (v, i) comes before (bv, bi) in the order of the top ids: larger value, then lower id.
__device__ __forceinline__ bool lb_before(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

// The first (v, i) in that order over the block, in every thread (every thread must call it).
__device__ __forceinline__ void lb_block_best(float* v, int* i) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(LB_FULL_MASK, *v, o);
        const int oi = __shfl_xor_sync(LB_FULL_MASK, *i, o);
        if (lb_before(ov, oi, *v, *i)) { *v = ov; *i = oi; }
    }
    __syncthreads();
    if (lane == 0) { sv[warp] = *v; si[warp] = *i; }
    __syncthreads();
    *v = lane < warps ? sv[lane] : -LB_INF;
    *i = lane < warps ? si[lane] : 0x7fffffff;
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(LB_FULL_MASK, *v, o);
        const int oi = __shfl_xor_sync(LB_FULL_MASK, *i, o);
        if (lb_before(ov, oi, *v, *i)) { *v = ov; *i = oi; }
    }
}

// grid rows, block TOP_THREADS. logits (., v): row_idx[r] is the logits row sampled as row r.
// token, logprob, rowmax (rows,); top_ids, top_lp (rows, n_top), n_top <= v.
extern "C" __global__ void greedy_top(const float* logits, int v, const int* row_idx, int rows, int n_top,
                                      int* token, float* logprob, float* rowmax, int* top_ids, float* top_lp) {
    const int r = blockIdx.x;
    if (r >= rows) return;
    const float* z = logits + (long long)row_idx[r] * v;
    float best = -LB_INF;
    int best_id = 0x7fffffff;
    float nan = 0.0f;
    for (int i = threadIdx.x; i < v; i += blockDim.x) {
        const float x = z[i];
        if (x != x) nan = 1.0f;
        else if (lb_before(x, i, best, best_id)) { best = x; best_id = i; }
    }
    lb_block_best(&best, &best_id);
    nan = lb_block_sum(nan);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < v; i += blockDim.x) sum += expf(z[i] - best);
    sum = lb_block_sum(sum);
    const float lse = best + logf(sum);
    if (threadIdx.x == 0) {
        token[r] = best_id;
        logprob[r] = z[best_id] - lse;
        rowmax[r] = nan > 0.0f ? LB_NAN : best;
    }
    // The n_top ids one at a time: each the first in the order among those after the previous one.
    float prev = LB_INF;
    int prev_id = -1;
    for (int n = 0; n < n_top; n++) {
        float b = -LB_INF;
        int bi = 0x7fffffff;
        for (int i = threadIdx.x; i < v; i += blockDim.x) {
            const float x = z[i];
            const bool after = x < prev || (x == prev && i > prev_id);
            if (x == x && after && lb_before(x, i, b, bi)) { b = x; bi = i; }
        }
        lb_block_best(&b, &bi);
        if (threadIdx.x == 0) {
            top_ids[(long long)r * n_top + n] = bi;
            top_lp[(long long)r * n_top + n] = b - lse;
        }
        prev = b;
        prev_id = bi;
    }
}
