/* The pool behind lb_parallel_for (pool.h).
 *
 * One job at a time: its tasks are claimed from one 64-bit word, the job's number in the high half
 * and the next task in the low half, by compare-and-swap. A worker late for a job (descheduled on a
 * busy machine) can then never claim a task of the next one, so the caller waits only for the tasks
 * to be done, not for every worker to wake: it runs tasks itself until none are left. Once all are
 * done the caller closes the job (low half all ones) before it returns.
 *
 * Workers wait for a new job number spinning for about SPIN_NS (a decode step calls a kernel every
 * few tens of microseconds; a futex wake costs about as much), yielding the core after YIELD_NS (on a
 * machine with fewer free cores than threads the caller may be waiting for it), then sleep on a
 * condition variable.
 * Workers block every signal, so Python's handlers keep running on its main thread. A forked child
 * has no workers (threads do not survive fork): its pool is reset to one thread. Workers are
 * stopped and joined at exit.
 */
#define _GNU_SOURCE
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define MAX_THREADS 256
#define SPIN_NS 200000
#define YIELD_NS 20000
#define CLOSED 0xffffffffu

static struct {
    pthread_mutex_t busy;          /* held by the running parallel_for, and by a resize */
    pthread_mutex_t lock;          /* guards sleeping on wake */
    pthread_cond_t wake;
    _Atomic uint64_t claim;        /* job << 32 | next task (CLOSED: none left) */
    _Atomic int64_t done;          /* tasks of the job finished */
    _Atomic int sleepers, stop, size;
    _Atomic(lb_task) fn;
    _Atomic(void *) ctx;
    _Atomic int64_t n;
    int workers, registered;
    pthread_t tid[MAX_THREADS];
} P = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, CLOSED, 0, 0, 0, 1};

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Claims and runs tasks of the job in claim word c until the job has none left or is another. */
static void run_tasks(uint64_t c) {
    const uint32_t job = (uint32_t)(c >> 32);
    for (;;) {
        const uint32_t i = (uint32_t)c;
        /* read before the claim: a successful claim proves the job (and so these) did not change */
        const lb_task fn = atomic_load_explicit(&P.fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&P.ctx, memory_order_relaxed);
        const int64_t n = atomic_load_explicit(&P.n, memory_order_relaxed);
        if (i == CLOSED || (int64_t)i >= n)
            return;
        if (atomic_compare_exchange_weak(&P.claim, &c, c + 1)) {
            fn(ctx, i);
            atomic_fetch_add_explicit(&P.done, 1, memory_order_release);
            c = atomic_load(&P.claim);
        }
        if ((uint32_t)(c >> 32) != job)
            return;
    }
}

/* The claim word once its job number differs from seen (or the pool stops). */
static uint64_t wait_job(uint32_t seen) {
    int64_t start = 0;
    for (int s = 0;; s++) {
        const uint64_t c = atomic_load(&P.claim);
        if ((uint32_t)(c >> 32) != seen || atomic_load(&P.stop))
            return c;
        if ((s & 255) == 0) {
            const int64_t t = now_ns();
            if (start == 0)
                start = t;
            else if (t - start > YIELD_NS && t - start <= SPIN_NS)
                sched_yield();                     /* a busy machine: the caller may want this core */
            else if (t - start > SPIN_NS) {
                pthread_mutex_lock(&P.lock);
                atomic_fetch_add(&P.sleepers, 1);   /* before the check: the poster reads it after its store */
                while ((uint32_t)(atomic_load(&P.claim) >> 32) == seen && !atomic_load(&P.stop))
                    pthread_cond_wait(&P.wake, &P.lock);
                atomic_fetch_sub(&P.sleepers, 1);
                pthread_mutex_unlock(&P.lock);
                start = 0;
                continue;
            }
        }
        relax();
    }
}

