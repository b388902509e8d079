"""Stopping a directory leaves no socket open, even with a handshake still waiting for an answer."""

from __future__ import annotations

import asyncio
import threading

import zmq
import zmq.asyncio

from bus.config import BusConfig
from bus.directory import Directory
from bus.mdns import Candidate


async def test_stop_ends_handshakes_in_flight_so_the_context_can_end():
    ctx = zmq.asyncio.Context()
    mute = ctx.socket(zmq.ROUTER)                  # accepts the handshake, never answers it
    port = mute.bind_to_random_port("tcp://127.0.0.1")
    d = Directory(ctx, BusConfig(cluster="c", mdns=False), me="me")
    await d.start()
    d._on_candidate(Candidate(cluster="c", name="peer", kind="echo", instance="peer", epoch=1,
                              host="127.0.0.1", rpc_port=port, pub_port=port + 1))
    await asyncio.wait_for(mute.recv_multipart(), 5)  # the handshake is now waiting (1 s timeout)
    await d.stop()
    mute.close(linger=0)
    # As busctl and `llmbus up` end: term() blocks the loop, so nothing left open could close.
    ended = threading.Thread(target=ctx.term, daemon=True)
    ended.start()
    ended.join(3)
    if ended.is_alive():
        ctx.destroy(linger=0)
    assert not ended.is_alive(), "a socket stayed open after Directory.stop()"
