"""A real `llmbus up` for end-to-end tests, and a client that collects one request's events."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import zmq.asyncio

from bus.client import RpcClient
from bus.curve import ClusterKey, read_key_file
from wire.messages.bus import Status
from wire.messages.scheduler import Done, Generate, Started, Tokens

from ..bus.procs import ROOT, cli, env
from ..waiting import until


# The bus key of each running stack's endpoints: `llmbus up` keys its stack by default, and the
# helpers below call its services as a member would.
KEYS: dict[str, ClusterKey] = {}


def key_of(endpoint: str) -> ClusterKey | None:
    return KEYS.get(endpoint)


def remember_key(info: dict) -> ClusterKey | None:
    """The key of the stack whose file is `info`, remembered for its endpoints."""
    key = read_key_file(Path(info["key_file"])) if info.get("key_file") else None
    if key is not None:
        for peer in (info["scheduler"], *info["peers"]):
            KEYS["tcp://" + peer] = key
    return key


class Stack:
    """`llmbus up ARGS` in its own runtime folder; stop() sends SIGTERM as systemd or a user would."""

    def __init__(self, runtime: Path, *args: str, ready_timeout: float = 240, extra_env: dict | None = None):
        self.runtime = runtime
        e = env()
        e["LLMBUS_RUNTIME_DIR"] = str(runtime)
        if "--http" not in args:   # never the default 8080: tests run side by side
            args = (*args, "--http", "127.0.0.1:0")
        e.update(extra_env or {})
        self.proc = subprocess.Popen(cli("up", *args), cwd=ROOT, env=e, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.output: list[str] = []
        # A thread reads the output: select() on a buffered pipe misses lines already buffered.
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + ready_timeout
        while not any("llmbus is up" in line for line in list(self.output)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("llmbus up did not come up:\n" + "".join(self.output))
            time.sleep(0.1)
        (self.file,) = runtime.glob("*.json")
        self.info = json.loads(self.file.read_text())
        self.endpoint = "tcp://" + self.info["scheduler"]
        self.http = self.info["http"]         # the gateway's base URL
        self.key = remember_key(self.info)
        # For a command run beside the stack (busctl, llmbus chat): its runtime folder, and so
        # its stack file and key.
        self.env = {"LLMBUS_RUNTIME_DIR": str(runtime)}

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line)

    def drain_output(self) -> str:
        return "".join(self.output)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._reader.join(5)
        return rc

    def close(self) -> None:
        """Stop the stack, which must end cleanly (exit 0); its output says why when it did not."""
        rc = self.stop()
        assert rc == 0, self.drain_output()


@dataclass
class Result:
    started: Started | None = None
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    done: Done | None = None
    events: list = field(default_factory=list)


async def generate(endpoint: str, body: Generate, client: RpcClient | None = None,
                   stop_after_tokens: int | None = None, on_tokens=None,
                   idle_timeout: float = 120) -> Result:
    """Run one request to its end (or close the stream after `stop_after_tokens` tokens);
    `on_tokens(n)` is called with the number of tokens so far at each Tokens event; a stream
    silent for `idle_timeout` seconds raises CallTimeout."""
    own = client is None
    client = client or RpcClient(zmq.asyncio.Context.instance(), endpoint, key=key_of(endpoint))
    res = Result()
    try:
        async with contextlib.aclosing(client.stream(body, idle_timeout=idle_timeout)) as events:
            async for ev in events:
                res.events.append(ev)
                if isinstance(ev, Started):
                    res.started = ev
                elif isinstance(ev, Tokens):
                    res.text += ev.text
                    res.token_ids += ev.token_ids
                    if on_tokens is not None:
                        on_tokens(len(res.token_ids))
                    if stop_after_tokens is not None and len(res.token_ids) >= stop_after_tokens:
                        break
                elif isinstance(ev, Done):
                    res.done = ev
    finally:
        if own:
            await client.close()
    return res


async def call(endpoint: str, body, timeout: float = 10.0):
    c = RpcClient(zmq.asyncio.Context.instance(), endpoint, key=key_of(endpoint))
    try:
        return await c.call(body, timeout)
    finally:
        await c.close()


async def status_of(stack, name: str):
    """The Status reply of the stack's service `name`, asked of each of its peers in turn."""
    for peer in stack.info["peers"]:
        reply = await call(f"tcp://{peer}", Status())
        if reply.name == name:
            return reply
    raise AssertionError(f"no {name} among {stack.info['peers']}")


async def wait_for(cond, timeout: float = 10.0, every: float = 0.1):
    """Await until the async `cond()` returns something true (tests/waiting.py's `until`)."""
    return await until(cond, timeout, every)
