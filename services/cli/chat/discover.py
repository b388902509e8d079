"""Find a cluster's scheduler on the network by mDNS, for `llmbus chat --cluster C` when no
stack of that cluster runs on this machine."""

from __future__ import annotations

import asyncio

from bus.config import BusConfig
from bus.directory import Directory
from bus.mdns import open_zeroconf

from .errors import NoStack
from .target import Target


async def discover(ctx, cluster: str, interfaces: tuple[str, ...] = (), wait: float = 3.0,
                   key=None) -> Target:
    """The ready scheduler of `cluster` that mDNS finds on `interfaces` (() = every interface),
    confirmed by handshake; NoStack saying what discovery saw when there is none in `wait` s."""
    zc = open_zeroconf(interfaces, "")
    directory = Directory(ctx, BusConfig(cluster=cluster, mdns_interfaces=interfaces, key=key),
                          me="llmbus-chat", zeroconf=zc)
    await directory.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            if (e := directory.pick("scheduler")) is not None:
                return Target(scheduler=f"{e.host}:{e.rpc_port}", cluster=cluster,
                              model=e.info.model, shards=len(e.info.pipeline))
            if loop.time() >= deadline:
                raise NoStack(f"no scheduler of cluster {cluster!r} runs here nor answers on the "
                              f"network ({directory.explain()})")
            await asyncio.sleep(0.1)
    finally:
        await directory.stop()
        await zc.async_close()
