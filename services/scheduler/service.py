"""The scheduler service: admits generation requests, batches them through the shard pipeline,
and streams each request's tokens back to its caller.

At start it finds a tokenizer and a whole shard pipeline of one model on the bus, takes the
vocabulary's bytes (so that it decodes text itself) and the KV page geometry of the shards,
and builds the pure policy (`Scheduler`) over them. `Driver` runs the policy; replicas of the
ranges make further pipelines, each with its own policy and driver (`pipelines/replicas.py`); this file holds
the bus handlers.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid

import numpy as np

from bus.config import ServiceConfig
from bus.errors import CallTimeout, PeerDead, PeerRestarted, RemoteError, ServiceError, ServiceNotFound
from bus.service import Service, handles, streams
from services.tokenizer.client import fetch_model
import wire
from wire.failures import (BAD_DIMENSIONS, BAD_FORMAT, BAD_REPLY, DUPLICATE_REQUEST, INTERNAL, LOADING,
                           QUEUE_FULL, RANGE_FAILED, SCHEDULER_STOPPED, STARTING,
                           TOKENIZER_UNAVAILABLE, UNREACHABLE)
from wire.messages.bus import Event
from wire.messages.info import SchedulerInfo
from wire.messages.scheduler import (CancelRequest, Cancelled, Done, Embed, Embeddings, Generate,
                                     Started, Stats, StatsRequest, Tokens)
from wire.messages.sampling import SamplingParams
from wire.messages.bus import Probe
from wire.messages.shard import Forward, ForwardResult
from wire.messages.tokenizer import Encode, Render

from .batching.admission import check_sampling
from .batching.config import SchedulerConfig
from .config import SchedulerServiceConfig
from .batching.errors import BadRequest, QueueFull
from .batching.policy import Scheduler
from .batching.sequence import Request
from .grammar.errors import BadFormat
from .pipelines.breaker import Breakers
from .pipelines.answers import AnswerInbox, Answers
from .pipelines.chains import Stage, assign_pipelines, assignment_key, explain_missing, find_gap
from .pipelines.driver import Driver
from .pipelines.failed_ranges import FAILED_TOPIC, FailedRanges
from .pipelines.hops import HopStats
from .pipelines.overlap import micro_batches
from .pipelines.pooling import BadPooling, Pooled, embedding_inputs, finish_vector
from .pipelines.reach import Reach
from .pipelines.replicas import Pipeline, Pipelines
from .pipelines.streams import RequestStream, StreamEvent
from .placement.placer import Placer

log = logging.getLogger("llmbus.scheduler")

PIPELINE_TOPIC = "scheduler.pipeline"   # a pipeline came, left rotation, or handed work over
PROBE_S = 2.0                           # how long a last shard may take to find and call us
# How often a starting scheduler looks for its tokenizer and a whole pipeline again: a respawned
# one finds them within moments, and each moment of its start is a pause for every stream the
# gateway carries over to it.
START_POLL_S = 0.05


class SchedulerService(AnswerInbox, Service):
    kind = "scheduler"

    def __init__(self, config: ServiceConfig, sched: SchedulerServiceConfig | None = None, ctx=None):
        super().__init__(config, ctx)
        self.sched = sched or SchedulerServiceConfig()
        self.model = self.sched.model
        self.pipelines: Pipelines | None = None     # the pipelines: a policy and a driver each
        self._ctx_len = 0                   # context of every pipeline's requests
        self._tok_info = None               # the tokenizer's InfoReply: vocabulary, EOS ids
        self._arrivals = itertools.count()  # shared by the pipelines' policies (order of arrival)
        self.requests: dict[str, RequestStream] = {}
        self.token_bytes: list[bytes] = []
        self.failed_ranges = FailedRanges()
        self.hops = HopStats(config.name)
        self.answers = Answers(config.name, self.peers_call, self.epoch)
        self.reach = Reach(self._probe, time.monotonic)
        self.placer: Placer | None = None
        self._assigned: tuple = ((), [])    # the last assignment_key and its pipelines
        self._grammars = None               # grammar.matcher.Grammars over the vocabulary
        self._no_grammars = ""              # why there is none, when it could not be made

    # ------------------------------------------------------------------ lifecycle
    async def on_start(self) -> None:
        self.directory.subscribe(FAILED_TOPIC)
        self.directory.on_event.append(self._on_health_event)
        self.directory.on_expire.append(self._on_peer_expired)
        self.watch_stages()        # a batch's answer comes straight: hear of its stages' loss
        took = {}                  # how long each step of the start took: in the log
        tok = await self._timed(took, "tokenizer", self._wait_for(self._tokenizer, "a tokenizer"))
        info, self.token_bytes = await self._timed(took, "vocabulary", fetch_model(self.peers, tok))
        self.model = info.model
        await self._timed(took, "grammars", self._make_grammars(info))
        # Shards without --layers wait for a range: the placer gives them one from here on.
        self.placer = Placer(self.directory, self.peers_call, lambda: self.model,
                             idle=lambda: self.pipelines is None or self.pipelines.idle(),
                             wake=lambda: self.pipelines is not None and self.pipelines.wake(),
                             served=self._batches_done,
                             idle_timeout=self.sched.batch_timeout)
        self._tasks.append(asyncio.get_running_loop().create_task(self.placer.run()))
        chain = await self._timed(took, "pipeline",
                                  self._wait_for(self._first_chain, "a whole shard pipeline"))
        # Every pipeline takes the first one's context (a request may move to another).
        pool = min(s.num_pages * s.page_size for s in chain)
        self._ctx_len = min(c for c in (self.sched.context_length, info.context_length, pool) if c > 0)
        self._tok_info = info
        pipelines = Pipelines(self._assign, self._make_pipeline, Breakers(), time.monotonic)
        pipelines.refresh()
        self.pipelines = pipelines
        self._tasks.append(asyncio.get_running_loop().create_task(self._watch_pipelines()))
        log.info("serving %s over %s (context %d), %.2f s after the start (%s)", self.model,
                 [pipeline.shards for pipeline in pipelines], self._ctx_len,
                 time.monotonic() - self.started_at,
                 ", ".join(f"{k} {v:.2f} s" for k, v in took.items()))

    def _make_pipeline(self, name: str, chain: list[Stage]) -> Pipeline:
        """A policy over this pipeline's KV pages and a driver running it."""
        sizes = {s.page_size for s in chain}
        if len(sizes) != 1:
            raise ValueError(f"shards disagree on the KV page size: {sorted(sizes)}")
        page_size, num_pages = sizes.pop(), min(s.num_pages for s in chain)
        info = self._tok_info
        policy = Scheduler(SchedulerConfig(
            **self.sched.batching(), num_pages=num_pages, page_size=page_size,
            context_length=min(self._ctx_len, num_pages * page_size),
            max_inflight=self.sched.inflight or micro_batches(chain),
            vocab_size=info.vocab_size, eos_ids=frozenset(info.eot_ids),
            token_bytes=tuple(self.token_bytes)), arrivals=self._arrivals)
        pipeline = Pipeline(name, policy)
        pipeline.driver = Driver(policy, self.requests, self._forward,
                             lambda: self.pipelines.chain_of(pipeline) if self.pipelines else chain,
                             self.sched.batch_timeout, unserved_budget_s=self.sched.unserved_budget_s,
                             describe_gap=self._describe_gap,
                             on_batch=lambda step_s, error: self._batch_ended(pipeline, step_s, error))
        self._tasks.append(asyncio.get_running_loop().create_task(pipeline.driver.run()))
        log.info("pipeline %s: %d pages of %d tokens", name, num_pages, page_size)
        return pipeline

    def _batch_ended(self, pipeline: Pipeline, step_s: float | None, error: str) -> None:
        """A served batch is progress even when it gives no token (a long prompt's prefill
        chunks): the health watcher's stall rule must not take a scheduler waiting on shards
        through a long prefill for a hung one."""
        if not error:
            self.progress += 1
        if self.pipelines is not None:
            self.pipelines.observe(pipeline, step_s, error)

    async def _watch_pipelines(self) -> None:
        """Pipelines that lost their chain hand their sequences over; new replicas become pipelines."""
        while True:
            await asyncio.sleep(0.2)
            try:
                self.pipelines.refresh()
                self.pipelines.rebalance()
                for entry in self.pipelines.changes():   # `busctl monitor` shows them
                    self.publish(PIPELINE_TOPIC, Event(topic=PIPELINE_TOPIC, service=self.name,
                                                       data=entry))
            except Exception:  # a bug here must not stop the watch
                log.exception("looking at the pipelines failed")
                self.counters["pipeline_errors"] += 1

    def _batches_done(self) -> int:
        if self.pipelines is None:
            return 0
        return sum(p.driver.counters["batches_done"] for p in self.pipelines if p.driver)

    async def on_stop(self) -> None:
        # Past the drain timeout: what is still running ends with a reason, not a silent close.
        if self.pipelines is not None:
            for out in self.pipelines.fail_all("the scheduler stopped before this request finished",
                                               SCHEDULER_STOPPED):
                if (stream := self.requests.get(out.request_id)) is not None:
                    stream.deliver(StreamEvent(out))
            if self._inflight:
                await asyncio.wait(self._inflight, timeout=1.0)
            for pipeline in self.pipelines:
                if pipeline.driver is not None:
                    await pipeline.driver.stop()
        await self.reach.close()

    @staticmethod
    async def _timed(took: dict, step: str, work):
        t0 = time.monotonic()
        try:
            return await work
        finally:
            took[step] = time.monotonic() - t0

    async def _wait_for(self, find, what: str):
        """What `find` finds, looked for every START_POLL_S (saying why not every 10 s)."""
        loop = asyncio.get_running_loop()
        said = loop.time()
        while (found := find()) is None:
            if loop.time() - said >= 10:
                log.info("waiting for %s: %s", what, self._explain())
                said = loop.time()
            await asyncio.sleep(START_POLL_S)
        return found

    def _tokenizer(self) -> str | None:
        e = self.directory.pick("tokenizer", self.model or None)
        return e.name if e is not None else None

    def _shards(self) -> list:
        shards = self.directory.of_kind("shard")
        return self.placer.stages_allowed(shards) if self.placer is not None else shards

    def _assign(self, current: list[list[str]]):
        """Each pipeline's chain now (pipelines/chains.py), None while a new placement is
        switching in; a chain whose last shard is not known to reach us is refused (reach.py)."""
        if self.placer is not None and self.placer.paused:
            return None    # a new placement is switching in: no batch until it serves
        shards = self._shards()
        key = assignment_key(shards, self.model, current)
        if key != self._assigned[0]:
            self._assigned = (key, assign_pipelines(shards, self.model, current))
        return self.reach.admit([None if c is None else list(c) for c in self._assigned[1]])

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
        for why_not in self.reach.refused().values():
            why += f"; pipeline refused: {why_not}"
        return why

    async def peers_call(self, shard: str, body, timeout: float):
        return await self.peers.call(shard, body, timeout=timeout)

    async def _forward(self, first: str, body: Forward, timeout: float) -> ForwardResult:
        """A batch through its route: the answer comes from the last shard straight."""
        try:
            result = await self.answers.forward(first, body, timeout)
        except (CallTimeout, RemoteError) as e:
            if isinstance(e, CallTimeout) or e.code == UNREACHABLE:
                self.reach.forget(body.route[-1])   # check the way back before the next batch
            raise
        self.hops.record(result.hops)
        return result

    async def _probe(self, last: Stage) -> None:
        """Whether `last` reaches this scheduler (the path its results take): it finds us in its
        own directory and calls us (bus.probe)."""
        await self.peers.call(last.name, Probe(target=self.name, timeout=PROBE_S),
                              timeout=PROBE_S + 1.0, epoch=last.epoch)

    def info(self) -> SchedulerInfo:
        extra = {"placement": self.placer.info()} if self.placer is not None else {}
        if refused := self.reach.refused():
            extra["refused"] = refused
        if self.directory is not None and (clashes := self.directory.clashes()):
            extra["name_clashes"] = {n: list(eps) for n, eps in clashes.items()}
        if self.pipelines is None:
            return SchedulerInfo(model=self.model, **extra)
        s = self.pipelines.policy_stats()
        counts = {k: int(s[k]) for k in ("waiting", "running", "inflight_batches", "pages_total",
                                         "pages_used", "pages_cached")}
        rates = {k: round(float(s[k]), 4) for k in ("page_use", "prefix_hit_rate", "tokens_per_s")}
        return SchedulerInfo(model=self.model, pipeline=self.pipelines.first_pipeline(),
                             pipelines=self.pipelines.info(), **counts, **rates, **extra)

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
        if self.pipelines is None:
            return
        why = self.failed_ranges.why(self.directory.live(), self.model)
        if why is None:
            return
        log.error("failing every request: %s", why)
        for out in self.pipelines.fail_all(why, RANGE_FAILED):
            if (stream := self.requests.get(out.request_id)) is not None:
                stream.deliver(StreamEvent(out))
        self.pipelines.wake()

    # ------------------------------------------------------------------ requests
    @streams(Generate)
    async def generate(self, msg):
        req: Generate = msg.body
        self._check_serving()
        arrived = asyncio.get_running_loop().time()
        rid = req.request_id or uuid.uuid4().hex
        if rid in self.requests:
            raise ServiceError(DUPLICATE_REQUEST, f"request {rid!r} is already running")
        try:
            params = check_sampling(SamplingParams.of(req))
        except BadRequest as e:
            raise ServiceError(e.reason, e.detail) from None
        constraint = await self._constraint(req.format) if req.format is not None else None
        prompt = await self._prompt_ids(req)
        # The deadline runs from arrival: rendering the prompt took some of it (at least a
        # moment is left, so that a request already late ends with reason deadline).
        deadline = (None if req.deadline_s is None else
                    max(req.deadline_s - (asyncio.get_running_loop().time() - arrived), 1e-3))
        stream = RequestStream(rid, len(prompt), params, completed=len(req.continued), constraint=constraint)
        max_tokens = req.max_tokens if req.max_tokens is not None else self.pipelines.context_length
        try:
            terms = self.pipelines.submit(Request(
                rid, tuple(prompt), max_tokens, req.priority, tuple(req.stop), params.seed, deadline,
                tuple(req.continued),
                held=constraint is not None and constraint.holds_whole_answer))
        except QueueFull as e:
            raise ServiceError(QUEUE_FULL, str(e), retry_after=round(e.retry_after, 1)) from None
        except BadRequest as e:
            raise ServiceError(e.reason, e.detail) from None
        started = Started(request_id=rid, prompt_tokens=len(prompt), max_tokens=terms.max_tokens,
                          seed=params.seed, note=terms.note if req.max_tokens is not None else "")
        if (finish := terms.finished) is not None:   # a continuation its tokens already ended
            yield started
            yield Done(request_id=rid, finish_reason=finish.reason, prompt_tokens=len(prompt),
                       completion_tokens=len(req.continued), stop_string=finish.stop_string,
                       detail=finish.detail, code=finish.code)
            return
        self.requests[rid] = stream
        try:
            yield started
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
                               stop_string=finish.stop_string, detail=finish.detail,
                               code=finish.code)
                    return
        finally:
            # The caller left (or cancelled): end the request now and free its pages.
            if (pipeline := self.pipelines.pipeline_of(rid)) is not None:
                pipeline.policy.cancel(rid)
                pipeline.driver.wake.set()
            self.requests.pop(rid, None)

    async def _make_grammars(self, info) -> None:
        """The vocabulary's index for grammars, made once before any request: llguidance holds
        the GIL for much of it (0.5 s for SmolLM2's 49k tokens, 3 s for Gemma 3's 262k on an idle
        core), which would stall every stream if it came with the first format."""
        from .grammar.matcher import Grammars
        try:
            self._grammars = await asyncio.get_running_loop().run_in_executor(
                None, Grammars, self.token_bytes, info.special_ids, info.eot_ids)
        except Exception as e:   # the service runs on; formats are refused with the reason
            self._no_grammars = f"structured output is unavailable for this vocabulary: {e}"
            log.exception("no grammars")

    async def _constraint(self, fmt):
        """A matcher for the request's `format`, compiled off the event loop (a schema takes a
        few milliseconds); a format we cannot follow is refused with bad_format, naming why."""
        if self._grammars is None:
            raise ServiceError(BAD_FORMAT, self._no_grammars or "structured output is unavailable")
        try:
            return await asyncio.get_running_loop().run_in_executor(
                None, self._grammars.compile, fmt)
        except BadFormat as e:
            raise ServiceError(BAD_FORMAT, f"format: {e}") from None

    async def _prompt_ids(self, req: Generate) -> list[int]:
        """The prompt's token ids."""
        if req.prompt_ids is not None:
            return list(req.prompt_ids)
        return await self._tokenize(
            Render(messages=req.messages, template=req.template, tools=req.tools,
                   assistant_prefix=req.assistant_prefix) if req.messages is not None
            else Encode(text=req.prompt, parse_special=False, add_special=True))

    async def _tokenize(self, body: Render | Encode) -> list[int]:
        """A tokenizer's ids for `body`. A tokenizer that dies or restarts under the call (or is
        between processes) is waited for, up to `tokenizer_wait_s`: its restart is no error of
        the client's request."""
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
                    if e.code != LOADING:          # a respawned tokenizer answers before it has loaded
                        raise
                    why = f"{tok} is still loading"
                    self.counters["tokenizer_retries"] += 1
            if loop.time() >= give_up:
                raise ServiceError(TOKENIZER_UNAVAILABLE, f"{why} (waited "
                                   f"{self.sched.tokenizer_wait_s:g} s)", retry_after=1.0)
            await asyncio.sleep(0.05)

    @handles(Embed)
    async def embed(self, msg) -> Embeddings:
        """Each input a prefill of its own through the pipelines, beside generation; the last
        shard pools its final hidden states (pipelines/pooling.py puts the chunks together)."""
        req: Embed = msg.body
        self._check_serving()
        arrived = asyncio.get_running_loop().time()
        rid = req.request_id or uuid.uuid4().hex
        pooling, width = self._tok_info.pooling, self._tok_info.embedding_length
        if req.dimensions is not None and width and req.dimensions > width:
            raise ServiceError(BAD_DIMENSIONS, f"dimensions {req.dimensions} is more than the "
                                                f"model's {width}")
        inputs = ([list(ids) for ids in req.input_ids] if req.input_ids else
                  [await self._tokenize(Encode(text=t, parse_special=False, add_special=True))
                   for t in req.inputs])
        prompts = embedding_inputs(inputs, self.pipelines.context_length, req.truncate)
        deadline = (None if req.deadline_s is None else
                    max(req.deadline_s - (asyncio.get_running_loop().time() - arrived), 1e-3))
        streams = [RequestStream(f"{rid}/{i}", len(p), SamplingParams(),
                                 pooled=Pooled(pooling, len(p))) for i, p in enumerate(prompts)]
        if any(s.request_id in self.requests for s in streams):
            raise ServiceError(DUPLICATE_REQUEST, f"request {rid!r} is already running")
        try:
            for stream, prompt in zip(streams, prompts):
                self.pipelines.submit(Request(stream.request_id, tuple(prompt), 1, req.priority,
                                              (), 0, deadline, (), pooling=pooling))
                self.requests[stream.request_id] = stream
            vectors = []
            for i, stream in enumerate(streams):
                while (finish := (await stream.events.get()).output.finish) is None:
                    pass
                if finish.reason != "stop":
                    raise ServiceError(finish.code or INTERNAL, f"input {i}: {finish.reason}"
                                       + (f": {finish.detail}" if finish.detail else ""))
                vectors.append(finish_vector(stream.pooled.vector(), req.dimensions,
                                             req.normalize))
        except QueueFull as e:
            raise ServiceError(QUEUE_FULL, str(e), retry_after=round(e.retry_after, 1)) from None
        except BadRequest as e:
            raise ServiceError(e.reason, e.detail) from None
        except BadPooling as e:
            raise ServiceError(BAD_REPLY, f"the pipeline's pooled states: {e}") from None
        finally:
            for stream in streams:   # a failed or refused input ends the others now
                if (pipeline := self.pipelines.pipeline_of(stream.request_id)) is not None:
                    pipeline.policy.cancel(stream.request_id)
                    pipeline.driver.wake.set()
                self.requests.pop(stream.request_id, None)
        if req.dimensions is not None and req.dimensions > len(vectors[0]):
            raise ServiceError(BAD_DIMENSIONS, f"dimensions {req.dimensions} is more than the "
                                                f"model's {len(vectors[0])}")
        self.counters["embeddings"] += len(vectors)
        return Embeddings(request_id=rid, vectors=wire.Tensor(np.stack(vectors)),
                          prompt_tokens=[len(p) for p in prompts], pooling=pooling)

    def _check_serving(self) -> None:
        """Refuse a new request the pipelines cannot serve now (or ever)."""
        if (why := self.failed_ranges.why(self.directory.live(), self.model)) is not None:
            raise ServiceError(RANGE_FAILED, why)
        if self.placer is not None and self.placer.refused and find_gap(self._shards(), self.model):
            # The shards left cannot hold the model: nothing serves its missing layers until
            # a host joins, so a new request is told so now rather than after the budget.
            raise ServiceError(RANGE_FAILED, self._describe_gap())
        if self.pipelines is None:
            raise ServiceError(STARTING, "the scheduler is still finding its pipeline",
                               retry_after=1.0)

    @handles(CancelRequest)
    async def cancel(self, msg) -> Cancelled:
        rid = msg.body.request_id
        pipeline = self.pipelines.pipeline_of(rid) if self.pipelines is not None else None
        if pipeline is not None:
            out = pipeline.policy.cancel(rid)
            stream = self.requests.get(rid)
            if stream is not None and out is not None:
                stream.deliver(StreamEvent(out))
            pipeline.driver.wake.set()
        return Cancelled(request_id=rid, found=pipeline is not None)

    @handles(StatsRequest)
    async def stats(self, msg) -> Stats:
        if self.pipelines is None:
            raise ServiceError(STARTING, "the scheduler is still finding its pipeline",
                               retry_after=1.0)
        s = self.pipelines.policy_stats()
        s.update(self.pipelines.driver_stats())
        s.update(self.pipelines.pipeline_stats())
        s.update(self.hops.stats())
        s.update(self.answers.stats())
        s.update(self._shard_pages())
        if self._grammars is not None:
            s.update(self._grammars.mask_stats())
        return Stats(stats=s, pipeline=self.pipelines.first_pipeline())

    def _shard_pages(self) -> dict[str, float]:
        """Each live shard's KV pages as its last heartbeat told them, and those it still holds
        for a scheduler run other than this one (leaked: a shard drops a gone run's pages)."""
        out = {"shards.kv_pages_stale": 0.0}
        for e in self.directory.of_kind("shard"):
            info = e.info
            out[f"shard.{e.name}.kv_pages"] = float(info.kv_pages)
            if (info.kv_owner, info.kv_owner_epoch) != (self.name, self.epoch):
                out["shards.kv_pages_stale"] += info.kv_pages
        return out

