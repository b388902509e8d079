"""The delaying bridge: two hosts on it see each other's frames late by the delay each way,
every byte arrives intact, and multicast (what mDNS needs) crosses it."""

from __future__ import annotations

import pytest

from tests.conftest import require

from .link_probe import probe
from .netns import Network, why_not

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("delay_ms", [0, 4])
def test_frames_between_hosts_are_late_by_the_delay_each_way(delay_ms):
    why = why_not()
    require(not why, f"the bridge test needs network namespaces: {why}")
    net = Network(delay_ms=delay_ms)
    try:
        net.add("a"), net.add("b")
        got = probe(net, "a", "b")
        assert got["heard"] == "hello by multicast" and got["intact"], got
        # A round trip crosses the bridge twice: never faster than twice the delay.
        assert got["min_rtt_s"] >= 2 * delay_ms / 1000, got
        sent, _ = net.link_bytes("a")
        assert sent >= 8 << 20
    finally:
        net.close()
