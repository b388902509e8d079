"""The scheduler service: admits generation requests, batches them through the shard pipeline,
and streams each request's tokens back to its caller.

At start it finds a tokenizer and a whole shard pipeline of one model on the bus, takes the
vocabulary's bytes (so that it decodes text itself) and the KV page geometry of the shards,
and builds the pure policy (`Scheduler`) over them. `Driver` runs the policy; replicas of the
ranges make further pipelines, each with its own policy and driver (`lanes.py`); this file holds
the bus handlers.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from dataclasses import dataclass

from bus.config import ServiceConfig
from bus.errors import CallTimeout, PeerDead, PeerRestarted, RemoteError, ServiceError, ServiceNotFound
from bus.dispatch import receives
from bus.service import Service, handles, streams
from wire.messages.bus import Event
from wire.messages.scheduler import (CancelRequest, Cancelled, Done, Generate, Started, Stats,
                                     StatsRequest, Tokens)
from wire.messages.sampling import SamplingParams
from wire.messages.shard import Forward, ForwardFailed, ForwardReply, ForwardResult
from wire.messages.tokenizer import Encode, InfoRequest, Render, VocabRequest

from .admission import check_sampling
from .config import SchedulerConfig
from .breaker import Breakers
from .direct import DirectReplies
from .driver import Driver
from .errors import BadRequest, QueueFull
from .failed_ranges import FAILED_TOPIC, FailedRanges
from .hops import HopStats
from .lanes import Lane, Lanes
from .pipeline import Stage, explain_missing, find_gap
from .pipelines import assign_pipelines, assignment_key
from .placer import Placer
from .policy import Scheduler
from .sequence import Request
from .streams import RequestStream, StreamEvent

log = logging.getLogger("llmbus.scheduler")

PIPELINE_TOPIC = "scheduler.pipeline"   # a pipeline came, left rotation, or handed work over


@dataclass(frozen=True)
class SchedulerServiceConfig:
    model: str = ""                  # model identity to serve; "": the first tokenizer's
    max_batch_tokens: int = 512
    max_batch_seqs: int = 64
    max_inflight: int = 0            # 0: one more than the pipeline has stages
    max_queue: int = 256
    context_length: int = 0          # 0: the model's, bounded by the shards' KV pages
    batch_timeout: float = 120.0
    unserved_budget_s: float = 300.0  # requests fail when their layers are unserved this long
    max_refill_tokens: int = 128      # re-prefill tokens per micro-batch after a loss
    tokenizer_wait_s: float = 30.0    # how long a request waits for a tokenizer to come back
    pace_step_s: float = 0.12        # a batch's target compute while streams decode (pacing.py)
    pace_max_wait_s: float = 10.0    # ... unless a request has waited this long for a first token
    direct_results: bool = True      # the last shard answers here straight too (direct.py)

    def __post_init__(self):
        for name in ("max_batch_tokens", "max_batch_seqs", "max_queue", "batch_timeout",
                     "unserved_budget_s", "max_refill_tokens", "tokenizer_wait_s",
                     "pace_step_s", "pace_max_wait_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.max_inflight < 0 or self.context_length < 0:
            raise ValueError("max_inflight and context_length must be >= 0")


class SchedulerService(Service):
    kind = "scheduler"

    def __init__(self, config: ServiceConfig, sched: SchedulerServiceConfig | None = None, ctx=None):
        super().__init__(config, ctx)
        self.sched = sched or SchedulerServiceConfig()
        self.model = self.sched.model
        self.lanes: Lanes | None = None     # the pipelines: a policy and a driver each
        self._ctx_len = 0                   # context of every pipeline's requests
        self._tok_info = None               # the tokenizer's InfoReply: vocabulary, EOS ids
        self._arrivals = itertools.count()  # shared by the lanes' policies (order of arrival)
        self.requests: dict[str, RequestStream] = {}
        self.token_bytes: list[bytes] = []
        self.failed_ranges = FailedRanges()
        self.hops = HopStats(config.name)
        self.direct = DirectReplies(config.name, self._chain_forward, self.hops.record)
        self.placer: Placer | None = None
        self._assigned: tuple = ((), [])    # the last assignment_key and its pipelines

    # ------------------------------------------------------------------ lifecycle
    async def on_start(self) -> None:
        self.directory.subscribe(FAILED_TOPIC)
        self.directory.on_event.append(self._on_health_event)
        self.directory.on_expire.append(self._on_peer_expired)
        # A batch answered straight has no chain of calls to end when a stage of it is lost.
        self.directory.on_expire.append(lambda entry: self.direct.lost(entry.name, None))
        self.directory.on_replaced.append(lambda old, new: self.direct.lost(new.name, new.epoch))
        tok = await self._wait_for(self._tokenizer, "a tokenizer")
        info = await self.peers.call(tok, InfoRequest(), timeout=10)
        self.model = info.model
        while len(self.token_bytes) < info.vocab_size:  # in pages: a header holds at most 1 MiB
            page = await self.peers.call(tok, VocabRequest(skip_special=True,
                                                           start=len(self.token_bytes),
                                                           count=16384), timeout=30)
            if not page.token_bytes:
                raise ValueError(f"{tok} sent {len(self.token_bytes)} of {info.vocab_size} tokens")
            self.token_bytes.extend(page.token_bytes)
        # Shards without --layers wait for a range: the placer gives them one from here on.
        self.placer = Placer(self.directory, self._forward, lambda: self.model,
                             idle=lambda: self.lanes is None or self.lanes.idle(),
                             wake=lambda: self.lanes is not None and self.lanes.wake(),
                             served=self._batches_done,
                             idle_timeout=self.sched.batch_timeout)
        self._tasks.append(asyncio.get_running_loop().create_task(self.placer.run()))
        chain = await self._wait_for(self._first_chain, "a whole shard pipeline")
        # Every pipeline takes the first one's context (a request may move to another).
        pool = min(s.num_pages * s.page_size for s in chain)
        self._ctx_len = min(c for c in (self.sched.context_length, info.context_length, pool) if c > 0)
        self._tok_info = info
        lanes = Lanes(self._assign, self._make_lane, Breakers(), time.monotonic)
        lanes.refresh()
        self.lanes = lanes
        self._tasks.append(asyncio.get_running_loop().create_task(self._watch_lanes()))
        log.info("serving %s over %s (context %d)", self.model,
                 [lane.shards for lane in lanes], self._ctx_len)

    def _make_lane(self, name: str, chain: list[Stage]) -> Lane:
        """A policy over this pipeline's KV pages and a driver running it."""
        sizes = {s.page_size for s in chain}
        if len(sizes) != 1:
            raise ValueError(f"shards disagree on the KV page size: {sorted(sizes)}")
        page_size, num_pages = sizes.pop(), min(s.num_pages for s in chain)
        info = self._tok_info
        policy = Scheduler(SchedulerConfig(
            num_pages=num_pages, page_size=page_size,
            context_length=min(self._ctx_len, num_pages * page_size),
            max_batch_tokens=self.sched.max_batch_tokens, max_batch_seqs=self.sched.max_batch_seqs,
            max_inflight=self.sched.max_inflight or len(chain) + 1, max_queue=self.sched.max_queue,
            max_refill_tokens=self.sched.max_refill_tokens,
            vocab_size=info.vocab_size, eos_ids=frozenset(info.eot_ids),
            pace_step_s=self.sched.pace_step_s, pace_max_wait_s=self.sched.pace_max_wait_s,
            token_bytes=tuple(self.token_bytes)), arrivals=self._arrivals)
        lane = Lane(name, policy)
        lane.driver = Driver(policy, self.requests, self._forward,
                             lambda: self.lanes.chain_of(lane) if self.lanes else chain,
                             self.sched.batch_timeout, unserved_budget_s=self.sched.unserved_budget_s,
                             describe_gap=self._describe_gap,
                             on_batch=lambda step_s, error: self._batch_ended(lane, step_s, error))
        lane.driver.pipeline = chain
        self._tasks.append(asyncio.get_running_loop().create_task(lane.driver.run()))
        log.info("pipeline %s: %d pages of %d tokens", name, num_pages, page_size)
        return lane

    def _batch_ended(self, lane: Lane, step_s: float | None, error: str) -> None:
        """A served batch is progress even when it gives no token (a long prompt's prefill
        chunks): the health watcher's stall rule must not take a scheduler waiting on shards
        through a long prefill for a hung one."""
        if not error:
            self.progress += 1
        if self.lanes is not None:
            self.lanes.observe(lane, step_s, error)

    async def _watch_lanes(self) -> None:
        """Lanes that lost their pipeline hand their sequences over; new replicas become lanes."""
        while True:
            await asyncio.sleep(0.2)
            try:
                self.lanes.refresh()
                self.lanes.rebalance()
                for entry in self.lanes.changes():   # `busctl monitor` shows them
                    self.publish(PIPELINE_TOPIC, Event(topic=PIPELINE_TOPIC, service=self.name,
                                                       data=entry))
            except Exception:  # a bug here must not stop the watch
                log.exception("looking at the pipelines failed")
                self.counters["lane_errors"] += 1

    def _batches_done(self) -> int:
        if self.lanes is None:
            return 0
        return sum(lane.driver.counters["batches_done"] for lane in self.lanes if lane.driver)

    async def on_stop(self) -> None:
        # Past the drain timeout: what is still running ends with a reason, not a silent close.
        if self.lanes is not None:
            for out in self.lanes.fail_all("the scheduler stopped before this request finished"):
                if (stream := self.requests.get(out.request_id)) is not None:
                    stream.deliver(StreamEvent(out))
            if self._inflight:
                await asyncio.wait(self._inflight, timeout=1.0)
            for lane in self.lanes:
                if lane.driver is not None:
                    await lane.driver.stop()
        await self.direct.close()

    async def _wait_for(self, find, what: str):
        waited = 0.0
        while (found := find()) is None:
            if waited and waited % 10 < 0.25:
                log.info("waiting for %s: %s", what, self._explain())
            await asyncio.sleep(0.25)
            waited += 0.25
        return found

    def _tokenizer(self) -> str | None:
        live = [e for e in self.directory.of_kind("tokenizer") if e.state == "ready"
                and (not self.model or e.info.get("model") == self.model)]
        return min(live, key=lambda e: e.load).name if live else None

    def _shards(self) -> list:
        shards = self.directory.of_kind("shard")
        return self.placer.stages_allowed(shards) if self.placer is not None else shards

    def _assign(self, current: list[list[str]]):
        """The pipelines now (lanes.py), None while a new placement is switching in."""
        if self.placer is not None and self.placer.paused:
            return None    # a new placement is switching in: no batch until it serves
        shards = self._shards()
        key = assignment_key(shards, self.model, current)
        if key != self._assigned[0]:
            self._assigned = (key, assign_pipelines(shards, self.model, current))
        return [None if c is None else list(c) for c in self._assigned[1]]

    def _first_chain(self):
        got = self._assign([])
        return got[0] if got else None

    def _describe_gap(self) -> str:
        gap = find_gap(self._shards(), self.model)
        where = ("no layers" if gap is None else f"layers {gap[0]}-{'?' if gap[1] is None else gap[1]}")
        return f"{where} of {self.model} have no ready shard ({self._explain()})"

    def _explain(self) -> str:
        why = explain_missing(self.directory.of_kind("shard"), self.model)
        for name, eps in self.directory.clashes().items():
            why += f"; two live services are named {name} ({' and '.join(eps)}): give each its own --name"
        if self.placer is not None and self.placer.refused:
            why += f"; {self.placer.refused}"
        return why

    async def _forward(self, shard: str, body, timeout: float):
        if isinstance(body, Forward) and self.sched.direct_results:
            return await self.direct.call(shard, body, timeout)
        return await self._chain_forward(shard, body, timeout)

    @receives(ForwardResult)
    def _result(self, msg) -> None:
        self.direct.received(msg.sender, msg.epoch, msg.body)

    @receives(ForwardFailed)
    def _failed(self, msg) -> None:
        self.direct.failed(msg.sender, msg.epoch, msg.body)

    async def _chain_forward(self, shard: str, body, timeout: float):
        sent = time.perf_counter()
        reply = await self.peers.call(shard, body, timeout=timeout)
        if isinstance(body, Forward) and isinstance(reply, ForwardReply):
            self.hops.record([st.name for st in body.route], reply,
                             (time.perf_counter() - sent) * 1e3)
        return reply

    def info(self) -> dict:
        extra = {"placement": self.placer.info()} if self.placer is not None else {}
        if self.directory is not None and (clashes := self.directory.clashes()):
            extra["name_clashes"] = {n: list(eps) for n, eps in clashes.items()}
        if self.lanes is None:
            return {"model": self.model, **extra}
        s = self.lanes.policy_stats()
        keep = ("waiting", "running", "inflight_batches", "pages_total", "pages_used", "page_use",
                "pages_cached", "prefix_hit_rate", "tokens_per_s")
        return {"model": self.model, "pipeline": self.lanes.first_pipeline(),
                "pipelines": self.lanes.info(),
                **{k: round(float(s[k]), 4) for k in keep}, **extra}

    def _on_health_event(self, topic: bytes, msg) -> None:
        """A watcher gave a service up: if it held a range no one else holds, the requests
        waiting for it end now with the reason (instead of after the unserved budget)."""
        if self.failed_ranges.on_event(topic, msg):
            self._fail_if_unservable()

    def _on_peer_expired(self, entry) -> None:
        """The event may come before the given-up shard's last heartbeat has expired (a shard
        that dies at start is given up within a second or two): its stale entry still covered
        the range then, so the check runs again when an entry leaves."""
        if entry.kind == "shard":
            self._fail_if_unservable()

    def _fail_if_unservable(self) -> None:
        if self.lanes is None:
            return
        why = self.failed_ranges.why(self.directory.live(), self.model)
        if why is None:
            return
        log.error("failing every request: %s", why)
        for out in self.lanes.fail_all(why):
            if (stream := self.requests.get(out.request_id)) is not None:
                stream.deliver(StreamEvent(out))
        self.lanes.wake()

    # ------------------------------------------------------------------ requests
    @streams(Generate)
    async def generate(self, msg):
        req: Generate = msg.body
        if (why := self.failed_ranges.why(self.directory.live(), self.model)) is not None:
            raise ServiceError("range_failed", why)
        if self.placer is not None and self.placer.refused and find_gap(self._shards(), self.model):
            # The shards left cannot hold the model: nothing serves its missing layers until
            # a host joins, so a new request is told so now rather than after the budget.
            raise ServiceError("range_failed", self._describe_gap())
        if self.lanes is None:
            raise ServiceError("starting", "the scheduler is still finding its pipeline",
                               retry_after=1.0)
        arrived = asyncio.get_running_loop().time()
        rid = req.request_id or uuid.uuid4().hex
        if rid in self.requests:
            raise ServiceError("duplicate_request_id", f"request {rid!r} is already running")
        try:
            params = check_sampling(SamplingParams.of(req))
        except BadRequest as e:
            raise ServiceError(e.reason, e.detail) from None
        prompt = await self._prompt_ids(req)
        # The deadline runs from arrival: rendering the prompt took some of it (at least a
        # moment is left, so that a request already late ends with reason deadline).
        deadline = (None if req.deadline_s is None else
                    max(req.deadline_s - (asyncio.get_running_loop().time() - arrived), 1e-3))
        stream = RequestStream(rid, len(prompt), params)
        max_tokens = req.max_tokens if req.max_tokens is not None else self.lanes.context_length
        try:
            terms = self.lanes.submit(Request(rid, tuple(prompt), max_tokens, req.priority,
                                               tuple(req.stop), params.seed, deadline))
        except QueueFull as e:
            raise ServiceError("queue_full", str(e), retry_after=round(e.retry_after, 1)) from None
        except BadRequest as e:
            raise ServiceError(e.reason, e.detail) from None
        self.requests[rid] = stream
        try:
            yield Started(request_id=rid, prompt_tokens=len(prompt), max_tokens=terms.max_tokens,
                          seed=params.seed, note=terms.note if req.max_tokens is not None else "")
            while True:
                events = [await stream.events.get()]
                while not stream.events.empty():  # whatever else came: one message
                    events.append(stream.events.get_nowait())
                outs = [e.output for e in events]
                ids = [o.token_id for o in outs if o.token_id is not None]
                text = "".join(o.text for o in outs)
                if ids or text:
                    yield Tokens(request_id=rid, text=text, token_ids=ids,
                                 logprobs=[o.logprob for o in outs if o.token_id is not None],
                                 top_ids=[e.top_ids for e in events if e.output.token_id is not None
                                          and e.top_ids],
                                 top_logprobs=[e.top_logprobs for e in events
                                               if e.output.token_id is not None and e.top_ids])
                finish = outs[-1].finish
                if finish is not None:
                    yield Done(request_id=rid, finish_reason=finish.reason,
                               prompt_tokens=stream.prompt_tokens,
                               completion_tokens=stream.completion_tokens,
                               stop_string=finish.stop_string, detail=finish.detail)
                    return
        finally:
            # The caller left (or cancelled): end the request now and free its pages.
            if (lane := self.lanes.lane_of(rid)) is not None:
                lane.policy.cancel(rid)
                lane.driver.wake.set()
            self.requests.pop(rid, None)

    async def _prompt_ids(self, req: Generate) -> list[int]:
        """The prompt's token ids. A tokenizer that dies or restarts under the call (or is
        between processes) is waited for, up to `tokenizer_wait_s`: its restart is no error of
        the client's request."""
        if req.prompt_ids is not None:
            return list(req.prompt_ids)
        body = (Render(messages=req.messages, template=req.template) if req.messages is not None
                else Encode(text=req.prompt, parse_special=False, add_special=True))
        loop = asyncio.get_running_loop()
        give_up, why = loop.time() + self.sched.tokenizer_wait_s, "no tokenizer of this model is live"
        while True:
            if (tok := self._tokenizer()) is not None:
                try:
                    return list((await self.peers.call(tok, body, timeout=30)).ids)
                except (PeerDead, PeerRestarted, CallTimeout, ServiceNotFound) as e:
                    why = f"{tok} did not answer: {e}"
                    self.counters["tokenizer_retries"] += 1
                except RemoteError as e:
                    if e.code != "loading":          # a respawned tokenizer answers before it has loaded
                        raise
                    why = f"{tok} is still loading"
                    self.counters["tokenizer_retries"] += 1
            if loop.time() >= give_up:
                raise ServiceError("tokenizer_unavailable", f"{why} (waited "
                                   f"{self.sched.tokenizer_wait_s:g} s)", retry_after=1.0)
            await asyncio.sleep(0.05)

    @handles(CancelRequest)
    async def cancel(self, msg) -> Cancelled:
        rid = msg.body.request_id
        lane = self.lanes.lane_of(rid) if self.lanes is not None else None
        if lane is not None:
            out = lane.policy.cancel(rid)
            stream = self.requests.get(rid)
            if stream is not None and out is not None:
                stream.deliver(StreamEvent(out))
            lane.driver.wake.set()
        return Cancelled(request_id=rid, found=lane is not None)

    @handles(StatsRequest)
    async def stats(self, msg) -> Stats:
        if self.lanes is None:
            raise ServiceError("starting", "the scheduler is still finding its pipeline",
                               retry_after=1.0)
        s = self.lanes.policy_stats()
        s.update(self.lanes.driver_stats())
        s.update(self.lanes.lane_stats())
        s.update(self.hops.stats())
        s.update(self.direct.stats())
        return Stats(stats=s, pipeline=self.lanes.first_pipeline())

