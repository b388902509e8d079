"""systemd notify protocol (READY=1, WATCHDOG=1, STOPPING=1) over $NOTIFY_SOCKET, no libsystemd."""

from __future__ import annotations

import os
import socket


class Notifier:
    """Sends sd_notify datagrams when run under systemd; does nothing otherwise."""

    def __init__(self, env: dict | None = None):
        env = os.environ if env is None else env
        addr = env.get("NOTIFY_SOCKET", "")
        if addr.startswith("@"):
            addr = "\0" + addr[1:]  # abstract namespace
        self.address = addr or None
        usec = env.get("WATCHDOG_USEC", "")
        self.watchdog_interval = int(usec) / 1e6 if usec.isdigit() and int(usec) > 0 else None

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *lines: str) -> bool:
        if not self.address:
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            try:
                s.sendto("\n".join(lines).encode(), self.address)
            except OSError:
                return False  # systemd gone: nothing useful to do about it
        return True

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")
