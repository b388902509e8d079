/* Decode attention straight from the KV pages.
 *
 * The numpy version gathers every sequence's pages into one contiguous copy per layer before
 * two batched matmuls; at batch 16 that copying is most of a decode step's time outside the
 * matmuls. Here the cache is read where it lies, slot by slot in page order (a slot holds every
 * KV head's row side by side), each row used by all the query heads that share it (grouped KV
 * heads), in plain C that the compiler vectorizes: the lane arrays keep partial sums independent,
 * so no -ffast-math is needed, and are summed as a tree of vector adds.
 */
#include "attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LANES 16

static inline float dot(const float *a, const float *b, int64_t n)
{
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++)
            acc[j] += a[i + j] * b[i + j];
    for (; i < n; i++)
        acc[0] += a[i] * b[i];
    for (int w = LANES / 2; w > 0; w /= 2)          /* a tree: vector adds, not 15 scalar ones */
        for (int j = 0; j < w; j++)
            acc[j] += acc[j + w];
    return acc[0];
}

static inline void axpy(float *y, float w, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += w * x[i];
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
    float *p = malloc((size_t)(H * (maxlen > 0 ? maxlen : 1)) * sizeof(float));
    if (!p)
        return LB_ATTN_ENOMEM;
    for (int64_t s = 0; s < S; s++) {
        const int64_t len = lens[s];
        const int32_t *t = table + s * n_pages;
        const float *qs = q + s * H * Dh;
        float *os = out + s * H * Dh;
        /* Scores, key by key: a cache slot holds all KVH heads' rows side by side, read in order. */
        for (int64_t c = 0; c < len; c++) {
            const float *k = k_cache + ((int64_t)t[c / page] * page + c % page) * row;
            for (int64_t h = 0; h < H; h++)
                p[h * len + c] = dot(qs + h * Dh, k + (h / G) * Dh, Dh) * scale;
        }
        for (int64_t h = 0; h < H; h++) {                 /* softmax, as kernels.softmax */
            float *ph = p + h * len, m = ph[0], sum = 0.0f;
            for (int64_t c = 1; c < len; c++)
                m = ph[c] > m ? ph[c] : m;
            for (int64_t c = 0; c < len; c++) {
                ph[c] = expf(ph[c] - m);
                sum += ph[c];
            }
            for (int64_t c = 0; c < len; c++)
                ph[c] /= sum;
        }
        memset(os, 0, (size_t)(H * Dh) * sizeof(float));
        for (int64_t c = 0; c < len; c++) {               /* values, slot by slot likewise */
            const float *v = v_cache + ((int64_t)t[c / page] * page + c % page) * row;
            for (int64_t h = 0; h < H; h++)
                axpy(os + h * Dh, p[h * len + c], v + (h / G) * Dh, Dh);
        }
    }
    free(p);
    return LB_ATTN_OK;
}
