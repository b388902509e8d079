"""The `bus.*` methods every service answers: handshake, status, echo, probe."""

from __future__ import annotations

import os
import socket
import time

import wire
from wire.failures import NO_DIRECTORY
from wire.messages.info import info_map
from wire.messages.bus import (Echo, EchoReply, Hello, Probe, ProbeReply, Status, StatusReply,
                               Welcome)

from .dispatch import handles
from .errors import PeerRestarted, ServiceError

# Answered in every state and past the request cap: they are how peers and people see a service.
ALWAYS = frozenset({Hello.TYPE, Status.TYPE, Echo.TYPE})


class BusMethods:
    """Mixin of Service: the built-in handlers, found in the handler table like any other."""

    @handles(Hello)
    async def _hello(self, msg: wire.Message) -> Welcome:
        return Welcome(**vars(self.identity()), cluster=self.config.bus.cluster,
                       state=self.state, info=info_map(self.info()))

    @handles(Status)
    async def _status(self, msg: wire.Message) -> StatusReply:
        counters = dict(self.counters)
        if self.directory is not None:
            counters.update({f"directory.{k}": v for k, v in self.directory.counters.items()})
        return StatusReply(**vars(self.identity()), state=self.state, load=self.load,
                           progress=self.progress, uptime=time.monotonic() - self.started_at,
                           counters=counters,
                           info={**info_map(self.info()), "host": socket.gethostname(),
                                 "pid": os.getpid(), "peers": [e.name for e in self.directory.live()]
                                 if self.directory else []})

    @handles(Echo)
    async def _echo(self, msg: wire.Message) -> EchoReply:
        # A received tensor goes back out as its own frames: no decode, no copy.
        return EchoReply(text=msg.body.text, payload=msg.body.payload)

    @handles(Probe)
    async def _probe(self, msg: wire.Message) -> ProbeReply:
        if self.peers is None:
            raise ServiceError(NO_DIRECTORY, f"{self.name} runs without discovery")
        target = msg.body.target
        client = await self.peers.client(target, wait=msg.body.timeout)
        t0 = time.perf_counter()
        try:
            await client.call(Echo(text=f"probe from {self.name}"), msg.body.timeout)
        except PeerRestarted:
            # The target's new process answered (a respawn on the same address, not yet heard
            # here): the client knows its epoch now, and the question is whether it answers.
            left = msg.body.timeout - (time.perf_counter() - t0)
            await client.call(Echo(text=f"probe from {self.name}"), max(left, 0.1))
        return ProbeReply(target=target, epoch=client.peer_epoch, endpoint=client.endpoint,
                          rtt_ms=(time.perf_counter() - t0) * 1e3)
