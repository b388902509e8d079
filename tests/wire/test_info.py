"""Each kind's heartbeat info is a typed record (wire.messages.info), checked when a heartbeat
or handshake is decoded: what a reader finds in `entry.info` is there, of its type."""

from __future__ import annotations

import pytest

import wire
from bus.liveness import PeerEntry
from wire.messages.bus import Heartbeat, Welcome
from wire.messages.info import HealthInfo, ServiceInfo, ShardInfo, info_map, info_of


def beat(kind: str, info: dict) -> Heartbeat:
    return Heartbeat(name="n", kind=kind, instance="0", epoch=1, host="h", rpc_port=1,
                     pub_port=2, state="ready", load=0.0, progress=0, seq=1, info=info)


def round_trip(body):
    return wire.decode(wire.encode(wire.Message(body))).body


def test_a_shard_heartbeat_comes_back_with_its_typed_info():
    info = ShardInfo(model="M", layers=(0, 15), n_layers=30, num_pages=64, page_size=16)
    e = PeerEntry.of(round_trip(beat("shard", info_map(info))), "heartbeat")
    assert e.info == info and e.info.layers == (0, 15) and e.info.serving
    assert e.machine == "" and e.name == "n"


@pytest.mark.parametrize("kind, info", [
    ("shard", {"layers": [15, 5]}),            # an empty range
    ("shard", {"layers": [0, 1, 2]}),
    ("shard", {"num_pages": "64"}),            # a string where a count goes
    ("scheduler", {"pipeline": "shard-0"}),
    ("tokenizer", {"vocab": 3}),               # a field no tokenizer tells
    ("echo", {"anything": 1}),                 # a kind without a record tells nothing more
])
def test_a_heartbeat_whose_info_does_not_fit_its_kind_is_a_bad_frame(kind, info):
    with pytest.raises(wire.BadFrame, match="info"):
        round_trip(beat(kind, info))


def test_a_handshake_is_checked_the_same_way():
    welcome = Welcome(name="n", kind="shard", instance="0", epoch=1, host="h", rpc_port=1,
                      pub_port=2, cluster="c", state="ready", info={"layers": [3, 3]})
    with pytest.raises(wire.BadFrame):
        round_trip(welcome)


def test_records_by_kind_and_a_failed_service_keeps_its_kind():
    assert type(info_of("echo", {})) is ServiceInfo
    health = info_of("health", {"mode": "children", "failed": {
        "shard-15": {"reason": "r", "kind": "shard", "info": {"layers": [15, 30], "model": "M"}}}})
    assert isinstance(health, HealthInfo)
    assert health.failed["shard-15"].last_info.layers == (15, 30)
    with pytest.raises(wire.BadFrame):
        info_of("health", {"failed": {"x": {"reason": "r", "kind": "shard", "info": {"layers": 7}}}})
