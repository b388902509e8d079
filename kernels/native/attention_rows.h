/* The rows of a decode attention call (attention.c), included once per code path by
 * attention_generic.c, attention_avx2.c and attention_avx512.c, each compiled for its instruction
 * set. The includer defines ROWS_NAME (the function this defines), WIDE (1: values summed 16 lanes
 * at a time, AVX-512; 0: 8), and how a float16 of the cache is widened to float where the path has
 * an instruction for it: KVF(p) one, KV8(p) eight, and KV16(p) sixteen where WIDE (otherwise lb_f16,
 * one at a time: attention_lanes.h).
 * Widening is exact, so every path, and every row, computes what it would over float32 caches
 * holding the same values: the same bits. */
#include "attention.h"
#include "attention_job.h"
#include "attention_lanes.h"

#include <stdlib.h>
#include <string.h>


/* y[h] (dh,) for the nh heads that read one KV head (w[h] = w + h * wstride): 0 if first, else
 * y[h] as it stands, plus w[h][c] * x[at[c] ...] for the keys c0 <= c < c1 in order. Outputs are
 * held in registers across the keys and each value row loaded once for all nh heads. An output's
 * sum is one chain of adds over its keys in order, so neither nh, the vector width, nor where the
 * keys are cut into blocks changes a bit. VT is the vector type, W its lanes, NV vectors of outputs per
 * pass: 16 and 4 for AVX-512, 8 and 2 for AVX2 (its 16 registers hold 4 x 2 accumulators unspilled);
 * LD(p) widens W float16 values of x to a VT. */
#define VAHEAD 16    /* keys ahead of the value sums whose value rows are prefetched whole */
#define WEIGHTED_SUMS(NAME, VT, W, NV, LD)                                                              \
    HOT void NAME(float *y, const float *w, int64_t wstride, int nh, const uint16_t *x,                 \
                  const int64_t *at, int64_t c0, int64_t c1, int64_t dh, int first)                     \
    {                                                                                                   \
        int64_t i = 0;                                                                                  \
        for (; i + NV * W <= dh; i += NV * W) {        /* NV * nh chains of adds in flight */           \
            VT acc[4][NV], xv[NV];                                                                      \
            for (int h = 0; h < nh; h++)                                                                \
                for (int j = 0; j < NV; j++)                                                            \
                    acc[h][j] = first ? (VT){0} : *(const VT *)(y + h * dh + i + j * W);                \
            for (int64_t c = c0; c < c1; c++) {                                                         \
                const uint16_t *xc = x + at[c] + i;                                                     \
                if (i == 0 && c + VAHEAD < c1)        /* a value row VAHEAD keys on, all of it */       \
                    for (int64_t j = 0; j < dh; j += 32)         /* 32 halves a line */                 \
                        __builtin_prefetch(x + at[c + VAHEAD] + j);                                     \
                else if (c + 8 < c1)                   /* its next columns 8 keys on, from L2 */        \
                    for (int j = 0; j < NV * W; j += 32)                                                \
                        __builtin_prefetch(x + at[c + 8] + i + j);                                      \
                for (int j = 0; j < NV; j++)                                                            \
                    xv[j] = LD(xc + j * W);                                                             \
                for (int h = 0; h < nh; h++) {                                                          \
                    float wc = w[h * wstride + c];                                                      \
                    for (int j = 0; j < NV; j++)                                                        \
                        acc[h][j] += wc * xv[j];                                                        \
                }                                                                                       \
            }                                                                                           \
            for (int h = 0; h < nh; h++)                                                                \
                for (int j = 0; j < NV; j++)                                                            \
                    *(VT *)(y + h * dh + i + j * W) = acc[h][j];                                        \
        }                                                                                               \
        for (; i + W <= dh; i += W)                                                                     \
            for (int h = 0; h < nh; h++) {                                                              \
                VT acc = first ? (VT){0} : *(const VT *)(y + h * dh + i);                               \
                for (int64_t c = c0; c < c1; c++)                                                       \
                    acc += w[h * wstride + c] * LD(x + at[c] + i);                                      \
                *(VT *)(y + h * dh + i) = acc;                                                          \
            }                                                                                           \
        for (; i < dh; i++)                                                                             \
            for (int h = 0; h < nh; h++) {                                                              \
                float acc = first ? 0.0f : y[h * dh + i];                                               \
                for (int64_t c = c0; c < c1; c++)                                                       \
                    acc += w[h * wstride + c] * KVF(x + at[c] + i);                                     \
                y[h * dh + i] = acc;                                                                    \
            }                                                                                           \
    }

