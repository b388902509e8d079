"""Where a running `llmbus up` says it is, so that `llmbus chat` and `busctl` find it with no
arguments: its stack file and its key, in the runtime folder (reading them: bus/stacks.py).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from bus.stacks import alive, running, runtime_dir  # noqa: F401  (the commands' names for them)


def private_cluster() -> str:
    """A cluster name of its own, for a stack on this machine that no other should answer."""
    return f"local-{uuid.uuid4().hex[:8]}"


def private_folder(env: dict | None = None) -> Path:
    """The runtime folder, made if missing; only its owner may enter one it makes."""
    folder = runtime_dir(env)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def stack_key(cluster: str, env: dict | None = None) -> Path:
    """A new CURVE key for the stack of `cluster`, mode 0600 beside its stack file: every
    process of the stack, `busctl` and `llmbus chat` use it (they find it through the file)."""
    from bus.curve import new_key, write_key_file
    path = private_folder(env) / f"{cluster}.key"
    write_key_file(path, new_key(), force=True)   # one left by a stack killed -9 is replaced
    return path


def register(cluster: str, info: dict, env: dict | None = None) -> Path:
    folder = private_folder(env)
    path = folder / f"{cluster}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"cluster": cluster, "pid": os.getpid(), **info}))
    tmp.replace(path)   # readers never see half a file
    return path


def busctl_hint(cluster: str, named: bool) -> str:
    """How to inspect a stack: `busctl list` finds the newest stack here by its stack file; a
    stack given its own --cluster name is named."""
    return f"busctl list --cluster {cluster}" if named else "busctl list"
