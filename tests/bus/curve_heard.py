"""Who hears a keyed service's heartbeats: one SUB per key on its PUB address, read until the
holder of the cluster key has heard enough (the others were connected all that time)."""

from __future__ import annotations

import zmq
import zmq.asyncio

import wire
from bus.curve import ClusterKey
from bus.directory import HEARTBEAT_TOPIC
from bus.sockets import make_socket
from wire.messages.bus import Heartbeat

from ..waiting import until


async def heartbeats_heard(pub: str, member: ClusterKey, others: dict[str, ClusterKey | None],
                           enough: int, timeout: float) -> dict[str, int]:
    """Heartbeats heard on `pub` by the member's SUB (key "member") and by one SUB per other key,
    once the member has heard `enough`."""
    keys = {"member": member, **others}
    subs = {who: make_socket(zmq.asyncio.Context.instance(), zmq.SUB, key=k) for who, k in keys.items()}
    heard = dict.fromkeys(subs, 0)
    for s in subs.values():
        s.setsockopt(zmq.SUBSCRIBE, HEARTBEAT_TOPIC)
        s.connect(pub)

    async def drain():
        for who, s in subs.items():
            while await s.poll(0):
                frames = await s.recv_multipart(copy=False)
                assert isinstance(wire.decode(frames[1:]).body, Heartbeat)
                heard[who] += 1
        return heard["member"] >= enough

    try:
        await until(drain, timeout=timeout, what=f"{enough} heartbeats heard with the key")
    finally:
        for s in subs.values():
            s.close(linger=0)
    return heard
