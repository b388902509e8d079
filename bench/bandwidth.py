"""How fast this machine reads memory: one thread alone, and n threads at once.

A decode step streams every weight once, so bytes / read bandwidth is its floor. n threads do not
read n times as fast as one on every machine (a VM's share of the memory system may be capped, a
single core may already draw most of it): a decode step on n threads is held against what n
threads read at once, measured here, not against n times one thread.
"""

from __future__ import annotations

import multiprocessing
import time

import numpy as np

ARRAY_BYTES = 512 << 20            # far past any cache
ROWS_OF = 4096                     # a gemv over (rows, 4096) float32 reads the array once


def read_bandwidth() -> dict:
    """Bytes/s a single thread reads from memory: a sum, a copy (read side), a matrix-vector product."""
    a = np.ones((ARRAY_BYTES // 4,), np.float32)
    dst = np.empty_like(a)
    m = a.reshape(-1, ROWS_OF)
    v = np.ones(ROWS_OF, np.float32)
    out = {}
    for name, fn in (("sum", lambda: a.sum()), ("copy", lambda: np.copyto(dst, a)), ("gemv", lambda: m @ v)):
        fn()
        out[name] = a.nbytes / min(_timed(fn) for _ in range(3))
    return out


def read_bandwidth_together(n: int, rounds: int = 4) -> float:
    """Bytes/s that n processes read at once, each a gemv over its own 1/n of ARRAY_BYTES (BLAS on
    one thread each), started together; the best round's total bytes over its slowest process."""
    if n < 2:
        return read_bandwidth()["gemv"]
    ctx = multiprocessing.get_context("fork")      # the readers need numpy only
    start, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_reader, args=(ARRAY_BYTES // n, rounds, start, results)) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        times = [results.get(timeout=120) for _ in range(n)]          # each process: its round times
    finally:
        for p in procs:
            p.join(timeout=10)
    slowest = [max(t[r] for t in times) for r in range(rounds)]
    return ARRAY_BYTES // n * n / min(slowest)


def _reader(nbytes: int, rounds: int, start, results) -> None:
    m = np.ones((nbytes // 4 // ROWS_OF, ROWS_OF), np.float32)
    v = np.ones(ROWS_OF, np.float32)
    m @ v
    took = []
    for _ in range(rounds):
        start.wait()
        took.append(_timed(lambda: m @ v))
    results.put(took)


def pool_read_arrays(arrays, threads: int, rounds: int = 4, clock=time.perf_counter) -> float | None:
    """Bytes/s the native kernels' pool reads `arrays` (numpy arrays, C-contiguous, 8-byte aligned),
    each once in turn, one stretch a thread (lb_pool_read), best of `rounds`; None without the
    library. Given a model's weights this is what a decode step's matmuls could stream from those
    very pages: a file mapping of page-cache folios reads at its own rate, not at that of a fresh
    anonymous buffer (here 4 KiB anonymous pages read ~25% slower on one thread than huge ones). The
    pool is left at the size it had. `clock`: time.thread_time times one thread's read by its CPU time."""
    from kernels import native_lib  # noqa: PLC0415 - the bench runs without the library too

    lib = native_lib.load()
    if lib is None:
        return None
    for a in arrays:
        if not a.flags.c_contiguous or a.ctypes.data % 8:
            raise ValueError(f"pool_read_arrays reads C-contiguous 8-byte aligned arrays, got {a.dtype}{a.shape}")
    spans = [(a.ctypes.data, a.nbytes) for a in arrays]
    total = sum(n for _, n in spans)

    def read_all():
        for at, n in spans:
            lib.lb_pool_read(at, n)

    was = native_lib.threads()
    native_lib.set_threads(threads)
    try:
        read_all()
        return total / min(_timed(read_all, clock) for _ in range(rounds))
    finally:
        native_lib.set_threads(was)


def weight_arrays(weights) -> list[np.ndarray]:
    """The buffers a forward streams: each array of the shard's weights once (a tied head once), a
    quantized matrix's blocks as stored (ShardWeights.buffers)."""
    return weights.buffers()


def _timed(fn, clock=time.perf_counter) -> float:
    t = clock()
    fn()
    return clock() - t


def pool_read_bandwidth(threads: int, rounds: int = 4) -> float | None:
    """Bytes/s the native kernels' pool reads on `threads` threads, one stretch of ARRAY_BYTES each
    (lb_pool_read: the way a decode step's matmuls split their weights), best of `rounds`; None
    without the library. Unlike the numpy figures it involves no BLAS threads and no other
    processes. The pool is left at the size it had."""
    buf = np.ones(ARRAY_BYTES, np.uint8)            # touched: no page faults in the timing
    return pool_read_arrays([buf], threads, rounds)
