"""Pure parts of the gateway: field checks, the key check, what health says is missing,
bus errors as HTTP errors."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, strategies as st

from bus.errors import PeerDead, RemoteError
from gateway import auth, health
from gateway.config import GatewayConfig, parse_http
from gateway.errors import (BadRequest, Overloaded, Unauthorized, Unavailable, UpstreamFailed,
                            UpstreamTimeout, failed_in_cluster, from_bus)
from gateway.fields import Fields, text_of
from wire.messages.info import info_of
from wire.failures import DEADLINE, INTERNAL, RANGE_FAILED, SCHEDULER_STOPPED, TABLE, UNSERVED


def test_fields_name_the_field_at_fault():
    f = Fields({"n": 2.5, "t": "hot", "opts": {"seed": "x"}, "stop": ["a", 3]})
    for call, param in [(lambda: f.int("n"), "n"), (lambda: f.num("t"), "t"),
                        (lambda: f.obj("opts").int("seed"), "opts.seed"),
                        (lambda: f.stops("stop"), "stop"), (lambda: f.str("model", required=True), "model")]:
        with pytest.raises(BadRequest) as e:
            call()
        assert e.value.param == param and param in e.value.message


def test_fields_accept_json_integers_written_as_floats_and_treat_null_as_absent():
    f = Fields({"max_tokens": 3.0, "seed": None, "stop": "END"})
    assert f.int("max_tokens") == 3 and f.int("seed", 7) == 7 and f.stops("stop") == ["END"]


@pytest.mark.parametrize("value", [True, float("nan"), "1", [1]])
def test_numbers_refuse_what_json_clients_may_send_by_mistake(value):
    with pytest.raises(BadRequest):
        Fields({"temperature": value}).num("temperature")


def test_ranges_are_checked():
    with pytest.raises(BadRequest, match=r"temperature is 3.0, outside 0.0..2.0"):
        Fields({"temperature": 3}).num("temperature", 1.0, 0.0, 2.0)


@given(st.lists(st.text(max_size=5), max_size=4))
def test_text_parts_join_in_order(parts):
    assert text_of([{"type": "text", "text": p} for p in parts], "content") == "".join(parts)


def test_image_parts_are_refused_by_name():
    with pytest.raises(BadRequest) as e:
        text_of([{"type": "text", "text": "a"}, {"type": "image_url"}], "messages[0].content")
    assert e.value.param == "messages[0].content[1]"


def test_the_key_is_checked_from_either_header():
    auth.check(None, {})                                   # no key configured: open
    auth.check("s3cret", {"Authorization": "Bearer s3cret"})
    auth.check("s3cret", {"x-api-key": "s3cret"})
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"x-api-key": "s3cre"}):
        with pytest.raises(Unauthorized):
            auth.check("s3cret", headers)


def test_the_key_file_wins_over_the_environment(tmp_path):
    key = tmp_path / "key"
    key.write_text("from-file\n")
    key.chmod(0o600)
    assert auth.load_key(key, {"LLMBUS_API_KEY": "from-env"}) == "from-file"
    assert auth.load_key(None, {"LLMBUS_API_KEY": "from-env"}) == "from-env"
    assert auth.load_key(None, {}) is None
    key.write_text("  \n")
    with pytest.raises(ValueError, match="empty"):
        auth.load_key(key, {})


def test_http_addresses():
    assert parse_http("0.0.0.0:9000") == ("0.0.0.0", 9000)
    assert parse_http(":0") == ("127.0.0.1", 0)
    with pytest.raises(ValueError):
        parse_http("localhost:http")
    with pytest.raises(ValueError):
        GatewayConfig(port=70000)


@dataclass
class Entry:
    name: str
    kind: str
    state: str = "ready"
    info: dict = field(default_factory=dict)
    instance: str = "0"
    epoch: int = 1
    load: float = 0.0
    last_seen: float = 0.0
    rpc_endpoint: str = "tcp://127.0.0.1:1"

    def __post_init__(self):
        self.info = info_of(self.kind, self.info)   # as a heartbeat's is read


def shard(name, a, b, n=30, model="m"):
    return Entry(name, "shard", info={"layers": [a, b], "n_layers": n, "model": model})


def test_health_names_what_is_missing():
    assert health.missing([], None) == ["tokenizer: none has answered yet",
                                        "scheduler: none ready",
                                        "shards: no ready shard holds any layer"]
    tok = Entry("tokenizer-0", "tokenizer", info={"model": "m"})
    entries = [tok, Entry("scheduler-0", "scheduler", "starting", {"model": "m"}),
               shard("shard-0", 0, 10), shard("shard-20", 20, 25)]
    assert health.missing(entries, "m") == [
        "scheduler: none ready (seen: scheduler-0 (starting))",
        "shards: layers 10:20 are held by no ready shard",
        "shards: layers 25:30 are held by no ready shard"]
    whole = [tok, Entry("scheduler-0", "scheduler", info={"model": "m"}), shard("a", 0, 19),
             shard("b", 19, 30), shard("other", 0, 30, model="x")]
    assert health.missing(whole, "m") == []
    assert health.missing(whole[:3] + [shard("b", 19, 30, model="x")], "m") == [
        "shards: layers 19:30 are held by no ready shard"]
    assert health.missing(whole[1:], "m") == ["tokenizer: none ready"]


def test_cluster_view_orders_the_layer_map():
    view = health.cluster_view([shard("b", 19, 30), shard("a", 0, 19)], now=2.0)
    assert [s["shard"] for s in view["layer_map"]] == ["a", "b"]
    assert view["services"][0]["heartbeat_age_s"] == 2.0


def test_bus_errors_become_http_errors():
    full = from_bus(RemoteError("queue_full", "256 waiting", retry_after=2.5))
    assert isinstance(full, Overloaded) and full.status == 429 and full.retry_after == 2.5
    bad = from_bus(RemoteError("bad_max_tokens", "too many"))
    assert isinstance(bad, BadRequest) and bad.param == "max_tokens"
    assert isinstance(from_bus(RemoteError("starting", "...")), Unavailable)
    assert isinstance(from_bus(PeerDead("gone")), Unavailable)
    assert isinstance(from_bus(RemoteError("internal", "oops")), UpstreamFailed)


def test_a_request_failed_in_the_cluster_gets_the_status_of_its_code_never_of_its_text():
    # The codes the scheduler ends a request with (policy.expire, the service's range check and
    # on_stop, the driver's budget); the text is for people only.
    gone = failed_in_cluster(RANGE_FAILED, "layers 15:30 of M are held by no ready shard and ...")
    assert isinstance(gone, Unavailable) and gone.status == 503 and "layers 15:30" in gone.message
    assert gone.retry_after is None                 # it will not come back by itself
    stopped = failed_in_cluster(SCHEDULER_STOPPED, "the scheduler stopped before this finished")
    assert stopped.status == 503 and stopped.retry_after == 1.0
    late = failed_in_cluster(DEADLINE, "deadline: 2 s passed with 3 of 40 tokens generated")
    assert isinstance(late, UpstreamTimeout) and late.status == 504
    other = failed_in_cluster(UNSERVED, "every batch on ['shard-0'] failed (last: x); nothing "
                                        "served for 300 s")
    assert isinstance(other, UpstreamFailed) and other.status == 500
    # The same words under another code get that code's status: the text decides nothing.
    assert failed_in_cluster(DEADLINE, "range_failed: the scheduler stopped").status == 504
    assert "no reason given" in failed_in_cluster(INTERNAL, "").message
    assert failed_in_cluster("", "an older scheduler").status == 500


def test_every_code_of_the_table_becomes_its_status_from_the_bus():
    for code, f in TABLE.items():
        e = from_bus(RemoteError(code, "x"))
        assert e.status == f.http and e.param == f.field, code
        assert (e.retry_after is not None) == (f.retry and f.http in (429, 503)), code
