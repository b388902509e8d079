/* Entry point: checks arguments, picks the widest code path the CPU has, and the plain C path. */
#include "qmatmul.h"
#include "qmatmul_impl.h"
#include "pool.h"
#include "qk.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static lb_kernel chosen;
static lb_rounder chosen_round;
static int chosen_isa = -1;

static int best_isa(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
#ifdef LB_SIMDE_AVX512        /* a test build (simde_avx512.h): the AVX-512 path runs emulated beside native AVX2 */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return LB_ISA_AVX512;
#endif
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
    case LB_ISA_AVX2: chosen = lb_qmatmul_avx2; chosen_round = lb_act_round_avx2; break;
#endif
    default: isa = LB_ISA_GENERIC; chosen = lb_qmatmul_generic; chosen_round = lb_act_round_generic; break;
    }
    chosen_isa = isa;
    return isa;
}

lb_rounder lb_chosen_rounder(void) {
    if (chosen_isa < 0) lb_set_isa(LB_ISA_AUTO);
    return chosen_round;
}

int lb_isa(void) { return lb_chosen_isa(); }

int lb_chosen_isa(void) {
    if (chosen_isa < 0) lb_set_isa(LB_ISA_AUTO);
    return chosen_isa;
}

/* x rounded for a kind of either family: this file's (Q4_1, Q8_0, and Q4_0 on AVX-512) or qk.c's (K
 * kinds, Q5_x, and Q4_0 on the other paths). */
typedef union {
    lb_act a;
    lb_qk_act qk;
} rounded;

/* Q4_0 sums each block exactly before any float (q32_tiles.h, q4_0_avx512.c: the plain C code's bits)
 * on every path; its tiles are qk.c's. */
static int qk_family(int kind) { return lb_qk_block_bytes(kind) != 0; }

static int round_x(int kind, const float *x, int64_t T, int64_t K, rounded *r) {
    if (qk_family(kind)) return lb_qk_round(kind, x, T, K, &r->qk);
    return lb_act_init(&r->a, kind, x, T, K, chosen_round);
}

static void multiply(int kind, const rounded *r, const uint8_t *w, int64_t N, float *out) {
    if (qk_family(kind)) lb_qk_multiply(kind, &r->qk, w, N, out);
    else chosen(kind, &r->a, w, N, out);
}

static void release(int kind, rounded *r) {
    if (qk_family(kind)) lb_qk_free(kind, &r->qk);
    else lb_act_free(&r->a);
}

/* Elements per block and bytes per block of a kind (0 bytes: not a kind of ours). */
static int64_t per_block(int kind) { return lb_is_qk(kind) ? QKK : QK; }
static int64_t block_bytes(int kind) { return lb_qk_block_bytes(kind) ? lb_qk_block_bytes(kind) : lb_block_bytes(kind); }

/* All of out from x: the activations rounded, then the path's kernel. */
static int whole(int kind, const float *x, int64_t T, int64_t K, const uint8_t *w, int64_t N, float *out) {
    rounded r;
    if (round_x(kind, x, T, K, &r) != LB_OK) return LB_ENOMEM;
    multiply(kind, &r, w, N, out);
    release(kind, &r);
    return LB_OK;
}

/* Splitting over threads (pool.c), the same for both families. A kernel computes each out[t, n] alone,
 * in an order fixed by the group of activation rows (up to 16 from a multiple of it) and of weight rows
 * (1, 2, 4 or 8 from a multiple of it) it falls in, and the K/Q5 kernels' order fixed by neither; pieces
 * of SPLIT rows (a multiple of every group) keep every group as it is, so every thread count gives the
 * bits of one thread. Many rows (a prompt) split by activation rows, each piece rounding its own rows;
 * few (decode) by weight rows over one rounding. Below MIN_WORK multiply-adds a piece would cost about
 * what handing it to another thread costs (a few us). */
#define SPLIT 16
_Static_assert(SPLIT % 16 == 0, "a piece of LB_Q4_0_T16 rows starts on a tile");
#define MIN_WORK (1 << 17)

typedef struct {
    int kind;
    const float *x;
    int64_t T, K, N, step;      /* step: rows of a piece (activation rows, or weight rows) */
    const uint8_t *w;
    float *out;
    const rounded *r;           /* by weight rows: the activations, rounded once */
    _Atomic int err;
} piece_job;

