"""`llmbus up --detach` and `llmbus down`: a stack in the background, found again by its file."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from .stacks import alive, busctl_hint, private_cluster, private_folder, running


def detach(args: argparse.Namespace, ready_timeout: float = 900.0) -> int:
    """Start `llmbus up` in its own session, wait until it is ready, print where it is."""
    cluster = args.cluster or private_cluster()
    argv = [a for a in args.argv if a not in ("-d", "--detach")]
    if args.cluster is None:
        argv += ["--cluster", cluster]
    logs = private_folder() / "logs" / cluster    # the folder of the stack's key, made private
    logs.mkdir(parents=True, exist_ok=True)
    relay = _Relay(logs / "up.log")
    with open(logs / "up.log", "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "services.cli", *argv], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + ready_timeout
    while True:
        relay.lines()    # the download's progress and each stage, as they happen
        stack = next((s for s in running() if s["cluster"] == cluster), None)
        if stack is not None:
            relay.lines()
            http = f"HTTP API at {stack['http']}, " if stack.get("http") else ""
            print(f"llmbus is up in the background (pid {proc.pid}, cluster {cluster}, {http}"
                  f"scheduler {stack['scheduler']}): talk to it with `llmbus chat`, inspect it "
                  f"with `{busctl_hint(cluster, args.cluster is not None)}`, stop it with `llmbus down`. Logs in {logs}.",
                  flush=True)
            return 0
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.terminate()
            relay.lines()     # its last words were relayed above
            print(f"llmbus up --detach: the stack did not come up (its log: {logs / 'up.log'})",
                  file=sys.stderr)
            return 1
        time.sleep(0.2)


class _Relay:
    """Copies the lines the background stack writes to its log onto this command's stderr."""

    def __init__(self, path):
        self.path = path
        self.at = path.stat().st_size if path.exists() else 0   # not an earlier run's lines
        self.partial = b""

    def lines(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.at)
                data = f.read()
        except OSError:
            return
        self.at += len(data)
        *done, self.partial = (self.partial + data).split(b"\n")
        for line in done:
            sys.stderr.write(line.decode(errors="replace") + "\n")
        sys.stderr.flush()


def stop_stacks(args: argparse.Namespace, timeout: float = 60.0) -> int:
    """SIGTERM the `llmbus up` of one stack (or all) and wait until it has stopped."""
    stacks = running()
    if args.cluster is not None:
        stacks = [s for s in stacks if s["cluster"] == args.cluster]
    elif not args.all:
        stacks = stacks[:1]
    if not stacks:
        print("llmbus down: no llmbus stack is running on this machine"
              + (f" with cluster {args.cluster}" if args.cluster else ""), file=sys.stderr)
        return 1
    for s in stacks:
        os.kill(s["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for s in stacks:
        while alive(s["pid"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(s["pid"]):
            print(f"llmbus down: {s['cluster']} (pid {s['pid']}) did not stop within {timeout:g}s",
                  file=sys.stderr)
            return 1
        print(f"stopped {s['cluster']}")
    return 0
