/* Small fused ops of the CPU float32 forward, computed exactly as the numpy kernels compute them. */
#ifndef LB_OPS_H
#define LB_OPS_H

#include <stdint.h>

#if defined(__GNUC__)
#define LB_OPS_API __attribute__((visibility("default")))
#else
#define LB_OPS_API
#endif

enum { LB_OPS_OK = 0, LB_OPS_ESHAPE = -2, LB_OPS_EPAGE = -3, LB_OPS_ENOMEM = -4 };

/* h, out (T, D); delta (T, D) or NULL; w (D,). If delta: h += delta (the residual add) first.
 * Then out = h / sqrt(mean(h^2) + eps) * w per row, the mean summed as numpy sums (pairwise). */
LB_OPS_API int lb_rms_norm(float *h, const float *delta, const float *w, int64_t T, int64_t D, float eps,
                           float *out);

/* qkv (T, (H + 2 KVH) * Dh) = [q | k | v]; cos, sin (T, n_rot / 2). Writes q rotated to q_out
 * (T, H, Dh), k rotated and v as they are to slot slots[t] of page pages[t] of k_cache, v_cache
 * (num_pages, page, KVH, Dh) of float16 bits, each rounded as numpy's cast rounds it. Rotation: dims
 * (2i, 2i+1) by the angle of cos/sin[t, i]; dims past n_rot are copied. */
LB_OPS_API int lb_rope_write_kv(const float *qkv, int64_t T, int64_t H, int64_t KVH, int64_t Dh, int64_t n_rot,
                                const float *cos, const float *sin, const int64_t *pages, const int64_t *slots,
                                uint16_t *k_cache, uint16_t *v_cache, int64_t num_pages, int64_t page,
                                float *q_out);

/* x (T rows `stride` floats apart), each row's first heads * Dh floats `heads` heads of Dh; w (Dh,).
 * In place, each head normed as lb_rms_norm norms a row (qwen3's and gemma3's q and k norms). */
LB_OPS_API int lb_rms_norm_heads(float *x, int64_t T, int64_t stride, int64_t heads, int64_t Dh, const float *w,
                                 float eps);

/* x (T, D) += b (D,) on every row (qwen2's q/k/v biases). */
LB_OPS_API int lb_add_bias(float *x, const float *b, int64_t T, int64_t D);

/* gate_up (T, 2F) = [gate | up] -> out (T, F) = gelu(gate) * up, gelu as kernels.ffn.gelu_tanh:
 * table[float16 bits of x] (table: 65536 floats, the rounded GELU of each float16, made by
 * kernels.ffn.gelu_tanh_table), exactly 0 for x <= -10 and x for x >= 10. */
LB_OPS_API int lb_geglu(const float *gate_up, int64_t T, int64_t F, const float *table, float *out);

/* gate_up (T, 2F) = [gate | up] -> out (T, F) = silu(gate) * up, silu(g) = g / (1 + exp(-g)) with
 * the library's own exp (swiglu.c says how; the same bits on every CPU path). */
LB_OPS_API int lb_swiglu(const float *gate_up, int64_t T, int64_t F, float *out);

#endif
