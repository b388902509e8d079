"""The shard runner: holds layers [start, end) of a model and runs batches through them.

Started without a range, it offers its memory budget on the bus and serves the range the
scheduler's placement gives it (`shard.place` loads it beside the range it serves,
`shard.switch` makes it the one served): see wire.messages.placement.

A `shard.forward` arrives at the first shard with token ids. Each shard runs its layers, hands
its activations to the next stage of the batch's route (the scheduler's pipeline, see
services.shard.route) in the configured codec, and answers its caller `shard.handed_on`. The last
shard applies the output head, samples, and sends the token ids and log-probabilities straight to
`Forward.reply_to` as `shard.result` (the reply itself, when the route has one stage: its caller
is `reply_to`); a stage whose next stage fails the batch tells `reply_to` with `shard.failed`
(wire.messages.shard).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

import wire
from bus.config import ServiceConfig
from bus.errors import BusError, ServiceError, code_of
from bus.machine import kernel_id
from bus.service import Service, handles
from wire.failures import (BAD_BATCH, BAD_RANGE, DEADLINE_EXCEEDED, KV_MISSING, LOADING, NOT_STAGED,
                           PINNED, RANGE_MISMATCH, STALE_ROUTE, SUPERSEDED, UNREACHABLE)
from wire.messages.info import ShardInfo
from wire.messages.placement import (FootprintReply, FootprintRequest, Place, Placed, Switch,
                                     Switched)
from wire.messages.shard import (Forward, ForwardFailed, ForwardResult, HandedOn, Hop, ReplyTo,
                                 RouteStage)

from .config import ShardConfig, usable_cores
from .kv_owner import DROP, STALE, KVOwner
from .route import BadRoute, StaleRoute, check_self, next_stage_heard

log = logging.getLogger("llmbus.shard")

def weight_format(device: str, requested: str) -> str:
    """The format a shard loads: a cuda shard keeps GGUF's blocks on the GPU unless asked for float32
    (then float16 there); a cpu shard its blocks where the native kernel is built, its Q4_0 layer
    matrices in tiles where the kernel runs an x86 vector path, AVX2 or AVX-512 ("quantized_t16":
    kernels.q4_0_tiles)."""
    if device == "cuda":
        return "float32" if requested == "float32" else "quantized"
    from kernels.q4_0_tiles import wants_tiles
    from kernels.qmatmul import library
    if requested == "auto":
        requested = "quantized" if library() is not None else "float32"
    return "quantized_t16" if requested == "quantized" and wants_tiles(library()) else requested


def array_module(device: str):
    """numpy for "cpu"; cupy for "cuda", or ArrayModuleUnavailable naming why there is none."""
    from kernels.xp import get_xp
    return get_xp("cupy" if device == "cuda" else "numpy")


@dataclass
class _Range:
    """One loaded layer range: what a forward runs, or what a plan staged beside it."""
    plan: int
    start: int
    end: int
    loaded: object
    model: object
    kv_bytes: int


# A batch of this many tokens or fewer (decode steps) runs on the event loop's thread when the
# compute thread is idle: handing it over and back costs ~0.2 ms (two thread wake-ups), a tenth
# of a step of the default model. The loop waits for that one decode step (heartbeats and reads
# with it: a few ms here, longer for a big range). Bigger batches, and any batch that comes while
# another computes, go to the compute thread and the loop keeps reading meanwhile. A range whose
# small steps take longer than INLINE_MAX_S (an 8B model's layers: hundreds of ms) runs them on
# the compute thread too: several such steps back to back would hold the heartbeats past the
# time peers wait before they take this shard for dead.
INLINE_TOKENS = 4
INLINE_MAX_S = 0.05


class ShardService(Service):
    kind = "shard"

    def __init__(self, config: ServiceConfig, shard: ShardConfig, ctx=None):
        super().__init__(config, ctx)
        self.shard = shard
        self.model = None
        self.loaded = None
        self.pinned = shard.pinned             # --layers: placement leaves this shard alone
        self.plan = 0                          # the placement plan served (0: pinned or none)
        self._staged: _Range | None = None     # loaded for a plan, not yet served
        self._wanted = 0                       # the newest plan asked for
        self.weight_format = weight_format(shard.device, shard.weights)
        self.kv_owner = KVOwner()              # the scheduler run whose page tables the KV follows
        # One compute thread: batches run one at a time here while the event loop keeps
        # reading requests, and numpy releases the GIL inside its kernels. Loading a placed
        # range has a thread of its own, so the range served keeps serving meanwhile.
        self._compute = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forward")
        self._computing = 0                    # batches handed to it and not yet back
        self._small_step_s = 0.0               # the last step of at most INLINE_TOKENS tokens
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="load")
        self._loading: dict[tuple[int, int, int], asyncio.Future] = {}   # (plan, start, end)
        self._handing: set[asyncio.Task] = set()   # batches handed on whose answer goes elsewhere

    # ------------------------------------------------------------------ lifecycle
    async def on_start(self) -> None:
        from services.modelstore.footprint import read_footprint
        from services.modelstore.identity import model_identity
        from services.modelstore.gguf_meta import read_metadata
        from services.shard.resident import gpu_reserve, weight_scale

        if self.directory is not None:   # (not on expiry: a late scheduler keeps its KV)
            self.directory.on_replaced.append(lambda old, new: self._owner_gone(old))
        loop = asyncio.get_running_loop()
        self.model_id = await loop.run_in_executor(self._loader, model_identity, self.shard.model)
        self.weight_scale = await loop.run_in_executor(self._loader, weight_scale, self.shard.model,
                                                       self.shard.device, self.weight_format)
        # A GPU shard offers its memory less what it keeps there beside weights and KV.
        self.reserve = 0 if self.shard.device != "cuda" else gpu_reserve(
            await loop.run_in_executor(self._loader, read_metadata, self.shard.model),
            self.shard.num_pages, self.shard.page_size)
        # Last: info() (every heartbeat) offers placement the figures above once this is set.
        self.footprint = await loop.run_in_executor(self._loader, read_footprint, self.shard.model)
        if self.pinned:
            self._take_range(await loop.run_in_executor(self._compute, self._load, 0, self.shard.start,
                                                   self.shard.end))

    def _load(self, plan: int, start: int, end: int) -> _Range:
        from services.modelstore.weight_cache import load_weights, page_in
        from services.shard.kv_cache import KVConfig, PagedKVCache
        from services.shard.model import ShardModel

        from kernels.hugepages import advise_hugepages
        from kernels.native_lib import set_threads

        s = self.shard
        self.threads = set_threads(s.threads)      # one pool per process: this shard's
        advise_hugepages(False)    # no stalls as the KV cache and new batch sizes are first touched
        if plan:   # beside a range that serves: the long part runs in a child process
            from services.shard.warm import warm
            warm(s.model, start, end, self.weight_format)
        loaded = load_weights(s.model, start, end, self.weight_format)
        kv = KVConfig(num_pages=s.num_pages, page_size=s.page_size)
        if s.device == "cuda":   # blocks and a float16 KV cache on the GPU, graphs captured; host fp32 I/O
            from services.shard.gpu_model import GpuShardModel, gpu_device
            model = GpuShardModel(loaded.config, loaded.weights, kv, gpu_device())
        else:
            page_in(loaded.weights)    # from disk now, not in a first forward that looks stalled meanwhile
            model = ShardModel(loaded.config, loaded.weights,
                               PagedKVCache.for_model(loaded.config, start, end, kv))
        return _Range(plan, start, end, loaded, model, model.kv.nbytes())

    def _take_range(self, r: _Range) -> None:
        # One assignment after another on the event loop, between forwards' awaits: a forward
        # already running keeps the model it started with.
        self.shard = replace(self.shard, start=r.start, end=r.end)
        self.loaded, self.model, self.kv_bytes, self.plan = r.loaded, r.model, r.kv_bytes, r.plan

    async def on_stop(self) -> None:
        for task in list(self._handing):
            task.cancel()
        await asyncio.gather(*self._handing, return_exceptions=True)
        self._loader.shutdown(wait=False, cancel_futures=True)
        self._compute.shutdown(wait=True)

    @property
    def kv_per_layer(self) -> int:
        return self.footprint.kv_bytes_per_layer(self.shard.num_pages, self.shard.page_size)

    def info(self) -> ShardInfo:
        out = ShardInfo()
        if not self.pinned and getattr(self, "footprint", None) is not None:
            # What placement reads: the budget, the KV one layer costs here, the plan served.
            out = ShardInfo(model=self.model_id, n_layers=self.footprint.n_layers,
                            memory=max(0, self.shard.memory - self.reserve), kv_per_layer=self.kv_per_layer,
                            weight_scale=round(self.weight_scale, 4), plan=self.plan,
                            num_pages=self.shard.num_pages, page_size=self.shard.page_size)
        if self.model is None:
            return wire.evolve(out, layers=(self.shard.start, self.shard.end)) if self.pinned else out
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return wire.evolve(
            out, layers=(self.shard.start, self.shard.end), n_layers=self.model.config.n_layers,
            model=self.model_id, codec=self.shard.codec, device=self.shard.device,
            weights=self.weight_format, weights_mb=round(self.loaded.weights.nbytes() / 2**20, 1),
            num_pages=self.shard.num_pages, page_size=self.shard.page_size,
            load_s=round(self.loaded.seconds, 3), cold_load=self.loaded.cold,
            kv_mb=round(self.kv_bytes / 2**20, 1), max_rss_mb=round(rss_mb, 1),
            # a GPU shard computes on its own device: it shares no cores with its neighbours
            threads=self.threads, kernel=kernel_id() if self.shard.device != "cuda" else "",
            cores=usable_cores(),
            kv_pages=self.model.kv.pages_held,
            kv_owner=self.kv_owner.name, kv_owner_epoch=self.kv_owner.epoch,
            gpu_mb=round(self.model.device_bytes() / 2**20, 1) if self.shard.device == "cuda" else 0.0)

    # ------------------------------------------------------------------ placement
    @handles(FootprintRequest)
    async def footprint_of(self, msg: wire.Message) -> FootprintReply:
        f = self.footprint
        return FootprintReply(model=self.model_id, layer_bytes=list(f.layer_bytes),
                              first_bytes=f.first_bytes, last_bytes=f.last_bytes,
                              kv_heads=f.kv_heads, head_dim=f.head_dim)

    @handles(Place)
    async def place(self, msg: wire.Message) -> Placed:
        p: Place = msg.body
        if self.pinned:
            raise ServiceError(PINNED, f"{self.name} serves layers {self.shard.start}:"
                                         f"{self.shard.end} given by --layers")
        if p.end > self.footprint.n_layers:
            raise ServiceError(BAD_RANGE, f"{p.start}:{p.end} is past the model's "
                                            f"{self.footprint.n_layers} layers")
        if p.plan < self._wanted:
            raise ServiceError(SUPERSEDED, f"plan {p.plan} is older than plan {self._wanted}")
        key = (p.plan, p.start, p.end)
        if self._staged is not None and (self._staged.plan, self._staged.start, self._staged.end) == key:
            return Placed(plan=p.plan, start=p.start, end=p.end, load_s=0.0)   # asked again
        self._wanted, self._staged = p.plan, None
        t0 = time.perf_counter()
        if self.model is not None and (p.start, p.end) == (self.shard.start, self.shard.end):
            # The same range: nothing to load (the scheduler re-prefills on the switch anyway).
            staged = _Range(p.plan, p.start, p.end, self.loaded, self.model, self.kv_bytes)
        else:
            # Asked again while loading (the scheduler lost sight of this shard meanwhile):
            # the same load answers both.
            if key not in self._loading:
                self._loading = {key: asyncio.get_running_loop().run_in_executor(
                    self._loader, self._load, *key)}
            fut = self._loading[key]
            try:
                staged = await asyncio.shield(fut)
            finally:
                if fut.done():
                    self._loading.pop(key, None)
        if self._wanted != p.plan:
            raise ServiceError(SUPERSEDED, f"plan {self._wanted} came while plan {p.plan} loaded")
        self._staged = staged
        self.counters["placements_loaded"] += 1
        return Placed(plan=p.plan, start=p.start, end=p.end,
                      load_s=round(time.perf_counter() - t0, 3))

    @handles(Switch)
    async def switch(self, msg: wire.Message) -> Switched:
        r = self._staged
        if r is None or r.plan != msg.body.plan:
            raise ServiceError(NOT_STAGED, f"{self.name} has not loaded plan {msg.body.plan}"
                               + (f" (it holds plan {r.plan})" if r is not None else ""))
        self._staged = None
        self._take_range(r)
        self.counters["switches"] += 1
        log.info("%s serves layers %d:%d of plan %d", self.name, r.start, r.end, r.plan)
        self._publish_heartbeat()   # announce the range now, not at the next beat
        return Switched(plan=r.plan, start=r.start, end=r.end)

    # ------------------------------------------------------------------ the work
    @handles(Forward, eager=True)   # a decode step runs as it is read: see INLINE_TOKENS
    async def forward(self, msg: wire.Message) -> HandedOn | ForwardResult:
        f: Forward = msg.body
        arrived = time.time()
        self.counters["forwards"] += 1
        if self.model is None:
            raise ServiceError(LOADING, f"{self.name} is still loading", retry_after=1.0)
        try:
            check_self(f.route, f.hop, self.name, self.epoch)
        except StaleRoute as e:
            raise self._refuse(STALE_ROUTE, e) from None
        # The range this batch runs on, held through the awaits below: a switch of placement
        # may come meanwhile, and the batch ends on the layers it began with.
        model, end = self.model, self.shard.end
        if f.first_layer != self.shard.start:
            raise ServiceError(RANGE_MISMATCH, f"{self.name} holds layers {self.shard.start}:"
                                                 f"{self.shard.end}, not {f.first_layer}:")
        self._follow_owner(f)
        batch = self._batch(f)
        small = batch.num_tokens <= INLINE_TOKENS
        inline = small and not self._computing and self._small_step_s < INLINE_MAX_S
        payload = f.tokens if f.tokens is not None else f.hidden
        t0 = time.perf_counter()
        if model.last:
            # Forward and sampling in one job: each hand-off to the compute thread and back is a
            # wake-up per token that a decode step waits for.
            result, took = await self._run(self._forward_and_sample, model, batch, f, inline=inline)
            if small:
                self._small_step_s = time.perf_counter() - t0
            result = wire.evolve(result, hops=[*f.hops, self._hop(payload, f.sent_at, arrived, took)])
            if f.hop == 0:   # a route of one stage: its caller is reply_to, and this is its reply
                return result
            self._answer(f, result)
            return HandedOn(batch_id=f.batch_id)
        out, took = await self._run(model.forward, batch, inline=inline)
        if small:
            self._small_step_s = time.perf_counter() - t0
        hop = self._hop(payload, f.sent_at, arrived, took)
        nxt, timeout = await self._next_stage(msg, f, end)
        onward = wire.evolve(f, first_layer=end, tokens=None, hop=f.hop + 1,
                             hidden=wire.Tensor(out, self.shard.codec), hops=[*f.hops, hop],
                             sent_at=time.time())
        # Sent now, before the caller's answer (the next stage waits for it, the caller not);
        # the route names the epoch planned for: this shard may not have heard of that restart.
        reply = self.peers.start_call(nxt.name, onward, timeout=timeout, epoch=nxt.epoch)
        task = asyncio.get_running_loop().create_task(
            self._hand_on(nxt, onward, reply, f.reply_to))
        self._handing.add(task)
        task.add_done_callback(self._handing.discard)
        return HandedOn(batch_id=f.batch_id)

    async def _heard(self, name: str) -> None:
        """Until `name` is heard from, for at most the time that judges it dead."""
        if self.directory is not None:
            try:
                await self.directory.wait_for(name, self.config.bus.dead_after)
            except BusError:
                pass

    def _hop(self, payload: wire.Tensor, sent_at: float, arrived: float, computed_s: float) -> Hop:
        """This stage's figures for the batch: what it received, when, and the seconds it computed
        (not its wait behind a batch ahead on the compute thread)."""
        return Hop(self.name, payload.nbytes_on_wire,
                   round(max(0.0, arrived - sent_at) * 1e3, 3) if sent_at else 0.0,
                   round(computed_s * 1e3, 3))

    def _answer(self, f: Forward, result: ForwardResult) -> None:
        """The last shard's result, straight to Forward.reply_to; UNREACHABLE to its caller when
        it cannot be sent (the scheduler checked this path when it assembled the pipeline)."""
        to = f.reply_to
        try:
            sent = self.peers.tell(to.name, result)
        except BusError as e:   # too large for the socket, say
            log.warning("%s: result of batch %d not sent to %s: %s", self.name, f.batch_id,
                        to.name, e)
            sent = False
        self.counters["results_sent" if sent else "results_not_sent"] += 1
        if not sent:
            raise ServiceError(UNREACHABLE, f"{self.name} could not send the result of batch "
                                            f"{f.batch_id} to {to.name}")

    async def _next_stage(self, msg: wire.Message, f: Forward, end: int):
        """The route's next stage and the time left to reach it, or the typed refusal."""
        try:
            nxt = await next_stage_heard(f.route, f.hop, self._live_epoch, end, self._heard)
        except StaleRoute as e:
            raise self._refuse(STALE_ROUTE, e) from None
        except BadRoute as e:
            raise ServiceError(BAD_BATCH, str(e)) from None
        timeout = (msg.deadline - time.time()) if msg.deadline else 30.0
        if timeout <= 0:
            raise ServiceError(DEADLINE_EXCEEDED, "no time left to reach the next shard")
        return nxt, timeout

    async def _hand_on(self, nxt: RouteStage, onward: Forward, reply: Awaitable,
                       to: ReplyTo) -> None:
        """Await the next stage's `reply` to a batch handed on; tell `to` when that stage fails
        it or cannot be reached, with that stage's error."""
        try:
            await reply
            return
        except BusError as e:
            failed = ForwardFailed(key=to.key, batch_id=onward.batch_id, stage=self.name,
                                   code=code_of(e), message=str(e)[:500],
                                   retry_after=getattr(e, "retry_after", None) or 0.0)
        self.counters[f"handed_on_failed.{failed.code}"] += 1
        try:
            told = self.peers.tell(to.name, failed)
        except BusError:
            told = False
        if not told:   # the caller's call runs out its time instead
            log.warning("%s: batch %d failed at %s (%s) and %s cannot be told", self.name,
                        onward.batch_id, nxt.name, failed.code, to.name)

    def _batch(self, f: Forward):
        from services.shard.batch import ForwardBatch, layout_arrays
        try:
            positions, query_lens, page_table = layout_arrays(f.positions, f.query_lens,
                                                              f.page_table)
            return ForwardBatch(
                positions=positions, query_lens=query_lens, page_table=page_table,
                tokens=f.tokens.array() if f.tokens is not None else None,
                hidden=f.hidden.array() if f.hidden is not None else None,
                want_logits=f.want_logits.array() if f.want_logits is not None else None)
        except ValueError as e:   # a payload not of its declared shape, a layout past int32
            raise ServiceError(BAD_BATCH, str(e)) from None

    def _refuse(self, code: str, e: Exception) -> ServiceError:
        """A batch planned for KV this shard does not hold: the scheduler must plan again."""
        self.counters[f"refused.{code}"] += 1
        log.warning("%s refuses a batch (%s): %s", self.name, code, e)
        return ServiceError(code, f"{self.name}: {e}")

    async def _run(self, fn, *args, inline: bool = False):
        """fn(*args) on the compute thread, or with `inline` on this thread (the caller makes
        sure no batch is on the compute thread: one batch at a time touches the model).
        Returns its result and the seconds it computed: a hop's compute_ms, without the wait for
        a batch ahead of it on the thread (with micro-batches in flight that wait was most of
        the figure, and pacing took it for the shard's cost per token)."""
        from kernels.sampling import BadSamplerInput
        from kernels.token_masks import BadMask
        from services.shard.batch import BadBatch
        from services.shard.kv_cache import KVMissing
        try:
            if inline:
                return _timed(fn, *args)
            self._computing += 1
            try:
                return await asyncio.get_running_loop().run_in_executor(self._compute, _timed, fn, *args)
            finally:
                self._computing -= 1
        except KVMissing as e:
            raise self._refuse(KV_MISSING, e) from None
        except (BadBatch, BadSamplerInput, BadMask) as e:
            raise ServiceError(BAD_BATCH, str(e)) from None

    def _follow_owner(self, f: Forward) -> None:
        """The KV follows one scheduler process's page tables (services.shard.kv_owner): a
        batch of a new one drops what a gone one held; a late batch of an earlier run of the
        owner is refused (its pages belong to the new run's sequences now)."""
        to, owner = f.reply_to, self.kv_owner
        verdict = owner.batch_from(to.name, to.epoch,
                                   self._live_epoch(owner.name) == owner.epoch)
        if verdict == STALE:
            raise self._refuse(STALE_ROUTE, StaleRoute(
                f"batch {f.batch_id} of {to.name} epoch {to.epoch}, which epoch {owner.epoch} "
                f"replaced"))
        if verdict == DROP:
            log.info("%s: %s epoch %d drives the KV now: the pages of the run before are dropped",
                     self.name, to.name, to.epoch)
            self._drop_kv()

    def _owner_gone(self, entry) -> None:
        """A new epoch of a service is heard: if the old one owned the KV, its pages are
        dropped now."""
        if self.kv_owner.gone(entry.name, entry.epoch):
            log.info("%s: %s epoch %d is gone: its KV pages are dropped", self.name, entry.name,
                     entry.epoch)
            self._drop_kv()

    def _drop_kv(self) -> None:
        # Behind the batches already on the compute thread (they may still write), or now.
        kv = self.model.kv if self.model is not None else None
        if kv is None:
            return
        if self._computing:
            self._compute.submit(kv.drop_all)
        else:
            kv.drop_all()

    def _live_epoch(self, name: str) -> int | None:
        e = self.directory.get(name)
        return e.epoch if e is not None else None

    def _forward_and_sample(self, model, batch, f: Forward) -> ForwardResult:
        """The last shard's step, on the compute thread: logits, then the sampled result."""
        from kernels.xp import to_numpy
        from services.shard.batch import BadBatch
        from kernels.token_masks import apply_token_masks
        from services.shard.sampling_step import sample_rows, split_histories

        pooled = None
        if f.pool_rows:   # embeddings: their rows' final hidden states, pooled
            logits, pooled = model.forward_pooled(batch, f.pool_rows, f.pool_kinds, on_device=True)
        else:
            logits = model.forward(batch, on_device=True)     # a GPU's stay there: sampled there
        n = logits.shape[0]
        if len(f.sampling) != n:
            raise BadBatch(f"{n} sequences sample but {len(f.sampling)} sampling entries were sent")
        if f.mask_rows:   # rows a grammar constrains: only the tokens it allows can be drawn
            logits = apply_token_masks(logits, f.mask_rows, f.masks.array())
        if n == 0:   # embeddings only: nothing to sample
            return ForwardResult(batch_id=f.batch_id, key=f.reply_to.key,
                                 tokens=wire.Tensor(np.zeros(0, np.int32)),
                                 logprobs=wire.Tensor(np.zeros(0, np.float32)),
                                 pooled=wire.Tensor(pooled) if pooled is not None else None)
        hist = f.history.array() if f.history is not None else np.zeros(0, np.int32)
        res = sample_rows(logits, f.sampling, f.steps, split_histories(hist, f.history_lens, n),
                          sampler=model.sampler)
        want_top = res.top_ids.shape[1] > 0
        return ForwardResult(
            batch_id=f.batch_id, key=f.reply_to.key, tokens=wire.Tensor(res.tokens),
            logprobs=wire.Tensor(res.logprobs),
            top_ids=wire.Tensor(res.top_ids) if want_top else None,
            top_logprobs=wire.Tensor(res.top_logprobs) if want_top else None,
            logits=wire.Tensor(to_numpy(logits), "fp32") if f.return_logits else None,
            errors=res.errors if res.failed else [],
            pooled=wire.Tensor(pooled) if pooled is not None else None)


def _timed(fn, *args):
    """fn(*args) and the seconds it took."""
    t = time.perf_counter()
    return fn(*args), time.perf_counter() - t
