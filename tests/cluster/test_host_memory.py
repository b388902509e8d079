"""A namespace host with a memory limit: what runs there is held to it, and a shard started
there without --memory offers its host's room, not the machine's free RAM."""

from __future__ import annotations

import subprocess
import sys

import pytest

from services.shard.cgroup import CgroupUnavailable, hierarchy
from tests.conftest import require

from .hosts import Hosts
from .netns import ROOT, why_not

pytestmark = pytest.mark.slow
MiB = 1 << 20


def test_a_hosts_processes_see_and_keep_its_memory_limit(tmp_path):
    why = why_not()
    require(not why, f"the test needs network namespaces: {why}")
    require(hierarchy() is not None, "the test needs a memory controller (cgroup v1 or v2)")
    hosts = Hosts(tmp_path)
    try:
        try:
            hosts.add("a", memory=256 * MiB)
        except CgroupUnavailable as e:
            require(False, f"the test needs a memory group: {e}")
        offer = subprocess.run(hosts.argv("a", [sys.executable, "-c", "from services.shard.cli import "
                                                "available_memory as a; print(a('cpu'))"]),
                               cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert offer.returncode == 0, offer.stderr
        assert 0 < int(offer.stdout) < 256 * MiB
        grow = subprocess.run(hosts.argv("a", [sys.executable, "-c", "b = bytearray(600 << 20); "
                                               "b[::4096] = b'x' * len(b[::4096])"]),
                              capture_output=True, timeout=60)
        assert grow.returncode != 0 and hosts.groups["a"].oom_kills() >= 1
    finally:
        hosts.close()
