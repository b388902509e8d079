"""What a micro-batch tells the shards, and what comes back from the sampler."""

from dataclasses import dataclass
from collections.abc import Mapping

from .errors import BadCompletion

from .sequence import Sequence
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
    seed: int
    step: int                     # tokens generated so far: with the seed, fixes the sampler's draw
    # An embedding's chunk: what the last shard pools of its rows ("sum", "last", "first": see
    # wire.messages.shard.Forward.pool_kinds), "" when this chunk has nothing to give its pooling.
    pool: str = ""


@dataclass(frozen=True)
class MicroBatch:
    batch_id: int
    page_size: int
    chunks: tuple[SeqChunk, ...]

    @property
    def num_tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.chunks)


@dataclass(frozen=True)
class SampledToken:
    """A sampled token id and its log-probability; the policy decodes its text."""

    token_id: int
    logprob: float | None = None


@dataclass(frozen=True)
class Output:
    """What the client of one request gets now: text to stream and, at the end, why it finished."""

    request_id: str
    token_id: int | None
    text: str
    finish: Finish | None
    logprob: float | None = None


class Draft:
    """The batch being built: sequences and token counts, under the token and sequence budget."""

    def __init__(self, budget: int, max_seqs: int):
        self.budget = budget
        self.max_seqs = max_seqs
        self.parts: dict[str, tuple[Sequence, int]] = {}

    def full(self) -> bool:
        return self.budget <= 0 or len(self.parts) >= self.max_seqs

    def add(self, seq: Sequence, n: int) -> None:
        self.parts[seq.request_id] = (seq, n)
        self.budget -= n

    def drop(self, seq: Sequence) -> None:
        self.budget += self.parts.pop(seq.request_id)[1]


def check_samples(batch_id: int, chunks: Mapping[str, SeqChunk], attached: Mapping[str, SeqChunk],
                  samples: Mapping[str, SampledToken], failures: Mapping[str, str]) -> None:
    """Raise BadCompletion unless every attached sampling chunk has exactly one SampledToken or
    one failure reason (its row failed on the last shard), and nothing else has either."""
    for rid in [*samples, *failures]:
        if rid not in chunks:
            raise BadCompletion(f"batch {batch_id} has no sequence {rid!r}")
        if rid in attached and not chunks[rid].sample:
            raise BadCompletion(f"{rid!r} was a prefill chunk in batch {batch_id}: nothing to sample")
    for rid, sample in samples.items():
        if not isinstance(sample, SampledToken) or not isinstance(sample.token_id, int) \
                or sample.token_id < 0:
            raise BadCompletion(f"sample for {rid!r} is not a SampledToken with a token id: {sample!r}")
    both = [rid for rid in failures if rid in samples]
    if both:
        raise BadCompletion(f"{both} both sampled and failed in batch {batch_id}")
    for rid, why in failures.items():
        if not isinstance(why, str) or not why:
            raise BadCompletion(f"failure of {rid!r} must say why, got {why!r}")
    missing = [rid for rid, c in attached.items() if c.sample and rid not in samples
               and rid not in failures]
    if missing:
        raise BadCompletion(f"batch {batch_id} lacks samples for {missing}")
