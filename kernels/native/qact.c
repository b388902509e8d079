/* Activations rounded to 8 bits per block of 32, as llama.cpp rounds them for a quantized dot product. */
#include <math.h>
#include <stdlib.h>

#include "qmatmul.h"
#include "qmatmul_impl.h"

/* One block: its quants into q[index(j)], returns d as float16 widened and the sum of the quants.
 * A NaN or infinity in the block gives d = NaN (and quants 0), so it reaches the output as NaN. */
static inline __attribute__((always_inline)) int round_block(const float *x, float *d_out, int8_t *q, int kind, int64_t b) {
    float amax = 0.0f;
    int finite = 1;
    for (int j = 0; j < QK; j++) {
        float a = fabsf(x[j]);
        finite &= a <= 3.4028235e38f;
        amax = a > amax ? a : amax;
    }
    if (!finite) {
        for (int j = 0; j < QK; j++) q[lb_act_index(kind, b, j)] = 0;
        *d_out = NAN;
        return 0;
    }
    const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < QK; j++) {
        int v = (int)nearbyintf(x[j] * id);          /* ties to even, as _mm256_round_ps in ggml */
        q[lb_act_index(kind, b, j)] = (int8_t)v;
        sum += v;
    }
    *d_out = lb_f16(lb_to_f16(d));
    return sum;
}

static void expand(lb_act *a);

/* The plain C path's rounder (qmatmul.c picks it only there: AVX2 and AVX-512 have their own), so
 * plain C here too, whatever the CPU: a forced LLMBUS_ISA=generic runs what a machine without AVX2
 * runs. */
void lb_act_round_generic(lb_act *a, const float *x) {
    for (int64_t t = 0; t < a->T; t++) {
        int8_t *q = a->q + t * a->nbp * QK;
        float *d = a->d + t * a->nbp, *side = a->side + t * a->nbp;
        for (int64_t b = 0; b < a->nb; b++) {
            int sum = round_block(x + t * a->K + b * QK, &d[b], q, a->kind, b);
            side[b] = d[b] * (float)sum;             /* |sum| <= 4064 and d has 11 bits: exact */
        }
    }
    expand(a);
}

/* Each block's d and side / lanes repeated once per lane of its kernel, and each lane's correction. A
 * q4 lane i of block b meets elements 4i..4i+3 and 16+4i..16+4i+3; a q8_0 lane i elements 4i..4i+3. */
static void expand(lb_act *a) {
    const int lanes = a->lanes, k = a->kind;
    const int32_t offset = k == LB_Q4_0 ? 8 : k == LB_Q8_0 ? 128 : 0;
    for (int64_t t = 0; t < a->T; t++) {
        const int8_t *q = a->q + t * a->nbp * QK;
        for (int64_t b = 0; b < a->nb; b++) {                /* padding blocks stay zero */
            const int64_t i = t * a->nbp + b;
            for (int l = 0; l < lanes; l++) {
                int32_t s = 0;
                for (int e = 4 * l; e < 4 * l + 4; e++)
                    s += q[lb_act_index(k, b, e)] + (lanes == 4 ? q[lb_act_index(k, b, e + 16)] : 0);
                a->dxe[i * lanes + l] = a->d[i];
                a->sxe[i * lanes + l] = a->side[i] / (float)lanes;     /* a power of two: exact */
                a->corr[i * lanes + l] = -offset * s;
            }
        }
    }
}

int lb_act_init(lb_act *a, int kind, const float *x, int64_t T, int64_t K, lb_rounder round) {
    a->kind = kind;
    a->T = T;
    a->K = K;
    a->nb = K / QK;
    a->nbp = (a->nb + LB_CHUNK - 1) / LB_CHUNK * LB_CHUNK;
    a->lanes = kind == LB_Q8_0 ? 8 : 4;
    const int64_t n = T * a->nbp;
    /* one zeroed allocation: the padding blocks must read as zero quants and zero scales */
    const int64_t nt = a->nb * (T + 8);
    const int64_t nv = kind == LB_Q8_0 && T > 1 ? (T + 7) / 8 * a->nb * 8 * QK : 0;   /* bytes of qv */
    a->mem = calloc((size_t)(n * QK + nv + (n * (2 + 3 * a->lanes) + 4 * nt) * (int64_t)sizeof(float)) + 64, 1);
    if (a->mem == NULL) return LB_ENOMEM;
    float *f = (float *)(((uintptr_t)a->mem + 63) & ~(uintptr_t)63);
    a->d = f;
    a->side = f + n;
    a->dxe = f + 2 * n;
    a->sxe = f + (2 + a->lanes) * n;
    a->corr = (int32_t *)(f + (2 + 2 * a->lanes) * n);
    a->side_t = f + (2 + 3 * a->lanes) * n;
    a->d_t = a->side_t + nt;
    a->sq_t = (int32_t *)(a->d_t + nt);
    a->sq8_t = a->sq_t + nt;
    a->q = (int8_t *)(a->sq8_t + nt);
    a->qv = nv ? a->q + n * QK : NULL;
    round(a, x);
    for (int64_t t = 0; t < T; t++)
        for (int64_t b = 0; b < a->nb; b++) {
            a->side_t[b * (T + 8) + t] = a->side[t * a->nbp + b];
            if (kind != LB_Q8_0) continue;       /* d_t, sq_t, sq8_t and qv: only kernels of q8_0's order read them */
            const int8_t *q = a->q + t * a->nbp * QK + b * QK;
            int32_t sq = 0;
            for (int e = 0; e < QK; e++) sq += q[e];
            a->d_t[b * (T + 8) + t] = a->d[t * a->nbp + b];
            a->sq_t[b * (T + 8) + t] = sq;
            a->sq8_t[b * (T + 8) + t] = -8 * sq;
            if (nv)
                for (int k = 0; k < QK / 4; k++)
                    memcpy(a->qv + (t / 8 * a->nb + b) * 8 * QK + k * QK + t % 8 * 4, q + 4 * k, 4);
        }
    return LB_OK;
}

void lb_act_free(lb_act *a) {
    free(a->mem);
    a->mem = NULL;
}

int lb_round_act(const float *x, int64_t T, int64_t K, float *out) {
    if (T < 0 || K <= 0 || K % QK) return LB_ESHAPE;
    if (T == 0) return LB_OK;
    lb_act a;
    if (lb_act_init(&a, LB_Q8_0, x, T, K, lb_chosen_rounder()) != LB_OK) return LB_ENOMEM;
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < K; k++)
            out[t * K + k] = a.d[t * a.nbp + k / QK] * (float)a.q[t * a.nbp * QK + k];   /* exact */
    lb_act_free(&a);
    return LB_OK;
}
