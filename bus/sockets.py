"""A tiny typed layer over zmq.asyncio sockets: every limit set on purpose, bind/connect explicit."""

from __future__ import annotations

from dataclasses import dataclass

import zmq
import zmq.asyncio

from wire.limits import MAX_FRAMES, MAX_TENSOR_BYTES


@dataclass(frozen=True)
class SocketLimits:
    sndhwm: int = 10_000           # messages queued per peer before send drops/blocks
    rcvhwm: int = 10_000
    linger_ms: int = 0             # never hang on close waiting for a dead peer
    max_msg_size: int = MAX_FRAMES * MAX_TENSOR_BYTES  # per frame, in zmq terms; frames are checked again on decode
    reconnect_ivl_ms: int = 100
    reconnect_ivl_max_ms: int = 2000


DEFAULT_LIMITS = SocketLimits()


def _apply(sock: zmq.Socket, limits: SocketLimits) -> None:
    sock.setsockopt(zmq.SNDHWM, limits.sndhwm)
    sock.setsockopt(zmq.RCVHWM, limits.rcvhwm)
    sock.setsockopt(zmq.LINGER, limits.linger_ms)
    sock.setsockopt(zmq.MAXMSGSIZE, min(limits.max_msg_size, MAX_TENSOR_BYTES))
    sock.setsockopt(zmq.RECONNECT_IVL, limits.reconnect_ivl_ms)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, limits.reconnect_ivl_max_ms)


def make_socket(ctx: zmq.asyncio.Context, kind: int,
                limits: SocketLimits = DEFAULT_LIMITS) -> zmq.asyncio.Socket:
    sock = ctx.socket(kind)
    _apply(sock, limits)
    if kind == zmq.ROUTER:
        # A send to a vanished caller fails (EHOSTUNREACH) instead of vanishing: a stream to a
        # client that went away stops at its next message, and frees what it held.
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    return sock


def bind(sock: zmq.Socket, host: str, port: int) -> int:
    """Bind to host:port (port 0 picks a free one) and return the port actually bound."""
    if port == 0:
        return sock.bind_to_random_port(f"tcp://{host}", min_port=20000, max_port=60000, max_tries=200)
    sock.bind(f"tcp://{host}:{port}")
    return port


def endpoint(host: str, port: int) -> str:
    return f"tcp://{host}:{port}"
