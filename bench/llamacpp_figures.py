"""llama.cpp's figures for bench/forward.py, through llama-cpp-python's low-level batch API.

Every figure goes through llama_batch + llama_decode, exactly as the numpy engine's do through
ForwardBatch: decode at batch b is one llama_decode per step with one token for each of b
sequences (n_seq_max = b), so llama.cpp batches it itself; nothing runs sequence by sequence.
"""

from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path


class LlamaCpp:
    """A loaded GGUF in llama.cpp, and fresh contexts on it for each measurement."""

    def __init__(self, lc, path: Path, threads: int):
        self.lc, self.threads = lc, threads
        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)   # its C log goes through this
        lc.llama_backend_init()
        mp = lc.llama_model_default_params()
        self.model = lc.llama_model_load_from_file(str(path).encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")

    def context(self, n_seq: int, n_ctx: int, n_batch: int):
        lc = self.lc
        cp = lc.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = n_ctx, n_batch, min(n_batch, 512), n_seq
        cp.n_threads = cp.n_threads_batch = self.threads
        init = getattr(lc, "llama_init_from_model", None) or lc.llama_new_context_with_model
        ctx = init(self.model, cp)
        if not ctx:
            raise RuntimeError(f"llama.cpp could not make a context for {n_seq} sequences")
        return Context(lc, ctx, n_batch, n_seq)

    def close(self) -> None:
        self.lc.llama_model_free(self.model)


class Context:
    def __init__(self, lc, ctx, n_batch: int, n_seq: int):
        self.lc, self.ctx = lc, ctx
        self.batch = lc.llama_batch_init(n_batch, 0, n_seq)

    def decode(self, items) -> None:
        """items: (seq, token, pos, wants logits), at most n_batch of them."""
        b = self.batch
        for i, (s, tok, pos, want) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i] = tok, pos, 1
            b.seq_id[i][0], b.logits[i] = s, want
        b.n_tokens = len(items)
        rc = self.lc.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def clear(self) -> None:
        self.lc.llama_memory_clear(self.lc.llama_get_memory(self.ctx), True)

    def close(self) -> None:
        self.lc.llama_batch_free(self.batch)
        self.lc.llama_free(self.ctx)


SINGLE_ROUNDS = 3    # single-stream is best of 3 (ours too, bench/forward.py): a shared machine's hiccups


def decode_rate(llm: LlamaCpp, prompt, context: int, batch: int, steps: int, clock=time.perf_counter) -> float:
    """Aggregate tokens/s of `batch` sequences decoding together after a `context`-token prompt each,
    from the median step, as bench/engine_rates.py times ours (`clock`: time.thread_time counts this thread's CPU time: with one thread llama.cpp computes on it)."""
    per_seq = -(-(context + steps + 16) // 256) * 256     # llama.cpp pads n_ctx per sequence to 256
    ctx = llm.context(batch, batch * per_seq, batch * context)
    try:
        ctx.decode([(s, tok, p, p == context - 1) for s in range(batch)
                    for p, tok in enumerate(prompt(context, s))])
        times = []
        for step in range(steps):
            t = clock()
            ctx.decode([(s, 11 + s, context + step, True) for s in range(batch)])
            times.append(clock() - t)
        return batch / statistics.median(times)
    finally:
        ctx.close()


def prefill_rate(llm: LlamaCpp, prompt, n: int, runs: int = 2, clock=time.perf_counter) -> float:
    """Tokens/s of one n-token prompt (logits for its last token only), best of `runs`."""
    ctx = llm.context(1, n + 16, n)
    try:
        best = float("inf")
        for _ in range(runs):
            ctx.clear()
            t = clock()
            ctx.decode([(0, tok, p, p == n - 1) for p, tok in enumerate(prompt(n))])
            best = min(best, clock() - t)
        return n / best
    finally:
        ctx.close()


def figures(path: Path, prompt, *, context: int, steps: int, threads: int, batches, prefills) -> dict | str:
    """The figures keyed as bench/forward.py prints them, or a line saying why there are none."""
    try:
        import llama_cpp as lc  # noqa: PLC0415 - optional: the `bench` extra
    except ImportError:
        return "llama_cpp (llama-cpp-python, the `bench` extra) is not installed: llama.cpp figures skipped"
    try:
        llm = LlamaCpp(lc, path, threads)
    except Exception as e:  # noqa: BLE001 - a bench reports, it does not crash
        return f"llama.cpp failed to load: {type(e).__name__}: {e}"
    try:
        out = {"version": lc.__version__}
        decode_rate(llm, prompt, context, 1, 2)                           # warm: pages in the weights
        out["single"] = max(decode_rate(llm, prompt, context, 1, steps * 2) for _ in range(SINGLE_ROUNDS))
        for b in batches:
            out[f"batch{b}"] = decode_rate(llm, prompt, context, b, steps)
        for n in prefills:
            out[f"prefill{n}"] = prefill_rate(llm, prompt, n)
        return out
    except Exception as e:  # noqa: BLE001
        return f"llama.cpp run failed: {type(e).__name__}: {e}"
    finally:
        llm.close()
