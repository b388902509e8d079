/* Decode attention over a paged KV cache: one query token per sequence, grouped KV heads. */
#ifndef LB_ATTENTION_H
#define LB_ATTENTION_H

#include <stdint.h>

#if defined(__GNUC__)
#define LB_ATTN_API __attribute__((visibility("default")))
#else
#define LB_ATTN_API
#endif

enum { LB_ATTN_OK = 0, LB_ATTN_ESHAPE = -2, LB_ATTN_EPAGE = -3, LB_ATTN_ENOMEM = -4 };

/* q (S, H, Dh); k_cache, v_cache (num_pages, page, KVH, Dh); table (S, n_pages) pages of each
 * sequence; lens (S,) keys each sequence has (its positions 0 .. lens[s]-1), of which a row sees
 * the last `window` (0: all); out (S, H, Dh). Query head h reads KV head h / (H / KVH). The caches
 * hold float16 bits, q and out are float32 (q rounded to float16 for the scores, as the keys); all
 * C-contiguous. */
LB_ATTN_API int lb_attend_decode(const float *q, const uint16_t *k_cache, const uint16_t *v_cache,
                                 const int32_t *table, const int32_t *lens, int64_t S, int64_t H,
                                 int64_t KVH, int64_t Dh, int64_t page, int64_t n_pages,
                                 int64_t num_pages, int64_t window, float scale, float *out);

#endif
