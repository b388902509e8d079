"""Start real llmbus processes for tests, and make sure they die with the test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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
    return e


class Procs:
    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def start(self, args: list[str], **kw) -> subprocess.Popen:
        p = subprocess.Popen(args, cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, **kw)
        self.procs.append(p)
        return p

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
