"""Start real llmbus processes for tests, and make sure they die with the test."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from services.health.processes import free_port  # noqa: F401  (re-exported for the tests)

ROOT = Path(__file__).resolve().parents[2]


def unique_cluster() -> str:
    # mDNS is shared by everything on this machine: a cluster of its own keeps tests apart.
    return f"t{uuid.uuid4().hex[:10]}"


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "services.cli", *args]


def busctl_cmd(*args: str) -> list[str]:
    script = Path(sys.executable).parent / "busctl"
    return [str(script), *args] if script.exists() else [sys.executable, "-m", "bus.busctl", *args]


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e["OPENBLAS_NUM_THREADS"] = "1"
    e["PYTHONFAULTHANDLER"] = "1"      # a crash, or the SIGABRT of Procs.report, prints every thread's stack
    return e


class Procs:
    """Processes a test starts, each writing what it prints to a log file of its own (a pipe nobody
    reads fills at 64 KiB and then blocks the process in its next write: a service that stops
    answering for no reason its code shows), read back by `output` and `report`."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []
        self._logs = Path(tempfile.mkdtemp(prefix="llmbus-procs-"))
        self._started = 0

    def start(self, args: list[str], **kw) -> subprocess.Popen:
        self._logs.mkdir(mode=0o700, exist_ok=True)      # again after a stop_all
        self._started += 1
        log = self._logs / f"{self._started}.log"
        with open(log, "ab") as out:           # appends: the child's writes never overwrite each other
            p = subprocess.Popen(args, cwd=ROOT, env=env(), stdout=out, stderr=subprocess.STDOUT,
                                 text=True, **kw)
        p.log = log
        self.procs.append(p)
        return p

    def output(self, p: subprocess.Popen, tail: int = 4000) -> str:
        """The last `tail` characters `p` printed."""
        try:
            return p.log.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def exited(self) -> list[subprocess.Popen]:
        return [p for p in self.procs if p.poll() is not None]

    def report(self, stacks: bool = False) -> str:
        """How each process stands, with what it printed last. stacks: first make each one still
        running print every thread's stack (SIGABRT under PYTHONFAULTHANDLER; it then exits), to say
        where a process that stopped answering is stuck."""
        if stacks:
            running = [p for p in self.procs if p.poll() is None]
            for p in running:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGABRT)
            for p in running:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    pass
        parts = []
        for p in self.procs:
            state = "running" if p.poll() is None else f"exited {p.returncode}"
            parts.append(f"--- {_name(p.args)} (pid {p.pid}, {state}); its output ends:\n{self.output(p)}")
        return "\n".join(parts)

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self._logs, ignore_errors=True)


def _name(args) -> str:
    args = list(args)
    return args[args.index("--name") + 1] if "--name" in args[:-1] else " ".join(map(str, args[2:5]))
