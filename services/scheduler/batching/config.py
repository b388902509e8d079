"""The scheduler policy's configuration: what an operator may set (`BatchingSettings`, the options
of `llmbus run scheduler`), and the one dataclass the policy reads, checked when built."""

from dataclasses import dataclass, field, fields

from bus.options import option

from .errors import ConfigError


@dataclass(frozen=True)
class BatchingSettings:
    """The batching policy's settings an operator may give, each declared once: the scheduler
    service's config extends this record, and the policy's config below does too."""
    max_batch_tokens: int = option(512, "token budget of one micro-batch (decodes + prefill chunks)")
    max_batch_seqs: int = option(64, "sequences in one micro-batch")
    max_queue: int = option(256, "waiting requests; past it a request is refused with retry-after")
    # Tokens of sequences being re-prefilled after a loss in one micro-batch: they come back
    # oldest first a few at a time, beside the decodes of those already back, and pacing does
    # not cut them further. A continuation (a request carried over from a lost scheduler) is one.
    max_refill_tokens: int = option(
        128, "tokens of sequences re-prefilled after a loss (of a shard, or of the scheduler a "
        "continuation comes from) per micro-batch: they come back oldest first beside the "
        "decodes of those already back", flag="--refill-tokens", metavar="N")
    # While any stream decodes, a batch's prefill (not a re-prefill after a loss) is cut to keep
    # its predicted compute, with the prefill of the batches already in flight, near pace_step_s
    # (a decode waits for the batches ahead of it), but never below pace_min_chunk tokens, so
    # that waiting requests still advance; the cost is fitted on pace_window batches. Past
    # pace_max_wait_s without a first token, a request's prefill is not paced: under heavy load
    # pacing alone would starve the queue (prompts need far more tokens than decodes).
    pace_step_s: float = option(
        0.12, "while any stream decodes (or a first token is on its way), prefill chunks are cut to "
        "keep a batch's predicted compute near this many ms (a decode waits for the batches ahead)",
        flag="--pace-ms", metavar="MS", per=1000)
    pace_max_wait_s: float = option(10.0, "no pacing once a request has waited this long for its "
                                    "first token", flag="--pace-max-wait", metavar="SECONDS")
    # A runaway answer repeating a phrase within a line (a line repeated is loop_repeats below).
    phrase_repeats: int = option(4, "an answer ends (repeated_phrase_loop) once it repeats one "
                                 "phrase of at most 64 tokens this many times in a row; 0: never",
                                 metavar="N")


@dataclass(frozen=True)
class SchedulerConfig(BatchingSettings):
    num_pages: int = 1024              # KV pages on every shard (the scheduler owns their tables)
    page_size: int = 16                # tokens per page
    context_length: int = 8192         # prompt + generated tokens of one sequence
    max_inflight: int = 2              # micro-batches in the pipeline at once
    max_tokens_limit: int = 1 << 20    # a max_tokens above this is a client bug, not a clamp
    vocab_size: int | None = None      # when set, prompt ids are checked against it
    eos_ids: frozenset[int] = field(default_factory=frozenset)
    # The bytes of every token id: generated tokens are decoded here, where stop rules need them.
    token_bytes: tuple[bytes, ...] = field(default=(), repr=False, compare=False)
    max_stop_strings: int = 16
    max_stop_chars: int = 256
    loop_repeats: int = 4              # same non-trivial line this many times → repeated_line_loop
    loop_window: int = 8               # ... within this many recent non-trivial lines
    loop_min_chars: int = 8            # a line is non-trivial with at least this many non-space chars
    phrase_max_tokens: int = 64        # ... a phrase of at most this many tokens (non-trivial too)
    max_batch_retries: int = 3         # unusable results in a row one sequence survives
    retry_after_min_s: float = 1.0
    retry_after_max_s: float = 300.0
    throughput_window_s: float = 10.0
    assumed_tokens_per_s: float = 50.0  # retry-after estimate before anything was measured
    pace_min_chunk: int = 16
    pace_window: int = 64

    def __post_init__(self):
        object.__setattr__(self, "eos_ids", frozenset(self.eos_ids))
        object.__setattr__(self, "token_bytes", tuple(self.token_bytes))
        if not self.token_bytes or not all(isinstance(b, bytes) for b in self.token_bytes):
            raise ConfigError("token_bytes must hold the bytes of every token id: generated "
                              "tokens are decoded with it")
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0 \
                    and f.name != "phrase_repeats":     # 0: no phrase-loop detection
                raise ConfigError(f"{f.name} must be > 0, got {v}")
        if self.context_length > self.num_pages * self.page_size:
            # Otherwise a lone long sequence could never get its pages and would wait forever.
            raise ConfigError(f"context_length {self.context_length} exceeds the KV pool "
                              f"({self.num_pages} pages x {self.page_size} tokens)")
        if self.loop_repeats < 2 or self.loop_window < self.loop_repeats:
            raise ConfigError("need 2 <= loop_repeats <= loop_window")
        if self.phrase_repeats == 1 or self.phrase_repeats < 0:
            raise ConfigError("need phrase_repeats >= 2, or 0 for none")
        if self.retry_after_min_s > self.retry_after_max_s:
            raise ConfigError("retry_after_min_s must be <= retry_after_max_s")