#ifdef LB_LANES_VECTOR
#if WIDE
WEIGHTED_SUMS(weighted_sums, v16, 16, 4, KV16)
#else
WEIGHTED_SUMS(weighted_sums, v8u, 8, 2, KV8)
#endif
#else
typedef float f1;
WEIGHTED_SUMS(weighted_sums, f1, 1, 4, KVF)
#endif

#define VBLOCK 64     /* keys per block of a tile's value sums: 64 slots of values stay in L1 */

static inline int64_t padded(int64_t len) { return (len + LANES - 1) / LANES * LANES; }

/* The end of the tile starting at row s0 (at most TILE rows, before s1): rows whose pages agree on
 * every page each row reads; *ref gets its longest row, whose pages the tile reads by. A prompt's
 * rows (plan_attention's rows_alone) share a table row; rows of different sequences stay apart. */
static int64_t tile_end(const lb_attn_job *j, int64_t s0, int64_t s1, int64_t *ref)
{
    int64_t e = s0 + 1;
    *ref = s0;
    for (; e < s1 && e - s0 < TILE; e++) {
        const int64_t longer = j->lens[e] > j->lens[*ref] ? e : *ref, shorter = longer == e ? *ref : e;
        const int64_t pages = (j->lens[shorter] + j->page - 1) / j->page;
        if (memcmp(j->table + shorter * j->n_pages, j->table + longer * j->n_pages, (size_t)pages * sizeof(int32_t)))
            break;
        *ref = longer;
    }
    return e;
}

/* Heads h0 .. h1-1 of rows s0 .. s0+R-1 of one tile, row ref the longest. Each row's operations are
 * those it has alone, and each head's are its own (a head's scores, softmax and value sums do not
 * depend on which other heads go beside it):
 * its scores over its own keys (first_key .. len-1, padded to 16), its softmax, its value sums in key
 * order; the tile only orders the loops so that a block of keys (then of values) loaded once serves
 * every row. p holds R * H * (nmax + 16) floats, nmax the most keys a row of the call sees padded
 * to 16; at holds the tile's key offsets, from its rows' lowest first key. */
