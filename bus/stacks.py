"""Where a running `llmbus up` says it is: one small JSON file per stack in the runtime folder
(its cluster, its services' addresses, the stack's key file), read by `busctl` and `llmbus chat`
to find it with no arguments. A file whose process is gone is stale and ignored (and removed when
seen). `llmbus up` writes it (services/cli/stacks.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def runtime_dir(env: dict | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("LLMBUS_RUNTIME_DIR"):
        return Path(env["LLMBUS_RUNTIME_DIR"])
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "llmbus"
    return Path.home() / ".cache" / "llmbus" / "run"


def running(env: dict | None = None) -> list[dict]:
    """Stacks whose parent process is alive, newest first."""
    folder = runtime_dir(env)
    found = []
    for path in folder.glob("*.json") if folder.is_dir() else ():
        try:
            info = json.loads(path.read_text())
            is_alive = alive(int(info["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if is_alive:
            found.append((path.stat().st_mtime, info))
        else:
            path.unlink(missing_ok=True)
    return [info for _, info in sorted(found, key=lambda x: x[0], reverse=True)]


def alive(pid: int) -> bool:
    """The process runs (a zombie, exited but not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True  # no /proc: kill(0) is all we know
