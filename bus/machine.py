"""Which machine this process runs on: the identity a health watcher matches services by."""

from __future__ import annotations

import functools
import socket


@functools.cache
def machine_id() -> str:
    """/etc/machine-id (stable across renames and shared by every process of the machine), or
    the host name where there is none."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path) as f:
                found = f.read().strip()
        except OSError:
            continue
        if found:
            return found
    return socket.gethostname()
