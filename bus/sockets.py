"""A tiny typed layer over zmq.asyncio sockets: every limit set on purpose, bind/connect explicit.

Every socket's limits are chosen here, by what it carries:

- CONTROL: heartbeats, events, handshakes and most RPC (tokenizer, scheduler, busctl). No frame
  we send is larger than a message header may be (wire.limits.MAX_HEADER_BYTES, 1 MiB); frames
  up to ANSWERED_FRAME_BYTES are still read, so that a caller of its own making (no wire.encode
  check) sending a header too large is answered `bad_frame` naming its call, not left waiting.
- ACTIVATIONS: a shard's request socket and the clients that call shards. A frame holds a
  batch's activations (512 tokens x 32768 hidden x fp32 = 64 MiB) or the logits of its sampled
  rows (64 rows x 262144 vocab x fp32 = 64 MiB), and few messages are queued per peer.

ZeroMQ disconnects a peer whose frame is over MAXMSGSIZE when the frame's length arrives, so an
oversized frame is never allocated; the sending side refuses such a frame before it leaves
(wire.encode's max_frame_bytes), so a caller gets a typed error instead of a silent drop. What a
peer can make a socket hold is at most RCVHWM messages, each of MAX_FRAMES frames of at most
max_msg_size, and the reader drains them as they come.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import zmq
import zmq.asyncio

from wire.limits import MAX_HEADER_BYTES, MAX_TENSOR_BYTES

from .curve import ClusterKey, secure


@dataclass(frozen=True)
class SocketLimits:
    sndhwm: int = 10_000           # messages queued per peer before send drops/blocks
    rcvhwm: int = 10_000
    linger_ms: int = 0             # never hang on close waiting for a dead peer
    max_msg_size: int = MAX_HEADER_BYTES  # per frame, in zmq terms; frames are checked again on decode
    # A connecting socket whose peer is down tries again every interval, never backing off: a
    # service respawned on its port (`llmbus up` fixes every child's ports, as units do) is
    # reached within one interval of binding it; a retry to a closed port costs one refused
    # connect (one to a host that is down waits out TCP's own connect timeout first).
    reconnect_ivl_ms: int = 100
    reconnect_ivl_max_ms: int = 0
    read_frame_bytes: int = 0      # zmq's MAXMSGSIZE, when it reads more than it sends (0: same)

    def __post_init__(self):
        if not MAX_HEADER_BYTES <= self.max_msg_size <= MAX_TENSOR_BYTES:
            # Below a header's limit a sound header could be dropped unread.
            raise ValueError(f"max_msg_size must be within {MAX_HEADER_BYTES}..{MAX_TENSOR_BYTES}")
        if self.sndhwm < 1 or self.rcvhwm < 1:
            raise ValueError("high-water marks must be at least 1")


ANSWERED_FRAME_BYTES = 4 * MAX_HEADER_BYTES
CONTROL = SocketLimits(read_frame_bytes=ANSWERED_FRAME_BYTES)
ACTIVATIONS = SocketLimits(sndhwm=64, rcvhwm=64, max_msg_size=64 << 20)
# A directory's SUB socket stays connected to every peer's PUB address. A peer restarted on the
# same port (`llmbus up` fixes them) is heard once the SUB reconnects.
SUBSCRIPTIONS = SocketLimits()
DEFAULT_LIMITS = CONTROL

# The request socket of a service of this kind, and every client calling one, use these limits;
# a kind not named here is control traffic.
LIMITS_BY_KIND: dict[str, SocketLimits] = {"shard": ACTIVATIONS}


def limits_for_kind(kind: str) -> SocketLimits:
    """The limits of a `kind` service's request socket, which its callers' sockets match."""
    return LIMITS_BY_KIND.get(kind, CONTROL)


def _apply(sock: zmq.Socket, limits: SocketLimits) -> None:
    sock.setsockopt(zmq.SNDHWM, limits.sndhwm)
    sock.setsockopt(zmq.RCVHWM, limits.rcvhwm)
    sock.setsockopt(zmq.LINGER, limits.linger_ms)
    sock.setsockopt(zmq.MAXMSGSIZE, max(limits.max_msg_size, limits.read_frame_bytes))
    sock.setsockopt(zmq.RECONNECT_IVL, limits.reconnect_ivl_ms)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, limits.reconnect_ivl_max_ms)


def make_socket(ctx: zmq.asyncio.Context, kind: int, limits: SocketLimits = DEFAULT_LIMITS,
                key: ClusterKey | None = None) -> zmq.asyncio.Socket:
    """A socket with `limits`; with the cluster `key`, CURVE on (see curve.py)."""
    sock = ctx.socket(kind)
    _apply(sock, limits)
    if key is not None:
        secure(sock, key)
    if kind == zmq.ROUTER:
        # A send to a vanished caller fails (EHOSTUNREACH) instead of vanishing: a stream to a
        # client that went away stops at its next message, and frees what it held.
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    return sock


class BindError(OSError):
    """A socket could not take its address: the port is in use, or the host is not this machine's."""


RANDOM_PORTS = (20000, 60000)     # where a socket asked for port 0 takes one (llmbus up's fixed ones lie below)


def bind(sock: zmq.Socket, host: str, port: int) -> int:
    """Bind to host:port (port 0 picks a free one) and return the port actually bound; BindError
    (an OSError, which `llmbus run` reports in one line) when the address cannot be had."""
    try:
        if port == 0:
            return sock.bind_to_random_port(f"tcp://{host}", min_port=RANDOM_PORTS[0], max_port=RANDOM_PORTS[1],
                                            max_tries=200)
        sock.bind(f"tcp://{host}:{port}")
    except zmq.ZMQError as e:
        where = f"tcp://{host}:{port}" if port else f"a free port of tcp://{host}"
        raise BindError(e.errno, f"cannot bind {where}: {os.strerror(e.errno)}") from e
    return port


def endpoint(host: str, port: int) -> str:
    return f"tcp://{host}:{port}"
