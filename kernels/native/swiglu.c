/* SwiGLU's gate, silu(gate) * up, with the exp of the attention's softmax (attention_lanes.h:
 * Cephes' expf, within 1 ulp).
 *
 * numpy's own exp is SIMD code that libm's expf does not match bit for bit, so the layer loop had
 * to leave C for five ufuncs a layer. Here the definition is this file's, for every CPU path and
 * vector width alike (only IEEE operations, -ffp-contract=off): e = exp(-|g|), which never
 * overflows; silu(g) = g / (1 + e) for g >= 0 and g e / (1 + e) below, the same function as
 * g / (1 + exp(-g)) with the same infinities and NaNs (silu(-inf) is NaN in both).
 */
#include "attention_lanes.h"
#include "ops.h"
#include "pool.h"
#include "qmatmul_impl.h"

static inline float silu_lane(float g)
{
    const float e = exp_lane(-fabsf(g));
    return (g >= 0.0f ? g : g * e) / (1.0f + e);
}

HOT void swiglu_rows(const float *gate_up, int64_t T, int64_t F, float *out)
{
    for (int64_t t = 0; t < T; t++) {
        const float *g = gate_up + t * 2 * F, *u = g + F;
        float *o = out + t * F;
        int64_t i = 0;
#ifdef LB_LANES_VECTOR
        for (; i + 8 <= F; i += 8) {
            v8 x, up;
            memcpy(&x, g + i, sizeof x);
            memcpy(&up, u + i, sizeof up);
            const v8 a = (v8)((i8)x & 0x7fffffff);                   /* |g|: the sign bit cleared */
            const v8 e = exp8(-a);
            const i8 pos = x >= 0.0f;                                 /* all ones where g >= 0 */
            const v8 num = (v8)(((i8)x & pos) | ((i8)(x * e) & ~pos));
            const v8 y = num / (1.0f + e) * up;
            memcpy(o + i, &y, sizeof y);
        }
#endif
        for (; i < F; i++)
            o[i] = silu_lane(g[i]) * u[i];
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void swiglu_avx2(const float *gate_up, int64_t T, int64_t F, float *out)
{
    swiglu_rows(gate_up, T, F, out);
}
#endif

typedef struct {
    void (*rows)(const float *, int64_t, int64_t, float *);
    const float *gate_up;
    float *out;
    int64_t T, F, step;
} split;

static void piece(void *ctx, int64_t i)
{
    const split *p = ctx;
    const int64_t t0 = i * p->step, n = t0 + p->step < p->T ? p->step : p->T - t0;
    p->rows(p->gate_up + t0 * 2 * p->F, n, p->F, p->out + t0 * p->F);
}

#define PIECE (1 << 14)      /* outputs worth a task of their own: ~15 us */

int lb_swiglu(const float *gate_up, int64_t T, int64_t F, float *out)
{
    if (T < 0 || F < 1)
        return LB_OPS_ESHAPE;
    if (T == 0)
        return LB_OPS_OK;
    split p = {swiglu_rows, gate_up, out, T, F, 1};
#if defined(__x86_64__) && defined(__GNUC__)
    if (lb_chosen_isa() >= LB_ISA_AVX2)
        p.rows = swiglu_avx2;
#endif
    /* A prompt's rows over the pool (each output is its own, so any split gives the same bits). */
    p.step = T * F <= PIECE ? T : (PIECE + F - 1) / F;
    lb_parallel_for((T + p.step - 1) / p.step, piece, &p);
    return LB_OPS_OK;
}
