"""A service's events and heartbeats on its PUB socket, and the systemd watchdog they drive."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import zmq

import wire
from wire.errors import Oversized
from wire.messages.bus import Heartbeat
from wire.messages.info import info_map

from .directory import HEARTBEAT_TOPIC
from .sockets import CONTROL


class Heartbeats:
    """Mixin of Service: publishes on `_pub`; reads identity(), state, load, progress, info()."""

    def publish(self, topic: str, body: Any) -> None:
        """Publish an event; PUB never blocks (slow subscribers drop at their HWM)."""
        if self._pub is None:
            return
        msg = wire.Message(body, sender=self.name, epoch=self.epoch)
        try:
            frames = [topic.encode()] + wire.encode(msg, max_frame_bytes=CONTROL.max_msg_size)
        except Oversized:  # subscribers would drop it unread; the loop that published goes on
            self.counters["publish_too_large"] += 1
            return
        try:
            self._pub.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        except zmq.ZMQError:
            self.counters["publish_dropped"] += 1

    def _heartbeat(self) -> Heartbeat:
        self._hb_seq += 1
        return Heartbeat(**vars(self.identity()), state=self.state, load=self.load,
                         progress=self.progress, seq=self._hb_seq, info=info_map(self.info()))

    def _publish_heartbeat(self) -> None:
        self.publish(HEARTBEAT_TOPIC.decode(), self._heartbeat())

    async def _heartbeat_loop(self) -> None:
        interval = self.config.bus.heartbeat_interval
        last_progress, last_change = self.progress, time.monotonic()
        while True:
            await asyncio.sleep(interval)
            self._publish_heartbeat()
            now = time.monotonic()
            if self.progress != last_progress:
                last_progress, last_change = self.progress, now
            # WATCHDOG=1 only while the loop runs and work moves (or there is none).
            stuck_for = now - last_change
            if self.load == 0 or stuck_for < (self.notifier.watchdog_interval or 30.0):
                self.notifier.watchdog()
