"""mDNS (zeroconf) advertisement and browsing of `_llmbus._tcp.local.` services.

mDNS is a hint only: a killed process leaves records behind for minutes, so every candidate
found here is confirmed by a handshake before use, and liveness comes from heartbeats.
"""

from __future__ import annotations

import asyncio
import socket
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from zeroconf import InterfaceChoice, IPVersion, ServiceStateChange
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from wire.messages.bus import Identity

SERVICE_TYPE = "_llmbus._tcp.local."


@dataclass(frozen=True)
class Candidate(Identity):
    """What a TXT record claims (a service's identity, less where its process runs, and its
    cluster): to be confirmed by handshake."""
    cluster: str


def _interfaces(ips: tuple[str, ...], advertised: str):
    if ips:
        return list(ips)
    if advertised and advertised not in ("0.0.0.0", "*"):
        return [advertised]
    return InterfaceChoice.All


def open_zeroconf(ips: tuple[str, ...], advertised: str = "") -> AsyncZeroconf:
    return AsyncZeroconf(interfaces=_interfaces(ips, advertised), ip_version=IPVersion.V4Only)


def _instance_name(name: str, epoch: int) -> str:
    # The epoch in the instance name keeps a restarted service from colliding with the
    # stale record its killed predecessor left behind.
    return f"{name}-{epoch & 0xFFFFFFFF:08x}.{SERVICE_TYPE}"


def service_info(c: Candidate) -> AsyncServiceInfo:
    props = {"cluster": c.cluster, "name": c.name, "kind": c.kind, "instance": c.instance,
             "epoch": str(c.epoch), "rpc": str(c.rpc_port), "pub": str(c.pub_port)}
    return AsyncServiceInfo(SERVICE_TYPE, _instance_name(c.name, c.epoch),
                            addresses=[socket.inet_aton(c.host)], port=c.rpc_port,
                            properties=props, server=f"{c.name}-{c.epoch & 0xFFFF:04x}.local.")


def parse_info(info: AsyncServiceInfo) -> Candidate | None:
    """A Candidate from a resolved record, or None when the record is not one of ours."""
    try:
        p = {k.decode(): (v or b"").decode() for k, v in info.properties.items()}
        addrs = info.parsed_addresses(IPVersion.V4Only)
        return Candidate(cluster=p["cluster"], name=p["name"], kind=p["kind"],
                         instance=p["instance"], epoch=int(p["epoch"]), host=addrs[0],
                         rpc_port=int(p["rpc"]), pub_port=int(p["pub"]))
    except (KeyError, ValueError, IndexError, UnicodeDecodeError, AttributeError):
        return None


class Advertiser:
    def __init__(self, zc: AsyncZeroconf, candidate: Candidate):
        self.zc = zc
        self.info = service_info(candidate)

    async def start(self) -> None:
        await self.zc.async_register_service(self.info, allow_name_change=True)

    async def stop(self) -> None:
        await self.zc.async_unregister_service(self.info)


class Browser:
    """Calls `found(candidate)` for each record of our type that resolves (added or updated).

    At most MAX_RESOLVING records are asked about at once and MAX_WAITING wait (the newest
    first): a flood of forged records costs bounded memory and queries, and a record announced
    after it is still resolved soon."""

    MAX_RESOLVING = 16
    MAX_WAITING = 256

    def __init__(self, zc: AsyncZeroconf, found: Callable[[Candidate], None]):
        self.zc = zc
        self.found = found
        self.records_seen = 0
        self.records_dropped = 0
        self._browser: AsyncServiceBrowser | None = None
        self._tasks: set[asyncio.Task] = set()
        self._waiting: OrderedDict[str, str] = OrderedDict()   # record name -> service type

    def start(self) -> None:
        loop = asyncio.get_running_loop()

        def on_change(zeroconf, service_type, name, state_change):
            if state_change in (ServiceStateChange.Added, ServiceStateChange.Updated):
                self._waiting.pop(name, None)
                self._waiting[name] = service_type
                if len(self._waiting) > self.MAX_WAITING:
                    self._waiting.popitem(last=False)
                    self.records_dropped += 1
                loop.call_soon_threadsafe(self._resolve_waiting)

        self._browser = AsyncServiceBrowser(self.zc.zeroconf, SERVICE_TYPE, handlers=[on_change])

    def _resolve_waiting(self) -> None:
        while self._waiting and len(self._tasks) < self.MAX_RESOLVING:
            name, service_type = self._waiting.popitem(last=True)
            t = asyncio.get_running_loop().create_task(self._resolve(service_type, name))
            self._tasks.add(t)
            t.add_done_callback(self._resolved)

    def _resolved(self, t: asyncio.Task) -> None:
        self._tasks.discard(t)
        if self._browser is not None:
            self._resolve_waiting()

    async def _resolve(self, service_type: str, name: str) -> None:
        info = AsyncServiceInfo(service_type, name)
        if not await info.async_request(self.zc.zeroconf, 3000):
            return
        self.records_seen += 1
        cand = parse_info(info)
        if cand is not None:
            self.found(cand)

    async def stop(self) -> None:
        if self._browser is not None:
            await self._browser.async_cancel()
            self._browser = None
        self._waiting.clear()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
