"""A warm start for respawned children: `python -m services.health.forkserver` imports what the
services import, then forks one child per request, each running `llmbus ARGS` as a fresh
`python -m services.cli ARGS` would, less the ~1 s (several on a loaded machine) of imports.

It holds no zmq context, event loop or thread when it forks (it refuses to serve if an import
started a thread), so a child starts clean: its own sockets, loop and threads, its own log.
Requests come as JSON lines on stdin, `{"args": [...], "log": PATH | null}`; on stdout it says
`{"ready": true}` once warm, `{"pid": N}` for each fork (in request order) and `{"exit": N,
"status": S}` when a child ends (S as subprocess's returncode: -signal when killed). It ends
when stdin closes; its children get SIGTERM when it dies (the watcher's own die the same way).
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import selectors
import signal
import sys

from .processes import LLMBUS, die_with_parent

# What `llmbus run KIND` imports before it is ready, for every kind `llmbus up` runs (the
# scheduler's grammars: llguidance, imported as the scheduler starts).
WARM = ("services.cli", "services.cli.run", "bus.service", "services.shard.cli",
        "services.shard.service", "services.shard.model", "services.shard.kv_cache",
        "services.modelstore.weight_cache", "services.tokenizer.cli", "services.tokenizer.service",
        "services.scheduler.cli", "services.scheduler.service",
        "services.scheduler.grammar.matcher", "gateway.cli", "gateway.service")


class NotForkSafe(RuntimeError):
    """An import left a thread running: a fork would copy its locks but not the thread."""


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def warm() -> None:
    for name in WARM:
        importlib.import_module(name)
    if threads() != 1:
        raise NotForkSafe(f"{threads()} threads after the imports")


def serve(requests: int, replies: int) -> dict | None:
    """Fork a child per request until `requests` closes (returns None). In a child, returns its
    request; the caller runs it."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)     # only to wake the selector
    sel = selectors.DefaultSelector()
    sel.register(requests, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    say(replies, {"ready": True})
    pending = b""
    while True:
        for key, _ in sel.select():
            if key.fd == wake_r:
                os.read(wake_r, 4096)
                reap(replies)
                continue
            chunk = os.read(requests, 65536)
            if not chunk:
                return None
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    signal.set_wakeup_fd(-1)
                    for fd in (wake_r, wake_w, requests, replies):
                        os.close(fd)
                    return request
                say(replies, {"pid": pid})


def reap(replies: int) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        say(replies, {"exit": pid, "status": os.waitstatus_to_exitcode(status)})


def say(fd: int, reply: dict) -> None:
    os.write(fd, json.dumps(reply).encode() + b"\n")


def become_child(request: dict) -> None:
    """In the forked child: the signals, files, process state and arguments of a fresh `llmbus`
    process."""
    for sig in (signal.SIGCHLD, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    die_with_parent()
    null = os.open(os.devnull, os.O_RDWR)
    out = (os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
           if request.get("log") else null)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024)
    # numpy's legacy global generator was seeded once, in the fork server: not shared by siblings.
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    sys.argv = ["llmbus", *request["args"]]


def main() -> int:
    # Ctrl-C reaches the whole process group: the watcher stops its children itself, and this
    # process ends when the watcher closes its requests.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    replies = os.dup(1)
    os.dup2(2, 1)            # anything an import prints goes to stderr, not into the replies
    try:
        warm()
    except (ImportError, NotForkSafe) as e:
        say(replies, {"error": f"{type(e).__name__}: {e}"})
        return 1
    request = serve(0, replies)
    if request is None:
        return 0
    become_child(request)
    # As `python -m services.cli ARGS` runs it; it ends the process with the command's status.
    runpy.run_module(LLMBUS, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
