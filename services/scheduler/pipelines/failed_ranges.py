"""Layer ranges that will not come back: a health watcher gave up on the only shard holding them.

Requests waiting for such a range would otherwise wait out the whole unserved budget; they end
now with reason `range_failed`, and new ones are refused with it. The failed shards are learnt
from `health.service_failed` events (at once) and from the watchers' heartbeats (which list what
they gave up, for a scheduler that started after the event).
"""

from __future__ import annotations

from collections.abc import Iterable

import wire
from wire.messages.health import ServiceEvent
from wire.messages.info import FailedService

FAILED_TOPIC = b"health.service_failed"


def unservable(failed: dict[str, FailedService], entries: Iterable, model: str) -> str | None:
    """Why no request of `model` can be served: a failed shard's layers that no ready shard of
    `model` holds; None when every failed shard's range is still held (or none failed)."""
    held = sorted(e.info.layers for e in entries if e.kind == "shard" and e.state == "ready"
                  and e.info.serving and e.info.model == model)
    for name, f in sorted(failed.items()):
        info = f.last_info
        if f.kind != "shard" or info.model != model or not info.layers:
            continue
        a, b = info.layers
        if not _covered(a, b, held):
            return (f"range_failed: layers {a}:{b} of {model} are held by no ready shard and "
                    f"{name} was given up by its health watcher ({f.reason})")
    return None


def _covered(a: int, b: int, held: list[tuple[int, int]]) -> bool:
    at = a
    for start, end in held:          # sorted by start
        if start <= at < end:
            at = end
    return at >= b


class FailedRanges:
    """The failed shards this scheduler knows of, from events and watchers' heartbeats."""

    def __init__(self):
        self.heard: dict[str, FailedService] = {}

    def on_event(self, topic: bytes, msg: wire.Message) -> bool:
        """Keep a `health.service_failed` event; True when it is one (the caller checks then)."""
        e = msg.body
        if topic != FAILED_TOPIC or not isinstance(e, ServiceEvent) or e.kind != "service_failed":
            return False
        self.heard[e.service] = FailedService(e.reason, e.service_kind, dict(e.info))
        return True

    def why(self, entries: Iterable, model: str) -> str | None:
        entries = list(entries)
        failed = dict(self.heard)
        for w in entries:
            if w.kind == "health":
                failed.update(w.info.failed)
        return unservable(failed, entries, model)
