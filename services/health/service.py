"""The health watcher as a bus service (`llmbus run health`, one per machine).

It hears every heartbeat through its directory, watches the services of its own machine with the
policy, recovers them through its mode (its own children, or systemd units) and publishes
`health.service_down` / `health.service_up` / `health.service_failed`. Its heartbeat info names
the services it has given up, so that a gateway or scheduler started later still knows.
Answers `health.status` (what `busctl list` shows) and `health.kill` (`busctl kill`).
"""

from __future__ import annotations

import asyncio
import signal as signals
from collections.abc import Callable
from dataclasses import dataclass

import wire
from bus.config import ServiceConfig
from bus.errors import ServiceError
from bus.machine import machine_id
from bus.service import Service, handles
from wire.failures import NOT_RUNNING, UNKNOWN_SERVICE
from wire.messages.bus import Heartbeat
from wire.messages.info import HealthInfo
from wire.messages.health import HealthStatus, HealthStatusReply, Kill, KillReply, ServiceEvent

from .policy import HealthConfig
from .watcher import Mode, UnknownService, Watcher


@dataclass(frozen=True)
class HealthServiceConfig:
    policy: HealthConfig = HealthConfig()
    tick: float = 0.1                 # how often exits, CPU time and silences are looked at
    watch_at_start: bool = True       # False: the owner calls watch() (llmbus up, once ready)

    def __post_init__(self):
        if not 0 < self.tick <= self.policy.heartbeat_interval:
            raise ValueError("tick must be within (0, heartbeat interval]")


class HealthService(Service):
    kind = "health"

    def __init__(self, config: ServiceConfig, mode: Mode, health: HealthServiceConfig | None = None,
                 ctx=None):
        if not config.discover:
            raise ValueError("the health watcher hears heartbeats through its directory: "
                             "run it without --no-discover")
        super().__init__(config, ctx)
        self.health = health or HealthServiceConfig()
        self.mode = mode
        self.machine = machine_id()
        self.watcher = Watcher(mode, self.health.policy, self._publish_event, self.name,
                               self.machine)
        self.on_event: list[Callable[[ServiceEvent], None]] = []
        self._watching: asyncio.Task | None = None

    async def on_start(self) -> None:
        self.directory.on_event.append(self._heard)
        for name in getattr(self.mode, "start_all", lambda: [])():
            self.watcher.started(name)
        if self.health.watch_at_start:
            self.watch()

    def watch(self) -> None:
        """Begin acting on what the policy decides (heartbeats are heard from the start)."""
        if self._watching is None:
            getattr(self.mode, "prepare_respawns", lambda: None)()   # children mode: warm starts
            self._watching = asyncio.get_running_loop().create_task(self._watch())
            self._tasks.append(self._watching)

    async def on_stop(self) -> None:
        if self._watching is not None:
            self._watching.cancel()
        stop_all = getattr(self.mode, "stop_all", None)
        if stop_all is not None:       # our own children: they stop with us
            await asyncio.get_running_loop().run_in_executor(None, stop_all)

    async def _watch(self) -> None:
        while True:
            self.watcher.tick()
            self.progress += 1
            await asyncio.sleep(self.health.tick)

    def _heard(self, topic: bytes, msg: wire.Message) -> None:
        if isinstance(msg.body, Heartbeat):
            self.watcher.heard(msg.body)

    def _publish_event(self, e: ServiceEvent) -> None:
        self.publish(e.topic, e)
        for cb in self.on_event:
            cb(e)

    def info(self) -> HealthInfo:
        return HealthInfo(mode=self.mode.name, machine=self.machine,
                          watching=sorted(self.watcher.policy.services),
                          failed=self.watcher.failed())

    @handles(HealthStatus)
    async def status(self, msg) -> HealthStatusReply:
        return HealthStatusReply(watcher=self.name, machine=self.machine, mode=self.mode.name,
                                 services=self.watcher.status())

    @handles(Kill)
    async def kill(self, msg) -> KillReply:
        k: Kill = msg.body
        try:
            pid = self.watcher.kill(k.name, signals.Signals[k.signal])
        except UnknownService as e:
            raise ServiceError(UNKNOWN_SERVICE, str(e)) from None
        except (ProcessLookupError, PermissionError) as e:
            raise ServiceError(NOT_RUNNING, f"{k.name}: {e}") from None
        return KillReply(name=k.name, pid=pid, signal=k.signal)
