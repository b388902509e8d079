"""A batch's call into the shard pipeline, answered by the last shard straight to the caller.

The caller sends `shard.forward` to the first shard, naming itself in `Forward.reply_to` with a
key for the call; the first shard answers `shard.handed_on` once it has handed the batch on, and
the answer comes as a one-way `shard.result` from the last shard (wire.messages.shard). On a route
of one stage the first shard is the last, and its `shard.result` is its reply. A stage
whose next stage fails the batch, or cannot be reached, tells the caller with `shard.failed`.
Each call ends in one of:

- the result, taken only from the last shard of its route, in the epoch the route names;
- the typed error of a stage (its own answer, or a `shard.failed` from a stage of the route);
- PeerDead or PeerRestarted when a stage of the route stops heartbeating or restarts;
- CallTimeout at the time limit.

A service that calls pipelines mixes `AnswerInbox` in: it hands the one-way messages to its
`answers`. `PipelineClient` is the bare such service: `llmbus generate` and tests drive shards
with it as the scheduler does.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import wire
from bus.dispatch import receives
from bus.service import Service
from bus.errors import CallTimeout, PeerDead, PeerRestarted, RemoteError
from wire.failures import BAD_REPLY
from wire.messages.bus import Probe
from wire.messages.shard import Forward, ForwardFailed, ForwardResult, HandedOn, ReplyTo

Call = Callable[[str, Forward, float], Awaitable[object]]


@dataclass
class _Waiting:
    answer: asyncio.Future
    route: dict[str, int]          # name -> epoch of every stage
    last: str


class Answers:
    def __init__(self, name: str, call: Call, epoch: int = 0):
        self.name = name               # the caller's service name: where results are sent
        self.epoch = epoch             # its run, whose page tables the shards' KV follows
        self._call = call              # (shard, body, timeout) -> the shard's reply
        # Keys name calls across restarts of this service too (a late result of an earlier
        # process, sent to the same name, must not answer a call of this one).
        self._keys = itertools.count(time.time_ns())
        self._waiting: dict[int, _Waiting] = {}
        self.counters: Counter[str] = Counter()

    async def forward(self, first: str, body: Forward, timeout: float) -> ForwardResult:
        """Send `body` to `first` and return the last shard's result, or raise the error that
        ended the batch."""
        key = next(self._keys)
        loop = asyncio.get_running_loop()
        w = _Waiting(loop.create_future(), {s.name: s.epoch for s in body.route}, body.route[-1].name)
        self._waiting[key] = w
        body = wire.evolve(body, reply_to=ReplyTo(self.name, key, self.epoch), sent_at=time.time())
        timer = loop.call_later(timeout, self._expire, w, body, timeout)
        try:
            # The first stage answers once it has handed the batch on, well before the last
            # shard can: its call runs in this task (no second task to wake on the way out).
            try:
                reply = await self._call(first, body, timeout)
            except Exception:
                if w.answer.done() and not w.answer.cancelled() and w.answer.exception() is None:
                    self.counters["first_failed_after_answer"] += 1
                    return w.answer.result()
                if not w.answer.done():
                    w.answer.cancel()
                raise
            if isinstance(reply, ForwardResult) and len(body.route) == 1 and reply.key == key:
                return reply          # a route of one stage: the last shard answered our call
            if not isinstance(reply, HandedOn):
                raise RemoteError(BAD_REPLY, f"{first} answered a forward with "
                                  f"{type(reply).__name__}", peer=first)
            return await w.answer
        finally:
            timer.cancel()
            self._waiting.pop(key, None)

    def _expire(self, w: _Waiting, body: Forward, timeout: float) -> None:
        if not w.answer.done():
            w.answer.set_exception(CallTimeout(
                f"{body.route[0].name}: no answer to batch {body.batch_id} within {timeout:g}s"))

    def _stage(self, key: int, sender: str, epoch: int) -> _Waiting | None:
        """The waiting call `key`, if (sender, epoch) is a stage of its route."""
        w = self._waiting.get(key)
        if w is None or w.answer.done():
            self.counters["late"] += 1           # answered already, or the call ended
            return None
        if w.route.get(sender) != epoch:
            self.counters["refused"] += 1        # not a process the batch went through
            return None
        return w

    def received(self, sender: str, epoch: int, result: ForwardResult) -> None:
        """A `shard.result` from the process (sender, epoch)."""
        w = self._stage(result.key, sender, epoch)
        if w is None:
            return
        if sender != w.last:
            self.counters["refused"] += 1
            return
        w.answer.set_result(result)

    def failed(self, sender: str, epoch: int, failure: ForwardFailed) -> None:
        """A `shard.failed` from the process (sender, epoch)."""
        w = self._stage(failure.key, sender, epoch)
        if w is not None:
            self.counters[f"failed.{failure.code}"] += 1
            w.answer.set_exception(RemoteError(failure.code, failure.message,
                                               failure.retry_after or None, failure.stage))

    def lost(self, name: str, epoch: int | None) -> None:
        """The stage `name` stopped heartbeating (epoch None) or runs `epoch` now: the calls
        through an older process of it end (no answer will come from that process)."""
        for w in list(self._waiting.values()):
            was = w.route.get(name)
            if was is None or w.answer.done() or (epoch is not None and epoch <= was):
                continue
            self.counters["lost_stage"] += 1
            w.answer.set_exception(
                PeerDead(f"{name} stopped heartbeating (epoch {was})") if epoch is None else
                PeerRestarted(f"{name} was replaced (epoch {was} -> {epoch})"))

    def stats(self) -> dict[str, int]:
        return {f"answers.{k}": v for k, v in self.counters.items()}


class AnswerInbox:
    """Mixin of a bus Service that calls pipelines: its `answers` get the one-way results and
    failures, and hear of the stages its directory loses. Call `watch_stages()` once its
    directory runs."""

    answers: Answers

    @receives(ForwardResult)
    def _result(self, msg: wire.Message) -> None:
        self.answers.received(msg.sender, msg.epoch, msg.body)

    @receives(ForwardFailed)
    def _failed(self, msg: wire.Message) -> None:
        self.answers.failed(msg.sender, msg.epoch, msg.body)

    def watch_stages(self) -> None:
        self.directory.on_expire.append(lambda entry: self.answers.lost(entry.name, None))
        self.directory.on_replaced.append(lambda old, new: self.answers.lost(new.name, new.epoch))


class PipelineClient(AnswerInbox, Service):
    """A service that sends batches down a pipeline of shards and takes their answers; its
    config must discover peers (the shards find it as it finds them)."""

    kind = "client"

    def __init__(self, config, ctx=None):
        super().__init__(config, ctx)
        self.answers = Answers(config.name, self._call, self.epoch)

    async def on_start(self) -> None:
        self.watch_stages()

    async def _call(self, shard: str, body, timeout: float):
        return await self.peers.call(shard, body, timeout=timeout)

    async def reached_by(self, shard: str, timeout: float = 60.0) -> None:
        """Wait until `shard` finds this service and calls it (bus.probe): the path its answers
        take. Raises the last failure past `timeout`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                await self.peers.call(shard, Probe(target=self.name, timeout=2.0), timeout=3.0)
                return
            except Exception:
                if loop.time() >= deadline:
                    raise
                await asyncio.sleep(0.1)
