"""A batch's call into the shard pipeline, answered by the last shard straight to the scheduler.

Through a chain of calls, the answer of a 3-stage pipeline comes back in three messages, each
decoded and sent on by a stage (on one machine, 2.3 ms of a 15 ms decode step). Here the
scheduler names itself in `Forward.reply_to` and the last shard sends its answer as a one-way
`shard.result` (wire.messages.shard), in two modes:

- both ways: the same answer also travels back along the chain, and the call ends with whichever
  comes first. Failures travel the chain as always. A batch goes this way while its last shard
  (name and epoch) has not yet been heard from straight: it proves that shard reaches us.
- `only`: each stage answers its caller with `shard.handed_on` once it has handed the batch on,
  so nothing comes back along the chain but the errors of a stage itself. A stage whose next
  stage fails the batch, or cannot be reached, tells us with `shard.failed` (the error the chain
  would have carried). A stage of the route that stops heartbeating or restarts ends the call as
  the chain would have (PeerDead, PeerRestarted), and so does the time limit (CallTimeout).

A result or failure is taken only from a process of the batch's route (name and epoch), for a
call still waiting. A call that ran out of time, or whose last shard could not reach us, makes
the next batches go both ways again until that shard is heard from straight.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import wire
from bus.errors import CallTimeout, PeerDead, PeerRestarted, RemoteError
from wire.failures import UNREACHABLE
from wire.messages.shard import (Forward, ForwardFailed, ForwardReply, ForwardResult, HandedOn,
                                 ReplyTo)

Call = Callable[[str, Forward, float], Awaitable[object]]
# (route names, the answer, ms from sending to the answer): the hop figures of an `only` batch,
# whose chain brings none back.
OnAnswer = Callable[[list[str], ForwardReply, float], None]


@dataclass
class _Waiting:
    answer: asyncio.Future
    route: dict[str, int]          # name -> epoch of every stage
    last: str
    only: bool
    sent: float = field(default_factory=time.perf_counter)


class DirectReplies:
    def __init__(self, name: str, chain: Call, on_answer: OnAnswer = lambda r, a, ms: None):
        self.name = name               # this service: where results are sent
        self._chain = chain            # the call to the first shard
        self._on_answer = on_answer
        # Keys name calls across restarts of this service too (a late result of an earlier
        # process, sent to the same name, must not answer a call of this one).
        self._keys = itertools.count(time.time_ns())
        self._waiting: dict[int, _Waiting] = {}
        self._heard: dict[str, int] = {}         # last shard -> the epoch heard from straight
        self._chains: set[asyncio.Task] = set()  # chain calls still running
        self.counters: Counter[str] = Counter()

    async def call(self, first: str, body: Forward, timeout: float) -> ForwardReply:
        """Send `body` to `first` and return the batch's answer, or raise the error the chain
        of calls would have raised. A route of one stage is one call: nothing to gain."""
        if len(body.route) < 2:
            return await self._chain(first, body, timeout)
        key = next(self._keys)
        last = body.route[-1]
        only = self._heard.get(last.name) == last.epoch and not body.return_logits
        loop = asyncio.get_running_loop()
        w = _Waiting(loop.create_future(), {s.name: s.epoch for s in body.route}, last.name, only)
        self._waiting[key] = w
        body = wire.evolve(body, reply_to=ReplyTo(self.name, key, only), sent_at=time.time())
        try:
            if only:
                answer = await self._only(w, first, body, timeout)
            else:
                answer = await self._both_ways(w, first, body, timeout)
        except (CallTimeout, RemoteError) as e:
            if isinstance(e, CallTimeout) or e.code == UNREACHABLE:
                self._heard.pop(last.name, None)   # both ways again until heard from straight
            raise
        finally:
            self._waiting.pop(key, None)
        if only:
            self._on_answer(list(w.route), answer, (time.perf_counter() - w.sent) * 1e3)
        return answer

    async def _only(self, w: _Waiting, first: str, body: Forward, timeout: float) -> ForwardReply:
        # The first stage answers once it has handed the batch on, well before the last shard
        # can: its call runs in this task (no second task to wake on the way out), then the
        # answer is awaited.
        loop = asyncio.get_running_loop()
        timer = loop.call_later(timeout, self._expire, w, body, timeout)
        try:
            try:
                reply = await self._chain(first, body, timeout)
            except Exception:
                if w.answer.done() and not w.answer.cancelled() and w.answer.exception() is None:
                    self.counters["chain_failed_after_answer"] += 1
                    return w.answer.result()
                if not w.answer.done():
                    w.answer.cancel()
                raise
            if not isinstance(reply, HandedOn):   # a stage of an older version answered
                self.counters["answered_by_chain"] += 1
                return reply
            self.counters["handed_on"] += 1
            return await w.answer
        finally:
            timer.cancel()

    async def _both_ways(self, w: _Waiting, first: str, body: Forward, timeout: float) -> ForwardReply:
        loop = asyncio.get_running_loop()
        chain = loop.create_task(self._chain(first, body, timeout))
        self._chains.add(chain)
        chain.add_done_callback(lambda task: self._chain_ended(w, task))
        try:
            return await w.answer
        except asyncio.CancelledError:
            chain.cancel()
            raise

    def _chain_ended(self, w: _Waiting, chain: asyncio.Task) -> None:
        self._chains.discard(chain)
        if chain.cancelled():
            if not w.answer.done():
                w.answer.cancel()
            return
        error = chain.exception()
        reply = None if error is not None else chain.result()
        if w.answer.done():   # answered straight (or the caller gave up) first
            self.counters["chain_failed_after_answer" if error else "answered_straight"] += 1
        elif error is not None:
            w.answer.set_exception(error)
        elif isinstance(reply, HandedOn):
            self.counters["handed_on"] += 1      # the answer comes straight
        else:
            self.counters["answered_by_chain"] += 1
            w.answer.set_result(reply)

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
        self._heard[sender] = epoch
        w.answer.set_result(result)

    def failed(self, sender: str, epoch: int, failure: ForwardFailed) -> None:
        """A `shard.failed` from the process (sender, epoch)."""
        w = self._stage(failure.key, sender, epoch)
        if w is not None:
            self.counters[f"failed.{failure.code}"] += 1
            w.answer.set_exception(RemoteError(failure.code, failure.message,
                                               failure.retry_after or None, failure.stage))

    def lost(self, name: str, epoch: int | None) -> None:
        """The stage `name` stopped heartbeating (epoch None) or runs `epoch` now: the `only`
        calls through an older process of it end as the chain's call to it would have."""
        for w in list(self._waiting.values()):
            was = w.route.get(name)
            if not w.only or was is None or w.answer.done() or (epoch is not None and epoch <= was):
                continue
            self.counters["lost_stage"] += 1
            w.answer.set_exception(
                PeerDead(f"{name} stopped heartbeating (epoch {was})") if epoch is None else
                PeerRestarted(f"{name} was replaced (epoch {was} -> {epoch})"))

    def stats(self) -> dict[str, int]:
        return {f"direct.{k}": v for k, v in self.counters.items()}

    async def close(self) -> None:
        """Cancel the chain calls still running (their batches were answered or given up)."""
        for task in list(self._chains):
            task.cancel()
        await asyncio.gather(*self._chains, return_exceptions=True)
