"""Child service processes that die with their parent and stop cleanly on request."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def private_cluster() -> str:
    return f"local-{uuid.uuid4().hex[:8]}"


def _die_with_parent() -> None:
    # Linux: the child gets SIGTERM when the parent dies, however it dies.
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class Children:
    log_dir: Path | None = None
    procs: list[subprocess.Popen] = field(default_factory=list)
    by_name: dict[str, subprocess.Popen] = field(default_factory=dict)
    specs: dict[str, list[str]] = field(default_factory=dict)

    def start(self, name: str, args: list[str]) -> subprocess.Popen:
        """Start `llmbus ARGS` as child `name` (again, if it ran before)."""
        out = subprocess.DEVNULL
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            out = open(self.log_dir / f"{name}.log", "ab")
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        p = subprocess.Popen([sys.executable, "-m", "services.cli", *args], stdout=out,
                             stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent)
        old = self.by_name.get(name)
        if old is not None:
            self.procs.remove(old)
        self.procs.append(p)
        self.by_name[name] = p
        self.specs[name] = list(args)
        return p

    def respawn(self, name: str) -> subprocess.Popen:
        return self.start(name, self.specs[name])

    def dead(self) -> list[subprocess.Popen]:
        return [p for p in self.procs if p.poll() is not None]

    def exited(self) -> dict[str, int]:
        """Children that exited, by name, with their exit status."""
        return {n: p.returncode for n, p in self.by_name.items() if p.poll() is not None}

    def stop(self, timeout: float = 10.0, first: tuple[str, ...] = ()) -> None:
        """SIGTERM every child and wait; the children named in `first` stop (and drain) before
        the others, e.g. a scheduler that needs its shards to finish what is in flight."""
        for name in first:
            p = self.by_name.get(name)
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout + 5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
