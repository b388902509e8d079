"""One request's events gathered into what every protocol reports (text, tokens, logprobs,
counts, timings, why it ended), and several requests' streams merged into one (OpenAI `n`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from wire.messages.scheduler import Done, Started, Tokens

from .errors import UpstreamFailed, failed_in_cluster


@dataclass
class Result:
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_ids: list[list[int]] = field(default_factory=list)
    top_logprobs: list[list[float]] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None   # the scheduler's: stop, length, repeated_line_loop, cancelled
    stop_string: str | None = None
    started_at: float = field(default_factory=time.perf_counter)
    first_token_at: float | None = None
    done_at: float | None = None

    def add(self, ev: Any) -> None:
        """Take one scheduler event; a request that failed raises its GatewayError."""
        if isinstance(ev, Started):
            self.prompt_tokens = ev.prompt_tokens
        elif isinstance(ev, Tokens):
            if self.first_token_at is None:
                self.first_token_at = time.perf_counter()
            self.text += ev.text
            self.token_ids += ev.token_ids
            self.logprobs += ev.logprobs
            self.top_ids += ev.top_ids
            self.top_logprobs += ev.top_logprobs
        elif isinstance(ev, Done):
            self.done_at = time.perf_counter()
            if ev.finish_reason == "failed":
                raise failed_in_cluster(ev.code, ev.detail)
            self.finish_reason = ev.finish_reason
            self.stop_string = ev.stop_string
            self.prompt_tokens = ev.prompt_tokens
            self.completion_tokens = ev.completion_tokens

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def length_limited(self) -> bool:
        return self.finish_reason == "length"


async def collect(events: AsyncIterator[Any]) -> Result:
    """Run one request to its end."""
    res = Result()
    async with contextlib.aclosing(events) as evs:
        async for ev in evs:
            res.add(ev)
    if not res.done:
        raise UpstreamFailed("the scheduler ended the stream without saying why")
    return res


async def collect_all(streams: list[AsyncIterator[Any]]) -> list[Result]:
    """Run several requests at once; the first failure cancels the others."""
    tasks = [asyncio.ensure_future(collect(s)) for s in streams]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def merged(streams: list[AsyncIterator[Any]]) -> AsyncIterator[tuple[int, Any]]:
    """The events of several streams as they come, tagged by the stream's index; closing
    this closes them all."""
    if len(streams) == 1:      # the common case needs no tasks
        async with contextlib.aclosing(streams[0]) as evs:
            async for ev in evs:
                yield 0, ev
        return
    queue: asyncio.Queue = asyncio.Queue()
    end = object()

    async def pump(i: int, s: AsyncIterator[Any]) -> None:
        try:
            async with contextlib.aclosing(s) as evs:
                async for ev in evs:
                    await queue.put((i, ev))
            await queue.put((i, end))
        except Exception as e:  # handed to the reader, which raises it in order
            await queue.put((i, e))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        open_streams = len(tasks)
        while open_streams:
            i, ev = await queue.get()
            if ev is end:
                open_streams -= 1
            elif isinstance(ev, Exception):
                raise ev
            else:
                yield i, ev
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def admitted(events: AsyncIterator[tuple[int, Any]],
                   results: list[Result]) -> AsyncIterator[tuple[int, Any]]:
    """Read `events` until every request was admitted (or ended), so that a refusal (a full
    queue, a bad field) raises here, before a 200 and a stream begin. Returns all the events,
    those read included; each goes into `results[i]` on the way."""
    seen: list[tuple[int, Any]] = []
    pending = set(range(len(results)))
    while pending:
        try:
            i, ev = await events.__anext__()
        except StopAsyncIteration:
            break
        results[i].add(ev)
        seen.append((i, ev))
        if isinstance(ev, (Started, Done)):
            pending.discard(i)

    async def replay():
        for item in seen:
            yield item
        async for i, ev in events:
            results[i].add(ev)
            yield i, ev
        if not all(r.done for r in results):
            raise UpstreamFailed("the scheduler ended a stream without saying why")

    return replay()
