"""ZAP: which CURVE clients a process's bound sockets admit (only holders of the cluster key).

libzmq asks the ZAP handler of the socket's context about every CURVE client; with none running,
a CURVE server admits any client that knows its public key. So a process starts one handler per
context, before it binds, and it runs on its own thread: a long forward on the event loop does
not hold up a peer connecting meanwhile. Several services in one process share a context (tests,
`llmbus up`'s watcher); the handler is counted and stops with the last of them.
"""

from __future__ import annotations

import threading
import time

import zmq
from zmq.auth.thread import ThreadAuthenticator

from .curve import ClusterKey


class _Members:
    """The public keys admitted, and how many clients were refused (bus/handshakes.py says why)."""

    def __init__(self):
        self.keys: list[bytes] = []
        self.refused = 0
        self._lock = threading.Lock()

    def callback(self, domain: str, key: bytes) -> bool:
        with self._lock:
            if key in self.keys:
                return True
            self.refused += 1
            return False


class _Handler:
    def __init__(self, ctx: zmq.Context):
        self.members = _Members()
        # A shadow: the handler's socket lives on the caller's context (ZAP is per context),
        # but as a plain socket its thread can use without an event loop.
        self.auth = ThreadAuthenticator(zmq.Context.shadow(ctx.underlying))
        deadline = time.monotonic() + _REBIND_S
        while True:
            try:
                self.auth.start()
                break
            except zmq.ZMQError as e:
                # A handler just stopped on this context: libzmq frees its inproc address a
                # moment after the socket closes (on its reaper thread), not at once.
                self.auth.stop()
                if e.errno != zmq.EADDRINUSE or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
        self.auth.configure_curve_callback("*", self.members)


_REBIND_S = 1.0
_handlers: dict[int, _Handler] = {}
_lock = threading.Lock()


def admit(ctx: zmq.Context, key: ClusterKey) -> None:
    """Bound CURVE sockets of `ctx` admit clients holding `key`; call before binding."""
    with _lock:
        h = _handlers.get(ctx.underlying)
        if h is None:
            h = _handlers[ctx.underlying] = _Handler(ctx)
        with h.members._lock:
            h.members.keys.append(key.public)


def release(ctx: zmq.Context, key: ClusterKey) -> None:
    """Undo one admit(); the handler stops with the last one (before the context may end)."""
    with _lock:
        h = _handlers.get(ctx.underlying)
        if h is None:
            return
        with h.members._lock:
            if key.public in h.members.keys:
                h.members.keys.remove(key.public)
            last = not h.members.keys
        if last:
            del _handlers[ctx.underlying]
            h.auth.stop()


def refused(ctx: zmq.Context) -> int:
    """How many CURVE clients `ctx`'s handler has refused so far."""
    h = _handlers.get(ctx.underlying)
    return h.members.refused if h is not None else 0


def admitted(ctx: zmq.Context) -> tuple[bytes, ...]:
    """The public keys `ctx`'s handler admits now (one per service that holds it)."""
    h = _handlers.get(ctx.underlying)
    return tuple(h.members.keys) if h is not None else ()
