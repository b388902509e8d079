/* A process-wide pool of threads that stays alive between calls: parallel_for runs tasks 0 .. n-1 on
 * the pool and the calling thread. Which thread runs a task never changes what it computes, so a
 * kernel that splits only independent outputs gives the same bits whatever the thread count. */
#ifndef LB_POOL_H
#define LB_POOL_H

#include <stdint.h>

#if defined(__GNUC__)
#define LB_POOL_API __attribute__((visibility("default")))
#else
#define LB_POOL_API
#endif

typedef void (*lb_task)(void *ctx, int64_t task);

/* Runs fn(ctx, i) for 0 <= i < n_tasks and returns when all are done. Serial in the caller when the
 * pool has one thread, when another parallel_for holds it (two callers, or a task calling in), or
 * when n_tasks < 2. */
void lb_parallel_for(int64_t n_tasks, lb_task fn, void *ctx);

/* Threads a parallel_for uses, the caller included (1: no workers). */
int lb_pool_size(void);

/* Resize the pool to n threads (the caller counts as one; n < 1 means 1); returns the size now. */
LB_POOL_API int lb_set_threads(int n);
LB_POOL_API int lb_threads(void);

/* calls empty parallel_fors of n_tasks (for bench/forward.py: the pool's cost per call); returns 0. */
LB_POOL_API int lb_pool_noop(int64_t calls, int64_t n_tasks);

/* Reads bytes of buf (8-byte aligned) once, a contiguous stretch per thread of the pool
 * (bench/bandwidth.py: the memory ceiling of the kernels' threads); returns the sum of buf as
 * little-endian uint64 words, then its bytes past the last whole word (mod 2^64), so that the reads
 * cannot be left out. */
LB_POOL_API uint64_t lb_pool_read(const void *buf, int64_t bytes);

#endif
