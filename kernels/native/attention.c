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
 *
 * A prompt's rows share their pages, so up to TILE of them go together (attend_tile): each block
 * of keys, then of values, is loaded once for all of them instead of once per row, which kept a
 * 1000-key prompt's attention bound by re-reading its cache. Only the loops' order changes; each
 * row's own operations, and so its bits, are those it has alone.
 *
 * The cache holds float16 (llama.cpp's default KV type): half the bytes of float32 to read, and
 * half the memory. A row widens each key and value as it loads it (exactly), so its operations are
 * those over float32 caches holding the same values. Its q is rounded to float16 first, as the keys
 * are (llama.cpp's flash attention, its default, does the same); products and sums stay float32.
 *
 * The rows are computed by attention_rows.h, compiled once per instruction set (attention_generic.c,
 * attention_avx2.c, attention_avx512.c); this file checks a call and splits it over the threads.
 *
 * A sliding window (gemma3's local layers) is a row's first key: a row of len keys sees keys
 * max(0, len - window) .. len-1, llama.cpp's LLAMA_SWA_TYPE_STANDARD mask (a key p0 is masked for
 * the query at p1 when p1 - p0 >= window). Only those keys are read, and a row's blocks of 16
 * count from its first key, so its bits are those of a row over just these keys.
 */
#include "attention.h"
#include "attention_job.h"
#include "qmatmul_impl.h"
#include "pool.h"

#include <stdatomic.h>
#include <stdlib.h>

static int check(const int32_t *table, const int32_t *lens, int64_t S, int64_t page, int64_t n_pages,
                 int64_t num_pages, int64_t window, int64_t *maxlen)
{
    *maxlen = 0;
    for (int64_t s = 0; s < S; s++) {
        int64_t len = lens[s];
        if (len < 1 || len > n_pages * page)
            return LB_ATTN_ESHAPE;
        for (int64_t i = first_key(len, window) / page; i < (len + page - 1) / page; i++) {
            int32_t p = table[s * n_pages + i];
            if (p < 0 || p >= num_pages)
                return LB_ATTN_EPAGE;
        }
        if (len > *maxlen)
            *maxlen = len;
    }
    return LB_ATTN_OK;
}


/* A call cut into pieces of `step` rows, or, with fewer rows than threads, each row into `parts`
 * ranges of heads (a decode step of one sequence: its heads are all the work there is). */
typedef struct {
    const lb_attn_job *j;
    int isa;
    int64_t step, S, parts;
    _Atomic int err;
} split_job;

static int rows_isa(const lb_attn_job *j, int isa, int64_t s0, int64_t s1, int64_t h0, int64_t h1)
{
    switch (isa) {       /* the path is lb_set_isa's (qmatmul.c): forcing a path forces it here too */
#if defined(__x86_64__) && defined(__GNUC__)
    case LB_ISA_AVX512: return lb_attn_rows_avx512(j, s0, s1, h0, h1);
    case LB_ISA_AVX2: return lb_attn_rows_avx2(j, s0, s1, h0, h1);
#endif
    default: return lb_attn_rows_generic(j, s0, s1, h0, h1);
    }
}

static void rows_piece(void *ctx, int64_t i)
{
    split_job *sj = ctx;
    int err;
    if (sj->parts > 1) {
        const int64_t s = i / sj->parts, k = i % sj->parts, H = sj->j->H;
        err = rows_isa(sj->j, sj->isa, s, s + 1, k * H / sj->parts, (k + 1) * H / sj->parts);
    } else {
        const int64_t s0 = i * sj->step, s1 = s0 + sj->step < sj->S ? s0 + sj->step : sj->S;
        err = rows_isa(sj->j, sj->isa, s0, s1, 0, sj->j->H);
    }
    if (err)
        sj->err = err;
}

int lb_attend_decode(const float *q, const uint16_t *k_cache, const uint16_t *v_cache, const int32_t *table,
                     const int32_t *lens, int64_t S, int64_t H, int64_t KVH, int64_t Dh, int64_t page,
                     int64_t n_pages, int64_t num_pages, int64_t window, float scale, float *out)
{
    if (S < 0 || H < 1 || KVH < 1 || H % KVH || Dh < 1 || page < 1 || n_pages < 0 || window < 0)
        return LB_ATTN_ESHAPE;
    int64_t maxlen;
    int err = check(table, lens, S, page, n_pages, num_pages, window, &maxlen);
    if (err || S == 0)
        return err;
    /* The scores' q rounded to float16, as the keys are: llama.cpp's flash attention (its default)
     * takes q to the keys' type before its dot products. */
    const int64_t nq = S * H * Dh;
    float *qh = malloc((size_t)nq * sizeof(float));
    if (!qh)
        return LB_ATTN_ENOMEM;
    const int isa = lb_chosen_isa();
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa == LB_ISA_AVX2 || isa == LB_ISA_AVX512)
        lb_attn_round_f16c(q, qh, nq);
    else
#endif
        lb_attn_round_generic(q, qh, nq);
    const lb_attn_job j = {qh, k_cache, v_cache, table, lens, H, KVH, Dh, page, n_pages, window, scale, out};
    const int threads = lb_pool_size();
    if (threads <= 1 || (S == 1 && H == 1)) {
        err = rows_isa(&j, isa, 0, S, 0, H);
    } else if (S < threads) {
        /* Fewer rows than threads: each row's heads in ceil(threads / S) ranges (at most H), one a task;
         * a range's heads that share a KV head read its keys once, so the ranges are no more than needed. */
        int64_t parts = (threads + S - 1) / S;
        parts = parts < H ? parts : H;
        split_job sj = {&j, isa, 1, S, parts, LB_ATTN_OK};
        lb_parallel_for(S * parts, rows_piece, &sj);
        err = sj.err;
    } else {
        /* Rows over the pool's threads (pool.c), four pieces a thread; pieces longer than a tile are whole
         * tiles, so a long prompt keeps sharing its key loads (a row's bits do not depend on its piece). */
        int64_t step = (S + 4 * threads - 1) / (4 * threads);
        if (step > TILE)
            step = (step + TILE - 1) / TILE * TILE;
        split_job sj = {&j, isa, step, S, 1, LB_ATTN_OK};
        lb_parallel_for((S + step - 1) / step, rows_piece, &sj);
        err = sj.err;
    }
    free(qh);
    return err;
}
