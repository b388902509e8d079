"""Whose page tables a shard's KV follows, pure: one scheduler process at a time.

The scheduler owns every shard's page tables; a shard only counts the slots it wrote. When that
scheduler is gone (a new epoch of it is heard or sends batches, or another scheduler sends them
once it stopped heartbeating), its sequences went with it: the pages they held are dropped, so
that none of them is counted as held, nor read by a sequence of the next scheduler as if it had
written them (the next one prefills what it needs, the continuations included). A scheduler that
was only late (its heartbeats expired, then came again in the same epoch) keeps its KV, as a late
shard keeps its cache.
"""

from __future__ import annotations

from dataclasses import dataclass

TAKE, DROP, STALE = "take", "drop", "stale"


@dataclass
class KVOwner:
    name: str = ""          # "" : no scheduler has written here yet, or its KV was dropped
    epoch: int = 0
    drops: int = 0          # times the KV of a gone scheduler was dropped

    def batch_from(self, name: str, epoch: int, owner_live: bool) -> str:
        """What a batch of scheduler (name, epoch) does to the KV: TAKE (it is the owner's, or
        the first), DROP (drop the gone owner's KV first, then it owns it), or STALE (a late
        batch of an earlier run of the owner: refused, its pages are the new run's now).
        `owner_live`: whether the current owner still heartbeats in this epoch."""
        if not self.name or (name, epoch) == (self.name, self.epoch):
            verdict = TAKE
        elif name == self.name and epoch < self.epoch:
            return STALE
        elif name == self.name or not owner_live:
            verdict = DROP
        else:       # two live schedulers on one shard: not a setup we run; keep what is written
            verdict = TAKE
        self.name, self.epoch = name, epoch
        self.drops += verdict == DROP
        return verdict

    def gone(self, name: str, epoch: int) -> bool:
        """The service (name, epoch) was replaced by a new epoch: True if it owned the KV (drop
        it now)."""
        if (name, epoch) != (self.name, self.epoch) or not self.name:
            return False
        self.name, self.epoch = "", 0
        self.drops += 1
        return True
