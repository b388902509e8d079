"""The fork server behind respawns: a forked `llmbus` child runs its command as a new
interpreter would (output to its log, exit status told back, killed by a signal as -signal),
and starts clean: nothing of the server's pipes, signal dispositions or threads."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from services.health.processes import Children, child_env, forkable
from services.health.forked import ForkServer, ForkServerGone
from tests.bus.procs import env, unique_cluster
from tests.waiting import until_sync


def fork_server() -> ForkServer:
    return ForkServer(dict(child_env(), **env()))   # PYTHONPATH: the checkout under test


@pytest.fixture(scope="module")
def server():
    s = fork_server()
    until_sync(lambda: s.ready or s.error, 120, what="the fork server warm")
    assert s.ready, s.error
    yield s
    s.close()
    assert s._proc.returncode == 0


def test_a_command_runs_with_its_output_in_the_log_and_its_exit_status(server, tmp_path):
    log = tmp_path / "pull-help.log"
    p = server.spawn(["pull", "--help"], log)
    assert p.wait(60) == 0
    assert "usage: llmbus pull" in log.read_text()
    bad = server.spawn(["no-such-command"], log)
    assert bad.wait(60) == 2                           # argparse's status for bad usage
    assert "invalid choice: 'no-such-command'" in log.read_text()


def fds(pid: int) -> set[str]:
    return {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}


def ignored_signals(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("SigIgn:")).split()[1], 16)


def test_a_forked_service_starts_clean_and_a_kill_is_told_as_minus_the_signal(server, tmp_path):
    p = server.spawn(["run", "echo", "--name", "echo-fork", "--cluster", unique_cluster(),
                      "--no-mdns", "--no-discover"], tmp_path / "echo.log")
    try:
        until_sync(lambda: len(os.listdir(f"/proc/{p.pid}/task")) > 1, 60,
                   what="the service's own threads (zmq's, started after the fork)")
        server_pid = server._proc.pid
        assert len(os.listdir(f"/proc/{server_pid}/task")) == 1   # the server forks threadless
        pipes = {link for link in fds(server_pid) if link.startswith("pipe:")}
        assert pipes and not pipes & fds(p.pid)          # none of the server's pipes leaked in
        assert ignored_signals(server_pid) & (1 << (signal.SIGINT - 1))
        assert not ignored_signals(p.pid) & (1 << (signal.SIGINT - 1))   # Ctrl-C stops it again
        assert p.poll() is None
    finally:
        p.kill()
    assert p.wait(30) == -signal.SIGKILL
    assert p.poll() == -signal.SIGKILL


def test_only_one_blas_thread_is_forkable():
    assert forkable(["run", "shard"])
    assert forkable(["run", "shard", "--blas-threads", "1"])
    assert not forkable(["run", "shard", "--blas-threads", "4"])
    assert forkable(["run", "shard", "--blas-threads=1"])
    assert not forkable(["run", "shard", "--blas-threads=2", "--threads", "1"])


def test_once_the_server_ended_children_start_as_new_interpreters(tmp_path):
    s = fork_server()
    s.close(timeout=120)                               # its requests closed: it ends
    assert s._proc.returncode == 0 and not s.alive
    with pytest.raises(ForkServerGone):
        s.spawn(["pull", "--help"], tmp_path / "x.log")
    kids = Children(log_dir=tmp_path, forks=s)
    p = kids.start("help", ["pull", "--help"])
    assert isinstance(p, subprocess.Popen) and p.wait(60) == 0
    assert "usage: llmbus pull" in (tmp_path / "help.log").read_text()
