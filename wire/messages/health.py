"""Messages of the health watcher (`llmbus run health`): its service events, its status, kill."""

from __future__ import annotations

from typing import Any

from ..schema import message, record
from .info import ServiceInfo, check_info, info_of

EVENT_KINDS = ("service_down", "service_up", "service_failed")
STATES = ("starting", "up", "stalled", "killing", "down", "failed")
SIGNALS = ("SIGTERM", "SIGKILL", "SIGSTOP", "SIGCONT", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2")


@message("health.service_event")
class ServiceEvent:
    """Published by a watcher on topic `health.<kind>` when a service of its machine goes down,
    comes up, or is given up (failed: past the restart budget, it is not started again)."""
    kind: str
    service: str
    reason: str
    watcher: str
    machine: str
    restarts: int
    info: dict[str, Any]          # the service's last heartbeat info (a shard's layers, model)
    service_kind: str = ""        # the kind of the service, whose info record `info` is

    def check(self):
        if self.kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {self.kind!r}; one of {', '.join(EVENT_KINDS)}")
        check_info(self.service_kind, self.info)

    @property
    def last_info(self) -> ServiceInfo:
        return info_of(self.service_kind, self.info)

    @property
    def topic(self) -> str:
        return f"health.{self.kind}"


@record
class Watched:
    """One service as its watcher sees it."""
    name: str
    state: str
    restarts: int
    last_error: str
    pid: int
    unit: str

    def check(self):
        if self.state not in STATES:
            raise ValueError(f"unknown state {self.state!r}")


@message("health.status")
class HealthStatus:
    """Ask a watcher for the services it is responsible for."""


@message("health.status_reply")
class HealthStatusReply:
    watcher: str
    machine: str
    mode: str                     # "children" or "systemd"
    services: list[Watched]


@message("health.kill")
class Kill:
    """Ask the watcher of a service's machine to send it a signal (drills, tests)."""
    name: str
    signal: str = "SIGTERM"

    def check(self):
        if self.signal not in SIGNALS:
            raise ValueError(f"signal {self.signal!r}: one of {', '.join(SIGNALS)}")


@message("health.kill_reply")
class KillReply:
    name: str
    pid: int
    signal: str
