"""One `llmbus up` stack as a child process of the benchmark: started, found, stopped.

Each stack gets its own runtime folder, so that the benchmark finds its own scheduler and
never one that another user of the machine left running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

READY_LINE = "llmbus is up"


class StackFailed(RuntimeError):
    """The stack did not come up (or died); the message carries the tail of its logs."""


class LocalStack:
    """`llmbus up --shards N [--replicas R]` under this process; use as a context manager."""

    def __init__(self, shards: int, *, model: Path | None = None, pages: int | None = None,
                 max_queue: int | None = None, start_timeout: float = 180.0,
                 key_file: Path | None = None, replicas: int = 1, up_args: tuple[str, ...] = ()):
        self.shards = shards
        self.key_file = key_file          # the cluster's CURVE key: every link of the stack keyed
        self.replicas = replicas          # shard processes per range: one pipeline each
        self.up_args = tuple(up_args)     # more `llmbus up` options, e.g. ("--inflight", "2")
        self.model = model
        self.pages = pages
        self.max_queue = max_queue
        self.start_timeout = start_timeout
        self.runtime = Path(tempfile.mkdtemp(prefix=f"llmbus-bench-{shards}s-"))
        self.info: dict = {}
        self.ready_s = 0.0
        self._proc: subprocess.Popen | None = None
        self._stderr_path = self.runtime / "up.stderr"

    def __enter__(self) -> "LocalStack":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def scheduler(self) -> str:
        return "tcp://" + self.info["scheduler"]

    @property
    def pid(self) -> int:
        """The `llmbus up` process (its services are its children)."""
        return self._proc.pid

    @property
    def http(self) -> str:
        """The gateway's base URL (on a free port: a benchmark never takes the user's 8080)."""
        return self.info["http"]

    def start(self) -> None:
        cmd = [sys.executable, "-m", "services.cli", "up", "--shards", str(self.shards),
               "--http", "127.0.0.1:0"]
        if self.model is not None:
            cmd += ["--model", str(self.model)]
        if self.pages is not None:
            cmd += ["--pages", str(self.pages)]
        if self.max_queue is not None:
            cmd += ["--max-queue", str(self.max_queue)]
        if self.key_file is not None:
            cmd += ["--key-file", str(self.key_file)]
        else:   # the benchmarks' clients call the bus unkeyed (bench.serve --curve: the plain side)
            cmd += ["--insecure"]
        if self.replicas != 1:
            cmd += ["--replicas", str(self.replicas)]
        cmd += list(self.up_args)
        env = {**os.environ, "LLMBUS_RUNTIME_DIR": str(self.runtime)}
        t0 = time.monotonic()
        with open(self._stderr_path, "wb") as err:
            # Its own session: a last-resort kill reaches the services it started, and a Ctrl-C
            # at the benchmark's terminal is handled by the benchmark, which stops it in order.
            self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env,
                                          start_new_session=True, text=True)
        ready = threading.Event()
        threading.Thread(target=self._watch_stdout, args=(ready,), daemon=True).start()
        while not ready.wait(0.2):
            if self._proc.poll() is not None:
                raise StackFailed(f"`llmbus up --shards {self.shards}` exited with status "
                                  f"{self._proc.returncode} while starting\n{self.log_tail()}")
            if time.monotonic() - t0 > self.start_timeout:
                self.stop()
                raise StackFailed(f"`llmbus up --shards {self.shards}` was not up after "
                                  f"{self.start_timeout:.0f}s\n{self.log_tail()}")
        self.ready_s = time.monotonic() - t0
        self.info = self._find()

    def _watch_stdout(self, ready: threading.Event) -> None:
        for line in self._proc.stdout:
            if READY_LINE in line:
                ready.set()
        # EOF: nothing more to read; the poll() in start() reports an exit.

    def _find(self) -> dict:
        from services.cli.stacks import running
        stacks = running({"LLMBUS_RUNTIME_DIR": str(self.runtime)})
        if not stacks:
            self.stop()
            raise StackFailed(f"`llmbus up` said it is up but wrote no stack file in "
                              f"{self.runtime}\n{self.log_tail()}")
        return stacks[0]

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM, as a user's service manager would; SIGKILL to the group if it hangs."""
        p = self._proc
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)   # the group this stack's own session made
            p.wait(5)
            print(f"warning: the {self.shards}-shard stack ignored SIGTERM for {grace:.0f}s; "
                  f"killed", file=sys.stderr)

    def log_tail(self, lines: int = 20) -> str:
        """The tail of `llmbus up`'s own stderr and of every service's log."""
        parts = [("llmbus up", self._stderr_path)]
        logs = self.info.get("logs")
        folder = Path(logs) if logs else self.runtime / "logs"
        parts += [(p.stem, p) for p in sorted(folder.rglob("*.log"))] if folder.is_dir() else []
        out = []
        for name, path in parts:
            try:
                text = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            if text:
                out.append(f"--- {name} ({path}) ---\n" + "\n".join(text))
        return "\n".join(out) or f"(no logs under {self.runtime})"