static void piece_by_x(void *ctx, int64_t i) {
    piece_job *j = ctx;
    const int64_t t0 = i * j->step, t1 = t0 + j->step < j->T ? t0 + j->step : j->T;
    int err = whole(j->kind, j->x + t0 * j->K, t1 - t0, j->K, j->w, j->N, j->out + t0 * j->N);
    if (err) j->err = err;
}

static void piece_by_w(void *ctx, int64_t i) {
    piece_job *j = ctx;
    const int64_t n0 = i * j->step, n1 = n0 + j->step < j->N ? n0 + j->step : j->N, nn = n1 - n0, T = j->T;
    const uint8_t *w = j->w + n0 * (j->K / per_block(j->kind)) * block_bytes(j->kind);
    if (T == 1) {                                   /* one row: the kernel's row stride is never used */
        multiply(j->kind, j->r, w, nn, j->out + n0);
        return;
    }
    float *tmp = malloc((size_t)(T * nn) * sizeof(float));   /* the kernel writes rows nn apart */
    if (tmp == NULL) {
        j->err = LB_ENOMEM;
        return;
    }
    multiply(j->kind, j->r, w, nn, tmp);
    for (int64_t t = 0; t < T; t++)
        memcpy(j->out + t * j->N + n0, tmp + t * nn, (size_t)nn * sizeof(float));
    free(tmp);
}

static int64_t pieces(int64_t rows, int64_t want, int64_t *step) {
    int64_t s = (rows + want - 1) / want;
    s = (s + SPLIT - 1) / SPLIT * SPLIT;
    *step = s;
    return (rows + s - 1) / s;
}

int lb_qmatmul(int kind, const float *x, int64_t T, int64_t K, const uint8_t *w, int64_t N, float *out) {
    if (block_bytes(kind) == 0) return LB_EKIND;
    if (T < 0 || N < 0 || K <= 0 || K % per_block(kind)) return LB_ESHAPE;
    if (T == 0 || N == 0) return LB_OK;
    if (chosen_isa < 0) lb_set_isa(LB_ISA_AUTO);   /* a benign race: every thread picks the same path */
    const int threads = lb_pool_size();
    if (threads <= 1 || T * N * K < MIN_WORK) return whole(kind, x, T, K, w, N, out);
    piece_job j = {kind, x, T, K, N, 0, w, out, NULL, LB_OK};
    if (T >= 2 * SPLIT * threads) {                 /* every thread gets two pieces or more */
        lb_parallel_for(pieces(T, 2 * threads, &j.step), piece_by_x, &j);
        return j.err;
    }
    rounded r;
    if (round_x(kind, x, T, K, &r) != LB_OK) return LB_ENOMEM;
    j.r = &r;
    /* A decode step (one row): one piece a thread, each streaming one stretch of the weights and
     * paying one cold start (the prefetchers ramp up again at every piece). On 2 free threads a
     * decode step's matmuls scale 1.83x this way, against 1.78x with two pieces a thread and 1.73x
     * with three (measured with bench/decode_profile.py --threads 1,2). A few rows (a batch of
     * decodes) compute more than they stream: four pieces a thread, so a thread that another
     * process keeps off its core a while leaves its pieces to the others instead of holding the
     * step up. 8B over 3 namespace hosts sharing 2 cores, concurrency 8, on the AVX2 path: the
     * shards' 8-row steps took 435 ms against 446 with one piece a thread (eight pieces: as four);
     * on their own, the matmuls timed the same either way (0.98-1.00x). A worker not yet awake
     * when a call starts claims nothing: the caller runs every piece itself. */
    lb_parallel_for(pieces(N, T == 1 ? threads : 4 * threads, &j.step), piece_by_w, &j);
    release(kind, &r);
    return j.err;
}

/* Plain C of q4_1 and q8_0 (q4_0's is qk_generic.c's, with these steps but the last fused), the
 * definition the vector paths follow: per block the exact integer sum of quants times activation
 * quants, scaled by d_w * d_x in float32; q4_1's minimum adds m * d_x * sum(q_x). */
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
                    const uint8_t *qs = blk + 4;
                    for (int j = 0; j < QK / 2; j++)
                        p += (qs[j] & 0x0f) * xq[lb_act_index(kind, b, j)] + (qs[j] >> 4) * xq[lb_act_index(kind, b, j + 16)];
                }
                acc += lb_f16(lb_u16(blk)) * dx[b] * (float)p;
                if (kind == LB_Q4_1) acc += lb_f16(lb_u16(blk + 2)) * sx[b];
            }
            out[t * N + n] = acc;
        }
    }
}
