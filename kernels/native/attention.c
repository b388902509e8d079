/* Decode attention straight from the KV pages.
 *
 * The numpy version gathers every sequence's pages into one contiguous copy per layer before
 * two batched matmuls; at batch 16 that copying is most of a decode step's time outside the
 * matmuls. Here the cache is read where it lies (a slot holds every KV head's row side by side),
 * each key row used by all the query heads that share it (grouped KV heads).
 *
 * Every query row is computed alone, with operations fixed by its own q, keys and length
 * (attention_lanes.h): the shard hands a prompt's rows here one by one as decode queries, and
 * its 8-bit activations turn a 1-ulp difference into another token. Keys go in blocks of 16 (a
 * row's tail padded with weight-0 keys), so scores, exp and sums are vector code throughout.
 */
#include "attention.h"
#include "attention_lanes.h"

#include <stdlib.h>

/* y[h] (dh,) = sum over keys c < len, in order, of w[h][c] * x[at[c] ...] for the nh heads that
 * read one KV head (w[h] = w + h * wstride), outputs held in registers across all keys and each
 * value row loaded once for all nh heads. A head's sums do not depend on nh. */
HOT void weighted_sums(float *y, const float *w, int64_t wstride, int nh, const float *x, const int64_t *at,
                       int64_t len, int64_t dh)
{
    int64_t i = 0;
#ifdef LB_LANES_VECTOR
    for (; i + 4 * LANES <= dh; i += 4 * LANES) {    /* 4 * nh chains of adds in flight */
        v16 acc[3][4] = {{{0}}};
        for (int64_t c = 0; c < len; c++) {
            const float *xc = x + at[c] + i;
            if (c + 8 < len)                          /* a value row 8 keys on, from L2 (~5%) */
                for (int j = 0; j < 4; j++)
                    __builtin_prefetch(x + at[c + 8] + i + j * LANES);
            v16 x0 = LOAD(xc), x1 = LOAD(xc + LANES), x2 = LOAD(xc + 2 * LANES), x3 = LOAD(xc + 3 * LANES);
            for (int h = 0; h < nh; h++) {
                float wc = w[h * wstride + c];
                acc[h][0] += wc * x0;
                acc[h][1] += wc * x1;
                acc[h][2] += wc * x2;
                acc[h][3] += wc * x3;
            }
        }
        for (int h = 0; h < nh; h++)
            for (int j = 0; j < 4; j++)
                *(v16 *)(y + h * dh + i + j * LANES) = acc[h][j];
    }
    for (; i + LANES <= dh; i += LANES)
        for (int h = 0; h < nh; h++) {
            v16 acc = {0};
            for (int64_t c = 0; c < len; c++)
                acc += w[h * wstride + c] * LOAD(x + at[c] + i);
            *(v16 *)(y + h * dh + i) = acc;
        }
#endif
    for (; i < dh; i++)
        for (int h = 0; h < nh; h++) {
            float acc = 0.0f;
            for (int64_t c = 0; c < len; c++)
                acc += w[h * wstride + c] * x[at[c] + i];
            y[h * dh + i] = acc;
        }
}

static int check(const int32_t *table, const int32_t *lens, int64_t S, int64_t page, int64_t n_pages,
                 int64_t num_pages, int64_t *maxlen)
{
    *maxlen = 0;
    for (int64_t s = 0; s < S; s++) {
        int64_t len = lens[s];
        if (len < 1 || len > n_pages * page)
            return LB_ATTN_ESHAPE;
        for (int64_t i = 0; i < (len + page - 1) / page; i++) {
            int32_t p = table[s * n_pages + i];
            if (p < 0 || p >= num_pages)
                return LB_ATTN_EPAGE;
        }
        if (len > *maxlen)
            *maxlen = len;
    }
    return LB_ATTN_OK;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
int lb_attend_decode(const float *q, const float *k_cache, const float *v_cache, const int32_t *table,
                     const int32_t *lens, int64_t S, int64_t H, int64_t KVH, int64_t Dh, int64_t page,
                     int64_t n_pages, int64_t num_pages, float scale, float *out)
{
    if (S < 0 || H < 1 || KVH < 1 || H % KVH || Dh < 1 || page < 1 || n_pages < 0)
        return LB_ATTN_ESHAPE;
    int64_t maxlen;
    int err = check(table, lens, S, page, n_pages, num_pages, &maxlen);
    if (err)
        return err;
    const int64_t G = H / KVH, row = KVH * Dh;          /* row: floats per cache slot */
    const int64_t n = maxlen > 0 ? (maxlen + LANES - 1) / LANES * LANES : LANES;
    float *p = malloc((size_t)(H * n) * sizeof(float));
    int64_t *at = malloc((size_t)n * sizeof(int64_t));   /* offset of key c's slot in a cache */
    if (!p || !at) {
        free(p);
        free(at);
        return LB_ATTN_ENOMEM;
    }
    for (int64_t s = 0; s < S; s++) {
        const int64_t len = lens[s], npad = (len + LANES - 1) / LANES * LANES;
        const int32_t *t = table + s * n_pages;
        const float *qs = q + s * H * Dh;
        float *os = out + s * H * Dh;
        /* Slot offsets listed once, page by page: no integer division per key (~40 cycles each);
         * a padded key reads key 0 (any slot would do: softmax16 drops its score, the sums stop at len). */
        for (int64_t c = 0, i = 0; c < len; i++)
            for (int64_t j = 0; j < page && c < len; j++, c++)
                at[c] = ((int64_t)t[i] * page + j) * row;
        for (int64_t c = len; c < npad; c++)
            at[c] = at[0];
        /* Scores, 16 keys at a time: a block's key rows, read once, serve every head in L1. */
        for (int64_t c = 0; c < npad; c += LANES)
            for (int64_t kh = 0, h = 0; kh < KVH; kh++)
                for (int64_t g = 0; g < G; g++, h++)
                    scores16(p + h * npad + c, qs + h * Dh, k_cache + kh * Dh, at + c, Dh, scale);
        for (int64_t h = 0; h < H; h++)
            softmax16(p + h * npad, len, npad);
        for (int64_t kh = 0; kh < KVH; kh++)              /* values, up to 3 heads at a time */
            for (int64_t g = 0, h = kh * G; g < G; g += 3, h += 3) {
                float *y = os + h * Dh, *w = p + h * npad;
                const float *x = v_cache + kh * Dh;
                if (G - g >= 3)                           /* nh a constant: accumulators in registers */
                    weighted_sums(y, w, npad, 3, x, at, len, Dh);
                else if (G - g == 2)
                    weighted_sums(y, w, npad, 2, x, at, len, Dh);
                else
                    weighted_sums(y, w, npad, 1, x, at, len, Dh);
            }
    }
    free(p);
    free(at);
    return LB_ATTN_OK;
}
