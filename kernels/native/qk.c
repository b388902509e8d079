/* Entry of the K-quant and 5-bit kinds: x rounded as llama.cpp rounds it for each (Q8_K for the K
 * kinds, Q8_0 / Q8_1 for Q5_0 / Q5_1), then the chosen code path. */
#include <math.h>
#include <stdlib.h>

#include "qk.h"

/* One block of 256 as quantize_row_q8_K_ref: the signed element of largest magnitude (the first,
 * on ties) sets iscale = -127 / max; q = min(127, rint(iscale * x)) with ties to even, d = 1 / iscale.
 * A block whose max is so small (below 127 / FLT_MAX) that iscale overflows rounds to q 0 as
 * llama.cpp's nearest_int makes of an infinite product, with d 0. The definition lb_round_block_k_avx2
 * follows bit for bit. */
static void round_block_k(const float *x, int8_t *q, float *d, int16_t *bsums) {
    float amax = 0.0f, max = 0.0f;
    int finite = 1;
    for (int j = 0; j < QKK; j++) {
        const float ax = fabsf(x[j]);
        finite &= ax <= 3.4028235e38f;
        if (ax > amax) amax = ax, max = x[j];
    }
    const float iscale = finite && amax != 0.0f ? -127.0f / max : INFINITY;
    if (!(fabsf(iscale) <= 3.4028235e38f)) {      /* all zero or tiny: d 0; NaN or inf: d NaN reaches the output */
        lb_zero_block_k(q, bsums);
        *d = finite ? 0.0f : NAN;
        return;
    }
    for (int j = 0; j < QKK; j++) {
        const int v = (int)nearbyintf(iscale * x[j]);
        q[j] = (int8_t)(v < 127 ? v : 127);
    }
    for (int j = 0; j < QKK / 16; j++) {
        int s = 0;
        for (int l = 0; l < 16; l++) s += q[16 * j + l];
        bsums[j] = (int16_t)s;
    }
    *d = 1.0f / iscale;
}

int lb_act_k_init(lb_act_k *a, const float *x, int64_t T, int64_t K) {
    a->T = T;
    a->K = K;
    a->nb = K / QKK;
    const int64_t n = T * a->nb;
    a->mem = malloc((size_t)(n * (int64_t)sizeof(float) + n * 16 * (int64_t)sizeof(int16_t) + T * K) + 64);
    if (a->mem == NULL) return LB_ENOMEM;
    a->d = (float *)(((uintptr_t)a->mem + 63) & ~(uintptr_t)63);
    a->bsums = (int16_t *)(a->d + n);
    a->q = (int8_t *)(a->bsums + n * 16);
    lb_k_rounder round = round_block_k;
#if defined(__x86_64__)
    if (lb_chosen_isa() >= LB_ISA_AVX2) round = lb_round_block_k_avx2;
#endif
    for (int64_t t = 0; t < T; t++)
        for (int64_t b = 0; b < a->nb; b++)
            round(x + t * K + b * QKK, a->q + t * K + b * QKK, a->d + t * a->nb + b, a->bsums + (t * a->nb + b) * 16);
    return LB_OK;
}

void lb_act_k_free(lb_act_k *a) {
    free(a->mem);
    a->mem = NULL;
}

void lb_qk_pairs(const lb_act_k *a, int64_t groups, int8_t *xv) {
    for (int64_t g = 0; g < groups; g++)
        for (int64_t b = 0; b < a->nb; b++)
            for (int p = 0; p < 32; p++) {
                const int quad[2] = {16 * (p / 8) + p % 8, 16 * (p / 8) + 8 + p % 8};
                int8_t *o = xv + ((g * a->nb + b) * 32 + p) * LB_PAIR_BYTES;
                for (int r = 0; r < 8; r++)
                    for (int e = 0; e < 2; e++)
                        memcpy(o + 8 * r + 4 * e, a->q + (8 * g + r) * a->K + b * QKK + 4 * quad[e], 4);
            }
}