HOT void attend_tile(const lb_attn_job *j, int64_t s0, int64_t R, int64_t ref, int64_t h0, int64_t h1, float *p,
                     int64_t *at)
{
    const int64_t H = j->H, KVH = j->KVH, Dh = j->Dh, page = j->page, G = H / KVH, row = KVH * Dh;
    const int64_t maxlen = j->lens[ref];
    int64_t lo = maxlen, nmax = 0;             /* the tile's lowest first key; its rows' most keys */
    int64_t first[TILE], n[TILE];
    for (int64_t r = 0; r < R; r++) {
        n[r] = j->lens[s0 + r] - (first[r] = first_key(j->lens[s0 + r], j->window));
        lo = first[r] < lo ? first[r] : lo;
        nmax = n[r] > nmax ? n[r] : nmax;
    }
    nmax = padded(nmax);
    /* Scores of head h of row r at p + (r * H + h) * hs: one key block past the longest row, so that
     * the 16 * H rows written together do not share L1 sets (a stride of 4 KiB did that at 1024 keys). */
    const int64_t hs = nmax + LANES;
    const int32_t *t = j->table + ref * j->n_pages;
    /* Slot offsets of keys lo .. maxlen-1 listed once, page by page: no integer division per key
     * (~40 cycles each); a padded key past them reads key lo (any slot would do: softmax16 drops its
     * score, the sums stop at len). Row r's key i is at[first[r] - lo + i]. */
    const int64_t span = maxlen - lo;
    for (int64_t c = 0, i = lo / page, jj = lo % page; c < span; i++, jj = 0)
        for (; jj < page && c < span; jj++, c++)
            at[c] = ((int64_t)t[i] * page + jj) * row;
    for (int64_t c = span; c < span + LANES; c++)
        at[c] = at[0];
    /* Scores, 16 keys at a time: a block's key rows, read once, serve every head of every row in L1
     * (rows of a prompt see nearly the same keys). A row past its own keys is done (its padded keys'
     * scores are dropped by softmax16). */
    for (int64_t c = 0; c < nmax; c += LANES)
        for (int64_t r = 0; r < R; r++) {
            if (c >= padded(n[r]))
                continue;
            const float *qs = j->q + (s0 + r) * H * Dh;
            const int64_t *ar = at + (first[r] - lo) + c;
            float *pr = p + r * H * hs;
            if (R == 1)           /* a row alone reads its keys from memory: slot by slot */
                scores16_heads(pr + c, hs, qs, j->k, ar, Dh, h0, h1, G, j->scale);
            else                  /* a tile's rows share each block in L1: head by head holds the sums in registers */
                for (int64_t h = h0; h < h1; h++)
                    scores16(pr + h * hs + c, qs + h * Dh, j->k + h / G * Dh, ar, Dh, j->scale);
        }
    for (int64_t r = 0; r < R; r++)
        for (int64_t h = h0; h < h1; h++)
            softmax16(p + (r * H + h) * hs, n[r], padded(n[r]));
    /* Values, VBLOCK keys at a time for every row and head (a row alone: all its keys at once). */
    const int64_t vb = R == 1 ? nmax : VBLOCK;
    for (int64_t c0 = 0; c0 < nmax; c0 += vb)
        for (int64_t kh = h0 / G; kh * G < h1; kh++)
            for (int64_t r = 0; r < R; r++) {
                const int64_t c1 = c0 + vb < n[r] ? c0 + vb : n[r];
                if (c0 >= n[r])
                    continue;
                const uint16_t *x = j->v + kh * Dh;
                const int64_t *ar = at + (first[r] - lo);
                const int64_t e = (kh + 1) * G < h1 ? (kh + 1) * G : h1;  /* this KV head's heads in range */
                for (int64_t h = kh * G > h0 ? kh * G : h0; h < e; h += 4) {   /* up to 4 heads at a time */
                    float *y = j->out + (s0 + r) * H * Dh + h * Dh, *w = p + (r * H + h) * hs;
                    const int nh = e - h >= 4 ? 4 : (int)(e - h);
                    /* nh a constant: the sums stay in registers */
                    if (nh == 4) weighted_sums(y, w, hs, 4, x, ar, c0, c1, Dh, c0 == 0);
                    else if (nh == 3) weighted_sums(y, w, hs, 3, x, ar, c0, c1, Dh, c0 == 0);
                    else if (nh == 2) weighted_sums(y, w, hs, 2, x, ar, c0, c1, Dh, c0 == 0);
                    else weighted_sums(y, w, hs, 1, x, ar, c0, c1, Dh, c0 == 0);
                }
            }
}

/* Heads [h0, h1) of rows [s0, s1) of a call, tile by tile (a pool of threads may split a call's rows
 * and heads anywhere: a row's bits do not depend on its tile, nor a head's on its neighbours). */
int ROWS_NAME(const lb_attn_job *j, int64_t s0, int64_t s1, int64_t h0, int64_t h1)
{
    int64_t maxlen = 1, maxn = 1;             /* the longest row; the most keys a row sees */
    for (int64_t s = s0; s < s1; s++) {
        const int64_t len = j->lens[s], n = len - first_key(len, j->window);
        maxlen = len > maxlen ? len : maxlen;
        maxn = n > maxn ? n : maxn;
    }
    const int64_t rows = s1 - s0 < TILE ? s1 - s0 : TILE;     /* the most a tile holds (one, decoding) */
    float *p = malloc((size_t)(rows * j->H * (padded(maxn) + LANES)) * sizeof(float));
    /* offset of each key's slot in a cache, for a tile's keys (at most maxlen) and a block past them */
    int64_t *at = malloc((size_t)(maxlen + LANES) * sizeof(int64_t));
    if (!p || !at) {
        free(p);
        free(at);
        return LB_ATTN_ENOMEM;
    }
    for (int64_t s = s0, ref; s < s1;) {
        const int64_t e = tile_end(j, s, s1, &ref);
        attend_tile(j, s, e - s, ref, h0, h1, p, at);
        s = e;
    }
    free(p);
    free(at);
    return LB_ATTN_OK;
}
