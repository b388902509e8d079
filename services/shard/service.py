"""The shard runner: holds layers [start, end) of a model and runs batches through them.

A `shard.forward` arrives at the first shard with token ids. Each shard runs its layers, then
hands its activations to the next stage of the batch's route (the scheduler's pipeline, see
services.shard.route) in the configured codec, and awaits that shard's reply. The last shard
applies the output head, samples, and answers with token ids and log-probabilities; the answer
travels back along the chain, so a failure anywhere reaches the caller as a typed error.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

import wire
from bus.config import ServiceConfig
from bus.errors import ServiceError
from bus.service import Service, handles
from wire.messages.shard import Forward, ForwardReply

from .route import BadRoute, StaleRoute, check_self, next_stage

log = logging.getLogger("llmbus.shard")

DEVICES = ("cpu", "cuda")
# "quantized": GGUF's blocks through the native kernel (kernels.qmatmul), 6x fewer bytes a step;
# "float32": dequantized, numpy/OpenBLAS; "auto": quantized where the native kernel was built.
WEIGHT_FORMATS = ("auto", "quantized", "float32")


def weight_format(device: str, requested: str) -> str:
    """The format a shard loads: a cuda shard dequantizes (to fp16 on the device) whatever it is asked."""
    if device == "cuda":
        return "float32"
    if requested == "auto":
        from kernels.qmatmul import available
        return "quantized" if available() else "float32"
    return requested


def array_module(device: str):
    """numpy for "cpu"; cupy for "cuda", or ArrayModuleUnavailable naming why there is none."""
    from kernels.xp import get_xp
    return get_xp("cupy" if device == "cuda" else "numpy")


@dataclass(frozen=True)
class ShardConfig:
    model: Path
    start: int
    end: int
    codec: str = "fp16"          # how this shard's activations travel to the next
    num_pages: int = 1024
    page_size: int = 16
    weights: str = "auto"        # how a cpu shard holds its matrices: WEIGHT_FORMATS
    device: str = "cpu"          # "cpu" (numpy) or "cuda" (cupy, imported only then)
    threads: int = 1             # native kernel threads of this process (kernels.native_lib.set_threads)

    def __post_init__(self):
        if self.threads < 1:
            raise ValueError(f"threads {self.threads}: at least 1")
        if self.device not in DEVICES:
            raise ValueError(f"device {self.device!r}: one of {', '.join(DEVICES)}")
        if self.weights not in WEIGHT_FORMATS:
            raise ValueError(f"weights {self.weights!r}: one of {', '.join(WEIGHT_FORMATS)}")
        if self.codec not in wire.ACTIVATION_CODECS:
            raise ValueError(f"codec {self.codec!r}: one of {', '.join(wire.ACTIVATION_CODECS)}")
        if not 0 <= self.start < self.end:
            raise ValueError(f"layer range {self.start}:{self.end} is empty or negative")


class ShardService(Service):
    kind = "shard"

    def __init__(self, config: ServiceConfig, shard: ShardConfig, ctx=None):
        super().__init__(config, ctx)
        self.shard = shard
        self.model = None
        self.loaded = None
        # One compute thread: batches run one at a time here while the event loop keeps
        # reading requests, and numpy releases the GIL inside its kernels.
        self._compute = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forward")

    # ------------------------------------------------------------------ lifecycle
    async def on_start(self) -> None:
        self.loaded, self.model = await asyncio.get_running_loop().run_in_executor(
            self._compute, self._load)

    def _load(self):
        from services.modelstore.identity import model_identity
        from services.modelstore.weight_cache import load_weights
        from services.shard.kv_cache import KVConfig, PagedKVCache
        from services.shard.model import ShardModel

        from kernels.native_lib import set_threads

        s = self.shard
        self.threads = set_threads(s.threads)      # one pool per process: this shard's
        xp = array_module(s.device)
        self.weight_format = weight_format(s.device, s.weights)
        loaded = load_weights(s.model, s.start, s.end, self.weight_format)
        weights, dtype = loaded.weights, np.dtype(np.float32)
        if s.device == "cuda":   # fp16 halves what the GPU reads per token; the engine keeps fp32 I/O
            weights, dtype = weights.to(xp, xp.float16), np.dtype(np.float16)
        kv = PagedKVCache.for_model(loaded.config, s.start, s.end,
                                    KVConfig(num_pages=s.num_pages, page_size=s.page_size),
                                    dtype=dtype, xp=xp)
        # ShardModel hands back host float32 (hidden states or logits) whatever xp computes,
        # so the codec and the sampler below always see numpy arrays.
        model = ShardModel(loaded.config, weights, kv, xp=xp)
        self.model_id = model_identity(s.model)
        self.kv_bytes = kv.k.nbytes + kv.v.nbytes
        return loaded, model

    async def on_stop(self) -> None:
        self._compute.shutdown(wait=True)

    def info(self) -> dict:
        if self.model is None:
            return {"layers": [self.shard.start, self.shard.end]}
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"layers": [self.shard.start, self.shard.end], "n_layers": self.model.config.n_layers,
                "model": self.model_id, "codec": self.shard.codec, "device": self.shard.device,
                "weights": self.weight_format, "weights_mb": round(self.loaded.weights.nbytes() / 2**20, 1),
                "num_pages": self.shard.num_pages, "page_size": self.shard.page_size,
                "load_s": round(self.loaded.seconds, 3), "cold_load": self.loaded.cold,
                "kv_mb": round(self.kv_bytes / 2**20, 1), "max_rss_mb": round(rss_mb, 1),
                "threads": self.threads}

    # ------------------------------------------------------------------ the work
    @handles(Forward)
    async def forward(self, msg: wire.Message) -> ForwardReply:
        f: Forward = msg.body
        self.counters["forwards"] += 1
        if self.model is None:
            raise ServiceError("loading", f"{self.name} is still loading", retry_after=1.0)
        try:
            check_self(f.route, f.hop, self.name, self.epoch)
        except StaleRoute as e:
            raise self._refuse("stale_route", e) from None
        if f.first_layer != self.shard.start:
            raise ServiceError("range_mismatch", f"{self.name} holds layers {self.shard.start}:"
                                                 f"{self.shard.end}, not {f.first_layer}:")
        batch = self._batch(f)
        t0 = time.perf_counter()
        out = await self._run(self.model.forward, batch)
        ms = (time.perf_counter() - t0) * 1e3
        if self.model.last:
            reply = await self._sample(f, out)
        else:
            reply = await self._hand_on(msg, f, out)
        reply.hop_ms[self.name] = round(ms, 3)
        return reply

    def _batch(self, f: Forward):
        from services.shard.batch import ForwardBatch
        try:
            return ForwardBatch(
                positions=f.positions.array(), query_lens=f.query_lens.array(),
                page_table=f.page_table.array(),
                tokens=f.tokens.array() if f.tokens is not None else None,
                hidden=f.hidden.array() if f.hidden is not None else None,
                want_logits=f.want_logits.array() if f.want_logits is not None else None)
        except ValueError as e:   # a payload that does not reshape to its declared shape
            raise ServiceError("bad_batch", str(e)) from None

    def _refuse(self, code: str, e: Exception) -> ServiceError:
        """A batch planned for KV this shard does not hold: the scheduler must plan again."""
        self.counters[f"refused.{code}"] += 1
        log.warning("%s refuses a batch (%s): %s", self.name, code, e)
        return ServiceError(code, f"{self.name}: {e}")

    async def _run(self, fn, *args):
        from kernels.sampling import BadSamplerInput
        from services.shard.batch import BadBatch
        from services.shard.kv_cache import KVMissing
        try:
            return await asyncio.get_running_loop().run_in_executor(self._compute, fn, *args)
        except KVMissing as e:
            raise self._refuse("kv_missing", e) from None
        except (BadBatch, BadSamplerInput) as e:
            raise ServiceError("bad_batch", str(e)) from None

    async def _hand_on(self, msg: wire.Message, f: Forward, hidden: np.ndarray) -> ForwardReply:
        try:
            nxt = next_stage(f.route, f.hop, self._live_epoch, self.shard.end)
        except StaleRoute as e:
            raise self._refuse("stale_route", e) from None
        except BadRoute as e:
            raise ServiceError("bad_batch", str(e)) from None
        onward = replace(f, first_layer=self.shard.end, tokens=None, hop=f.hop + 1,
                         hidden=wire.Tensor(hidden, self.shard.codec))
        timeout = (msg.deadline - time.time()) if msg.deadline else 30.0
        if timeout <= 0:
            raise ServiceError("deadline_exceeded", "no time left to reach the next shard")
        return await self.peers.call(nxt.name, onward, timeout=timeout)

    def _live_epoch(self, name: str) -> int | None:
        e = self.directory.get(name)
        return e.epoch if e is not None else None

    async def _sample(self, f: Forward, logits: np.ndarray) -> ForwardReply:
        from services.shard.sampling_step import sample_rows, split_histories

        n = logits.shape[0]
        if len(f.sampling) != n:
            raise ServiceError("bad_batch", f"{n} sequences sample but {len(f.sampling)} "
                                            "sampling entries were sent")
        hist = f.history.array() if f.history is not None else np.zeros(0, np.int32)
        res = await self._run(lambda: sample_rows(logits, f.sampling, f.steps,
                                                  split_histories(hist, f.history_lens, n)))
        want_top = res.top_ids.shape[1] > 0
        return ForwardReply(
            batch_id=f.batch_id, tokens=wire.Tensor(res.tokens), logprobs=wire.Tensor(res.logprobs),
            top_ids=wire.Tensor(res.top_ids) if want_top else None,
            top_logprobs=wire.Tensor(res.top_logprobs) if want_top else None,
            logits=wire.Tensor(logits, "fp32") if f.return_logits else None,
            errors=res.errors if res.failed else [])
