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

from bus.directory import Directory
from bus.errors import BusError
from bus.peers import Peers
from services.tokenizer.client import fetch_model
from wire.messages.scheduler import CancelRequest, Done, Generate, Started, StatsRequest, Tokens
from wire.messages.tokenizer import Decode, Encode, Render

from . import health
from .errors import NotFound, Unavailable, from_bus
from .metrics import Metrics
from .model import ModelCard
from .tools import Tools

log = logging.getLogger("llmbus.gateway")

CALL_TIMEOUT = 30.0


class Backend:
    def __init__(self, directory: Directory, peers: Peers, stream_idle_timeout: float,
                 metrics: Metrics):
        self.directory = directory
        self.peers = peers
        self.stream_idle_timeout = stream_idle_timeout
        self.metrics = metrics
        self.card: ModelCard | None = None
        self._cancels: set[asyncio.Task] = set()    # scheduler.cancel calls still in flight

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
        """The scheduler's events for one request (Started, Tokens..., Done).

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
        finished = False
        started, admitted, token_events = time.perf_counter(), None, []
        try:
            async with contextlib.aclosing(self.peers.stream(
                    sched.name, request, wait=CALL_TIMEOUT,
                    idle_timeout=self.stream_idle_timeout)) as events:
                async for ev in events:
                    if isinstance(ev, Tokens) and ev.token_ids:
                        token_events.append((time.perf_counter(), len(ev.token_ids)))
                    elif isinstance(ev, Started):
                        admitted = time.perf_counter()
                    elif isinstance(ev, Done):
                        self.metrics.generation(started, admitted, token_events, ev.prompt_tokens,
                                                ev.completion_tokens, ev.finish_reason,
                                                time.perf_counter())
                    yield ev
            finished = True
        except BusError as e:
            finished = True
            raise from_bus(e) from None
        finally:
            if not finished:
                self._cancel_later(sched.name, request.request_id)

    def _cancel_later(self, scheduler: str, request_id: str) -> None:
        # The stream's bus.cancel already stops it; this also covers a request the scheduler
        # admitted while the cancel was in flight. Runs detached: we may be inside a cancellation.
        async def cancel():
            with contextlib.suppress(BusError):
                await self.peers.call(scheduler, CancelRequest(request_id=request_id), timeout=5)
        task = asyncio.get_running_loop().create_task(cancel())
        self._cancels.add(task)
        task.add_done_callback(self._cancels.discard)

    async def close(self) -> None:
        """Let the cancels still in flight reach the scheduler (they time out in 5 s)."""
        await asyncio.gather(*self._cancels, return_exceptions=True)

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
        card = self.model()
        tok = self.directory.pick("tokenizer", card.identity)
        if tok is None:
            raise Unavailable("no tokenizer of the served model is live", retry_after=1.0)
        try:
            return await self.peers.call(tok.name, body, timeout=CALL_TIMEOUT)
        except BusError as e:
            raise from_bus(e) from None

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

    def cluster(self) -> dict[str, Any]:
        view = health.cluster_view(self.directory.live(), time.monotonic())
        card = self.card
        view["model"] = None if card is None else {"id": card.id, "identity": card.identity}
        view["missing"] = self.missing()
        return view


def _with_id(request: Generate, request_id: str) -> Generate:
    return dataclasses.replace(request, request_id=request_id)
