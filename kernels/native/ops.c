/* Small fused ops of the CPU float32 forward (RMSNorm with its residual add; RoPE with the KV write;
 * what other architectures add to llama's layer: q/k/v biases, per-head q/k norms, the GELU gate).
 *
 * At one token per step each numpy op is a few microseconds of dispatch and allocation around
 * well under a microsecond of arithmetic, and a decode step runs ~20 of them per layer. These
 * do the same arithmetic in one call each, in the same order and roundings as the numpy kernels
 * (kernels/norm.py, kernels/rope.py; built with -ffp-contract=off, so no fused multiply-adds),
 * so results are bit-identical to them.
 */
#include "ops.h"
#include "qmatmul_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PW_BLOCK 128     /* numpy's PW_BLOCKSIZE */

/* RMSNorm once per code path (norm_path.h): the path lb_set_isa picked runs (qmatmul.c), so that
 * forcing a narrower one (LLMBUS_ISA=avx2) forces it here too, as target_clones, which follows the
 * CPU, did not. Every copy does the same IEEE operations in the same order: the same bits. */
#define NORM_PATH generic
#define NORM_TGT
#include "norm_path.h"
#if defined(__x86_64__) && defined(__GNUC__)
#define NORM_PATH avx2
#define NORM_TGT __attribute__((target("avx2")))
#include "norm_path.h"
#define NORM_PATH avx512
#ifdef LB_SIMDE_AVX512           /* a test build, its AVX-512 path emulated: this CPU may lack AVX-512 */
#define NORM_TGT
#else
#define NORM_TGT __attribute__((target("avx512f")))
#endif
#include "norm_path.h"
#endif

int lb_rms_norm(float *h, const float *delta, const float *w, int64_t T, int64_t D, float eps, float *out)
{
    if (T < 0 || D < 1)
        return LB_OPS_ESHAPE;
    switch (lb_chosen_isa()) {
#if defined(__x86_64__) && defined(__GNUC__)
    case LB_ISA_AVX512: avx512_norm_rows(h, delta, w, T, D, eps, out); break;
    case LB_ISA_AVX2: avx2_norm_rows(h, delta, w, T, D, eps, out); break;
#endif
    default: generic_norm_rows(h, delta, w, T, D, eps, out); break;
    }
    return LB_OPS_OK;
}

int lb_rms_norm_heads(float *x, int64_t T, int64_t stride, int64_t heads, int64_t Dh, const float *w, float eps)
{
    if (T < 0 || heads < 1 || Dh < 1 || stride < heads * Dh)
        return LB_OPS_ESHAPE;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < heads; h++)
            generic_norm_row(x + t * stride + h * Dh, w, Dh, eps, x + t * stride + h * Dh);
    return LB_OPS_OK;
}

int lb_add_bias(float *x, const float *b, int64_t T, int64_t D)
{
    if (T < 0 || D < 1)
        return LB_OPS_ESHAPE;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < D; i++)
            x[t * D + i] += b[i];
    return LB_OPS_OK;
}

int lb_geglu(const float *gate_up, int64_t T, int64_t F, const float *table, float *out)
{
    if (T < 0 || F < 1)
        return LB_OPS_ESHAPE;
    for (int64_t t = 0; t < T; t++) {
        const float *g = gate_up + t * 2 * F, *u = g + F;
        float *o = out + t * F;
        for (int64_t i = 0; i < F; i++) {
            const float x = g[i];
            const float y = x <= -10.0f ? 0.0f : x >= 10.0f ? x : table[lb_f16_np(x)];
            o[i] = y * u[i];
        }
    }
    return LB_OPS_OK;
}

static void rope_row(const float *x, const float *c, const float *s, int64_t Dh, int64_t n_rot, float *y)
{
    for (int64_t i = 0; i < n_rot / 2; i++) {
        const float x0 = x[2 * i], x1 = x[2 * i + 1];
        y[2 * i] = x0 * c[i] - x1 * s[i];
        y[2 * i + 1] = x0 * s[i] + x1 * c[i];
    }
    memcpy(y + n_rot, x + n_rot, (size_t)(Dh - n_rot) * sizeof(float));
}

static void halves(const float *x, int64_t n, uint16_t *out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = lb_f16_np(x[i]);
}

int lb_rope_write_kv(const float *qkv, int64_t T, int64_t H, int64_t KVH, int64_t Dh, int64_t n_rot,
                     const float *cos, const float *sin, const int64_t *pages, const int64_t *slots,
                     uint16_t *k_cache, uint16_t *v_cache, int64_t num_pages, int64_t page, float *q_out)
{
    if (T < 0 || H < 1 || KVH < 1 || Dh < 1 || n_rot < 0 || n_rot % 2 || n_rot > Dh || page < 1)
        return LB_OPS_ESHAPE;
    for (int64_t t = 0; t < T; t++)                        /* check every slot before writing any */
        if (pages[t] < 0 || pages[t] >= num_pages || slots[t] < 0 || slots[t] >= page)
            return LB_OPS_EPAGE;
    const int64_t row = (H + 2 * KVH) * Dh, half = n_rot / 2;
    float *kr = malloc((size_t)Dh * sizeof(float));        /* a rotated key head, before rounding */
    if (!kr)
        return LB_OPS_ENOMEM;
    for (int64_t t = 0; t < T; t++) {
        const float *q = qkv + t * row, *k = q + H * Dh, *v = k + KVH * Dh;
        const float *c = cos + t * half, *s = sin + t * half;
        const int64_t at = (pages[t] * page + slots[t]) * KVH * Dh;
        for (int64_t h = 0; h < H; h++)
            rope_row(q + h * Dh, c, s, Dh, n_rot, q_out + (t * H + h) * Dh);
        for (int64_t h = 0; h < KVH; h++) {
            rope_row(k + h * Dh, c, s, Dh, n_rot, kr);
            halves(kr, Dh, k_cache + at + h * Dh);
        }
        halves(v, KVH * Dh, v_cache + at);
    }
    free(kr);
    return LB_OPS_OK;
}
