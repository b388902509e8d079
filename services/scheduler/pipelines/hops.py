"""Bytes and latency of each hop of the shard route, summed over the batches that came back
(`scheduler.stats` keys `hop.bytes.A>B`, `hop.latency_ms.A>B`, `hop.batches.A>B`).

Pure: fed each result's hops, the figures each stage appended as it handed the batch on (its
received bytes, and the one-way latency from the sender's clock to its own).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from wire.messages.shard import Hop


class HopStats:
    def __init__(self, sender: str):
        self.sender = sender            # the first hop of every route comes from here
        self.totals: Counter[str] = Counter()

    def record(self, hops: Sequence[Hop]) -> None:
        """The hops of one batch, in route order."""
        prev = self.sender
        for h in hops:
            hop = f"{prev}>{h.shard}"
            self.totals[f"hop.batches.{hop}"] += 1
            self.totals[f"hop.bytes.{hop}"] += h.bytes
            self.totals[f"hop.latency_ms.{hop}"] += h.latency_ms
            prev = h.shard

    def stats(self) -> dict[str, float]:
        return {k: round(float(v), 3) for k, v in self.totals.items()}
