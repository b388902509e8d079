"""Which weight-cache entries to remove: the cache of layer ranges would otherwise grow without
bound (placement gives shards new ranges, every rewritten GGUF is a new identity, and every layout
bump leaves the old entries behind). Pure: entries in, paths to remove out.

Rules, in order: entries of another layout version go (nothing reads them); half-written
temporaries older than an hour go (a writer that died); then the least recently used entries go
until the cache fits its budget. The entry just loaded is never removed, even alone over budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_BUDGET_GB = 10.0
ABANDONED_AFTER_S = 3600.0


@dataclass(frozen=True)
class CacheEntry:
    path: Path
    bytes: int
    used_at: float        # last load or write (the manifest's mtime)
    layout: int | None    # the entry's layout version; None for a temporary


def to_remove(entries: list[CacheEntry], budget_bytes: int, layout: int, keep: Path,
              now: float) -> list[Path]:
    """Paths to remove so that what stays is of `layout` and within `budget_bytes`."""
    gone: list[Path] = []
    stay: list[CacheEntry] = []
    for e in entries:
        if e.path == keep:
            stay.append(e)
        elif e.layout is None:
            if now - e.used_at > ABANDONED_AFTER_S:
                gone.append(e.path)
        elif e.layout != layout:
            gone.append(e.path)
        else:
            stay.append(e)
    total = sum(e.bytes for e in stay)
    for e in sorted(stay, key=lambda e: e.used_at):
        if total <= budget_bytes:
            break
        if e.path != keep:
            gone.append(e.path)
            total -= e.bytes
    return gone


def budget_bytes(env: dict) -> int:
    """$LLMBUS_WEIGHT_CACHE_GB (GiB, may be fractional), else DEFAULT_BUDGET_GB."""
    raw = env.get("LLMBUS_WEIGHT_CACHE_GB", "")
    try:
        gb = float(raw) if raw else DEFAULT_BUDGET_GB
    except ValueError:
        raise ValueError(f"LLMBUS_WEIGHT_CACHE_GB={raw!r}: a number of GiB") from None
    if not gb > 0:
        raise ValueError(f"LLMBUS_WEIGHT_CACHE_GB={raw!r}: must be more than 0")
    return int(gb * 2**30)