int lb_batch_x_init(lb_batch_x *x, const lb_act_k *a, int64_t groups, const lb_lanes *map) {
    const int64_t n = groups * a->nb;
    x->nb = a->nb;
    x->mem = malloc((size_t)(n * (32 * LB_PAIR_BYTES + 16 * 4 + 64 * 4)) + 64);
    if (x->mem == NULL) return LB_ENOMEM;
    x->dx = (float *)(((uintptr_t)x->mem + 63) & ~(uintptr_t)63);
    x->bs = (int32_t *)(x->dx + n * 16);
    x->xv = (int8_t *)(x->bs + n * 64);
    lb_qk_pairs(a, groups, x->xv);
    for (int64_t g = 0; g < groups; g++)
        for (int64_t b = 0; b < a->nb; b++)
            for (int L = 0; L < 16; L++) {
                x->dx[(g * a->nb + b) * 16 + L] = a->d[(8 * g + map->dx_row[L]) * a->nb + b];
                const int16_t *bs = a->bsums + ((8 * g + map->bs_row[L]) * a->nb + b) * 16;
                for (int v = 0; v < 4; v++) {
                    const int grp = 4 * v + 2 * map->bs_e[L];
                    x->bs[((g * a->nb + b) * 4 + v) * 16 + L] =
                        (int32_t)((uint32_t)(uint16_t)bs[grp] | (uint32_t)(uint16_t)bs[grp + 1] << 16);
                }
            }
    return LB_OK;
}

void lb_batch_x_free(lb_batch_x *x) {
    free(x->mem);
    x->mem = NULL;
}

int lb_qk_round(int kind, const float *x, int64_t T, int64_t K, lb_qk_act *a) {
    if (lb_is_qk(kind)) return lb_act_k_init(&a->ak, x, T, K);
    return lb_act_init(&a->a5, LB_Q8_0, x, T, K, lb_chosen_rounder());    /* Q8_0's order: the elements' own */
}

void lb_qk_multiply(int kind, const lb_qk_act *a, const uint8_t *w, int64_t N, float *out) {
    const lb_act_k *ak = lb_is_qk(kind) ? &a->ak : NULL;
    const lb_act *a5 = lb_is_qk(kind) ? NULL : &a->a5;
    if (kind == LB_Q4_0_T16 && lb_chosen_isa() < LB_ISA_AVX2) {       /* the plain C path reads tiles slowly */
        lb_q4_0t_matmul_generic(a5, w, N, out);
        return;
    }
#if defined(__x86_64__)
    if (ak != NULL && lb_chosen_isa() >= LB_ISA_AVX512) {
        lb_qk_matmul_avx512(kind, ak, w, N, out);
        return;
    }
    if (kind == LB_Q4_0 && lb_chosen_isa() >= LB_ISA_AVX512) {
        lb_q4_0_matmul_avx512(a5, w, N, out);
        return;
    }
    if (kind == LB_Q4_0_T16 && lb_chosen_isa() >= LB_ISA_AVX512) {
        lb_q4_0t_matmul_avx512(a5, w, N, out);
        return;
    }
    if (kind == LB_Q4_0_T16) {
        lb_q4_0t_matmul_avx2(a5, w, N, out);
        return;
    }
    if (lb_chosen_isa() >= LB_ISA_AVX2) {     /* Q5_0/Q5_1 run it on AVX-512 machines too */
        lb_qk_matmul_avx2(kind, ak, a5, w, N, out);
        return;
    }
#endif
    lb_qk_matmul_generic(kind, ak, a5, w, N, out);
}

void lb_qk_free(int kind, lb_qk_act *a) {
    if (lb_is_qk(kind)) lb_act_k_free(&a->ak);
    else lb_act_free(&a->a5);
}

int lb_round_act_k(const float *x, int64_t T, int64_t K, int8_t *q, float *d) {
    if (T < 0 || K <= 0 || K % QKK) return LB_ESHAPE;
    if (T == 0) return LB_OK;
    lb_act_k a;
    if (lb_act_k_init(&a, x, T, K) != LB_OK) return LB_ENOMEM;
    memcpy(q, a.q, (size_t)(T * K));
    memcpy(d, a.d, (size_t)(T * a.nb) * sizeof(float));
    lb_act_k_free(&a);
    return LB_OK;
}
