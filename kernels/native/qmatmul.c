/* Entry point: checks arguments, picks the widest code path the CPU has, and the plain C path. */
#include "qmatmul.h"
#include "qmatmul_impl.h"
#include "qk.h"

static lb_kernel chosen;
static lb_rounder chosen_round;
static int chosen_isa = -1;

static int best_isa(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return LB_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return LB_ISA_AVX2;
#endif
    return LB_ISA_GENERIC;
}

int lb_set_isa(int isa) {
    int best = best_isa();
    if (isa < 0 || isa > best) isa = best;
    switch (isa) {
#if defined(__x86_64__)
    case LB_ISA_AVX512: chosen = lb_qmatmul_avx512; chosen_round = lb_act_round_avx512; break;
    case LB_ISA_AVX2: chosen = lb_qmatmul_avx2; chosen_round = lb_act_round_generic; break;
#endif
    default: isa = LB_ISA_GENERIC; chosen = lb_qmatmul_generic; chosen_round = lb_act_round_generic; break;
    }
    chosen_isa = isa;
    return isa;
}

int lb_chosen_isa(void) {
    if (chosen_isa < 0) lb_set_isa(LB_ISA_AUTO);
    return chosen_isa;
}

lb_rounder lb_chosen_rounder(void) {
    if (chosen_isa < 0) lb_set_isa(LB_ISA_AUTO);
    return chosen_round;
}

int lb_qmatmul(int kind, const float *x, int64_t T, int64_t K, const uint8_t *w, int64_t N, float *out) {
    if (lb_qk_block_bytes(kind)) return lb_qk_matmul(kind, x, T, K, w, N, out);   /* qk.c */
    if (lb_block_bytes(kind) == 0) return LB_EKIND;
    if (T < 0 || N < 0 || K <= 0 || K % QK) return LB_ESHAPE;
    if (T == 0 || N == 0) return LB_OK;
    if (chosen_isa < 0) lb_set_isa(LB_ISA_AUTO);   /* a benign race: every thread picks the same path */
    lb_act a;
    if (lb_act_init(&a, kind, x, T, K, chosen_round) != LB_OK) return LB_ENOMEM;
    chosen(kind, &a, w, N, out);
    lb_act_free(&a);
    return LB_OK;
}

/* Plain C, the definition the vector paths follow: per block the exact integer sum of quants times
 * activation quants, scaled by d_w * d_x in float32 (q4_0's -8 offset folded into the integer sum);
 * q4_1's minimum adds m * d_x * sum(q_x). */
void lb_qmatmul_generic(int kind, const lb_act *a, const uint8_t *w, int64_t N, float *out) {
    const int64_t nb = a->nb, bb = lb_block_bytes(kind);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t t = 0; t < a->T; t++) {
            const int8_t *xq = a->q + t * a->nbp * QK;
            const float *dx = a->d + t * a->nbp, *sx = a->side + t * a->nbp;
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = w + (n * nb + b) * bb;
                int32_t p = 0;
                if (kind == LB_Q8_0) {
                    for (int j = 0; j < QK; j++) p += (int8_t)blk[2 + j] * xq[lb_act_index(kind, b, j)];
                } else {
                    const uint8_t *qs = blk + (kind == LB_Q4_1 ? 4 : 2);
                    const int off = kind == LB_Q4_0 ? 8 : 0;
                    for (int j = 0; j < QK / 2; j++)
                        p += ((qs[j] & 0x0f) - off) * xq[lb_act_index(kind, b, j)] +
                             ((qs[j] >> 4) - off) * xq[lb_act_index(kind, b, j + 16)];
                }
                acc += lb_f16(lb_u16(blk)) * dx[b] * (float)p;
                if (kind == LB_Q4_1) acc += lb_f16(lb_u16(blk + 2)) * sx[b];
            }
            out[t * N + n] = acc;
        }
    }
}
