/* x (T, K) float32 times a GGUF block-quantized weight (N, K) transposed: out (T, N) float32, row-major.
 * x is first rounded to 8 bits per block of 32 as llama.cpp rounds it (lb_round_act), then the
 * products are summed exactly in integers per block and scaled in float32. */
#ifndef LB_QMATMUL_H
#define LB_QMATMUL_H

#include <stdint.h>

#if defined(__GNUC__)
#define LB_API __attribute__((visibility("default")))
#else
#define LB_API
#endif

/* Kinds use ggml's type numbers, but for LB_Q4_0_T16, ours: Q4_0's blocks regrouped 16 rows a tile
 * (lb_q4_0_tile), which the AVX-512 path reads with plain loads where GGUF's order takes a gather and
 * a transpose of 16 rows a block; the same bits as LB_Q4_0 on every path. */
enum { LB_Q4_0 = 2, LB_Q4_1 = 3, LB_Q5_0 = 6, LB_Q5_1 = 7, LB_Q8_0 = 8, LB_Q4_K = 12, LB_Q5_K = 13, LB_Q6_K = 14,
       LB_Q4_0_T16 = 1002 };

/* Instruction sets, for lb_set_isa: the widest the CPU has is the default. */
enum { LB_ISA_AUTO = -1, LB_ISA_GENERIC = 0, LB_ISA_AVX2 = 1, LB_ISA_AVX512 = 2 };

enum { LB_OK = 0, LB_EKIND = -1, LB_ESHAPE = -2, LB_ENOMEM = -3 };

/* out[t, n] = sum_k round_act(x)[t, k] * dequant(w)[n, k]; w holds N rows of K / 32 blocks (K / 256 for the
 * K kinds, whose x is rounded per 256 as lb_round_act_k says; Q5_1 rounds x as Q4_1, Q5_0 as Q4_0). No
 * alignment needed. */
LB_API int lb_qmatmul(int kind, const float *x, int64_t T, int64_t K, const uint8_t *w, int64_t N, float *out);

/* Pick the code path (tests compare them all); returns the path now in use (a wider one than the
 * CPU has falls back to the best it has). */
LB_API int lb_set_isa(int isa);

/* The path lb_set_isa picked (LB_ISA_*), picking the default first if none was. */
LB_API int lb_isa(void);

/* N rows of Q4_0 blocks (K / 32 a row, GGUF's order) into LB_Q4_0_T16's order, the same bytes
 * moved: each full 16 rows a tile, whose block b is 288 bytes: the 16 rows' float16 d, then for k =
 * 0..3 the 16 rows' quant bytes 4k .. 4k + 3 (row c at 64 k + 4 c: the 32-bit lane c of one 64-byte
 * load); the last N % 16 rows after the tiles, as they were. A tile is 16 rows' bytes, so rows
 * n .. N of a tiled matrix (n a multiple of 16) are a tiled matrix of their own. lb_q4_0_untile
 * is the inverse. */
LB_API int lb_q4_0_tile(const uint8_t *w, int64_t N, int64_t K, uint8_t *out);
LB_API int lb_q4_0_untile(const uint8_t *w, int64_t N, int64_t K, uint8_t *out);
LB_API int lb_q4_0_tile_in_place(uint8_t *w, int64_t N, int64_t K);     /* a tile's worth of memory besides */

/* round_act(x) (T, K): each block of 32 as d * q, d = float16(max|x| / 127), q = rint(x * 127 / max|x|):
 * exactly the activations lb_qmatmul multiplies (a block holding NaN or inf gives NaN). */
LB_API int lb_round_act(const float *x, int64_t T, int64_t K, float *out);

/* x (T, K), K a multiple of 256, rounded as llama.cpp's quantize_row_q8_K: q (T, K) int8 and d (T, K / 256)
 * float, x ~ d * q (a block holding NaN or inf: d NaN, q 0). */
LB_API int lb_round_act_k(const float *x, int64_t T, int64_t K, int8_t *q, float *d);

#endif
