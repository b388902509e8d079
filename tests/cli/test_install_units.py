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
        assert "@" not in re.sub(r"llmbus-shard@|%i|@\.service|@system-service|@privileged|@resources",
                                 "", text.split("[Unit]")[1]), name
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


@pytest.fixture(scope="module")
def placed(tmp_path_factory, model_path):
    """A shard machine of a keyed cluster: two placed shards offering 1G each, and the key."""
    root = tmp_path_factory.mktemp("placed")
    key = root / "cluster.key"
    assert main(["keygen", "--out", str(key)]) == 0
    rc = main(["install-units", "--prefix", str(root / "units"), "--conf", str(root / "conf"),
               "--model", str(model_path), "--services", "", "--shards", "2", "--memory", "1G",
               "--key-file", str(key), "--cluster", "c1"])
    assert rc == 0
    return root


def test_placed_shards_of_a_keyed_cluster_get_no_layers_and_every_unit_takes_the_key(placed,
                                                                                       monkeypatch):
    conf = env_of(placed / "conf" / "cluster.env")
    assert conf["LLMBUS_KEY_FILE"] == str(placed / "cluster.key")
    shard_envs = sorted((placed / "conf").glob("shard-*.env"))
    assert len(shard_envs) == 2
    instances = [p.stem.removeprefix("shard-") for p in shard_envs]
    # Named after this host, so that placed shards of other machines never clash on the bus.
    assert instances[0].endswith("-0") and instances[1].endswith("-1") and instances[0] != "0"
    for p in shard_envs:
        assert env_of(p) == {"LLMBUS_ARGS": "--memory 1G"}
    target = (placed / "units" / "llmbus.target").read_text()
    assert all(f"llmbus-shard@{i}.service" in target for i in instances)
    # Every unit reads cluster.env, where LLMBUS_KEY_FILE is the default of --key-file.
    for name in UNITS[:-1]:
        text = (placed / "units" / name).read_text()
        assert f"EnvironmentFile={placed / 'conf'}/cluster.env" in text.splitlines(), name
    (exec_line,) = [line for line in (placed / "units" / "llmbus-shard@.service").read_text()
                    .splitlines() if line.startswith("ExecStart=")]
    line = exec_line.removeprefix("ExecStart=").replace("%i", instances[0])
    line = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: {**conf, "LLMBUS_ARGS": "--memory 1G"}[
        m.group(1) or m.group(2)], line)
    monkeypatch.setenv("LLMBUS_KEY_FILE", conf["LLMBUS_KEY_FILE"])   # as systemd passes it
    args = build_parser().parse_args(shlex.split(line)[3:])
    assert args.layers is None and args.memory == 1 << 30 and args.key_file == placed / "cluster.key"


def test_systemd_accepts_the_placed_shard_units(placed):
    require(shutil.which("systemd-analyze") is not None, "systemd-analyze is not installed")
    units = placed / "units"
    (first, _) = sorted((placed / "conf").glob("shard-*.env"))
    r = subprocess.run(["systemd-analyze", "verify", *[str(units / u) for u in UNITS],
                        str(units / f"llmbus-shard@{first.stem.removeprefix('shard-')}.service")],
                       capture_output=True, text=True, timeout=120)
    ours = [line for line in (r.stdout + r.stderr).splitlines() if "llmbus" in line]
    assert r.returncode == 0 and not ours, r.stdout + r.stderr


def test_a_key_file_others_can_read_is_refused_before_any_unit_is_written(tmp_path, model_path, capsys):
    key = tmp_path / "cluster.key"
    assert main(["keygen", "--out", str(key)]) == 0
    key.chmod(0o644)
    rc = main(["install-units", "--prefix", str(tmp_path / "units"), "--conf", str(tmp_path / "conf"),
               "--model", str(model_path), "--key-file", str(key)])
    assert rc == 2 and "chmod 600" in capsys.readouterr().err
    assert not (tmp_path / "units").exists()
