"""Messages of placement: the scheduler learns a model's footprint from a shard that offers its
memory, has each shard load its range of a new plan beside the one it serves (`shard.place`),
and switches them all together at a batch boundary (`shard.switch`)."""

from __future__ import annotations

from ..schema import message


@message("shard.footprint")
class FootprintRequest:
    """Ask a shard for the bytes of each layer of its model (read from the GGUF index)."""


@message("shard.footprint_reply")
class FootprintReply:
    model: str
    layer_bytes: list[int]
    first_bytes: int           # token embeddings, held by the first shard
    last_bytes: int            # output norm and head, held by the last
    kv_heads: int
    head_dim: int

    def check(self):
        if not self.layer_bytes or min(self.layer_bytes) < 0 or self.first_bytes < 0 \
                or self.last_bytes < 0 or self.kv_heads < 1 or self.head_dim < 1:
            raise ValueError("a footprint needs layers and sizes >= 0")


@message("shard.place")
class Place:
    """Load layers [start, end) for plan `plan` while the current range keeps serving; answered
    with `Placed` once loaded."""
    plan: int
    start: int
    end: int

    def check(self):
        if self.plan < 1 or not 0 <= self.start < self.end:
            raise ValueError(f"plan {self.plan} range {self.start}:{self.end}: need plan >= 1 "
                             "and 0 <= start < end")


@message("shard.placed")
class Placed:
    plan: int
    start: int
    end: int
    load_s: float


@message("shard.switch")
class Switch:
    """Serve the range loaded for `plan` from now on (its KV starts empty)."""
    plan: int


@message("shard.switched")
class Switched:
    plan: int
    start: int
    end: int
