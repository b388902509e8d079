"""Hosts for multi-host runs: each a network namespace (netns.Network) with its own hostname,
its own cache directory and, when given one, a memory limit of its own (a control group).

Every process a host starts runs in its namespace and its group, its output in a log file.
`close()` ends them all and removes the groups and namespaces, even after a failure.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from services.shard.cgroup import MemoryGroup

from .netns import ROOT, Network


class Hosts:
    def __init__(self, logs: Path, delay_ms: float = 0.0):
        self.logs = logs
        self.logs.mkdir(parents=True, exist_ok=True)
        self.net = Network(delay_ms=delay_ms)
        self.addr: dict[str, str] = {}
        self.groups: dict[str, MemoryGroup] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.host_of: dict[str, str] = {}

    def add(self, host: str, memory: int | None = None) -> str:
        """A new host; with `memory`, everything it runs shares that many bytes, page cache included."""
        self.addr[host] = self.net.add(host)
        if memory is not None:
            self.groups[host] = MemoryGroup(memory, host)
        (self.logs / host / "cache").mkdir(parents=True, exist_ok=True)
        return self.addr[host]

    def cache(self, host: str) -> Path:
        """The host's own cache directory ($LLMBUS_CACHE): its range caches are its own."""
        return self.logs / host / "cache"

    def argv(self, host: str, argv: list[str]) -> list[str]:
        """argv as `host` runs it: in its namespace, under its hostname, in its memory group."""
        cmd = self.net.cmd(host, ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host, *argv])
        return self.groups[host].argv(cmd) if host in self.groups else cmd

    def start(self, host: str, label: str, argv: list[str], env: dict | None = None,
              **kw) -> subprocess.Popen:
        """Start argv on `host`; its output goes to <logs>/<label>.log (its stderr to
        <logs>/<label>.err when stdout is given)."""
        e = {**os.environ, "LLMBUS_CACHE": str(self.cache(host)), **(env or {})}
        if "stdout" not in kw:
            kw["stdout"] = open(self.logs / f"{label}.log", "w")
            kw["stderr"] = subprocess.STDOUT
        else:
            kw.setdefault("stderr", open(self.logs / f"{label}.err", "w"))
        p = subprocess.Popen(self.argv(host, argv), cwd=ROOT, env=e, text=True, **kw)
        self.procs[label], self.host_of[label] = p, host
        return p

    def kill(self, label: str, sig: int = signal.SIGKILL) -> None:
        self.procs[label].send_signal(sig)

    def memory(self, label: str) -> dict[str, int]:
        """A live process's resident bytes: all, anonymous, and file pages (mapped weights)."""
        out = {}
        with open(f"/proc/{self.procs[label].pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                    out[key] = int(value.split()[0]) * 1024
        return out

    def stop(self, labels=None) -> None:
        procs = [self.procs[k] for k in (labels or list(self.procs))]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                pass

    def close(self) -> None:
        self.stop()
        for g in self.groups.values():
            try:
                g.close()
            except OSError:        # a process that outlived its kill still holds it
                pass
        self.net.close()
