"""`llmbus up` refuses, before anything starts, where a stack of this machine already runs or a
port it was given is taken, saying which; `llmbus --version`."""

from __future__ import annotations

import socket
import subprocess
import sys
import tomllib

import pytest

from services.cli import build_parser
from services.cli.preflight import refusal, split_address
from services.cli.stacks import register
from tests.bus.procs import ROOT, cli, env

STACK = {"cluster": "local-1234", "pid": 42, "http": "http://127.0.0.1:8080",
         "scheduler": "127.0.0.1:5000", "peers": []}


def never_in_use(host, port):
    return False


def test_a_running_stack_on_the_same_address_or_cluster_is_named():
    why = refusal(http="127.0.0.1:8080", cluster=None, rpc_port=0, stacks=[STACK],
                  in_use=never_in_use)
    assert "already running here (cluster local-1234, pid 42, HTTP API at http://127.0.0.1:8080)" in why
    assert "llmbus down" in why
    why = refusal(http="127.0.0.1:9000", cluster="local-1234", rpc_port=0, stacks=[STACK],
                  in_use=never_in_use)
    assert "with cluster local-1234" in why and "llmbus down --cluster local-1234" in why
    # Another name of the same place is the same stack.
    for same in ("0.0.0.0:8080", "localhost:8080"):
        assert "already running here" in refusal(http=same, cluster=None, rpc_port=0,
                                                 stacks=[STACK], in_use=never_in_use)
    assert refusal(http="127.0.0.1:8081", cluster="other", rpc_port=0, stacks=[STACK],
                   in_use=never_in_use) is None
    # Port 0 (any free port) never collides.
    assert refusal(http="127.0.0.1:0", cluster=None, rpc_port=0, stacks=[
        {**STACK, "http": "http://127.0.0.1:0"}], in_use=never_in_use) is None


def test_a_port_taken_by_another_program_is_named_with_its_option():
    taken = {8080, 5555}
    in_use = lambda host, port: port in taken   # noqa: E731
    why = refusal(http="127.0.0.1:8080", cluster=None, rpc_port=0, stacks=[], in_use=in_use)
    assert why.startswith("port 8080 (--http 127.0.0.1:8080) is in use") and "--http" in why
    why = refusal(http="127.0.0.1:8081", cluster=None, rpc_port=5555, stacks=[], in_use=in_use)
    assert why.startswith("port 5555 (--port 5555) is in use")


def test_bad_addresses_are_refused_by_name():
    assert split_address("http://[::1]:80/") == ("::1", 80)
    for bad in ("8080", "host:", "host:99999", ":80"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            split_address(bad)


def up(runtime, *args):
    e = {**env(), "LLMBUS_RUNTIME_DIR": str(runtime)}
    return subprocess.run(cli("up", *args), cwd=ROOT, env=e, capture_output=True, text=True,
                          timeout=60)


def test_up_refuses_a_busy_port_and_a_running_stack_before_starting_anything(tmp_path):
    with socket.socket() as s:          # another program on the port
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = up(tmp_path, "--http", f"127.0.0.1:{port}")
        assert r.returncode == 2 and r.stdout == ""
        assert r.stderr == (f"llmbus up: port {port} (--http 127.0.0.1:{port}) is in use by "
                            f"another program on this machine: choose another with --http\n")
    # A stack this machine runs (its file names a live process: this test's).
    register("local-abcd", {"http": "http://127.0.0.1:18080", "scheduler": "127.0.0.1:1",
                            "peers": []}, {"LLMBUS_RUNTIME_DIR": str(tmp_path)})
    r = up(tmp_path, "--detach", "--http", "127.0.0.1:18080")
    assert r.returncode == 2
    assert "an llmbus stack is already running here (cluster local-abcd" in r.stderr
    # Nothing started: no services' logs, no second stack file.
    assert [p.name for p in tmp_path.iterdir()] == ["local-abcd.json"]


def test_a_bad_gateway_option_is_refused_before_anything_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LLMBUS_RUNTIME_DIR", str(tmp_path))
    args = build_parser().parse_args(["up", "--http", "127.0.0.1:0", "--allowed-host", "llm.lan",
                                      "--cors-origin", "front.example"])
    assert args.func(args) == 2
    assert capsys.readouterr().err == ("llmbus up: --cors-origin 'front.example': give an origin "
                                       "such as https://chat.example.com\n")
    assert list(tmp_path.iterdir()) == []         # no key made, no model pulled, nothing started


def test_version_is_the_packages():
    want = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    r = subprocess.run(cli("--version"), cwd=ROOT, env=env(), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout == f"llmbus {want}\n"
