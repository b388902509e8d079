"""The bus side of the gateway: the model card, generation streams, tokenizing, health.

Protocols call these and never touch sockets; every bus failure comes out as a GatewayError.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

import wire
from bus.directory import Directory
from bus.errors import BusError, ClientClosed, RemoteError, code_of
from bus.peers import Peers
from services.tokenizer.client import fetch_model
from wire.failures import (DUPLICATE_REQUEST, LOADING, NOT_FOUND, PEER_DEAD, PEER_RESTARTED,
                           SCHEDULER_STOPPED, STARTING, TIMEOUT)
from wire.messages.scheduler import (CancelRequest, Done, Embed, Embeddings, Generate, Started,
                                     StatsRequest, Tokens)
from wire.messages.tokenizer import Decode, Encode, Render

from . import health
from .carry import Carry
from .embeddings import parts
from .errors import NotFound, Unavailable, from_bus
from .feed import ClusterFeed
from .metrics import Metrics
from .model import ModelCard
from .tools import Tools

log = logging.getLogger("llmbus.gateway")

CALL_TIMEOUT = 30.0
# A tokenizer call that failed so is asked again (of the tokenizer that serves next).
TOKENIZER_LOST = frozenset({PEER_DEAD, PEER_RESTARTED, NOT_FOUND, TIMEOUT, LOADING})
# An embedding request that failed so is sent again (to the scheduler that serves next).
SCHEDULER_LOST = frozenset({PEER_DEAD, PEER_RESTARTED, NOT_FOUND, SCHEDULER_STOPPED, STARTING})
EMBED_TIMEOUT = 600.0      # the scheduler's answer to a batch of inputs, however many
REFUSED_PAUSE_S = 0.25   # before asking a scheduler that refused a continuation (no hint) again


class Backend:
    def __init__(self, directory: Directory, peers: Peers, stream_idle_timeout: float,
                 metrics: Metrics, carry_s: float = 60.0):
        self.directory = directory
        self.peers = peers
        self.stream_idle_timeout = stream_idle_timeout
        self.carry_s = carry_s
        self.stopping = False
        self.metrics = metrics
        self.card: ModelCard | None = None
        self._cancels: set[asyncio.Task] = set()    # scheduler.cancel calls still in flight
        self.feed = ClusterFeed(directory, peers, self.scheduler_stats, self._serving)

    # ------------------------------------------------------------------ the model
    async def watch_model(self) -> None:
        """Learn the served model from a tokenizer (again if it changes); runs for the
        service's life."""
        while True:
            tok = self.directory.pick("tokenizer")
            if tok is not None and (self.card is None or tok.info.model != self.card.identity):
                try:
                    self.card = await self._load_card(tok.name)
                    log.info("serving model %r (%s)", self.card.id, self.card.identity)
                except BusError as e:
                    log.warning("could not read the model from %s: %s", tok.name, e)
            await asyncio.sleep(0.25)

    async def _load_card(self, tok: str) -> ModelCard:
        info, table = await fetch_model(self.peers, tok, CALL_TIMEOUT)
        return ModelCard.of(info, int(time.time()), table)

    def model(self, requested: str | None = None) -> ModelCard:
        """The served model; Unavailable before a tokenizer answered, NotFound for another id."""
        card = self.card
        if card is None:
            raise Unavailable("no tokenizer has answered yet: the cluster is starting",
                              retry_after=1.0)
        if not card.matches(requested):
            raise NotFound(f"the model {requested!r} does not exist; this cluster serves "
                           f"{card.id!r}", param="model")
        return card

    # ------------------------------------------------------------------ generation
    async def generate(self, request: Generate) -> AsyncIterator[Any]:
        """The scheduler's events for one request (Started, Tokens..., Done), carried across the
        loss of its scheduler (gateway.carry): a scheduler that dies, restarts or stops under it
        is a pause in the events, and the rest comes from the scheduler that serves next.

        Closing the iterator early (a client that left) ends the request in the scheduler:
        the bus stream is cancelled, and a scheduler.cancel makes sure its pages are freed.
        """
        card = self.model()
        sched = self.directory.pick("scheduler", card.identity)
        if sched is None:
            raise Unavailable("no scheduler is ready: " + "; ".join(self.missing()),
                              retry_after=1.0)
        if not request.request_id:
            request = _with_id(request, "gw-" + uuid.uuid4().hex)
        carry = Carry(request, time.monotonic())
        started, admitted, token_events = time.perf_counter(), None, []
        give_up = None
        counted = False      # this request's ending is in llmbus_requests_finished_total
        while True:
            finished, lost, pause = False, None, 0.0
            try:
                async with contextlib.aclosing(self.peers.stream(
                        sched.name, carry.next_request(time.monotonic()), wait=CALL_TIMEOUT,
                        idle_timeout=self.stream_idle_timeout)) as events:
                    async for ev in events:
                        if isinstance(ev, Done) and carry.ended_by_loss(ev):
                            lost = f"{sched.name} stopped: {ev.detail}"
                            break
                        if (ev := carry.take(ev)) is None:
                            continue
                        if isinstance(ev, Tokens) and ev.token_ids:
                            token_events.append((time.perf_counter(), len(ev.token_ids)))
                        elif isinstance(ev, Started):
                            admitted = time.perf_counter()
                        elif isinstance(ev, Done):
                            counted = True
                            self.metrics.generation(started, admitted, token_events,
                                                    ev.prompt_tokens, ev.completion_tokens,
                                                    ev.finish_reason, time.perf_counter())
                        yield ev
                finished = lost is None
            except BusError as e:
                if self.stopping:      # (and the finally below cancels it in the scheduler)
                    raise self._stopping_error() from None
                if not carry.bridges(code_of(e)):
                    finished = True
                    raise from_bus(e) from None
                lost = str(e)
                if isinstance(e, RemoteError):   # a live scheduler that cannot take it yet
                    pause = min(e.retry_after or REFUSED_PAUSE_S, 1.0)
                if code_of(e) == DUPLICATE_REQUEST:
                    # The scheduler was only stopped, came back, and still runs the request as
                    # it was: that run ends, and the continuation goes on from what was sent.
                    with contextlib.suppress(BusError):
                        await self.peers.call(sched.name, CancelRequest(
                            request_id=request.request_id), timeout=5)
            finally:
                # The client left. (Not after a loss: a cancel by name could reach the scheduler's
                # next process, and end the continuation there.)
                if not finished and lost is None:
                    self._cancel_later(sched.name, request.request_id)
                    if not counted:
                        self.metrics.finished.labels("cancelled").inc()
                        counted = True
            if finished:
                return
            # Wait for a scheduler that serves (the respawn, or another), up to carry_s from the
            # first loss, and go on there.
            if not carry.losses:
                self.metrics.carried.inc()
                give_up = time.monotonic() + self.carry_s
            elif time.monotonic() >= give_up:
                raise Unavailable(f"the cluster did not answer: {lost}; no scheduler took the "
                                  f"request again within {self.carry_s:g} s", retry_after=1.0)
            carry.lost()
            log.info("request %s: %s; carrying its %d tokens to the scheduler that serves next",
                     request.request_id, lost, len(carry.sent))
            await asyncio.sleep(max(0.0, min(pause, give_up - time.monotonic())))
            sched = await self._next_scheduler(card.identity, give_up, lost)

    async def _next_scheduler(self, model: str, give_up: float, why: str):
        """The least loaded ready scheduler (a lost one has left the directory, or is there
        under its new epoch); Unavailable past `give_up`."""
        while (e := self.directory.pick("scheduler", model)) is None:
            if self.stopping:
                raise self._stopping_error()
            if time.monotonic() >= give_up:
                raise Unavailable(f"the cluster did not answer: {why}; no scheduler took the "
                                  f"request again within {self.carry_s:g} s", retry_after=1.0)
            await asyncio.sleep(0.05)
        return e

    def _cancel_later(self, scheduler: str, request_id: str) -> None:
        # The stream's bus.cancel already stops it; this also covers a request the scheduler
        # admitted while the cancel was in flight. Runs detached: we may be inside a cancellation.
        async def cancel():
            with contextlib.suppress(BusError):
                await self.peers.call(scheduler, CancelRequest(request_id=request_id), timeout=5)
        task = asyncio.get_running_loop().create_task(cancel())
        self._cancels.add(task)
        task.add_done_callback(self._cancels.discard)

    def stop(self) -> None:
        """The gateway is stopping: every stream in flight ends now, with an error naming why
        (in the stream, when its 200 went out), instead of a connection cut."""
        self.stopping = self.feed.stopping = True
        self.peers.fail_all(ClientClosed("the gateway is stopping"))

    @staticmethod
    def _stopping_error() -> Unavailable:
        return Unavailable("the gateway is stopping (shut down or restarted): send the request "
                           "again", retry_after=1.0)

    async def close(self) -> None:
        """Let the cancels still in flight reach the scheduler (they time out in 5 s)."""
        await asyncio.gather(*self._cancels, return_exceptions=True)

    # ------------------------------------------------------------------ embeddings
    async def embed(self, request: Embed) -> Embeddings:
        """The scheduler's vectors for `request`, its inputs sent in parts that each fit one
        message header (gateway.embeddings.parts), all at once."""
        rid = request.request_id or "gw-" + uuid.uuid4().hex
        bodies = [dataclasses.replace(request, request_id=f"{rid}.{i}", **part)
                  for i, part in enumerate(parts(request.inputs, request.input_ids))]
        tasks = [asyncio.ensure_future(self._embed(b)) for b in bodies]
        try:
            got = await asyncio.gather(*tasks)
        finally:   # one part refused or failed (or the client left): the others end now
            for t in tasks:
                t.cancel()
        if len(got) == 1:
            return got[0]
        return Embeddings(request_id=rid, pooling=got[0].pooling,
                          vectors=wire.Tensor(np.concatenate([g.vectors.array() for g in got])),
                          prompt_tokens=[n for g in got for n in g.prompt_tokens])

    async def _embed(self, request: Embed) -> Embeddings:
        """Nothing of an embedding streams, so a scheduler lost under it (or stopping) is asked
        again from the start, of the one that serves next, up to carry_s."""
        return await self._ask("scheduler", request, SCHEDULER_LOST, EMBED_TIMEOUT)

    # ------------------------------------------------------------------ tokenizer calls
    async def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        reply = await self._tokenizer_call(Encode(text=text, add_special=add_special,
                                                  parse_special=parse_special))
        return list(reply.ids)

    async def render(self, messages: list[dict], tools: Tools | None = None,
                     template: str | None = None) -> list[int]:
        """The prompt's ids, for a count (the scheduler has a request's chat rendered itself)."""
        return list((await self._tokenizer_call(Render(
            messages=messages, template=template, tools=(tools.functions or None) if tools else None,
            assistant_prefix=tools.prefix if tools else ""))).ids)


    async def detokenize(self, ids: list[int]) -> str:
        return (await self._tokenizer_call(Decode(ids=ids, skip_special=False))).text

    async def _tokenizer_call(self, body):
        """A tokenizer's answer. One that dies or restarts under the call (or is between
        processes, or still loading) is waited for up to carry_s, as the scheduler waits for it."""
        return await self._ask("tokenizer", body, TOKENIZER_LOST, CALL_TIMEOUT,
                               self.metrics.tokenizer_retries)

    async def _ask(self, kind: str, body, lost: frozenset[str], timeout: float, retries=None):
        """The answer to `body` of a `kind` service of the served model. A call that fails
        with a code in `lost` (the service died, restarted, is between processes) is asked
        again of the one that serves next, up to carry_s from the first try; `retries`
        counts those."""
        card = self.model()
        give_up = time.monotonic() + self.carry_s
        why = f"no {kind} of the served model is ready"
        while True:
            if self.stopping:
                raise self._stopping_error()
            if (e := self.directory.pick(kind, card.identity)) is not None:
                try:
                    return await self.peers.call(e.name, body, timeout=timeout)
                except BusError as err:
                    if code_of(err) not in lost or time.monotonic() >= give_up:
                        raise from_bus(err) from None
                    why = f"{e.name} did not answer: {err}"
                    if retries is not None:
                        retries.inc()
            if time.monotonic() >= give_up:
                raise Unavailable(f"{why} (waited {self.carry_s:g} s)", retry_after=1.0)
            await asyncio.sleep(0.05)

    # ------------------------------------------------------------------ the cluster
    async def scheduler_stats(self) -> dict[str, float]:
        """The serving scheduler's stats, {} when none answers (a scrape must not fail)."""
        card = self.card
        sched = self.directory.pick("scheduler", card.identity if card else None)
        if sched is None:
            return {}
        try:
            return dict((await self.peers.call(sched.name, StatsRequest(), timeout=2.0)).stats)
        except BusError:
            return {}

    def missing(self) -> list[str]:
        card = self.card
        return health.missing(self.directory.live(), card.identity if card else None)

    async def cluster(self) -> dict[str, Any]:
        """The cluster now (gateway.cluster); `feed.changes()` is its live form."""
        return await self.feed.snapshot()

    def _serving(self) -> dict[str, Any]:
        card = self.card
        return {"model": None if card is None else {"id": card.id, "identity": card.identity},
                "missing": self.missing(), "gateway": self.directory.me}


def _with_id(request: Generate, request_id: str) -> Generate:
    return dataclasses.replace(request, request_id=request_id)
