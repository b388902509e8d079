"""A service's request loop: one reader on the ROUTER, a cap on requests at once, dispatch by
message type, streamed replies, and every send (a reply too large to send becomes a typed error).
"""

from __future__ import annotations

import asyncio
import logging
import time

import zmq

import wire
from wire.errors import Oversized
from wire.failures import BUSY, DEADLINE_EXCEEDED, DRAINING, INTERNAL, TOO_LARGE, UNKNOWN_METHOD
from wire.messages.bus import Cancel, Error, StreamEnd

from . import eager
from .bus_methods import ALWAYS
from .dispatch import Handler, is_eager, is_one_way, is_stream
from .errors import BusError, ServiceError, code_of

log = logging.getLogger("llmbus.bus")

# A refused caller retries after about this long: requests here take milliseconds to seconds,
# and a short hint spreads retries without idling a service that frees up fast.
BUSY_RETRY_AFTER = 0.5


class _Gone(Exception):
    """The caller of a stream is unreachable (its connection closed): stop producing."""


class RequestLoop:
    """Mixin of Service: serves `_router` with the `_handlers` table.

    Uses the service's name, epoch, state, counters, progress, config.max_requests and
    `_request_limits`; tracks every handler task in `_inflight`, those under the cap in `_capped`,
    and streams by (caller, id) in `_streams`.
    """

    async def _read_requests(self) -> None:
        # One reader per socket, a plain receive (a poll first costs as much again per request).
        # It is cancelled only at shutdown, past the drain: a request it would drop then is one
        # that closing the socket would drop unread.
        while True:
            frames = await self._router.recv_multipart(copy=False)
            ident, rest = frames[0].bytes, frames[1:]
            try:
                msg = wire.decode(rest)
            except wire.BadFrame as e:
                self.counters["bad_frames"] += 1
                self.counters[f"bad_frames.{e.reason}"] += 1
                await self._send(ident, wire.Message(Error(code=e.code, message=str(e)[:500]),
                                                     id=e.msg_id, sender=self.name,
                                                     epoch=self.epoch))
                continue
            self.counters["requests"] += 1
            if isinstance(msg.body, Cancel):
                self._cancel_stream(ident, msg.body.id)
                continue
            handler = self._handlers.get(msg.type)
            if is_one_way(handler):   # answered by nothing, so never refused as busy
                self._receive(handler, msg)
                continue
            counted = msg.type not in ALWAYS
            if counted and len(self._capped) >= self.config.max_requests:
                self.counters[f"errors.{BUSY}"] += 1
                await self._send(ident, msg.reply(Error(
                    code=BUSY, message=f"{self.name} is at its limit of {len(self._capped)} "
                    "requests at once: retry later", retry_after=BUSY_RETRY_AFTER),
                    self.name, self.epoch))
                continue
            serve = self._serve(ident, msg)
            if not is_eager(handler):
                task = asyncio.get_running_loop().create_task(serve)
            elif (task := eager.start(serve)) is None:
                continue   # answered in its first step
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
            if counted:
                self._capped.add(task)
                task.add_done_callback(self._capped.discard)

    def _receive(self, handler: Handler, msg: wire.Message) -> None:
        """A one-way message, handled here on the reader (see dispatch.receives)."""
        try:
            handler(self, msg)
            self.progress += 1
        except Exception:   # a handler bug: nobody waits for an answer, so say it in the log
            self.counters["errors.one_way"] += 1
            log.exception("%s: handling one-way %s failed", self.name, msg.type)

    def _cancel_stream(self, ident: bytes, mid: int) -> None:
        task = self._streams.get((ident, mid))
        if task is not None:
            self.counters["streams_cancelled"] += 1
            task.cancel()

    async def _serve(self, ident: bytes, msg: wire.Message) -> None:
        handler = self._handlers.get(msg.type)
        try:
            if handler is None:
                raise ServiceError(UNKNOWN_METHOD, f"{self.kind} does not handle {msg.type}")
            if self.state in ("draining", "stopped") and msg.type not in ALWAYS:
                raise ServiceError(DRAINING, f"{self.name} is shutting down", retry_after=1.0)
            if msg.deadline and time.time() > msg.deadline:
                raise ServiceError(DEADLINE_EXCEEDED, "request arrived after its deadline")
            if is_stream(handler):
                if not await self._stream(ident, msg, handler):
                    return  # cancelled, or the caller is gone: nobody to answer
                body = StreamEnd()
            else:
                body = await handler(self, msg)
            self.progress += 1
        except ServiceError as e:
            self.counters[f"errors.{e.code}"] += 1
            body = Error(code=e.code, message=e.message, retry_after=e.retry_after)
        except BusError as e:  # a call this handler made to another service failed
            code = code_of(e)
            self.counters[f"errors.{code}"] += 1
            body = Error(code=code, message=str(e)[:500])
        except Exception as e:  # a handler bug answers the caller and keeps the loop alive
            self.counters[f"errors.{INTERNAL}"] += 1
            body = Error(code=INTERNAL, message=f"{type(e).__name__}: {e}"[:500])
        await self._send(ident, msg.reply(body, self.name, self.epoch))

    async def _stream(self, ident: bytes, msg: wire.Message, handler: Handler) -> bool:
        """Send every body the generator yields; False when it was cancelled or the caller left."""
        key = (ident, msg.id)
        self._streams[key] = asyncio.current_task()
        gen = handler(self, msg)
        try:
            async for body in gen:
                frames = self._reply_frames(msg.reply(body, self.name, self.epoch))
                if not await self._send_frames(ident, frames):
                    raise _Gone()
                self.progress += 1
            return True
        except (asyncio.CancelledError, _Gone) as e:
            # Closing the generator runs its finally blocks (a request frees its resources).
            await gen.aclose()
            self.counters["streams_gone" if isinstance(e, _Gone) else "streams_stopped"] += 1
            return False
        except ServiceError:
            await gen.aclose()  # raised here, not by the generator (a reply too large): close it too
            raise
        finally:
            self._streams.pop(key, None)

    def _reply_frames(self, reply: wire.Message) -> list:
        """A reply's frames; ServiceError("too_large") when the caller's socket would drop them."""
        try:
            # Callers of this service's kind receive with the limits its request socket has.
            return wire.encode(reply, max_frame_bytes=self._request_limits.max_msg_size)
        except Oversized as e:
            raise ServiceError(TOO_LARGE, f"{reply.type} reply not sent: {e}") from None

    async def _send(self, ident: bytes, msg: wire.Message) -> bool:
        """Send to one caller (a reply too large becomes a `too_large` error); False when the
        caller is unreachable."""
        try:
            frames = self._reply_frames(msg)
        except ServiceError as e:
            self.counters[f"errors.{e.code}"] += 1
            frames = wire.encode(msg.reply(Error(code=e.code, message=e.message[:500]),
                                           self.name, self.epoch))
        return await self._send_frames(ident, frames)

    async def _send_frames(self, ident: bytes, frames: list) -> bool:
        """False when the caller is unreachable (ROUTER_MANDATORY says so)."""
        try:
            await self._router.send_multipart([ident] + frames, copy=False)
            return True
        except zmq.ZMQError:
            self.counters["send_errors"] += 1
            return False
