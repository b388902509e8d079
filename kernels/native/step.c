/* lb_decode_plan (step.h): for a batch of decode tokens, what services/shard/batch.validate,
 * PagedKVCache.check_written and plan_attention(rows_alone=True) compute, without their ~40 numpy
 * calls (about 0.1 ms each decode step, serial while the kernels' pool waits). Those
 * stay the definition: a batch this refuses goes through them, and they say what is wrong. */
#include "step.h"

int lb_decode_plan(const int32_t *pos, const int32_t *qlens, const int32_t *tokens, const int32_t *table,
                   int64_t S, int64_t P, int64_t vocab, int64_t num_pages, int64_t page_size,
                   const int32_t *written, int64_t *write_pages, int64_t *write_slots, int32_t *lens,
                   int32_t *dec_table, int64_t *n_pages) {
    if (S < 1 || P < 1 || page_size < 1) return 1;
    int64_t longest = 0;
    for (int64_t s = 0; s < S; s++) {
        const int64_t p = pos[s];
        const int32_t *row = table + s * P;
        if (qlens[s] != 1) return 2;
        if (tokens != 0 && (tokens[s] < 0 || tokens[s] >= vocab)) return 3;
        if (p < 0) return 4;
        const int64_t needed = p / page_size + 1;
        if (needed > P) return 5;
        for (int64_t j = 0; j < needed; j++) {
            if (row[j] < 0 || row[j] >= num_pages) return 6;
            const int64_t before = p - j * page_size;            /* slots page j must hold: min(before, page) */
            if ((before < page_size ? before : page_size) > written[row[j]]) return 7;
        }
        write_pages[s] = row[needed - 1];
        write_slots[s] = p % page_size;
        lens[s] = (int32_t)(p + 1);
        if (p + 1 > longest) longest = p + 1;
    }
    const int64_t n = (longest + page_size - 1) / page_size;
    for (int64_t s = 0; s < S; s++)
        for (int64_t j = 0; j < n; j++)
            dec_table[s * n + j] = table[s * P + j] < 0 ? 0 : table[s * P + j];
    *n_pages = n;
    return 0;
}

void lb_mark_written(int32_t *written, const int64_t *pages, const int64_t *slots, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (slots[i] + 1 > written[pages[i]]) written[pages[i]] = (int32_t)(slots[i] + 1);
}
