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

/* Helpers are forced inline: one left out of line is compiled for the baseline ISA, not for the
 * target_clones variant calling it (GCC did that to weighted_sum: 2.5x slower). */
#if defined(__GNUC__)
#define HOT static inline __attribute__((always_inline))
#else
#define HOT static inline
#endif

#if defined(__GNUC__) && (__GNUC__ >= 12 || defined(__clang__))
/* The lanes as one vector value: the accumulator stays in registers and the tree is vector
 * shuffles (an array here made GCC reduce through the stack: store-forwarding stalls, half the
 * time of a call). Same lanes, same tree, so the same sums as the array version below. */
typedef float v16 __attribute__((vector_size(64), aligned(4)));
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));
typedef float v2 __attribute__((vector_size(8)));

HOT float dot(const float *a, const float *b, int64_t n)
{
    v16 acc = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        acc += *(const v16 *)(a + i) * *(const v16 *)(b + i);
    for (; i < n; i++)
        acc[0] += a[i] * b[i];
    v8 s8 = __builtin_shufflevector(acc, acc, 0, 1, 2, 3, 4, 5, 6, 7)
          + __builtin_shufflevector(acc, acc, 8, 9, 10, 11, 12, 13, 14, 15);
    v4 s4 = __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
    v2 s2 = __builtin_shufflevector(s4, s4, 0, 1) + __builtin_shufflevector(s4, s4, 2, 3);
    return s2[0] + s2[1];
}
#else
HOT float dot(const float *a, const float *b, int64_t n)
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
#endif

/* The largest of a[0 .. n-1], n >= 1, in lanes (a maximum does not depend on the order). */
HOT float max_of(const float *a, int64_t n)
{
    float m[LANES];
    int64_t i = 0;
    for (int j = 0; j < LANES; j++)
        m[j] = a[0];
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++)
            m[j] = a[i + j] > m[j] ? a[i + j] : m[j];
    for (; i < n; i++)
        m[0] = a[i] > m[0] ? a[i] : m[0];
    for (int j = 1; j < LANES; j++)
        m[0] = m[j] > m[0] ? m[j] : m[0];
    return m[0];
}

/* y (n,) = sum over keys c, in order, of w[c] * x[at[c] ...]: an output row held in registers
 * across all keys (accumulating in memory key by key chained every add on a store and a reload). */
HOT void weighted_sum(float *y, const float *w, const float *x, const int64_t *at, int64_t len,
                                int64_t n)
{
    int64_t i = 0;
#if defined(__GNUC__) && (__GNUC__ >= 12 || defined(__clang__))
    for (; i + 4 * LANES <= n; i += 4 * LANES) {     /* four chains of adds in flight, not one */
        v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (int64_t c = 0; c < len; c++) {
            const float *xc = x + at[c] + i;
            a0 += w[c] * *(const v16 *)xc;
            a1 += w[c] * *(const v16 *)(xc + LANES);
            a2 += w[c] * *(const v16 *)(xc + 2 * LANES);
            a3 += w[c] * *(const v16 *)(xc + 3 * LANES);
        }
        *(v16 *)(y + i) = a0;
        *(v16 *)(y + i + LANES) = a1;
        *(v16 *)(y + i + 2 * LANES) = a2;
        *(v16 *)(y + i + 3 * LANES) = a3;
    }
    for (; i + LANES <= n; i += LANES) {
        v16 acc = {0};
        for (int64_t c = 0; c < len; c++)
            acc += w[c] * *(const v16 *)(x + at[c] + i);
        *(v16 *)(y + i) = acc;
    }
#endif
    for (; i < n; i++) {
        float acc = 0.0f;
        for (int64_t c = 0; c < len; c++)
            acc += w[c] * x[at[c] + i];
        y[i] = acc;
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
    const int64_t n = maxlen > 0 ? maxlen : 1;
    float *p = malloc((size_t)(H * n) * sizeof(float));
    int64_t *at = malloc((size_t)n * sizeof(int64_t));   /* offset of key c's slot in a cache */
    if (!p || !at) {
        free(p);
        free(at);
        return LB_ATTN_ENOMEM;
    }
    for (int64_t s = 0; s < S; s++) {
        const int64_t len = lens[s];
        const int32_t *t = table + s * n_pages;
        const float *qs = q + s * H * Dh;
        float *os = out + s * H * Dh;
        /* Slot offsets listed once, page by page: no integer division per key (~40 cycles each). */
        for (int64_t c = 0, i = 0; c < len; i++)
            for (int64_t j = 0; j < page && c < len; j++, c++)
                at[c] = ((int64_t)t[i] * page + j) * row;
        /* Scores, key by key: a cache slot holds all KVH heads' rows side by side, read in order. */
        for (int64_t c = 0; c < len; c++) {
            const float *k = k_cache + at[c];
            for (int64_t kh = 0, h = 0; kh < KVH; kh++)
                for (int64_t g = 0; g < G; g++, h++)
                    p[h * len + c] = dot(qs + h * Dh, k + kh * Dh, Dh) * scale;
        }
        for (int64_t h = 0; h < H; h++) {                 /* softmax, as kernels.softmax */
            float *ph = p + h * len, m = max_of(ph, len), sum = 0.0f;
            for (int64_t c = 0; c < len; c++) {
                ph[c] = expf(ph[c] - m);
                sum += ph[c];
            }
            for (int64_t c = 0; c < len; c++)
                ph[c] /= sum;
        }
        for (int64_t kh = 0, h = 0; kh < KVH; kh++)       /* values: each output summed in key order */
            for (int64_t g = 0; g < G; g++, h++)
                weighted_sum(os + h * Dh, p + h * len, v_cache + kh * Dh, at, len, Dh);
    }
    free(p);
    free(at);
    return LB_ATTN_OK;
}
