/* Entry point: checks arguments, picks the widest code path the CPU has, and the plain C path. */
#include "qmatmul.h"
#include "qmatmul_impl.h"

static lb_kernel chosen;
static int chosen_isa = -1;

static int best_isa(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
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
    case LB_ISA_AVX512: chosen = lb_qmatmul_avx512; break;
    case LB_ISA_AVX2: chosen = lb_qmatmul_avx2; break;
#endif
    default: isa = LB_ISA_GENERIC; chosen = lb_qmatmul_generic; break;
    }
    chosen_isa = isa;
    return isa;
}

int lb_qmatmul(int kind, const float *x, int64_t T, int64_t K, const uint8_t *w, int64_t N, float *out) {
    if (lb_block_bytes(kind) == 0) return LB_EKIND;
    if (T < 0 || N < 0 || K <= 0 || K % QK) return LB_ESHAPE;
    if (T == 0 || N == 0) return LB_OK;
    if (chosen_isa < 0) lb_set_isa(LB_ISA_AUTO);   /* a benign race: every thread picks the same path */
    chosen(kind, x, T, K, w, N, out);
    return LB_OK;
}

/* Dequantize one block of 32 weights exactly as ggml does (fp32 multiply, then add). */
static void dequant_block(int kind, const uint8_t *b, float *y) {
    if (kind == LB_Q8_0) {
        float d = lb_f16(lb_u16(b));
        for (int j = 0; j < QK; j++) y[j] = (float)(int8_t)b[2 + j] * d;
    } else if (kind == LB_Q4_1) {
        float d = lb_f16(lb_u16(b)), m = lb_f16(lb_u16(b + 2));
        for (int j = 0; j < QK / 2; j++) {
            y[j] = (float)(b[4 + j] & 0x0f) * d + m;
            y[j + QK / 2] = (float)(b[4 + j] >> 4) * d + m;
        }
    } else {
        float d = lb_f16(lb_u16(b));
        for (int j = 0; j < QK / 2; j++) {
            y[j] = (float)((b[2 + j] & 0x0f) - 8) * d;
            y[j + QK / 2] = (float)((b[2 + j] >> 4) - 8) * d;
        }
    }
}

/* Plain C: dequantize each block once, use it for every row of x. */
void lb_qmatmul_generic(int kind, const float *x, int64_t T, int64_t K, const uint8_t *w, int64_t N, float *out) {
    const int64_t nb = K / QK, bb = lb_block_bytes(kind);
    float y[QK];
    for (int64_t n = 0; n < N; n++) {
        for (int64_t t = 0; t < T; t++) out[t * N + n] = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            dequant_block(kind, w + n * nb * bb + b * bb, y);
            for (int64_t t = 0; t < T; t++) {
                const float *xb = x + t * K + b * QK;
                float s = 0.0f;
                for (int j = 0; j < QK; j++) s += xb[j] * y[j];
                out[t * N + n] += s;
            }
        }
    }
}

/* All N rows of w as float32 (N, K), exactly as dequant_block: for a long prompt, where BLAS's
 * packed sgemm on the float weights outruns the block kernels (kernels/qmatmul.py). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
int lb_dequantize(int kind, const uint8_t *w, int64_t N, int64_t K, float *out) {
    if (lb_block_bytes(kind) == 0) return LB_EKIND;
    if (N < 0 || K <= 0 || K % QK) return LB_ESHAPE;
    const int64_t nb = N * (K / QK), bb = lb_block_bytes(kind);
    for (int64_t b = 0; b < nb; b++) dequant_block(kind, w + b * bb, out + b * QK);
    return LB_OK;
}
