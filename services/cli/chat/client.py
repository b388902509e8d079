"""Answers from a stack's scheduler, streamed as they are sampled.

The scheduler is followed by its heartbeats (a `Directory` of that one static peer), so a
stack that dies mid-answer ends the stream with a clear error instead of a hang. Each answer
gets a fresh directory: between answers the event loop sleeps at the prompt, and heartbeats
queued meanwhile would vouch for a scheduler that may have died since. The last answer's
directory closes in the background while the next answer streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass

import zmq.asyncio

from bus.client import RpcClient
from bus.config import BusConfig
from bus.curve import ClusterKey
from bus.directory import Directory
from bus.errors import (BusError, CallTimeout, PeerDead, PeerRestarted, RemoteError,
                        ServiceNotFound)
from bus.peers import Peers
from wire.failures import QUEUE_FULL, STARTING, failure
from wire.messages.scheduler import CancelRequest, Done, Generate, Started, Tokens

from .errors import ChatError, Refused, StackGone
from .target import Target

HANDSHAKE_TIMEOUT = 2.0
# Services heartbeat every 0.5 s and are dead after 3 misses; this client keeps that 1.5 s
# rule but looks ten times as often, so that closing its directory takes 0.1 s, not 0.5 s.
LOOK_EVERY = 0.05
DEAD_AFTER_MISSES = 30


@dataclass
class Answer:
    text: str = ""
    finish_reason: str = ""     # stop, length, repeated_line_loop, cancelled
    completion_tokens: int = 0
    max_tokens: int = 0         # after the scheduler clamped it to the context
    note: str = ""              # why max_tokens was clamped, if it was


@dataclass
class _Link:
    """The scheduler of one stack, as the bus knows it for one answer."""
    name: str
    directory: Directory
    peers: Peers

    async def close(self) -> None:
        await asyncio.gather(self.peers.close(), self.directory.stop())


class ChatClient:
    def __init__(self, ctx: zmq.asyncio.Context, key: ClusterKey | None = None):
        self.ctx = ctx
        self.key = key                  # the cluster's CURVE key, if it has one
        self.me = f"chat-{os.getpid()}"
        self._link: _Link | None = None
        self._closing: set[asyncio.Task] = set()
        self._known: tuple[Target, str, str] | None = None   # target, scheduler name, cluster

    async def ask(self, target: Target, request: Generate,
                  on_text: Callable[[str], None]) -> Answer:
        """Stream the answer to `request`, calling `on_text` with each new piece of text.

        Raises StackGone, Refused (typed refusals) or ChatError (a failed answer). Cancelling
        the calling task stops the stream, which tells the scheduler to drop the request.
        """
        self._retire()
        link = await self._connect(target)
        answer = Answer()
        try:
            entry = await link.directory.wait_for(link.name, HANDSHAKE_TIMEOUT + 1)
            if entry.state in ("draining", "stopped", "failed"):
                raise StackGone(f"the stack is shutting down ({link.name} is {entry.state})")
            async with contextlib.aclosing(link.peers.stream(link.name, request)) as events:
                async for ev in events:
                    if isinstance(ev, Started):
                        answer.max_tokens, answer.note = ev.max_tokens, ev.note
                    elif isinstance(ev, Tokens) and ev.text:
                        answer.text += ev.text
                        on_text(ev.text)
                    elif isinstance(ev, Done):
                        answer.finish_reason = ev.finish_reason
                        answer.completion_tokens = ev.completion_tokens
                        if ev.finish_reason == "failed":
                            raise ChatError(f"the answer failed: {ev.detail or 'no reason given'}")
                        return answer
            raise StackGone("the stack stopped in the middle of the answer")
        except RemoteError as e:
            raise refusal(e) from None
        except PeerDead:
            self._known = None
            raise StackGone(f"the llmbus stack at {target.scheduler} stopped (its scheduler went "
                            f"silent): is `llmbus up` still running?") from None
        except (ServiceNotFound, CallTimeout):
            self._known = None
            raise StackGone(f"the llmbus stack at {target.scheduler} does not answer: is "
                            f"`llmbus up` still running?") from None
        except PeerRestarted:
            raise StackGone("the scheduler restarted in the middle of the answer: ask again") \
                from None

    async def cancel(self, request_id: str) -> bool:
        """End `request_id` (of the last answer) on the scheduler and wait until it says so."""
        if self._link is None:
            return False
        try:
            reply = await self._link.peers.call(
                self._link.name, CancelRequest(request_id=request_id), timeout=HANDSHAKE_TIMEOUT)
            return reply.found
        except BusError:
            return False

    async def close(self) -> None:
        self._retire()
        await asyncio.gather(*self._closing)

    def _retire(self) -> None:
        """Close the last answer's link without waiting (closing a bus client takes ~0.2 s)."""
        link, self._link = self._link, None
        if link is not None:
            task = asyncio.get_running_loop().create_task(link.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _connect(self, target: Target) -> _Link:
        if self._known is None or self._known[0] != target:
            self._known = (target, *await self._hello(target))
        _, name, cluster = self._known
        directory = Directory(self.ctx, BusConfig(
            cluster=cluster, mdns=False, peers=(target.scheduler,),
            heartbeat_interval=LOOK_EVERY, heartbeat_misses=DEAD_AFTER_MISSES, key=self.key),
            me=self.me)
        self._link = _Link(name, directory, Peers(self.ctx, directory, me=self.me))
        await directory.start()
        return self._link

    async def _hello(self, target: Target) -> tuple[str, str]:
        """The scheduler's name and cluster, from who answers at its address."""
        client = RpcClient(self.ctx, f"tcp://{target.scheduler}", sender=self.me, key=self.key)
        try:
            w = await client.handshake(target.cluster or "any", HANDSHAKE_TIMEOUT)
        except BusError:
            keyed = ("; CURVE is on here: does the stack use this key file?" if self.key else
                     "; a stack with a CURVE key answers only with its --key-file")
            raise StackGone(f"nothing answers at {target.scheduler}: is `llmbus up` still "
                            f"running? (start one with `llmbus up`){keyed}") from None
        finally:
            await client.close()
        if w.kind != "scheduler":
            raise ChatError(f"{target.scheduler} is a {w.kind} ({w.name}), not a scheduler")
        if target.cluster and w.cluster != target.cluster:
            raise StackGone(f"{target.scheduler} now belongs to cluster {w.cluster!r}, not "
                            f"{target.cluster!r}: the stack has stopped")
        if w.state == "starting":
            raise Refused(STARTING, "the stack is still starting: ask again in a moment", 1.0)
        return w.name, w.cluster


def refusal(e: RemoteError) -> Refused:
    """A scheduler's typed error as one line that says what to do."""
    if e.code == QUEUE_FULL:
        wait = f"try again in {e.retry_after:g} s" if e.retry_after else "try again later"
        return Refused(e.code, f"the stack is busy (queue_full: {e.message}): {wait}",
                       e.retry_after)
    if failure(e.code).retry:
        return Refused(e.code, f"{e.code}: {e.message}: try again in {e.retry_after or 1:g} s",
                       e.retry_after)
    return Refused(e.code, f"{e.code}: {e.message}", e.retry_after)
