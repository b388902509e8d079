"""Messages every service speaks: handshake, status, echo, errors, heartbeats."""

from __future__ import annotations

import dataclasses
from dataclasses import KW_ONLY
from typing import Any

from ..schema import message, record
from .info import check_info
from ..tensor import Tensor

STATES = ("starting", "ready", "draining", "stopped", "failed")


@message("bus.hello")
class Hello:
    """Handshake: a peer confirms who answers at an endpoint before using it."""
    cluster: str


@record
class Identity:
    """Who a service process is and where it answers, declared once: its handshake, heartbeats,
    status and every directory entry of it carry these fields."""
    name: str
    kind: str
    instance: str
    epoch: int         # new on every start of the process; grows across restarts
    host: str
    rpc_port: int
    pub_port: int
    _: KW_ONLY
    # Where the process runs, so that the health watcher of that machine can act on it.
    machine: str = ""  # /etc/machine-id (or the host name): equal for every process of a machine
    pid: int = 0
    unit: str = ""     # the systemd unit that runs it ("" when none does)

    @classmethod
    def of(cls, carrier) -> "Identity":
        """The identity of anything that carries its fields (a heartbeat, a directory entry)."""
        return cls(**{f.name: getattr(carrier, f.name) for f in dataclasses.fields(cls)})


@message("bus.welcome")
class Welcome(Identity):
    """The answer to `bus.hello`: who answers at this endpoint, of which cluster, in which state."""
    cluster: str
    state: str
    info: dict[str, Any]   # the kind's info record (wire.messages.info), as in heartbeats

    def check(self):
        check_info(self.kind, self.info)


@message("bus.heartbeat")
class Heartbeat(Identity):
    state: str
    load: float        # requests in flight (or the service's own notion of load)
    progress: int      # grows whenever the service gets work done
    seq: int           # heartbeat counter of this epoch
    info: dict[str, Any]   # the kind's info record (wire.messages.info), checked on decode

    def check(self):
        if self.state not in STATES:
            raise ValueError(f"unknown state {self.state!r}")
        check_info(self.kind, self.info)


@message("bus.status")
class Status:
    pass


@message("bus.status_reply")
class StatusReply(Identity):
    state: str
    load: float
    progress: int
    uptime: float
    counters: dict[str, int]
    info: dict[str, Any]   # the kind's info record, with what the process adds (host, pid, peers)


@message("bus.echo")
class Echo:
    """Round trip for diagnostics and latency measurement; the payload comes back as sent."""
    text: str = ""
    payload: Tensor | None = None


@message("bus.echo_reply")
class EchoReply:
    text: str = ""
    payload: Tensor | None = None


@message("bus.error")
class Error:
    """A typed failure reply: `code` names the error for the caller's code, `message` for people."""
    code: str
    message: str
    retry_after: float | None = None


@message("bus.cancel")
class Cancel:
    """One-way: stop the caller's own streaming call `id` (same connection); no reply."""
    id: int


@message("bus.stream_end")
class StreamEnd:
    """The last message of a streamed reply: the handler finished without error."""


@message("bus.event")
class Event:
    """A service event (started, stopped, killed, respawned, failed...) published on the bus."""
    topic: str
    service: str
    data: dict[str, Any]


@message("bus.probe")
class Probe:
    """Ask a service to reach another by name through its own directory (connectivity check)."""
    target: str
    timeout: float = 2.0

    def check(self):
        if not 0 < self.timeout <= 60:
            raise ValueError("timeout must be within (0, 60] seconds")


@message("bus.probe_reply")
class ProbeReply:
    target: str
    epoch: int
    endpoint: str
    rtt_ms: float
