"""Placement: cutting a model's layers into contiguous ranges, one per shard. The one home of
layer cutting: by each shard's memory budget (`place`, `decide`: shards the scheduler places) or
into ranges of about equal work (`split_layers`: the ranges `llmbus up` pins).

Pure: a model's footprint (bytes per layer, the first shard's embeddings, the last's head) and
the shards that offer memory in, a plan (or a refusal naming what is missing) out. `decide` adds
the hysteresis: a plan is replaced when the shards change (a host joined or was lost) or the
current one no longer fits, not when a budget moves a little.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from services.modelstore.footprint import Footprint


@dataclass(frozen=True)
class Member:
    """A shard that asks to be placed: its name, memory budget and KV bytes per layer it holds, and
    the bytes its weights take per byte of the model file (a GPU's float16 where the file's blocks
    have no kernel there, a CPU's float32 when it dequantizes)."""
    name: str
    memory: int
    kv_per_layer: int
    weight_scale: float = 1.0


@dataclass(frozen=True)
class Plan:
    """Contiguous ranges in layer order: (shard name, start, end), covering every layer once."""
    ranges: tuple[tuple[str, int, int], ...]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(name for name, _, _ in self.ranges)

    def range_of(self, name: str) -> tuple[int, int] | None:
        return next(((a, b) for n, a, b in self.ranges if n == name), None)


class PlacementRefused(Exception):
    """The model does not fit the shards offered: `missing` bytes more are needed for layers
    [start, end)."""

    def __init__(self, missing: int, start: int, end: int):
        self.missing, self.start, self.end = missing, start, end
        layers = f"layer {start}" if end - start == 1 else f"layers {start}–{end - 1}"
        super().__init__(f"needs {human_bytes(missing)} more for {layers}")


def human_bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def need(fp: Footprint, m: Member, start: int, end: int) -> int:
    """Bytes `m` needs to hold layers [start, end): weights, KV, and the ends' extra tensors."""
    w = sum(fp.layer_bytes[start:end])
    if start == 0:
        w += fp.first_bytes
    if end == fp.n_layers:
        w += fp.last_bytes
    return math.ceil(w * m.weight_scale) + m.kv_per_layer * (end - start)


def _fits(fp: Footprint, members: Sequence[Member], ends: Sequence[int]) -> bool:
    starts = [0, *ends[:-1]]
    return all(need(fp, m, a, b) <= m.memory for m, a, b in zip(members, starts, ends))


def _proportional(fp: Footprint, members: Sequence[Member]) -> list[int]:
    """Range ends whose bytes follow the members' budgets, each member at least one layer."""
    n, k = fp.n_layers, len(members)
    total_mem = sum(m.memory for m in members)
    ends, start, spent_mem = [], 0, 0
    for j, m in enumerate(members[:-1]):
        spent_mem += m.memory
        # The cumulative share of everything (layers, their KV, both ends' extras) that the
        # members so far should hold; the boundary nearest to it wins.
        target = spent_mem / total_mem * _whole(fp, members)
        best, best_err = start + 1, None
        for b in range(start + 1, n - (k - 1 - j) + 1):
            err = abs(_held(fp, members, ends + [b]) - target)
            if best_err is None or err < best_err:
                best, best_err = b, err
        ends.append(best)
        start = best
    return ends + [n]


def _whole(fp: Footprint, members: Sequence[Member]) -> float:
    kv = sum(m.kv_per_layer for m in members) / len(members)
    scale = sum(m.weight_scale for m in members) / len(members)
    return (sum(fp.layer_bytes) + fp.first_bytes + fp.last_bytes) * scale + kv * fp.n_layers


def _held(fp: Footprint, members: Sequence[Member], ends: Sequence[int]) -> int:
    starts = [0, *ends[:-1]]
    return sum(need(fp, m, a, b) for m, a, b in zip(members, starts, ends))


def _by_capacity(fp: Footprint, members: Sequence[Member]) -> tuple[list[int], int]:
    """Each member in turn takes as many layers as fit, leaving one for each member after it.
    Returns the ends and the first layer nobody could take (n_layers when all were taken)."""
    n, k = fp.n_layers, len(members)
    ends, start = [], 0
    for j, m in enumerate(members):
        last = n if j == k - 1 else n - (k - 1 - j)
        b = start
        while b < last and need(fp, m, start, b + 1) <= m.memory:
            b += 1
        if b == start:
            return ends, start
        ends.append(b)
        start = b
    return ends, start


def place(fp: Footprint, members: Sequence[Member]) -> Plan:
    """Ranges in proportion to memory (members in name order); PlacementRefused if the model
    does not fit. Members too small for any single layer are left out."""
    usable = sorted((m for m in members
                     if any(need(fp, m, i, i + 1) <= m.memory for i in range(fp.n_layers))),
                    key=lambda m: m.name)[:fp.n_layers]
    if not usable:
        kv = max((m.kv_per_layer for m in members), default=0)
        raise PlacementRefused(_total(fp, kv) - max((m.memory for m in members), default=0),
                               0, fp.n_layers)
    first_refusal = None
    while usable:
        try:
            ends = _cut(fp, usable)
        except PlacementRefused as e:
            first_refusal = first_refusal or e
            # A shard too small for the end it would get may keep the others from fitting:
            # try without the smallest (it stays unplaced, as a spare).
            usable = sorted(sorted(usable, key=lambda m: (m.memory, m.name))[1:], key=lambda m: m.name)
            continue
        starts = [0, *ends[:-1]]
        return Plan(tuple((m.name, a, b) for m, a, b in zip(usable, starts, ends)))
    raise first_refusal


def _cut(fp: Footprint, usable: Sequence[Member]) -> list[int]:
    ends = _proportional(fp, usable)
    if _fits(fp, usable, ends):
        return ends
    ends, stop = _by_capacity(fp, usable)
    if stop < fp.n_layers or not _fits(fp, usable, ends):
        kv = max(m.kv_per_layer for m in usable)
        missing = max(_total(fp, kv) - sum(m.memory for m in usable),
                      need(fp, usable[-1], stop, fp.n_layers) - usable[-1].memory, 1)
        raise PlacementRefused(missing, stop, fp.n_layers)
    return ends


def _total(fp: Footprint, kv_per_layer: int) -> int:
    return sum(fp.layer_bytes) + kv_per_layer * fp.n_layers + fp.first_bytes + fp.last_bytes


def peak_use(fp: Footprint, plan: Plan, members: Sequence[Member]) -> float:
    """The largest share of its budget any member of `plan` would use (inf if one is missing)."""
    by_name = {m.name: m for m in members}
    worst = 0.0
    for name, a, b in plan.ranges:
        m = by_name.get(name)
        if m is None or m.memory <= 0:
            return float("inf")
        worst = max(worst, need(fp, m, a, b) / m.memory)
    return worst


@dataclass(frozen=True)
class Decision:
    plan: Plan | None          # None: keep the current plan
    reason: str


def decide(fp: Footprint, current: Plan | None, members: Sequence[Member],
           min_gain: float = 0.25) -> Decision:
    """Whether to replace `current`: always when a member was lost or joined, or when the current
    plan no longer fits; for a change of budgets alone, only when the best plan's peak use is
    `min_gain` (a fraction) below the current's. Raises PlacementRefused when nothing fits.

    Given the same members it returns the plan it returned before, so plans never flap."""
    names = {m.name for m in members}
    if current is None:
        return Decision(place(fp, members), "first plan")
    lost = sorted(current.names - names)
    if lost:
        return Decision(place(fp, members), f"lost {', '.join(lost)}")
    best = place(fp, members)
    joined = sorted(best.names - current.names)
    if joined:
        return Decision(best, f"joined {', '.join(joined)}")
    now = peak_use(fp, current, members)
    if now > 1.0:
        return Decision(best, f"the current plan no longer fits (peak use {now:.0%})")
    if best != current and peak_use(fp, best, members) < now * (1 - min_gain):
        return Decision(best, f"peak use {now:.0%} -> {peak_use(fp, best, members):.0%}")
    return Decision(None, "the current plan holds")


# ----------------------------------------------------------------- by work, for pinned shards
def split_layers(n_layers: int, n_shards: int, head_cost: float = 0.0) -> list[tuple[int, int]]:
    """Contiguous [a, b) ranges covering 0..n_layers.

    `head_cost` is the work of the output head in layers (it runs on the last shard): the last
    range gets that many fewer layers, so that no stage of the pipeline is the slow one.
    Without it the ranges are as even as possible, earlier ones larger.
    """
    if not 1 <= n_shards <= n_layers:
        raise ValueError(f"cannot cut {n_layers} layers into {n_shards} shards")
    if head_cost < 0:
        raise ValueError("head_cost must be >= 0")
    share = (n_layers + head_cost) / n_shards
    last = min(max(1, round(share - head_cost)), n_layers - (n_shards - 1))
    base, extra = divmod(n_layers - last, n_shards - 1) if n_shards > 1 else (0, 0)
    out, a = [], 0
    for i in range(n_shards - 1):
        b = a + base + (1 if i < extra else 0)
        out.append((a, b))
        a = b
    out.append((a, n_layers))
    return out


def head_cost_in_layers(meta: dict) -> float:
    """Multiply-adds of the output head over those of one layer, from GGUF metadata (llama)."""
    arch = meta.get("general.architecture", "llama")
    d = int(meta.get(f"{arch}.embedding_length", 0))
    ffn = int(meta.get(f"{arch}.feed_forward_length", 0))
    heads = int(meta.get(f"{arch}.attention.head_count", 0))
    kv_heads = int(meta.get(f"{arch}.attention.head_count_kv", heads))
    vocab = len(meta.get("tokenizer.ggml.tokens", ())) or int(meta.get(f"{arch}.vocab_size", 0))
    if not (d and ffn and heads):
        return 0.0
    kv = d * kv_heads // heads
    layer = d * (d + 2 * kv) + d * d + 3 * d * ffn    # wqkv, wo, gate+up, down
    return vocab * d / layer
