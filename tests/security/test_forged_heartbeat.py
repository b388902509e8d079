"""The root health watcher (mode systemd) acts only on what it owns: the llmbus units install-units
wrote for this machine, and a pid only when /proc says it is that unit's main process. A forged
heartbeat naming `reboot.target` and a foreign pid makes it run nothing and signal nothing: every
systemctl call is recorded by a fake systemctl first on PATH."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys

import pytest

from bus.machine import machine_id
from services.health.policy import HealthConfig
from services.health.systemd import SystemdMode
from services.health.watcher import UnknownService, Watcher
from wire.messages.bus import Heartbeat

CFG = HealthConfig(heartbeat_interval=0.5, heartbeat_misses=3, restart_budget=2,
                   budget_window=60.0, backoff_first=0.5)


class Clock:
    t = 100.0

    def __call__(self):
        return self.t


def forged(name: str, unit: str, pid: int, epoch: int = 1) -> Heartbeat:
    return Heartbeat(name=name, kind="shard", instance="0", epoch=epoch, state="ready", load=0.0,
                     progress=0, seq=1, host="127.0.0.1", rpc_port=1, pub_port=2, info={},
                     machine=machine_id(), pid=pid, unit=unit)


@pytest.fixture
def systemctl(tmp_path, monkeypatch):
    """A systemctl on PATH that records its arguments, one call a line."""
    log = tmp_path / "calls"
    fake = tmp_path / "bin" / "systemctl"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    return log


def watcher_as_installed(tmp_path, clock, events) -> Watcher:
    """The watcher's mode as `llmbus install-units` configures it (health.env's arguments to
    `llmbus run health --mode systemd`), with systemctl run to its end (so that what the fake
    records is all there is)."""
    from bus.config import BusConfig, ServiceConfig
    from services.cli import build_parser
    from services.health.cli import build

    model = tmp_path / "m.gguf"
    model.write_bytes(b"")
    args = build_parser().parse_args(["install-units", "--prefix", str(tmp_path / "units"),
                                      "--conf", str(tmp_path / "conf"), "--model", str(model),
                                      "--layers", "0:30"])
    assert args.func(args) == 0
    health_env = tmp_path / "conf" / "health.env"
    owned = (shlex.split(health_env.read_text().split("=", 1)[1].strip().strip('"'))
             if health_env.exists() else [])
    args = build_parser().parse_args(["run", "health", "--mode", "systemd", *owned])
    svc = build(args, ServiceConfig(name="health-0", kind="health", discover=True,
                                    bus=BusConfig(mdns=False)))
    mode = svc.mode
    mode._run = lambda argv: subprocess.run(argv, check=False)
    return Watcher(mode, CFG, events.append, me="health-0", machine=machine_id(), clock=clock)


def test_a_forged_heartbeat_naming_reboot_target_and_a_foreign_pid_does_nothing(systemctl, tmp_path):
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        clock, events = Clock(), []
        w = watcher_as_installed(tmp_path, clock, events)
        for hb in (forged("shard-0", "reboot.target", victim.pid),
                   forged("evil", "systemd-logind.service", victim.pid),
                   # an owned unit's name, but the pid is not that unit's main process
                   forged("tokenizer-0", "llmbus-tokenizer.service", victim.pid),
                   forged("init", "llmbus-shard@0.service", 1)):
            w.heard(hb)
        w.tick()
        clock.t += 10                    # every one of them silent: a real one would be killed
        for _ in range(5):
            w.tick()
            clock.t += 1
        for name in ("shard-0", "evil", "tokenizer-0", "init"):
            try:                         # what `busctl kill NAME --signal SIGKILL` reaches
                w.kill(name, signal.SIGKILL)
            except (UnknownService, ProcessLookupError):
                pass
        assert not systemctl.exists(), systemctl.read_text()
        assert victim.poll() is None, "the foreign process was signalled"
        assert w.policy.services == {} and events == []
    finally:
        victim.kill()
        victim.wait()


def test_a_unit_is_only_acted_on_for_its_main_process(tmp_path):
    """/proc's word: in the unit's cgroup, its parent outside it (a fake /proc tree here)."""
    from services.health.systemd import is_main_process

    def proc(pid: int, ppid: int, cgroup: str) -> None:
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "stat").write_bytes(f"{pid} (py thon) S {ppid} 1 1 0".encode())
        (d / "cgroup").write_text(cgroup)
    proc(1, 0, "0::/init.scope\n")
    proc(400, 1, "0::/system.slice/llmbus-shard@0.service\n")
    proc(401, 400, "0::/system.slice/llmbus-shard@0.service\n")        # a child of the service
    proc(500, 1, "1:name=systemd:/system.slice/llmbus-shard@0.service\n0::/\n")   # cgroup v1
    proc(600, 1, "0::/user.slice/user-1000.slice/session-3.scope\n")
    main = lambda pid, unit: is_main_process(pid, unit, proc=str(tmp_path))  # noqa: E731
    assert main(400, "llmbus-shard@0.service") and main(500, "llmbus-shard@0.service")
    assert not main(401, "llmbus-shard@0.service")
    assert not main(400, "llmbus-tokenizer.service")
    assert not main(600, "llmbus-shard@0.service") and not main(1, "init.scope")
    assert not main(999, "llmbus-shard@0.service")                       # gone


def test_only_llmbus_units_can_be_owned():
    with pytest.raises(ValueError, match="llmbus-"):
        SystemdMode("m", ["reboot.target"])
    with pytest.raises(ValueError, match="llmbus-"):
        SystemdMode("m", ["llmbus-x.service ; reboot"])


def test_install_units_gives_the_watcher_the_units_it_wrote(tmp_path):
    from services.cli import build_parser
    from services.health.cli import add_arguments
    import argparse
    import shlex

    model = tmp_path / "m.gguf"
    model.write_bytes(b"")
    args = build_parser().parse_args(["install-units", "--prefix", str(tmp_path / "units"),
                                      "--conf", str(tmp_path / "conf"), "--model", str(model),
                                      "--layers", "0:15", "--layers", "15:30"])
    assert args.func(args) == 0
    env = (tmp_path / "conf" / "health.env").read_text()
    health_args = shlex.split(env.split("=", 1)[1].strip().strip('"'))
    p = argparse.ArgumentParser()
    add_arguments(p)
    owned = p.parse_args(health_args).watch_units
    assert sorted(owned) == ["llmbus-gateway.service", "llmbus-scheduler.service",
                             "llmbus-shard@0.service", "llmbus-shard@15.service",
                             "llmbus-tokenizer.service"]
    unit = (tmp_path / "units" / "llmbus-health.service").read_text()
    assert f"EnvironmentFile=-{tmp_path / 'conf'}/health.env" in unit.splitlines()
