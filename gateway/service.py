"""The gateway service: a bus service (found and finding like every other) that serves the
HTTP APIs with aiohttp over the tokenizer and scheduler it finds in its directory."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from bus.config import ServiceConfig
from bus.service import Service

from .app import build_app
from .backend import Backend
from .config import GatewayConfig
from .connections import CappedSite
from .metrics import Metrics
from wire.messages.info import GatewayInfo

log = logging.getLogger("llmbus.gateway")


class GatewayService(Service):
    kind = "gateway"

    def __init__(self, config: ServiceConfig, gateway: GatewayConfig, ctx=None):
        if not config.discover:
            raise ValueError("the gateway finds the tokenizer and scheduler through its "
                             "directory: run it without --no-discover")
        super().__init__(config, ctx)
        self.gateway = gateway
        self.backend: Backend | None = None
        self.http_port = 0
        self._runner: web.AppRunner | None = None

    async def on_start(self) -> None:
        self.backend = Backend(self.directory, self.peers, self.gateway.stream_idle_timeout,
                               Metrics(), self.gateway.carry_s)
        self._tasks.append(asyncio.get_running_loop().create_task(self.backend.watch_model()))
        # handler_cancellation: a client that disconnects cancels its handler, which closes the
        # generation stream and so ends the request in the scheduler.
        # keepalive_timeout runs from a connection's start until a request's headers are in (and
        # again between requests): it is the deadline for headers, so a client that trickles
        # them in cannot hold a connection.
        self._runner = web.AppRunner(build_app(self.backend, self.gateway), access_log=None,
                                     handler_cancellation=True, shutdown_timeout=5.0,
                                     keepalive_timeout=self.gateway.header_timeout)
        await self._runner.setup()
        site = CappedSite(self._runner, self.gateway.host, self.gateway.port,
                          self.gateway.max_connections)
        await site.start()
        self.http_port = site._server.sockets[0].getsockname()[1]
        log.info("HTTP on http://%s:%d", self.gateway.host, self.http_port)

    async def on_stop(self) -> None:
        if self.backend is not None:
            self.backend.stop()      # streams end with an error naming why, then the server stops
        if self._runner is not None:
            await self._runner.cleanup()
        if self.backend is not None:
            await self.backend.close()

    @property
    def url(self) -> str:
        return f"http://{self.gateway.host}:{self.http_port}"

    def info(self) -> GatewayInfo:
        card = self.backend.card if self.backend else None
        return GatewayInfo(http=self.url if self.http_port else "",
                           model=card.identity if card else "", model_id=card.id if card else "")
