"""An embedding's vector, put together from what the last shard pooled of each of its chunks."""

from __future__ import annotations

import numpy as np

from bus.errors import ServiceError
from wire.failures import BAD_EMBED_INPUT


class BadPooling(ValueError):
    """The chunks that came back do not make the embedding (a gap, or a part missing)."""


class Pooled:
    """The parts of one embedding: per chunk start, its token count and what the last shard
    pooled of its rows (a sum for a mean, one row for last and cls). A chunk from position 0
    starts it over: the sequence was prefilled again (a lost pipeline, a preemption)."""

    def __init__(self, pooling: str, length: int):
        self.pooling = pooling
        self.length = length
        self._parts: dict[int, tuple[int, np.ndarray]] = {}

    def add(self, start: int, n: int, vector: np.ndarray) -> None:
        if start == 0:
            self._parts.clear()
        self._parts[start] = (n, np.asarray(vector, np.float64))

    def vector(self) -> np.ndarray:
        """The pooled vector, float32 (D,): the mean of every token's final hidden state, or the
        last or first token's."""
        if self.pooling == "mean":
            at, total = 0, None
            for start in sorted(self._parts):
                n, part = self._parts[start]
                if start != at:
                    raise BadPooling(f"mean pooling: tokens {at}..{start} never came back")
                total = part if total is None else total + part
                at = start + n
            if at != self.length or total is None:
                raise BadPooling(f"mean pooling: {at} of {self.length} tokens came back")
            return (total / self.length).astype(np.float32)
        want = 0 if self.pooling == "cls" else None
        for start, (n, part) in self._parts.items():
            if (want == 0 and start == 0) or (want is None and start + n == self.length):
                return part.astype(np.float32)
        raise BadPooling(f"{self.pooling} pooling: its token never came back")


def embedding_inputs(inputs: list[list[int]], context: int, truncate: bool) -> list[list[int]]:
    """Each input's token ids as they run: cut to the context with `truncate`, else an input
    past it is refused (bad_embedding_input, naming it), as is an empty one."""
    out = []
    for i, ids in enumerate(inputs):
        if not ids:
            raise ServiceError(BAD_EMBED_INPUT, f"input {i} has no tokens")
        if len(ids) > context and not truncate:
            raise ServiceError(BAD_EMBED_INPUT, f"input {i} has {len(ids)} tokens; the context "
                                                f"holds {context}: shorten it or ask to truncate")
        out.append(list(ids[:context]))
    return out


def finish_vector(vector: np.ndarray, dimensions: int | None, normalize: bool) -> np.ndarray:
    """What the caller asked of a pooled vector: its first `dimensions` components (Matryoshka
    truncation), then L2-normalized (a zero vector stays zero)."""
    v = np.asarray(vector, np.float32)
    if dimensions is not None:
        v = v[:dimensions]
    if normalize:
        norm = float(np.linalg.norm(v.astype(np.float64)))
        if norm > 0:
            v = (v.astype(np.float64) / norm).astype(np.float32)
    return v
