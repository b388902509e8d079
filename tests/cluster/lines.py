"""JSON lines from a client process of a multi-host test (tests/cluster/client.py), awaited with
a deadline."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time


class Lines:
    def __init__(self, proc: subprocess.Popen):
        self.proc, self.q = proc, queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.q.put(line)
        self.q.put(None)

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def expect(self, event: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.q.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"the client ended before {event!r}")
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if msg.get("event") == event:
                return msg
        raise AssertionError(f"no {event!r} from the client within {timeout:g}s")
