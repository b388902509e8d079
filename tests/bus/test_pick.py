"""`Directory.pick`: where a request goes when any service of a kind will do: the least loaded
ready one (serving the model asked for)."""

from __future__ import annotations

import zmq.asyncio

from bus.config import BusConfig
from bus.directory import Directory
from bus.liveness import PeerEntry
from wire.messages.info import TokenizerInfo


def tokenizer(name: str, load: float, model: str = "M", state: str = "ready") -> PeerEntry:
    return PeerEntry(name=name, kind="tokenizer", instance="0", epoch=1, host="127.0.0.1",
                     rpc_port=1, pub_port=2, state=state, load=load,
                     info=TokenizerInfo(model=model, vocab_size=10))


async def test_pick_takes_the_least_loaded_ready_one_of_the_model():
    ctx = zmq.asyncio.Context()
    d = Directory(ctx, BusConfig(cluster="c", mdns=False), me="me")   # not started: fed by hand
    try:
        assert d.pick("tokenizer") is None
        for e in (tokenizer("a", 3.0), tokenizer("b", 1.0), tokenizer("c", 0.0, state="starting"),
                  tokenizer("d", 0.5, model="other")):
            d._observe(e)
        assert d.pick("tokenizer").name == "d"
        assert d.pick("tokenizer", "M").name == "b"
        assert d.pick("tokenizer", "nothing") is None and d.pick("scheduler") is None
    finally:
        await d.stop()
        ctx.destroy(linger=0)
