"""The scheduler service: admits generation requests, batches them through the shard pipeline,
and streams each request's tokens back to its caller.

At start it finds a tokenizer and a whole shard pipeline of one model on the bus, takes the
vocabulary's bytes (so that it decodes text itself) and the KV page geometry of the shards,
and builds the pure policy (`Scheduler`) over them. `Driver` runs the policy; this file holds
the bus handlers.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass

from bus.config import ServiceConfig
from bus.errors import ServiceError
from bus.service import Service, handles, streams
from wire.messages.scheduler import (CancelRequest, Cancelled, Done, Generate, Started, Stats,
                                     StatsRequest, Tokens)
from wire.messages.sampling import SamplingParams
from wire.messages.tokenizer import Encode, InfoRequest, Render, VocabRequest

from .admission import check_sampling
from .config import SchedulerConfig
from .driver import Driver
from .errors import BadRequest, QueueFull
from .pipeline import explain_missing, find_chain, find_gap
from .policy import Scheduler
from .sequence import Request
from .streams import RequestStream, StreamEvent

log = logging.getLogger("llmbus.scheduler")


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
    pace_step_s: float = 0.12        # a batch's target compute while streams decode (pacing.py)
    pace_max_wait_s: float = 10.0    # ... unless a request has waited this long for a first token

    def __post_init__(self):
        for name in ("max_batch_tokens", "max_batch_seqs", "max_queue", "batch_timeout",
                     "unserved_budget_s", "pace_step_s", "pace_max_wait_s"):
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
        self.policy: Scheduler | None = None
        self.driver: Driver | None = None
        self.requests: dict[str, RequestStream] = {}
        self.token_bytes: list[bytes] = []

    # ------------------------------------------------------------------ lifecycle
    async def on_start(self) -> None:
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
        chain = await self._wait_for(self._chain, "a whole shard pipeline")
        sizes = {s.page_size for s in chain}
        if len(sizes) != 1:
            raise ValueError(f"shards disagree on the KV page size: {sorted(sizes)}")
        page_size, num_pages = sizes.pop(), min(s.num_pages for s in chain)
        pool = num_pages * page_size
        ctx = min(c for c in (self.sched.context_length, info.context_length, pool) if c > 0)
        self.policy = Scheduler(SchedulerConfig(
            num_pages=num_pages, page_size=page_size, context_length=ctx,
            max_batch_tokens=self.sched.max_batch_tokens, max_batch_seqs=self.sched.max_batch_seqs,
            max_inflight=self.sched.max_inflight or len(chain) + 1, max_queue=self.sched.max_queue,
            vocab_size=info.vocab_size, eos_ids=frozenset(info.eot_ids),
            pace_step_s=self.sched.pace_step_s, pace_max_wait_s=self.sched.pace_max_wait_s,
            token_bytes=tuple(self.token_bytes)))
        self.driver = Driver(self.policy, self.requests, self._forward, self._chain,
                             self.sched.batch_timeout, unserved_budget_s=self.sched.unserved_budget_s,
                             describe_gap=self._describe_gap)
        self.driver.pipeline = chain
        self._tasks.append(asyncio.get_running_loop().create_task(self.driver.run()))
        log.info("serving %s over %s (%d pages of %d tokens, context %d)", self.model,
                 [s.name for s in chain], num_pages, page_size, ctx)

    async def on_stop(self) -> None:
        # Past the drain timeout: what is still running ends with a reason, not a silent close.
        if self.policy is not None:
            for rid in list(self.requests):
                out = self.policy.fail(rid, "the scheduler stopped before this request finished")
                if out is not None:
                    self.requests[rid].deliver(StreamEvent(out))
            if self._inflight:
                await asyncio.wait(self._inflight, timeout=1.0)
        if self.driver is not None:
            await self.driver.stop()

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

    def _chain(self):
        prefer = self.driver.pipeline if self.driver is not None else ()
        return find_chain(self.directory.of_kind("shard"), self.model, [s.name for s in prefer])

    def _describe_gap(self) -> str:
        gap = find_gap(self.directory.of_kind("shard"), self.model)
        where = ("no layers" if gap is None else f"layers {gap[0]}-{'?' if gap[1] is None else gap[1]}")
        return f"{where} of {self.model} have no ready shard ({self._explain()})"

    def _explain(self) -> str:
        return explain_missing(self.directory.of_kind("shard"), self.model)

    async def _forward(self, shard: str, body, timeout: float):
        return await self.peers.call(shard, body, timeout=timeout)

    def info(self) -> dict:
        if self.policy is None:
            return {"model": self.model}
        s = self.policy.stats()
        keep = ("waiting", "running", "inflight_batches", "pages_total", "pages_used", "page_use",
                "pages_cached", "prefix_hit_rate", "tokens_per_s")
        return {"model": self.model, "pipeline": [st.name for st in self.driver.pipeline],
                **{k: round(float(s[k]), 4) for k in keep}}

    # ------------------------------------------------------------------ requests
    @streams(Generate)
    async def generate(self, msg):
        req: Generate = msg.body
        if self.policy is None:
            raise ServiceError("starting", "the scheduler is still finding its pipeline",
                               retry_after=1.0)
        rid = req.request_id or uuid.uuid4().hex
        if rid in self.requests:
            raise ServiceError("duplicate_request_id", f"request {rid!r} is already running")
        try:
            params = check_sampling(SamplingParams.of(req))
        except BadRequest as e:
            raise ServiceError(e.reason, e.detail) from None
        prompt = await self._prompt_ids(req)
        stream = RequestStream(rid, len(prompt), params)
        max_tokens = req.max_tokens if req.max_tokens is not None else self.policy.config.context_length
        try:
            terms = self.policy.submit(Request(rid, tuple(prompt), max_tokens, req.priority,
                                               tuple(req.stop), params.seed))
        except QueueFull as e:
            raise ServiceError("queue_full", str(e), retry_after=round(e.retry_after, 1)) from None
        except BadRequest as e:
            raise ServiceError(e.reason, e.detail) from None
        self.requests[rid] = stream
        self.driver.wake.set()
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
            if self.policy.is_tracked(rid):
                self.policy.cancel(rid)
                self.driver.wake.set()
            self.requests.pop(rid, None)

    async def _prompt_ids(self, req: Generate) -> list[int]:
        if req.prompt_ids is not None:
            return list(req.prompt_ids)
        tok = self._tokenizer()
        if tok is None:
            raise ServiceError("tokenizer_unavailable", "no tokenizer of this model is live",
                               retry_after=1.0)
        if req.messages is not None:
            reply = await self.peers.call(tok, Render(messages=req.messages, template=req.template),
                                          timeout=30)
        else:
            reply = await self.peers.call(tok, Encode(text=req.prompt, parse_special=False,
                                                      add_special=True), timeout=30)
        return list(reply.ids)

    @handles(CancelRequest)
    async def cancel(self, msg) -> Cancelled:
        rid = msg.body.request_id
        found = self.policy is not None and self.policy.is_tracked(rid)
        if found:
            out = self.policy.cancel(rid)
            stream = self.requests.get(rid)
            if stream is not None and out is not None:
                stream.deliver(StreamEvent(out))
            self.driver.wake.set()
        return Cancelled(request_id=rid, found=found)

    @handles(StatsRequest)
    async def stats(self, msg) -> Stats:
        if self.policy is None:
            raise ServiceError("starting", "the scheduler is still finding its pipeline",
                               retry_after=1.0)
        s = {k: float(v) for k, v in self.policy.stats().items()}
        s.update({f"driver.{k}": float(v) for k, v in self.driver.counters.items()})
        s.update({f"driver.{k}": round(float(v), 3) for k, v in self.driver.timing.items()})
        return Stats(stats=s, pipeline=[st.name for st in self.driver.pipeline])

