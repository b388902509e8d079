"""What a micro-batch tells the shards, and what comes back from the sampler."""

from dataclasses import dataclass
from typing import Any

from .stop_rules import Finish


@dataclass(frozen=True)
class SeqChunk:
    """One sequence's share of a batch: feed `token_ids` at positions start, start+1, ...

    Positions [0, start) are already in the KV cache (earlier chunks or prefix-cache hits:
    `cached` of them came from the cache), so every shard skips them.
    """

    request_id: str
    token_ids: tuple[int, ...]
    start: int
    cached: int
    page_table: tuple[int, ...]   # KV page of positions [i*page_size, (i+1)*page_size)
    sample: bool                  # last chunk of the sequence: sample the next token
    sampling: Any
    seed: int
    step: int                     # tokens generated so far: with the seed, fixes the sampler's draw


@dataclass(frozen=True)
class BatchPlan:
    batch_id: int
    page_size: int
    chunks: tuple[SeqChunk, ...]

    @property
    def num_tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.chunks)


@dataclass(frozen=True)
class Sample:
    """A sampled token and its text piece from the tokenizer's incremental decoder ('' if incomplete)."""

    token_id: int
    text: str = ""
    logprob: float | None = None


@dataclass(frozen=True)
class Output:
    """What the client of one request gets now: text to stream and, at the end, why it finished."""

    request_id: str
    token_id: int | None
    text: str
    finish: Finish | None
    logprob: float | None = None
