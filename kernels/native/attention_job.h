/* What attention.c shares with its per-path row functions (attention_rows.h, compiled once per
 * instruction set in attention_generic.c, attention_avx2.c, attention_avx512.c). Internal. */
#ifndef LB_ATTENTION_JOB_H
#define LB_ATTENTION_JOB_H

#include <stdint.h>

/* One call's arguments, shared by its tiles. The caches hold float16 bits. */
typedef struct {
    const float *q;
    const uint16_t *k, *v;
    const int32_t *table, *lens;
    int64_t H, KVH, Dh, page, n_pages, window;
    float scale;
    float *out;
} lb_attn_job;

#define TILE 16       /* query rows of one sequence that share each key and value block they load */

/* The first key a row of len keys sees through a window of `window` keys (0: all of them). */
static inline int64_t first_key(int64_t len, int64_t window)
{
    return window > 0 && len > window ? len - window : 0;
}

/* Heads [h0, h1) of rows [s0, s1) of a call, one function per path (each the same operations: the
 * same bits); LB_ATTN_OK or LB_ATTN_ENOMEM. And out[i] = x[i] rounded to float16 (to nearest, ties to
 * even) for i < n, per path. */
int lb_attn_rows_generic(const lb_attn_job *j, int64_t s0, int64_t s1, int64_t h0, int64_t h1);
void lb_attn_round_generic(const float *x, float *out, int64_t n);
#if defined(__x86_64__) && defined(__GNUC__)
int lb_attn_rows_avx2(const lb_attn_job *j, int64_t s0, int64_t s1, int64_t h0, int64_t h1);
int lb_attn_rows_avx512(const lb_attn_job *j, int64_t s0, int64_t s1, int64_t h0, int64_t h1);
void lb_attn_round_f16c(const float *x, float *out, int64_t n);
#endif

#endif
