/* LB_Q4_0_T16 (qmatmul.h): Q4_0's blocks regrouped 16 rows a tile, the moves both ways, and the
 * plain C product over it, which the paths without their own tiles (generic, AVX2) run: qk_generic.c's
 * Q4_0 steps in its order, each block found where the tile keeps it, so every path gives Q4_0's bits. */
#include "qmatmul.h"
#include "qk.h"

#include <stdlib.h>
#include <string.h>

#define TILE_ROWS 16
#define TBLOCK (TILE_ROWS * 18)           /* a tile's block b: 16 d, then 4 x 64 quant bytes */

/* Where row c (< 16) of a tile keeps block b's d, and quant bytes 4k .. 4k + 3. */
static inline int64_t d_at(int64_t b, int c) { return b * TBLOCK + 2 * c; }
static inline int64_t quad_at(int64_t b, int c, int k) { return b * TBLOCK + 32 + 64 * k + 4 * c; }

static int check(const uint8_t *w, int64_t N, int64_t K, const uint8_t *out) {
    if (N < 0 || K <= 0 || K % QK) return LB_ESHAPE;
    return (N > 0 && (w == NULL || out == NULL)) ? LB_ESHAPE : LB_OK;
}

/* Rows of GGUF's order to tiles (to_tiles) or back: each of a tile's blocks' d and quads between
 * where a row keeps them and where the tile does; the rows after the last tile copied. */
static int move(const uint8_t *w, int64_t N, int64_t K, uint8_t *out, int to_tiles) {
    const int err = check(w, N, K, out);
    if (err) return err;
    const int64_t nb = K / QK, rb = nb * 18, full = N / TILE_ROWS * TILE_ROWS;
    for (int64_t n0 = 0; n0 < full; n0 += TILE_ROWS) {
        const uint8_t *from = w + n0 * rb;
        uint8_t *to = out + n0 * rb;
        for (int c = 0; c < TILE_ROWS; c++)
            for (int64_t b = 0; b < nb; b++) {
                const int64_t row = c * rb + b * 18;
                if (to_tiles) {
                    memcpy(to + d_at(b, c), from + row, 2);
                    for (int k = 0; k < 4; k++) memcpy(to + quad_at(b, c, k), from + row + 2 + 4 * k, 4);
                } else {
                    memcpy(to + row, from + d_at(b, c), 2);
                    for (int k = 0; k < 4; k++) memcpy(to + row + 2 + 4 * k, from + quad_at(b, c, k), 4);
                }
            }
    }
    if (N > full) memcpy(out + full * rb, w + full * rb, (size_t)((N - full) * rb));
    return LB_OK;
}

int lb_q4_0_tile(const uint8_t *w, int64_t N, int64_t K, uint8_t *out) { return move(w, N, K, out, 1); }

int lb_q4_0_untile(const uint8_t *w, int64_t N, int64_t K, uint8_t *out) { return move(w, N, K, out, 0); }

int lb_q4_0_tile_in_place(uint8_t *w, int64_t N, int64_t K) {
    const int err = check(w, N, K, w);
    if (err) return err;
    const int64_t rb = K / QK * 18, full = N / TILE_ROWS * TILE_ROWS;
    uint8_t *rows = malloc((size_t)(TILE_ROWS * rb));        /* a tile is its 16 rows' bytes, moved */
    if (rows == NULL && full > 0) return LB_ENOMEM;
    for (int64_t n0 = 0; n0 < full; n0 += TILE_ROWS) {
        memcpy(rows, w + n0 * rb, (size_t)(TILE_ROWS * rb));
        lb_q4_0_tile(rows, TILE_ROWS, K, w + n0 * rb);
    }
    free(rows);
    return LB_OK;
}

/* qk_generic.c's Q4_0 product (acc + d_w * d_x * p a block, p the exact integer sum), over the tiles
 * and the GGUF rows after them. */
void lb_q4_0t_matmul_generic(const lb_act *a, const uint8_t *w, int64_t N, float *out) {
    const int64_t nb = a->nb, rb = nb * 18, full = N / TILE_ROWS * TILE_ROWS;
    for (int64_t n = 0; n < N; n++) {
        const int c = (int)(n % TILE_ROWS);
        const uint8_t *tile = w + (n - c) * rb;
        for (int64_t t = 0; t < a->T; t++) {
            const int8_t *xq = a->q + t * a->nbp * QK;
            const float *dx = a->d + t * a->nbp;
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                uint8_t qs[16];
                uint16_t d;
                if (n < full) {
                    d = lb_u16(tile + d_at(b, c));
                    for (int k = 0; k < 4; k++) memcpy(qs + 4 * k, tile + quad_at(b, c, k), 4);
                } else {
                    d = lb_u16(w + n * rb + b * 18);
                    memcpy(qs, w + n * rb + b * 18 + 2, 16);
                }
                int32_t p = 0;
                for (int j = 0; j < QK / 2; j++)
                    p += ((qs[j] & 0x0f) - 8) * xq[b * QK + j] + ((qs[j] >> 4) - 8) * xq[b * QK + j + 16];
                acc = lb_q4_0_step(acc, p, lb_f16(d), dx[b]);
            }
            out[t * N + n] = acc;
        }
    }
}
