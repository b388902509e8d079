// Helpers every llmbus CUDA kernel shares: float16 bits <-> float32 without cuda_fp16.h (NVRTC
// compiles these sources with no system headers), and sums across a warp and a block.
#ifndef LLMBUS_COMMON_CUH
#define LLMBUS_COMMON_CUH

#define LB_FULL_MASK 0xffffffffu
// math.h's INFINITY and NAN are not defined under NVRTC (no system headers): their bits.
#define LB_INF __int_as_float(0x7f800000)
#define LB_NAN __int_as_float(0x7fc00000)

// float16 is stored as its 16 bits (unsigned short): the KV cache, and F16 weights.
__device__ __forceinline__ float lb_half_to_float(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ unsigned short lb_float_to_half(float f) {   // round to nearest even
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// A float16 at any byte address (GGUF blocks are only 2-byte aligned), little endian.
__device__ __forceinline__ float lb_load_half(const unsigned char* p) {
    return lb_half_to_float((unsigned short)(p[0] | (p[1] << 8)));
}

// The sum of v over the warp, in every lane.
__device__ __forceinline__ float lb_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(LB_FULL_MASK, v, o);
    return v;
}

// The sum of v over the block, in every thread. Every thread of the block must call it
// (it synchronizes); blockDim.x a multiple of 32, at most 1024.
__device__ __forceinline__ float lb_block_sum(float v) {
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = lb_warp_sum(v);
    __syncthreads();                       // part[] may still be read by a previous call
    if (lane == 0) part[warp] = v;
    __syncthreads();
    float s = lane < warps ? part[lane] : 0.0f;
    return lb_warp_sum(s);
}

#endif
