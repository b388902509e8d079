"""Bytes and latency of each hop of the shard route, summed over the batches that came back
(`scheduler.stats` keys `hop.bytes.A>B`, `hop.latency_ms.A>B`, `hop.batches.A>B`).

Pure: fed the route a batch took, its reply's per-hop figures, and the round trip of the
scheduler's own call to the first shard. A batch answered straight by the last shard (direct.py)
has no round trips: each stage measured its hop one way, from the sender's clock to its own.
"""

from __future__ import annotations

from collections import Counter

from wire.messages.shard import ForwardReply


class HopStats:
    def __init__(self, sender: str):
        self.sender = sender            # the first hop of every route comes from here
        self.totals: Counter[str] = Counter()

    def record(self, route: list[str], reply: ForwardReply, call_ms: float) -> None:
        """One batch that went along `route` (shard names in order) and came back as `reply`."""
        prev = self.sender
        for i, name in enumerate(route):
            if name not in reply.hop_bytes:
                break   # a shard that reports no hop figures (an older one): stop there
            hop = f"{prev}>{name}"
            self.totals[f"hop.batches.{hop}"] += 1
            self.totals[f"hop.bytes.{hop}"] += reply.hop_bytes[name]
            if i == 0 and name in reply.stage_ms:
                # The scheduler's own call: its round trip less the first stage's time.
                latency = max(0.0, call_ms - reply.stage_ms[name])
            else:   # measured the same way by the shard that sent it, or one way by the receiver
                latency = reply.hop_latency_ms.get(name, 0.0)
            self.totals[f"hop.latency_ms.{hop}"] += latency
            prev = name

    def stats(self) -> dict[str, float]:
        return {k: round(float(v), 3) for k, v in self.totals.items()}
