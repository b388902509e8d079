"""Messages of the scheduler: a generation request in, a stream of token events out.

`scheduler.generate` is answered by a stream (bus `@streams`): one `Started`, then `Tokens`
as they are sampled, then one `Done` saying why it ended. A refused request gets a typed
`bus.error` instead (queue_full with retry_after, or the bad request's failure code).
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from ..schema import message
from ..tensor import Tensor
from .sampling import SamplingParams

@message("scheduler.generate")
class Generate(SamplingParams):
    """A request: exactly one of a chat (`messages`), a text `prompt`, or `prompt_ids`, with the
    sampling parameters as flat fields of their own (inherited; seed None: the scheduler picks)."""
    messages: list[dict[str, Any]] | None = None   # rendered with the model's chat template
    prompt: str | None = None                      # raw text, tokenized as is (a completion)
    prompt_ids: list[int] | None = None            # token ids, used as they are
    max_tokens: int | None = None                  # None: up to the end of the context
    stop: list[str] = field(default_factory=list)  # never emitted; may span tokens
    priority: str = "normal"                       # high, normal, low
    request_id: str = ""                           # "": the scheduler names it
    template: str | None = None                    # a named chat template instead of the model's
    # With `messages`: function definitions the chat offers (rendered by the tokenizer, as in
    # tokenizer.render), and text the assistant's answer starts with (a forced tool call).
    tools: list[dict[str, Any]] | None = None
    assistant_prefix: str = ""
    # Seconds the request may take from its arrival at the scheduler (admission bounds it);
    # past it the request ends `failed` with code `deadline`. Relative, not a time of day: the
    # caller's and the scheduler's clocks need not agree (they may be on other machines).
    deadline_s: float | None = None
    # A continuation (a gateway carrying the request across the loss of its scheduler): the
    # token ids this request already generated, whose text its client has. They are generated
    # tokens to the new scheduler: the sampler's step goes on from their count (with the same
    # seed, the same draws), max_tokens and penalties count them, their text is not sent again,
    # and Done's completion_tokens includes them.
    continued: list[int] = field(default_factory=list)
    # The structure the answer must have, enforced token by token (constrained decoding):
    # {"type": "json_object"}, {"type": "json_schema", "schema": {...}}, or {"type": "lark",
    # "grammar": "..."} (llguidance's Lark dialect: what the gateway asks of a forced tool call).
    # None: free text. The scheduler's admission compiles it (a bad one: bad_format).
    format: dict[str, Any] | None = None

    def check(self):
        # The sampling ranges and the deadline are the scheduler's admission's to check.
        given = [n for n in ("messages", "prompt", "prompt_ids") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of messages, prompt, prompt_ids"
                             + (f" (got {', '.join(given)})" if given else ""))


@message("scheduler.started")
class Started:
    """First event of a stream: the request was admitted."""
    request_id: str
    prompt_tokens: int
    max_tokens: int          # after clamping to the context
    seed: int
    note: str = ""           # why max_tokens was clamped, if it was


@message("scheduler.tokens")
class Tokens:
    """Newly sampled tokens of one request and the text they completed (may be "")."""
    request_id: str
    text: str
    token_ids: list[int]
    logprobs: list[float]
    top_ids: list[list[int]] = field(default_factory=list)        # when top_logprobs > 0
    top_logprobs: list[list[float]] = field(default_factory=list)


@message("scheduler.done")
class Done:
    """Last event of a stream: why it ended (stop, length, repeated_line_loop, cancelled, failed);
    a failed one has its failure `code` (wire.failures: callers decide by it) and a `detail` for
    people, starting "deadline:" when the request's deadline passed."""
    request_id: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    stop_string: str | None = None
    detail: str = ""
    code: str = ""


@message("scheduler.embed")
class Embed:
    """Embeddings of texts (or token ids): each input runs through the pipeline as a prefill of
    its own, batched beside generation, and the last shard pools its final hidden states by the
    model's pooling type. Answered by one `Embeddings` (or a typed `bus.error`: a bad input is
    bad_embedding_input, naming which)."""
    inputs: list[str] = field(default_factory=list)           # texts, tokenized with BOS as the GGUF asks
    input_ids: list[list[int]] = field(default_factory=list)  # or token ids, used as they are
    normalize: bool = True          # L2-normalized (after `dimensions` cuts the vector)
    dimensions: int | None = None   # keep the first n components (Matryoshka); None: all
    truncate: bool = False          # an input past the context is cut to it (else refused)
    priority: str = "normal"
    request_id: str = ""            # "": the scheduler names it; input i runs as "{id}/{i}"
    deadline_s: float | None = None

    def check(self):
        if bool(self.inputs) == bool(self.input_ids):
            raise ValueError("give exactly one of inputs and input_ids, not empty")
        if self.dimensions is not None and self.dimensions < 1:
            raise ValueError(f"dimensions must be >= 1, got {self.dimensions}")


@message("scheduler.embeddings")
class Embeddings:
    """One vector per input, in order: float32 (inputs, dimensions)."""
    request_id: str
    vectors: Tensor
    prompt_tokens: list[int]        # tokens of each input (after truncation)
    pooling: str                    # mean, cls or last


@message("scheduler.cancel")
class CancelRequest:
    """End a request by id now, from any caller; its pages are freed at once."""
    request_id: str


@message("scheduler.cancelled")
class Cancelled:
    request_id: str
    found: bool


@message("scheduler.stats")
class StatsRequest:
    pass


@message("scheduler.stats_reply")
class Stats:
    stats: dict[str, float]
    pipeline: list[str]             # shard names from the first layer to the last
