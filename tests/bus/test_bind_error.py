"""A service whose port is taken says so in one line and exits 1, instead of a traceback."""

import subprocess

import zmq

from .procs import ROOT, cli, env, unique_cluster


def test_a_port_in_use_is_one_clear_line_and_exit_1():
    ctx = zmq.Context.instance()
    holder = ctx.socket(zmq.ROUTER)
    port = holder.bind_to_random_port("tcp://127.0.0.1")
    try:
        r = subprocess.run(cli("run", "echo", "--cluster", unique_cluster(), "--interface", "127.0.0.1",
                               "--no-mdns", "--rpc-port", str(port)),
                           cwd=ROOT, env=env(), capture_output=True, text=True, timeout=60)
    finally:
        holder.close(linger=0)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.strip() == (f"llmbus run echo: [Errno {zmq.EADDRINUSE}] cannot bind "
                                f"tcp://127.0.0.1:{port}: Address already in use")
