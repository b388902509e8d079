"""llama.cpp as the baseline engine: one context, up to C sequences decoded together in one
`llama_decode` per step (continuous batching, as llama-server's slots do), driven by the same
closed-loop clients and timed the same way as the llmbus stack.

Uses llama-cpp-python's low-level API (llama_batch, llama_decode, llama_memory_seq_rm); greedy
sampling is an argmax over the logits row, as the stack's temperature 0 is.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.serve_workload import Prompt, RequestTiming, Workload

BATCH_TOKENS = 512   # tokens per llama_decode call (llama.cpp's default n_batch)


class LlamaCppFailed(RuntimeError):
    """llama.cpp could not load the model or refused a batch."""


@dataclass
class _Slot:
    """One client's request in flight on its own sequence id."""
    seq: int
    prompts: list[Prompt]                     # what this client sends next
    timing: RequestTiming | None = None
    todo: list[int] = field(default_factory=list)   # prompt ids not yet decoded
    pos: int = 0
    last: int = -1
    generated: int = 0


class LlamaCppEngine:
    def __init__(self, model: Path, max_seqs: int, seq_ctx: int, threads: int,
                 eog: frozenset[int], extra_bufts: bool = True):
        import llama_cpp
        from llama_cpp import llama_cpp as L

        self.L = L
        self.version = getattr(llama_cpp, "__version__", "?")
        self.eog = eog
        self.max_seqs = max_seqs
        # Keep llama.cpp quiet: its load log would bury the table. The callback must outlive it.
        self._quiet = L.llama_log_callback(lambda level, text, data: None)
        L.llama_log_set(self._quiet, ctypes.c_void_p(0))
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        # False keeps weights out of llama.cpp's extra buffer types (AMX, repacked layouts):
        # on a VM that advertises AMX but does not grant its tile state, AMX kernels SIGILL.
        mp.use_extra_bufts = extra_bufts
        self.model = L.llama_model_load_from_file(str(model).encode(), mp)
        if not self.model:
            raise LlamaCppFailed(f"llama.cpp could not load {model}")
        cp = L.llama_context_default_params()
        cp.n_ctx = max_seqs * seq_ctx
        cp.n_batch = cp.n_ubatch = BATCH_TOKENS
        cp.n_seq_max = max_seqs
        cp.n_threads = cp.n_threads_batch = threads
        cp.kv_unified = True    # one KV pool shared by the sequences, as llama-server uses it
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise LlamaCppFailed("llama.cpp could not create a context")
        self.mem = L.llama_get_memory(self.ctx)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.batch = L.llama_batch_init(BATCH_TOKENS, 0, 1)

    def close(self) -> None:
        L = self.L
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)

    def run(self, prompts: list[Prompt], concurrency: int, workload: Workload) -> list[RequestTiming]:
        """Client i sends prompts i, i+C, ... one after another; all clients decode together."""
        if concurrency > self.max_seqs:
            raise ValueError(f"concurrency {concurrency} > the context's {self.max_seqs} sequences")
        slots = [_Slot(i, list(prompts[i::concurrency])) for i in range(concurrency)]
        timings: list[RequestTiming] = []
        active = [s for s in slots if self._next(s, timings)]
        while active:
            wants = self._fill(active)
            if self.L.llama_decode(self.ctx, self.batch) != 0:
                raise LlamaCppFailed("llama_decode refused a batch")
            now = time.perf_counter()
            for slot, idx in wants:
                row = np.ctypeslib.as_array(self.L.llama_get_logits_ith(self.ctx, idx),
                                            shape=(self.n_vocab,))
                tok = int(np.argmax(row))
                slot.timing.tokens(now, 1)
                slot.generated += 1
                slot.last = tok
                if tok in self.eog or slot.generated >= workload.max_tokens:
                    slot.timing.finish = "stop" if tok in self.eog else "length"
                    if not self._next(slot, timings):
                        active.remove(slot)
        return timings

    def _next(self, slot: _Slot, timings: list[RequestTiming]) -> bool:
        """Start the slot's next request on a clean sequence; False when it has none left."""
        self.L.llama_memory_seq_rm(self.mem, slot.seq, -1, -1)
        if not slot.prompts:
            slot.timing = None
            return False
        p = slot.prompts.pop(0)
        slot.timing = RequestTiming(sent=time.perf_counter(), prompt_tokens=len(p.ids))
        timings.append(slot.timing)
        slot.todo, slot.pos, slot.generated, slot.last = list(p.ids), 0, 0, -1
        return True

    def _fill(self, active: list[_Slot]) -> list[tuple[_Slot, int]]:
        """One step's batch: every decoding slot's last token first, then prompt chunks."""
        b, n, wants = self.batch, 0, []

        def put(slot: _Slot, tok: int, logits: bool) -> None:
            nonlocal n
            b.token[n], b.pos[n], b.n_seq_id[n] = tok, slot.pos, 1
            b.seq_id[n][0] = slot.seq
            b.logits[n] = logits
            if logits:
                wants.append((slot, n))
            slot.pos += 1
            n += 1

        for slot in active:
            if not slot.todo:
                put(slot, slot.last, True)
        for slot in active:
            while slot.todo and n < BATCH_TOKENS:
                put(slot, slot.todo.pop(0), not slot.todo)
        b.n_tokens = n
        return wants
