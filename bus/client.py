"""Request/reply to one peer over a DEALER socket, matched by id, with deadlines and epochs.

The client survives the peer restarting: ZeroMQ reconnects the socket, the first reply (or a
handshake) from the new epoch moves `peer_epoch` forward, calls sent to the old epoch fail with
PeerRestarted, and any reply that still arrives from an old epoch is dropped and counted.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import zmq
import zmq.asyncio

import wire
from wire.errors import Oversized
from wire.failures import BAD_REPLY
from wire.messages.bus import Cancel, Error, Hello, StreamEnd, Welcome

from .errors import (BadReply, BusError, CallTimeout, ClientClosed, MessageTooLarge, PeerRestarted,
                     RemoteError)
from .idle import IdleWatch
from .curve import ClusterKey
from .sockets import CONTROL, SocketLimits, make_socket

_ids = itertools.count(1)


class _StreamWaiter:
    """Collects the replies of one streamed call; quacks like the Future a plain call waits on."""

    def __init__(self):
        self.queue: asyncio.Queue = asyncio.Queue()
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, msg: wire.Message) -> None:
        if isinstance(msg.body, (StreamEnd, Error)):
            self._done = True
        self.queue.put_nowait(msg)

    def set_exception(self, exc: BaseException) -> None:
        self._done = True
        self.queue.put_nowait(exc)


async def _raised(e: BaseException) -> Any:
    raise e


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(asyncio.TimeoutError())


class RpcClient:
    """Calls one peer. `limits` must match the peer's request socket (sockets.limits_for_kind):
    a request with a frame over them is refused here, as the peer would drop it unread.
    With the cluster `key` it speaks CURVE, and a peer without that key never answers."""

    def __init__(self, ctx: zmq.asyncio.Context, endpoint: str, sender: str = "client",
                 sender_epoch: int = 0, name: str = "", limits: SocketLimits = CONTROL,
                 key: ClusterKey | None = None):
        self.ctx = ctx
        self.endpoint = endpoint
        self.sender = sender
        self.sender_epoch = sender_epoch or time.time_ns()
        self.name = name or endpoint
        self.peer_epoch = 0
        self.stale_dropped = 0
        self.bad_frames = 0
        self._pending: dict[int, tuple[asyncio.Future, int]] = {}  # id -> (future, epoch sent to)
        self.limits = limits
        self._sock = make_socket(ctx, zmq.DEALER, limits, key)
        self._sock.connect(endpoint)
        self._closed = False
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def call(self, body: Any, timeout: float = 5.0, epoch: int = 0) -> Any:
        """Send a request, await its reply body; raises RemoteError, CallTimeout, PeerRestarted,
        MessageTooLarge, BadReply, ClientClosed. `epoch`: the peer's epoch the caller addresses,
        where it knows of a restart this client has not seen yet (a route planned by a service
        that has): an answer from that epoch is then the answer, not news of a restart."""
        return await self.start_call(body, timeout, epoch)

    def start_call(self, body: Any, timeout: float = 5.0, epoch: int = 0) -> Awaitable[Any]:
        """`call` in two parts: the request is queued on the socket before this returns, and the
        awaitable returned gives its reply body or raises what `call` raises (a request that
        could not be sent too). For a caller whose next stage must not wait for a turn of the
        event loop, as a shard handing a batch on. Await it, or the call stays pending."""
        try:
            self._check_open()
            mid = next(_ids)
            deadline = time.time() + timeout
            frames = self._encode(wire.Message(body=body, id=mid, sender=self.sender,
                                               epoch=self.sender_epoch, deadline=deadline))
        except BusError as e:
            return _raised(e)
        fut = asyncio.get_running_loop().create_future()
        self._pending[mid] = (fut, max(self.peer_epoch, epoch))
        return self._reply(mid, fut, self._sock.send_multipart(frames, copy=False), timeout, body)

    async def _reply(self, mid: int, fut: asyncio.Future, sent: asyncio.Future, timeout: float,
                     body: Any) -> Any:
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            await self._sent_within(sent, timeout, body)
            # A timer on the future itself, not asyncio.wait_for: wait_for wakes this task
            # through a second future, two more turns of the loop per reply (~0.1 ms a call
            # on a busy machine, on every hop of a decode step).
            timer = loop.call_later(max(0.0, timeout - (loop.time() - start)), _expire, fut)
            try:
                reply = await fut
            finally:
                timer.cancel()
        except CallTimeout:
            raise
        except asyncio.TimeoutError:
            raise CallTimeout(f"{self.name}: no reply to {type(body).TYPE} within {timeout:g}s") from None
        finally:
            self._pending.pop(mid, None)
        if isinstance(reply.body, Error):
            raise RemoteError(reply.body.code, reply.body.message, reply.body.retry_after, self.name)
        return reply.body

    def tell(self, body: Any) -> bool:
        """Send a one-way message (the peer handles it with `dispatch.receives` and answers
        nothing). Never waits: False when the socket takes nothing now (no pipe to the peer, or
        its queue is full), and the message is dropped. MessageTooLarge as `call`."""
        self._check_open()
        return self._send_now(self._encode(wire.Message(body=body, id=next(_ids), sender=self.sender,
                                                        epoch=self.sender_epoch)))

    def _send_now(self, frames: list) -> bool:
        """Queue frames without waiting: False when the socket takes nothing now."""
        try:
            sent = self._sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        except zmq.ZMQError:
            return False
        if sent.done():
            return not sent.cancelled() and sent.exception() is None
        sent.add_done_callback(lambda f: f.cancelled() or f.exception())
        return True

    async def stream(self, body: Any, idle_timeout: float | None = None) -> AsyncIterator[Any]:
        """Send a request to a streaming handler and yield each reply body as it comes.

        Ends at the handler's end; raises RemoteError, PeerRestarted, PeerDead, or CallTimeout
        when nothing came for `idle_timeout` seconds. Closing the generator early (use
        `contextlib.aclosing`, or cancel the task) tells the service to stop the handler.
        """
        self._check_open()
        mid = next(_ids)
        frames = self._encode(wire.Message(body=body, id=mid, sender=self.sender,
                                           epoch=self.sender_epoch))
        waiter = _StreamWaiter()
        self._pending[mid] = (waiter, self.peer_epoch)
        idle = IdleWatch(idle_timeout) if idle_timeout is not None else None
        try:
            sent = self._sock.send_multipart(frames, copy=False)
            await self._sent_within(sent, idle_timeout, body)
            while True:
                try:
                    if idle is not None:
                        idle.waiting()
                    item = await waiter.queue.get()
                except asyncio.CancelledError:
                    if idle is None or not idle.fired:
                        raise                  # the caller cancelled, or its task is stopping
                    asyncio.current_task().uncancel()
                    raise CallTimeout(f"{self.name}: {type(body).TYPE} stream silent for "
                                      f"{idle_timeout:g}s") from None
                if idle is not None:
                    idle.got()
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item.body, StreamEnd):
                    return
                if isinstance(item.body, Error):
                    e = item.body
                    raise RemoteError(e.code, e.message, e.retry_after, self.name)
                yield item.body
        finally:
            if idle is not None:
                idle.close()
            self._pending.pop(mid, None)
            if not waiter.done() and not self._closed:
                self._send_cancel(mid)

    async def _sent_within(self, sent: asyncio.Future, timeout: float | None, body: Any) -> None:
        """Wait for a queued request (`sent`, from send_multipart) to be taken, or raise
        CallTimeout when the socket takes nothing for `timeout` s.

        A DEALER takes a message at once while it has a pipe to the peer with room. It has none
        once the peer refused this client's CURVE handshake (libzmq drops the pipe and does not
        reconnect), or while the peer's queue is full: a plain await would then wait forever,
        past the call's deadline."""
        if sent.done():
            sent.result()
            return
        try:
            await asyncio.wait_for(sent, timeout)
        except asyncio.TimeoutError:
            raise CallTimeout(f"{self.name}: {type(body).TYPE} not sent within {timeout:g}s: the "
                              f"peer takes no messages (its queue is full, or it refused this "
                              f"client's key)") from None

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed(f"{self.name}: the client is closed")

    def _encode(self, msg: wire.Message) -> list:
        try:
            return wire.encode(msg, max_frame_bytes=self.limits.max_msg_size)
        except Oversized as e:
            raise MessageTooLarge(f"{self.name}: {msg.type} not sent: {e}") from None

    def _send_cancel(self, mid: int) -> None:
        cancel = wire.Message(body=Cancel(id=mid), id=next(_ids), sender=self.sender,
                              epoch=self.sender_epoch)
        self._send_now(wire.encode(cancel))   # best effort, never blocking: runs in finally blocks

    async def handshake(self, cluster: str, timeout: float = 2.0) -> Welcome:
        welcome = await self.call(Hello(cluster=cluster), timeout)
        if not isinstance(welcome, Welcome):
            raise RemoteError(BAD_REPLY, f"handshake answered with {type(welcome).TYPE}", peer=self.name)
        self.saw_epoch(welcome.epoch)
        return welcome

    def saw_epoch(self, epoch: int) -> None:
        """The peer is known to run `epoch` now: calls sent to an older epoch will never return."""
        if epoch <= self.peer_epoch:
            return
        previous, self.peer_epoch = self.peer_epoch, epoch
        if previous == 0:
            return
        for fut, sent_to in list(self._pending.values()):
            if sent_to and sent_to < epoch and not fut.done():
                fut.set_exception(PeerRestarted(f"{self.name} restarted (epoch {sent_to} -> {epoch})"))

    def fail_pending_before(self, epoch: int, exc: Exception) -> None:
        """End with `exc` every call in flight that was not sent to `epoch` or a later one."""
        for fut, sent_to in list(self._pending.values()):
            if sent_to < epoch and not fut.done():
                fut.set_exception(exc)

    def fail_pending(self, exc: Exception) -> None:
        """End every call in flight with `exc` (the peer is known dead)."""
        for fut, _ in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(exc)

    async def _read(self) -> None:
        # A plain receive, no poll first: a poll costs as much again per reply. The task is never
        # cancelled; close() closes the socket, which cancels a receive still waiting (none was
        # taken off the socket) and lets one already done be read to the end.
        while not self._closed:
            try:
                frames = await self._sock.recv_multipart(copy=False)
            except (zmq.ZMQError, asyncio.CancelledError):
                if self._closed:
                    return
                raise
            try:
                msg = wire.decode(frames)
            except wire.BadFrame as e:
                self.bad_frames += 1
                self._fail_undecodable(e)
                continue
            if self.peer_epoch and msg.epoch < self.peer_epoch:
                self.stale_dropped += 1
                continue
            self.saw_epoch(msg.epoch)
            entry = self._pending.get(msg.id)
            if entry is None or entry[0].done():
                self.stale_dropped += 1  # a reply for a call that already timed out
                continue
            entry[0].set_result(msg)

    def _fail_undecodable(self, e: wire.BadFrame) -> None:
        # A sound header names the call it answers: fail that call now rather than at its timeout.
        entry = self._pending.get(e.msg_id) if e.msg_id else None
        if entry is not None and not entry[0].done():
            entry[0].set_exception(BadReply(f"{self.name}: reply to call {e.msg_id} "
                                            f"cannot be decoded ({e})"))

    async def close(self) -> None:
        """Close the socket; every call in flight ends with ClientClosed."""
        if self._closed:
            return
        self._closed = True
        for fut, _ in self._pending.values():
            if not fut.done():
                fut.set_exception(ClientClosed(f"{self.name}: the client was closed during the call"))
        self._sock.close(linger=0)   # ends the reader's receive
        await asyncio.gather(self._reader, return_exceptions=True)

    async def __aenter__(self) -> "RpcClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
