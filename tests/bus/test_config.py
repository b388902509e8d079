import pytest

from bus.config import BusConfig, ServiceConfig, parse_peer


def test_peer_parsing():
    assert parse_peer("10.0.0.5:7000") == ("10.0.0.5", 7000)
    assert parse_peer("[::1]:7000") == ("::1", 7000)
    for bad in ("10.0.0.5", ":7000", "host:0", "host:99999", "host:http"):
        with pytest.raises(ValueError, match="HOST:RPC_PORT"):
            parse_peer(bad)


def test_config_is_validated_when_built():
    with pytest.raises(ValueError, match="cluster"):
        BusConfig(cluster="bad name!")
    with pytest.raises(ValueError, match="heartbeat_interval"):
        BusConfig(heartbeat_interval=0)
    with pytest.raises(ValueError, match="HOST:RPC_PORT"):
        BusConfig(peers=("nope",))
    with pytest.raises(ValueError, match="name"):
        ServiceConfig(name="", kind="echo")
    with pytest.raises(ValueError, match="port"):
        ServiceConfig(name="a", kind="echo", rpc_port=70000)


def test_dead_after_is_three_heartbeats_and_wildcard_binds_advertise_loopback():
    c = BusConfig(host="0.0.0.0")
    assert c.dead_after == pytest.approx(1.5)
    assert c.advertised == "127.0.0.1"
    assert BusConfig(host="0.0.0.0", advertise_host="10.1.2.3").advertised == "10.1.2.3"
