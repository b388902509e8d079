"""Calling services by name: resolve through the directory, keep one client per peer, and
follow the peer across restarts (new epoch, possibly a new endpoint)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import zmq.asyncio

from .client import RpcClient
from .directory import Directory
from .errors import PeerDead, PeerRestarted
from .liveness import PeerEntry
from .sockets import limits_for_kind


class Peers:
    def __init__(self, ctx: zmq.asyncio.Context, directory: Directory, me: str, epoch: int = 0):
        self.ctx = ctx
        self.directory = directory
        self.me = me
        self.epoch = epoch
        self._clients: dict[str, RpcClient] = {}
        self._closing: set[asyncio.Task] = set()   # clients of a peer's old endpoint
        directory.on_expire.append(self._expired)
        directory.on_replaced.append(self._replaced)

    def _expired(self, entry: PeerEntry) -> None:
        # Calls in flight to a peer whose heartbeats stopped fail now, not at their timeout.
        c = self._clients.get(entry.name)
        if c is not None:
            c.fail_pending(PeerDead(f"{entry.name} stopped heartbeating (epoch {entry.epoch})"))

    def _replaced(self, old: PeerEntry, new: PeerEntry) -> None:
        # Calls sent to the old process will never be answered: fail them now, not at timeout.
        c = self._clients.get(old.name)
        if c is None:
            return
        if c.endpoint == new.rpc_endpoint:
            c.saw_epoch(new.epoch)   # fails exactly the calls sent to older epochs
        c.fail_pending_before(new.epoch, PeerRestarted(
            f"{old.name} was replaced (epoch {old.epoch} -> {new.epoch})"))

    def fail_all(self, exc: Exception) -> None:
        """End every call and stream in flight to any peer with `exc` (this service is stopping)."""
        for c in self._clients.values():
            c.fail_pending(exc)

    async def client(self, name: str, wait: float = 5.0) -> RpcClient:
        entry = await self.directory.wait_for(name, wait)
        c = self._clients.get(name)
        if c is not None and self._outdated(c, entry):
            await c.close()
            if self._clients.get(name) is c:
                del self._clients[name]
        return self._client_for(entry)

    @staticmethod
    def _outdated(c: RpcClient, entry: PeerEntry) -> bool:
        return c.endpoint != entry.rpc_endpoint or c.limits != limits_for_kind(entry.kind)

    def _client_for(self, entry: PeerEntry) -> RpcClient:
        name = entry.name
        c = self._clients.get(name)
        if c is not None and self._outdated(c, entry):   # tell() does not wait for the close
            closing = asyncio.get_running_loop().create_task(c.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
            c = None
        if c is None:
            limits = limits_for_kind(entry.kind)
            c = RpcClient(self.ctx, entry.rpc_endpoint, sender=self.me, sender_epoch=self.epoch,
                          name=name, limits=limits, key=self.directory.config.key)
            self._clients[name] = c
        c.saw_epoch(entry.epoch)
        return c

    async def call(self, name: str, body: Any, timeout: float = 5.0, epoch: int = 0) -> Any:
        """RpcClient.call on `name`'s client (`epoch`: the one addressed, when known)."""
        c = await self.client(name, wait=timeout)
        return await c.call(body, timeout, epoch=epoch)

    def start_call(self, name: str, body: Any, timeout: float = 5.0,
                   epoch: int = 0) -> Awaitable[Any]:
        """`call`, with the request queued before this returns when the directory knows `name`
        live (RpcClient.start_call); otherwise the awaitable finds it first, as `call` does."""
        entry = self.directory.get(name)
        if entry is None:
            return self.call(name, body, timeout, epoch)
        return self._client_for(entry).start_call(body, timeout, epoch)

    def tell(self, name: str, body: Any) -> bool:
        """A one-way message to `name` (RpcClient.tell), never waiting: False, and nothing sent,
        when the directory does not know it live, or its socket takes nothing now."""
        entry = self.directory.get(name)
        return entry is not None and self._client_for(entry).tell(body)

    async def stream(self, name: str, body: Any, wait: float = 5.0,
                     idle_timeout: float | None = None) -> AsyncIterator[Any]:
        """A streamed call to `name` (see RpcClient.stream); PeerDead if its heartbeats stop."""
        c = await self.client(name, wait=wait)
        async with contextlib.aclosing(c.stream(body, idle_timeout)) as replies:
            async for body in replies:
                yield body

    @property
    def stale_dropped(self) -> int:
        return sum(c.stale_dropped for c in self._clients.values())

    async def close(self) -> None:
        await asyncio.gather(*self._closing, return_exceptions=True)
        for c in self._clients.values():
            await c.close()
        self._clients.clear()
