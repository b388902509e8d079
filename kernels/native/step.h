/* A decode step's batch checked and planned in one call (step.c). */
#ifndef LB_STEP_H
#define LB_STEP_H

#include <stdint.h>

#if defined(__GNUC__)
#define LB_STEP_API __attribute__((visibility("default")))
#else
#define LB_STEP_API
#endif

/* S sequences of one token each: pos, qlens, tokens (or NULL: hidden states come in) (S,); table
 * (S, P) page ids, -1 padded; written (num_pages,) the slots of each page this process wrote.
 * Returns 0 when qlens are all 1, tokens (if given) lie in [0, vocab), every position is >= 0, its
 * pages lie in table and in [0, num_pages), and they hold every earlier position; then writes
 * write_pages, write_slots (S,) (the token's page and slot), lens (S,) (pos + 1), dec_table
 * (S, n) (table's first n columns, -1 as 0) with n = *n_pages, the pages of the longest. Else a
 * positive code (which check failed first) and nothing is to be read from the outputs. */
LB_STEP_API int lb_decode_plan(const int32_t *pos, const int32_t *qlens, const int32_t *tokens,
                               const int32_t *table, int64_t S, int64_t P, int64_t vocab, int64_t num_pages,
                               int64_t page_size, const int32_t *written, int64_t *write_pages,
                               int64_t *write_slots, int32_t *lens, int32_t *dec_table, int64_t *n_pages);

/* After the step ran: written[pages[i]] = max(written[pages[i]], slots[i] + 1) for i < n. */
LB_STEP_API void lb_mark_written(int32_t *written, const int64_t *pages, const int64_t *slots, int64_t n);

#endif
