/* lb_pool_read (pool.h): a buffer read once through the pool, a contiguous stretch a thread, as a
 * decode step's matmuls read their weights (qmatmul.c: one piece a thread). What it takes is the
 * memory's ceiling for the kernels on that many threads (bench/bandwidth.py), measured with the
 * kernels' own threads, with nothing else (BLAS threads, other processes) in the reading. */
#include "pool.h"

#include <stdatomic.h>

typedef struct {
    const uint64_t *p;
    int64_t words, step;
    _Atomic uint64_t sum;
} read_job;

static void read_piece(void *ctx, int64_t i) {
    read_job *j = ctx;
    const int64_t a = i * j->step, b = a + j->step < j->words ? a + j->step : j->words;
    uint64_t s[8] = {0};                       /* 8 independent sums: the loads are not serialised */
    int64_t w = a;
    for (; w + 8 <= b; w += 8)
        for (int k = 0; k < 8; k++)
            s[k] += j->p[w + k];
    for (; w < b; w++)
        s[0] += j->p[w];
    atomic_fetch_add_explicit(&j->sum, s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7],
                              memory_order_relaxed);
}

uint64_t lb_pool_read(const void *buf, int64_t bytes) {
    const int64_t words = bytes / 8, n = lb_pool_size();
    read_job j = {buf, words, (words + n - 1) / n, 0};
    if (words > 0)
        lb_parallel_for(words < n ? words : n, read_piece, &j);
    uint64_t tail = 0;
    for (int64_t i = words * 8; i < bytes; i++)
        tail += ((const uint8_t *)buf)[i];
    return atomic_load(&j.sum) + tail;
}
