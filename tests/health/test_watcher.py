"""The watcher over the policy, in mode systemd: which heartbeats are its machine's, what systemctl
is asked, which events go out, what health.status and the heartbeat info say. No process is
started: the watched pids are this test's own (alive) and one that has certainly exited."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from services.health.cli import parse_children
from services.health.policy import HealthConfig, HealthPolicy
from services.health.systemd import SystemdMode
from services.health.watcher import UnknownService, Watcher
from wire.messages.bus import Heartbeat
from wire.messages.info import FailedService

CFG = HealthConfig(heartbeat_interval=0.5, heartbeat_misses=3, restart_budget=2,
                   budget_window=60.0, backoff_first=0.5)


def hb(name="shard-0", machine="m1", unit="llmbus-shard@0.service", pid=None, epoch=1,
       load=0.0, progress=0):
    return Heartbeat(name=name, kind="shard", instance="0", epoch=epoch, state="ready", load=load,
                     progress=progress, seq=1, host="h", rpc_port=1, pub_port=2,
                     info={"layers": [0, 15], "model": "M"}, machine=machine,
                     pid=os.getpid() if pid is None else pid, unit=unit)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def gone_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture
def world():
    ran, events, clock = [], [], Clock()
    # The units install-units wrote; /proc's word on each pid is taken as given here (the real
    # check: tests/security/test_forged_heartbeat.py).
    mode = SystemdMode("m1", ["llmbus-shard@0.service"], run=ran.append,
                       is_main=lambda pid, unit: True)
    w = Watcher(mode, CFG, events.append, me="health-0", machine="m1", clock=clock)
    return w, ran, events, clock


def test_only_services_of_its_own_machine_run_by_a_unit_are_watched(world):
    w, ran, events, clock = world
    w.heard(hb(name="other", machine="m2"))
    w.heard(hb(name="loose", unit=""))             # started by hand: nothing to restart it with
    w.heard(hb(name="health-0"))                   # not itself
    w.heard(hb())
    w.tick()
    assert sorted(w.policy.services) == ["shard-0"]
    assert [(e.kind, e.service, e.watcher, e.machine) for e in events] == [
        ("service_up", "shard-0", "health-0", "m1")]


def test_a_silent_unit_is_killed_by_systemctl_then_restarted_and_given_up_past_the_budget(world):
    w, ran, events, clock = world
    w.heard(hb())
    w.tick()
    clock.t += 1.6                                  # 3 heartbeats missed, and its CPU time
    w.policy.services["shard-0"].cpu_moved_at = 0   # ... has not moved: a hung process, here a
    hung = subprocess.Popen(["sleep", "60"])        # sleeping one (our own CPU time may tick on)
    try:
        w.mode.pids["shard-0"] = hung.pid
        actions = []
        for _ in range(3):
            actions += [a.kind for a in w.tick()]
    finally:
        hung.kill()
        hung.wait()
    assert actions == ["kill"]
    assert ran == [["systemctl", "kill", "--signal=SIGKILL", "--kill-whom=main",
                    "llmbus-shard@0.service"]]
    # Its process is gone: the watcher sees it, and asks systemd to start the unit again.
    w.mode.pids["shard-0"] = gone_pid()
    w.tick()
    assert ran[-1] == ["systemctl", "restart", "--no-block", "llmbus-shard@0.service"]
    for restart in range(2):                        # it comes back and dies again, twice
        w.heard(hb(epoch=2 + restart, pid=gone_pid()))
        clock.t += 5
        w.tick()
        w.tick()
    kinds = [e.kind for e in events]
    assert kinds.count("service_down") == 3 and kinds[-1] == "service_failed", kinds
    failed = events[-1]
    assert failed.info == {"layers": [0, 15], "model": "M"} and failed.restarts == 2
    assert "3 failures within 60 s" in failed.reason
    assert w.failed() == {"shard-0": FailedService(w.policy.services["shard-0"].last_error, "shard",
                                                   {"layers": [0, 15], "model": "M"})}
    assert failed.service_kind == "shard" and failed.last_info.layers == (0, 15)
    (row,) = w.status()
    assert (row.name, row.state, row.restarts, row.unit) == (
        "shard-0", "failed", 2, "llmbus-shard@0.service")
    n = len(ran)
    clock.t += 100
    w.tick()
    assert len(ran) == n                            # given up: systemd is asked nothing more


def test_kill_names_only_what_it_watches(world):
    w, ran, events, clock = world
    with pytest.raises(UnknownService, match="does not watch 'ghost'"):
        w.kill("ghost", 15)


def test_an_up_service_with_work_and_no_progress_shows_stalled_before_it_is_killed():
    p = HealthPolicy(CFG)
    p.started("s", 0.0)
    p.heard("s", epoch=1, load=2.0, progress=5, now=0.0)
    p.heard("s", epoch=1, load=2.0, progress=5, now=1.0)
    assert p.view(1.0)["s"]["state"] == "up"
    p.heard("s", epoch=1, load=2.0, progress=5, now=2.0)
    assert p.view(2.0)["s"]["state"] == "stalled"
    p.heard("s", epoch=1, load=2.0, progress=6, now=2.5)
    assert p.view(2.5)["s"]["state"] == "up"


def test_children_are_given_as_name_equals_arguments():
    assert parse_children(["shard-0=run shard --layers 0:15 --name 'shard 0'"]) == {
        "shard-0": ["run", "shard", "--layers", "0:15", "--name", "shard 0"]}
    for bad in (["shard-0"], ["=run shard"], ["a= "], ["a=run x", "a=run y"]):
        with pytest.raises(ValueError):
            parse_children(bad)
