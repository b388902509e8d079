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


def add_key_arguments(p) -> None:
    """--key-file (or $LLMBUS_KEY_FILE) and --insecure: how a stack this command starts is keyed
    (`llmbus up`, `llmbus generate`; see stack_key_of)."""
    from bus.cli_args import add_key_argument
    add_key_argument(p, dict(os.environ))
    p.add_argument("--insecure", action="store_true",
                   help="no CURVE key for the stack (default: a key of its own, mode 0600 in the "
                        "runtime folder): any local user's process may then call its services")


def stack_key_of(args, cluster: str):
    """The key a stack of `cluster` runs with: the file given (--key-file, $LLMBUS_KEY_FILE),
    none with --insecure, else a new one of its own (stack_key). Returns (the key or None, the
    file made for it or None: the stack removes it when it stops), and leaves in args.key_file
    the file every process of the stack is given. A bad key file is a ValueError."""
    from bus.cli_args import cluster_key
    from bus.curve import read_key_file
    key = cluster_key(args)
    if args.key_file is not None and args.insecure:
        raise ValueError("--insecure and --key-file: choose one")
    if key is not None or args.insecure:
        return key, None
    # Keyed by default: another user's process on this machine gets no answer.
    args.key_file = stack_key(cluster)
    return read_key_file(args.key_file), args.key_file


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
