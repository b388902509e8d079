"""Child service processes that die with their parent and stop cleanly on request: what the
health watcher supervises in mode `children` (`llmbus up` runs its stack that way).

A child runs `llmbus ARGS` (the program `python -m services.cli` runs, named below as a string:
the watcher starts the command line, it does not import it)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bus.sockets import RANDOM_PORTS

from .forked import Forked, ForkServer, ForkServerGone


# The program a child runs: `llmbus`, as `python -m services.cli`.
LLMBUS = "services.cli"
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands out as outgoing connections' source ports (Linux's default if
    it does not say)."""
    try:
        lo, hi = (int(x) for x in EPHEMERAL_RANGE.read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


_cursor: int | None = None       # where this process looks for its next free port, below the range


def free_port() -> int:
    """A port free now on 127.0.0.1, below the ephemeral range and below where sockets asked for
    port 0 bind (bus.sockets.RANDOM_PORTS) where there is room, and none that this process has
    handed out before (until it has gone through the whole span).

    A child keeps its ports for life and its respawn binds them again. A port in the ephemeral
    range can be taken while the child is down: as any outgoing connection's source port, or by
    TCP's self-connect, where a client retrying the dead service's port draws that very port as
    its source, connects to itself and holds it (one in ~1500 tries here); a CI run whose killed
    scheduler never served again, every request to its port silent, fits this. The search
    walks on from a random start: the ports of one stack are handed out before any is bound, so
    a port free a moment ago is no proof that it was not just given to a sibling."""
    global _cursor
    span = min(ephemeral_range()[0], RANDOM_PORTS[0]) - LOWEST_PORT      # nor where port 0 binds land
    if span >= 1000:
        if _cursor is None:
            _cursor = random.randrange(span)
        for _ in range(2000):
            port, _cursor = LOWEST_PORT + _cursor % span, (_cursor + 1) % span
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:           # no room below the range: any free port
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    # Linux: the child gets SIGTERM when the parent dies, however it dies.
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def child_env() -> dict[str, str]:
    # One BLAS thread: a shard's kernels have their own pool (`llmbus run --blas-threads`).
    return dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")


def forkable(args: list[str]) -> bool:
    """Whether the fork server can run `llmbus ARGS`: it loaded numpy with one BLAS thread."""
    for i, a in enumerate(args):
        if a == "--blas-threads":
            return args[i + 1:i + 2] == ["1"]
        if a.startswith("--blas-threads="):
            return a == "--blas-threads=1"
    return True


@dataclass
class Children:
    log_dir: Path | None = None
    procs: list[subprocess.Popen | Forked] = field(default_factory=list)
    by_name: dict[str, subprocess.Popen | Forked] = field(default_factory=dict)
    specs: dict[str, list[str]] = field(default_factory=dict)
    forks: ForkServer | None = None     # warm starts for respawns, once fork_respawns() ran

    def start(self, name: str, args: list[str]) -> subprocess.Popen | Forked:
        """Start `llmbus ARGS` as child `name` (again, if it ran before): forked by the warm
        fork server where there is one, else a new interpreter."""
        log = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = self.log_dir / f"{name}.log"
        p = None
        if self.forks is not None and forkable(args):
            try:
                p = self.forks.spawn(args, log)
            except ForkServerGone:
                p = None
        if p is None:
            out = open(log, "ab") if log is not None else subprocess.DEVNULL
            try:
                p = subprocess.Popen([sys.executable, "-m", LLMBUS, *args], stdout=out,
                                     stderr=subprocess.STDOUT, env=child_env(),
                                     preexec_fn=die_with_parent)
            finally:
                if log is not None:
                    out.close()         # the child holds its own copy
        old = self.by_name.get(name)
        if old is not None:
            self.procs.remove(old)
        self.procs.append(p)
        self.by_name[name] = p
        self.specs[name] = list(args)
        return p

    def fork_respawns(self) -> None:
        """Start the fork server (it warms up in the background; until then, and if it fails,
        children start as new interpreters)."""
        if self.forks is None and hasattr(os, "fork") and os.path.isdir("/proc/self/task"):
            self.forks = ForkServer(child_env(), preexec_fn=die_with_parent)

    def respawn(self, name: str) -> subprocess.Popen | Forked:
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
        if self.forks is not None:
            self.forks.close()
            self.forks = None