static void *worker(void *arg) {
    uint32_t seen = (uint32_t)(uintptr_t)arg;
    for (;;) {
        const uint64_t c = wait_job(seen);
        if (atomic_load(&P.stop))
            return NULL;
        seen = (uint32_t)(c >> 32);
        run_tasks(c);
    }
}

static void serial(int64_t n, lb_task fn, void *ctx) {
    for (int64_t i = 0; i < n; i++)
        fn(ctx, i);
}

void lb_parallel_for(int64_t n, lb_task fn, void *ctx) {
    if (n <= 0)
        return;
    if (n == 1 || n >= CLOSED || atomic_load_explicit(&P.size, memory_order_relaxed) <= 1 ||
        pthread_mutex_trylock(&P.busy) != 0) {
        serial(n, fn, ctx);
        return;
    }
    if (P.workers == 0) {                           /* resized to 1 since the check above */
        pthread_mutex_unlock(&P.busy);
        serial(n, fn, ctx);
        return;
    }
    atomic_store_explicit(&P.fn, fn, memory_order_relaxed);
    atomic_store_explicit(&P.ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&P.n, n, memory_order_relaxed);
    atomic_store_explicit(&P.done, 0, memory_order_relaxed);
    const uint64_t c = ((atomic_load(&P.claim) >> 32) + 1) << 32;
    atomic_store(&P.claim, c);                      /* seq_cst: publishes the fields above */
    if (atomic_load(&P.sleepers)) {
        pthread_mutex_lock(&P.lock);
        pthread_cond_broadcast(&P.wake);
        pthread_mutex_unlock(&P.lock);
    }
    run_tasks(c);
    for (int s = 1; atomic_load_explicit(&P.done, memory_order_acquire) < n; s++)
        if (s % 4096) relax(); else sched_yield();  /* a worker descheduled mid-task on a busy machine */
    atomic_store(&P.claim, c | CLOSED);
    pthread_mutex_unlock(&P.busy);
}

int lb_pool_size(void) { return atomic_load_explicit(&P.size, memory_order_relaxed); }
int lb_threads(void) { return lb_pool_size(); }

static void stop_workers(void) {
    atomic_store(&P.stop, 1);
    pthread_mutex_lock(&P.lock);
    pthread_cond_broadcast(&P.wake);
    pthread_mutex_unlock(&P.lock);
    for (int i = 0; i < P.workers; i++)
        pthread_join(P.tid[i], NULL);
    P.workers = 0;
    atomic_store(&P.size, 1);
    atomic_store(&P.stop, 0);
}

static void at_exit(void) {
    pthread_mutex_lock(&P.busy);
    stop_workers();
    pthread_mutex_unlock(&P.busy);
}

static void in_child(void) {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    P.busy = m;
    P.lock = m;
    P.wake = cv;
    P.workers = 0;
    atomic_store(&P.sleepers, 0);
    atomic_store(&P.stop, 0);
    atomic_store(&P.size, 1);
    atomic_store(&P.claim, (uint64_t)CLOSED);
}

int lb_set_threads(int n) {
    n = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
    pthread_mutex_lock(&P.busy);
    if (!P.registered) {
        P.registered = 1;
        atexit(at_exit);
        pthread_atfork(NULL, NULL, in_child);
    }
    if (n != P.workers + 1) {
        stop_workers();
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);   /* the workers inherit it */
        const uintptr_t job = (uintptr_t)(atomic_load(&P.claim) >> 32);
        while (P.workers < n - 1 && pthread_create(&P.tid[P.workers], NULL, worker, (void *)job) == 0)
            P.workers++;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        atomic_store(&P.size, P.workers + 1);
    }
    const int size = P.workers + 1;
    pthread_mutex_unlock(&P.busy);
    return size;
}

static void noop(void *ctx, int64_t i) {
    (void)ctx;
    (void)i;
}

int lb_pool_noop(int64_t calls, int64_t n_tasks) {
    for (int64_t i = 0; i < calls; i++)
        lb_parallel_for(n_tasks, noop, NULL);
    return 0;
}
