/* Plain C for the K-quant and 5-bit kinds, the definition the vector paths follow. A K block gives
 * exact integers: sumi = sum over its 16-element groups of scale * (weight quants . x quants), and
 * (Q4_K, Q5_K) summin = sum of min * bsum; then acc += (d_w d_x) sumi and accm += (dmin_w d_x) summin
 * in float32, out = acc - accm. Q5_0/Q5_1 go as Q4_0/Q4_1 do (qmatmul.c), with a fifth bit; Q4_0's
 * float step is fused (qk.h's lb_q4_0_step). */
#include "qk.h"

/* A K block's weight quants w[256] (Q6_K's with its -32 applied) in x's order, each 16-group's scale
 * and min, and the block's d and dmin. */
static void unpack_k(int kind, const uint8_t *blk, int8_t v[QKK], int32_t sc[16], int32_t mn[16], float *d, float *dmin) {
    if (kind == LB_Q6_K) {
        const uint8_t *ql = blk, *qh = blk + 128;
        const int8_t *s = (const int8_t *)(blk + 192);
        for (int h = 0; h < 2; h++, ql += 64, qh += 32)
            for (int l = 0; l < 32; l++) {
                int8_t *o = v + 128 * h + l;
                o[0] = (int8_t)(((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32);
                o[32] = (int8_t)(((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32);
                o[64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                o[96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        for (int g = 0; g < 16; g++) sc[g] = s[g], mn[g] = 0;
        *d = lb_f16(lb_u16(blk + 208));
        *dmin = 0.0f;
        return;
    }
    uint8_t s8[8], m8[8];
    lb_k4_scales(blk + 4, s8, m8);
    const uint8_t *qs = blk + (kind == LB_Q5_K ? 48 : 16), *qh = blk + 16;
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++) {
            int lo = qs[32 * j + l] & 0x0f, hi = qs[32 * j + l] >> 4;
            if (kind == LB_Q5_K) {
                lo |= ((qh[l] >> (2 * j)) & 1) << 4;
                hi |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
            }
            v[64 * j + l] = (int8_t)lo;
            v[64 * j + 32 + l] = (int8_t)hi;
        }
    for (int g = 0; g < 16; g++) sc[g] = s8[g / 2], mn[g] = m8[g / 2];
    *d = lb_f16(lb_u16(blk));
    *dmin = lb_f16(lb_u16(blk + 2));
}

static void matmul_k(int kind, const lb_act_k *a, const uint8_t *w, int64_t N, float *out) {
    const int64_t nb = a->nb, bb = lb_qk_block_bytes(kind);
    int8_t v[QKK];
    int32_t sc[16], mn[16];
    for (int64_t n = 0; n < N; n++)
        for (int64_t t = 0; t < a->T; t++) {
            float acc = 0.0f, accm = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                float d, dmin;
                unpack_k(kind, w + (n * nb + b) * bb, v, sc, mn, &d, &dmin);
                const int8_t *xq = a->q + t * a->K + b * QKK;
                const int16_t *bs = a->bsums + (t * nb + b) * 16;
                int32_t sumi = 0, summin = 0;
                for (int g = 0; g < 16; g++) {
                    int32_t p = 0;
                    for (int l = 0; l < 16; l++) p += v[16 * g + l] * xq[16 * g + l];
                    sumi += sc[g] * p;
                    summin += mn[g] * bs[g];
                }
                const float dx = a->d[t * nb + b];
                acc += d * dx * (float)sumi;
                accm += dmin * dx * (float)summin;
            }
            out[t * N + n] = acc - accm;
        }
}

static void matmul_q5(int kind, const lb_act *a, const uint8_t *w, int64_t N, float *out) {
    const int64_t nb = a->nb, bb = lb_qk_block_bytes(kind);
    const int off = kind == LB_Q5_0 ? 16 : kind == LB_Q4_0 ? 8 : 0, head = kind == LB_Q5_1 ? 4 : 2;
    for (int64_t n = 0; n < N; n++)
        for (int64_t t = 0; t < a->T; t++) {
            const int8_t *xq = a->q + t * a->nbp * QK;
            const float *dx = a->d + t * a->nbp, *sx = a->side + t * a->nbp;
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = w + (n * nb + b) * bb;
                const uint32_t qh = kind == LB_Q4_0 ? 0 : lb_u32(blk + head);     /* Q4_0: no fifth bits */
                const uint8_t *qs = blk + head + (kind == LB_Q4_0 ? 0 : 4);
                int32_t p = 0;
                for (int j = 0; j < QK / 2; j++)
                    p += (((qs[j] & 0x0f) | (((qh >> j) & 1) << 4)) - off) * xq[b * QK + j] +
                         (((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - off) * xq[b * QK + j + 16];
                if (kind == LB_Q4_0) acc = lb_q4_0_step(acc, p, lb_f16(lb_u16(blk)), dx[b]);
                else acc += lb_f16(lb_u16(blk)) * dx[b] * (float)p;
                if (kind == LB_Q5_1) acc += lb_f16(lb_u16(blk + 2)) * sx[b];
            }
            out[t * N + n] = acc;
        }
}

void lb_qk_matmul_generic(int kind, const lb_act_k *ak, const lb_act *a5, const uint8_t *w, int64_t N, float *out) {
    if (lb_is_qk(kind)) matmul_k(kind, ak, w, N, out);
    else matmul_q5(kind, a5, w, N, out);
}
