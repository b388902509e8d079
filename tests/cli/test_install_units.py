"""`llmbus install-units` writes units that systemd accepts (`systemd-analyze verify`, warnings
included) and whose command lines `llmbus` itself accepts, for this machine's python and model."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys

import pytest

from services.cli import build_parser, main
from tests.conftest import require

UNITS = ("llmbus-health.service", "llmbus-shard@.service", "llmbus-tokenizer.service",
         "llmbus-scheduler.service", "llmbus-gateway.service", "llmbus.target")


@pytest.fixture(scope="module")
def installed(tmp_path_factory, model_path):
    root = tmp_path_factory.mktemp("units")
    rc = main(["install-units", "--prefix", str(root / "units"), "--conf", str(root / "conf"),
               "--model", str(model_path), "--shards", "2", "--cluster", "c1",
               "--peer", "10.0.0.2:5555"])
    assert rc == 0
    return root


def env_of(path) -> dict:
    return {k: shlex.split(v)[0] if shlex.split(v) else "" for k, _, v in
            (line.partition("=") for line in path.read_text().splitlines() if line)}


def test_systemd_accepts_every_unit_and_a_shard_instance(installed):
    require(shutil.which("systemd-analyze") is not None, "systemd-analyze is not installed")
    units = installed / "units"
    assert sorted(p.name for p in units.iterdir()) == sorted(UNITS)
    conf = env_of(installed / "conf" / "cluster.env")
    shard_envs = sorted((installed / "conf").glob("shard-*.env"))
    first = shard_envs[0].stem.split("-")[1]
    r = subprocess.run(["systemd-analyze", "verify", *[str(units / u) for u in UNITS],
                        str(units / f"llmbus-shard@{first}.service")],
                       capture_output=True, text=True, timeout=120)
    ours = [line for line in (r.stdout + r.stderr).splitlines() if "llmbus" in line]
    assert r.returncode == 0 and not ours, r.stdout + r.stderr
    assert conf == {"LLMBUS_CLUSTER": "c1", "LLMBUS_PEERS": "10.0.0.2:5555",
                    "LLMBUS_MODEL": conf["LLMBUS_MODEL"], "LLMBUS_HTTP": "127.0.0.1:8080"}


def test_the_units_are_notify_services_with_watchdog_start_limits_and_their_unit_name(installed):
    for name in UNITS[:-1]:
        text = (installed / "units" / name).read_text()
        for line in ("Type=notify", "WatchdogSec=15", "StartLimitBurst=5",
                     "StartLimitIntervalSec=60", "Restart=on-failure", "Environment=LLMBUS_UNIT=%n",
                     f"EnvironmentFile={installed / 'conf'}/cluster.env",
                     "WantedBy=llmbus.target"):
            assert line in text.splitlines(), (name, line)
        assert "@" not in re.sub(r"llmbus-shard@|%i|@\.service", "", text.split("[Unit]")[1]), name
    target = (installed / "units" / "llmbus.target").read_text()
    shards = sorted(p.stem.split("-")[1] for p in (installed / "conf").glob("shard-*.env"))
    assert len(shards) == 2
    for s in shards:
        assert f"llmbus-shard@{s}.service" in target


def test_every_command_line_is_one_llmbus_accepts(installed, model_path):
    conf = env_of(installed / "conf" / "cluster.env")
    assert conf["LLMBUS_MODEL"] == str(model_path.resolve())
    shard_env = sorted((installed / "conf").glob("shard-*.env"))[0]
    instance = shard_env.stem.split("-")[1]
    env = {**conf, **env_of(shard_env), "LLMBUS_SCHEDULER_ARGS": "", "LLMBUS_GATEWAY_ARGS": "",
           "LLMBUS_HEALTH_ARGS": ""}
    for name in UNITS[:-1]:
        (exec_line,) = [line for line in (installed / "units" / name).read_text().splitlines()
                        if line.startswith("ExecStart=")]
        line = exec_line.removeprefix("ExecStart=").replace("%i", instance).replace("%H", "host")
        line = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env[m.group(1) or m.group(2)], line)
        argv = shlex.split(line)
        assert argv[:3] == [sys.executable, "-m", "services.cli"], name
        args = build_parser().parse_args(argv[3:])     # exits (fails the test) on a bad option
        assert args.command == "run", name
    assert args.kind == "gateway"
