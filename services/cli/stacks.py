"""Where a running `llmbus up` says it is, so that `llmbus chat` finds it with no arguments.

One small JSON file per stack in the runtime folder; a file whose process is gone is stale and
ignored (and removed when seen).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path


def private_cluster() -> str:
    """A cluster name of its own, for a stack on this machine that no other should answer."""
    return f"local-{uuid.uuid4().hex[:8]}"


def runtime_dir(env: dict | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("LLMBUS_RUNTIME_DIR"):
        return Path(env["LLMBUS_RUNTIME_DIR"])
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "llmbus"
    return Path.home() / ".cache" / "llmbus" / "run"


def register(cluster: str, info: dict, env: dict | None = None) -> Path:
    folder = runtime_dir(env)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{cluster}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"cluster": cluster, "pid": os.getpid(), **info}))
    tmp.replace(path)   # readers never see half a file
    return path


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


def busctl_hint(stack: dict) -> str:
    """The `busctl list` command line that inspects this stack (from its stack file's fields)."""
    key = f"LLMBUS_KEY_FILE={stack['key_file']} " if stack.get("key_file") else ""
    return (f"LLMBUS_CLUSTER={stack['cluster']} LLMBUS_MDNS=0 "
            f"LLMBUS_PEERS={','.join(stack['peers'])} {key}busctl list")
