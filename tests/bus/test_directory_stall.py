"""A directory whose event loop stalled past the dead-after time reads the heartbeats that came
meanwhile before it expires anyone: a live peer is not taken for dead (and its calls are not
failed) because the loop was busy (found by the stack fuzzer: 10^6 prompt ids took ~2 s to decode)."""

from __future__ import annotations

import threading
import time

import zmq
import zmq.asyncio

import wire
from bus.config import BusConfig
from bus.directory import HEARTBEAT_TOPIC, Directory
from bus.liveness import PeerEntry
from tests.waiting import until
from wire.messages.bus import Heartbeat


class Beater(threading.Thread):
    """A peer in its own thread: heartbeats every `interval` on a PUB socket, whatever our loop does."""

    def __init__(self, interval: float):
        super().__init__(daemon=True)
        self.interval, self.stop, self.sent = interval, threading.Event(), 0
        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.PUB)
        self.port = self.pub.bind_to_random_port("tcp://127.0.0.1")

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            self.sent += 1
            hb = Heartbeat(name="peer", kind="echo", instance="0", epoch=7, state="ready", load=0.0,
                           progress=0, seq=self.sent, host="127.0.0.1", rpc_port=self.port + 1,
                           pub_port=self.port, info={})
            self.pub.send_multipart([HEARTBEAT_TOPIC] + [bytes(f) for f in
                                    wire.encode(wire.Message(hb, sender="peer", epoch=7))])
        self.pub.close(linger=0)
        self.ctx.term()


async def test_a_stalled_loop_reads_queued_heartbeats_before_expiring_anyone():
    ctx = zmq.asyncio.Context()
    d = Directory(ctx, BusConfig(cluster="c", mdns=False, heartbeat_interval=0.2), me="me")
    expired = []
    d.on_expire.append(expired.append)
    beater = Beater(0.05)
    beater.start()
    try:
        await d.start()
        d._observe(PeerEntry(name="peer", kind="echo", instance="0", epoch=7, host="127.0.0.1",
                             rpc_port=beater.port + 1, pub_port=beater.port, state="ready"))
        d._sub.connect(f"tcp://127.0.0.1:{beater.port}")
        first = d.table.entries["peer"].last_seen
        await until(lambda: d.table.entries["peer"].last_seen > first, timeout=10,
                    what="a heartbeat heard")
        time.sleep(d.config.dead_after * 2)      # the stall under test: the whole loop blocked
        # What the stalled code sees next, before the reader has run: its heartbeats are queued,
        # not missing.
        assert d.get("peer") is not None and [e.name for e in d.of_kind("echo")] == ["peer"]
        seen = beater.sent
        await until(lambda: beater.sent > seen + 3, timeout=10)   # the loop runs again a while
        assert not expired, f"a live peer was expired after a stall: {expired}"
        assert d.get("peer") is not None
    finally:
        beater.stop.set()
        beater.join(5)
        await d.stop()
        ctx.destroy(linger=0)
