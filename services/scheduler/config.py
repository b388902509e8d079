"""The scheduler service's settings, declared once: `llmbus run scheduler`'s options are derived
from this dataclass (cli.py), and the batching policy's config takes the settings it extends."""

from __future__ import annotations

from dataclasses import dataclass, fields

from bus.options import option

from .batching.config import BatchingSettings


@dataclass(frozen=True)
class SchedulerServiceConfig(BatchingSettings):
    model: str = option("", "model identity to serve (default: the first tokenizer's)",
                        flag="--model-id")
    inflight: int = option(0, "micro-batches in the pipeline at once (0: one more than the "
                           "stages that can compute at once; shards on one machine share its "
                           "cores)", metavar="N")
    context_length: int = option(0, "tokens per sequence (0: the model's, bounded by the KV "
                                 "pages)", flag="--context", metavar="TOKENS")
    unserved_budget_s: float = option(
        300.0, "a request fails only when its layers have been unserved this long (no shard for a "
        "layer range, or every batch failing)", flag="--unserved-budget", metavar="SECONDS")
    batch_timeout: float = 120.0      # a batch with no answer this long has failed
    tokenizer_wait_s: float = 30.0    # how long a request waits for a tokenizer to come back

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            least = 0 if f.name in ("inflight", "context_length", "phrase_repeats") else 1e-9
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v < least:
                raise ValueError(f"{f.name} must be {'>= 0' if least == 0 else '> 0'}, got {v}")

    def batching(self) -> dict:
        """The settings the batching policy takes, as its config's fields."""
        return {f.name: getattr(self, f.name) for f in fields(BatchingSettings)}
