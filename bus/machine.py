"""Which machine this process runs on: the identity a health watcher matches services by."""

from __future__ import annotations

import functools
import hashlib
import hmac
import socket

# machine-id(5): the id "should be considered confidential" and must not be shown on a network;
# an application uses a hash of it under its own key (as sd_id128_get_machine_app_specific does).
_APP_KEY = b"llmbus machine id"


@functools.cache
def machine_id() -> str:
    """This machine's identity as llmbus shows it (heartbeats, /v1/cluster, busctl): a hash of
    /etc/machine-id (stable across renames and shared by every process of the machine), or of
    the host name where there is none. The raw id never leaves the machine."""
    return hashed(_raw_machine_id())


@functools.cache
def kernel_id() -> str:
    """Which running kernel this process is under, as llmbus shows it: a hash of its boot id.
    Processes that show the same one compete for the same cores and memory, whatever their
    network namespace, container or host name (and unlike /etc/machine-id, which cloned images
    share); "" where the kernel does not tell."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            raw = f.read().strip()
    except OSError:
        return ""
    return hashed("boot " + raw) if raw else ""


def hashed(raw: str) -> str:
    return hmac.new(_APP_KEY, raw.encode(), hashlib.sha256).hexdigest()[:32]


def _raw_machine_id() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path) as f:
                found = f.read().strip()
        except OSError:
            continue
        if found:
            return found
    return socket.gethostname()
