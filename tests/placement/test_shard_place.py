"""A shard without --layers over a real socket: it offers its memory, loads a plan's range beside
the one it serves, and serves it only when switched; wrong asks get typed errors."""

from __future__ import annotations

import pytest

from bus.config import BusConfig, ServiceConfig
from bus.errors import RemoteError
from services.shard.service import ShardConfig, ShardService
from wire.messages.placement import FootprintRequest, Place, Switch

from ..bus.serving import client_of, running

pytestmark = pytest.mark.slow


def shard(model_path, **kw) -> ShardService:
    return ShardService(ServiceConfig(name="placed", kind="shard", bus=BusConfig(mdns=False)),
                        ShardConfig(model=model_path, num_pages=8, **kw))


async def test_place_then_switch(model_path):
    async with running(shard(model_path, memory=400 << 20)) as s, client_of(s) as c:
        offer = s.info()
        assert offer.memory == 400 << 20 and not offer.layers and offer.plan == 0
        # K and V of one layer: 2 x pages x page size x KV heads x head dim x 2 bytes.
        assert offer.kv_per_layer == 2 * 8 * 16 * 3 * 64 * 2
        fp = await c.call(FootprintRequest(), 10)
        assert len(fp.layer_bytes) == offer.n_layers == 30

        placed = await c.call(Place(plan=1, start=0, end=15), 300)
        assert (placed.plan, placed.start, placed.end) == (1, 0, 15)
        assert not s.info().layers                # loaded, not served until switched
        with pytest.raises(RemoteError) as e:
            await c.call(Switch(plan=2), 10)
        assert e.value.code == "not_staged"
        switched = await c.call(Switch(plan=1), 10)
        assert (switched.start, switched.end) == (0, 15)
        assert s.info().layers == (0, 15) and s.info().plan == 1

        # The next plan loads beside the range served, which keeps serving until the switch.
        await c.call(Place(plan=2, start=0, end=30), 300)
        assert s.info().layers == (0, 15)
        with pytest.raises(RemoteError) as e:
            await c.call(Place(plan=1, start=0, end=10), 10)
        assert e.value.code == "superseded"
        with pytest.raises(RemoteError) as e:
            await c.call(Place(plan=3, start=10, end=31), 10)
        assert e.value.code == "bad_range"


async def test_a_pinned_shard_refuses_placement(model_path):
    async with running(shard(model_path, start=0, end=30)) as s, client_of(s) as c:
        assert not s.info().memory
        with pytest.raises(RemoteError) as e:
            await c.call(Place(plan=1, start=0, end=15), 10)
        assert e.value.code == "pinned"
