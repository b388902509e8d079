"""The watcher's side of the fork server (services/health/forkserver.py): start it, ask it for a
child, and hold each child as a `Forked`, which answers like the subprocess.Popen of a child
started the usual way (pid, poll, wait, send_signal, kill, returncode)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


class ForkServerGone(RuntimeError):
    """The fork server is not (or no longer) there to fork: start the child the usual way."""


class Forked:
    """A child of the fork server; its exit status comes from the server, which reaps it."""

    def __init__(self, server: "ForkServer", pid: int):
        self.server = server
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server._status(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.poll() is None:
            self.returncode = self.server._wait(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """One warm fork server, started with the children's environment."""

    def __init__(self, env: dict[str, str], preexec_fn=None):
        self._proc = subprocess.Popen([sys.executable, "-m", "services.health.forkserver"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                      preexec_fn=preexec_fn)
        self._cond = threading.Condition()
        self._pids: list[int] = []              # forked, not yet taken by spawn()
        self._exits: dict[int, int] = {}
        self.ready = False
        self.error = ""
        self._gone = False                      # its replies ended: it exited
        self._lock = threading.Lock()           # one request and its pid reply at a time
        self._reader = threading.Thread(target=self._read, name="forkserver", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self.ready and self._proc.poll() is None

    def spawn(self, args: list[str], log: Path | None, timeout: float = 5.0) -> Forked:
        """Fork `llmbus ARGS` with its output appended to `log`; raises ForkServerGone."""
        if not self.alive:
            raise ForkServerGone(self.error or "the fork server is not ready")
        with self._lock:
            try:
                self._proc.stdin.write(json.dumps({"args": list(args),
                                                   "log": str(log) if log else None}).encode() + b"\n")
                self._proc.stdin.flush()
            except (BrokenPipeError, ValueError) as e:
                raise ForkServerGone(f"the fork server stopped ({e})") from None
            with self._cond:
                if not self._cond.wait_for(lambda: self._pids or not self.alive, timeout):
                    raise ForkServerGone(f"no fork within {timeout:g} s")
                if not self._pids:
                    raise ForkServerGone(self.error or "the fork server stopped")
                pid = self._pids.pop(0)
                self._exits.pop(pid, None)      # a pid used before, by a child already gone
        return Forked(self, pid)

    def close(self, timeout: float = 5.0) -> None:
        """End the fork server (its children, if any are left, get SIGTERM)."""
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout)

    def _read(self) -> None:
        for line in self._proc.stdout:
            reply = json.loads(line)
            with self._cond:
                if "pid" in reply:
                    self._pids.append(reply["pid"])
                elif "exit" in reply:
                    self._exits[reply["exit"]] = reply["status"]
                elif reply.get("ready"):
                    self.ready = True
                elif "error" in reply:
                    self.error = f"the fork server did not start: {reply['error']}"
                self._cond.notify_all()
        with self._cond:
            self.error = self.error or f"the fork server exited ({self._proc.wait()})"
            self.ready, self._gone = False, True
            self._cond.notify_all()

    def _status(self, pid: int) -> int | None:
        with self._cond:
            if pid in self._exits:
                return self._exits[pid]
            if not self._gone:
                return None
        # The server is gone, and so are the exits it would have told: a child that no longer
        # exists has ended, with a status nobody can know.
        return None if os.path.exists(f"/proc/{pid}") else -1

    def _wait(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._cond.wait_for(lambda: pid in self._exits or self._gone, timeout)
        while (status := self._status(pid)) is None and self._gone:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.05)        # no server to tell its exit: look for it in /proc
        return status
