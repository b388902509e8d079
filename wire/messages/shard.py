"""Messages of the shard pipeline: a batch goes in at the first shard, hops through every
layer range, and comes back from the last as sampled token ids (never logits).

The answer comes back along the chain of calls, so that a failure at any stage reaches the caller
typed. A caller that names itself in `Forward.reply_to` also gets the last shard's answer
straight, as a one-way `shard.result`, ahead of the chain's: a decode step then waits for one
message back instead of one per stage. With `ReplyTo.only`, the chain carries back only
`shard.handed_on` (or a stage's own error), and a stage whose next stage fails the batch tells
the caller with a one-way `shard.failed` (services.scheduler.pipelines.direct)."""

from __future__ import annotations

from dataclasses import field

from ..schema import message, record
from ..tensor import Tensor
from .sampling import SamplingParams


@record
class RouteStage:
    """One shard of a batch's route: the process (name) and the run of it (epoch) that holds the KV."""
    name: str
    epoch: int


@record
class ReplyTo:
    """A service that wants the last shard's answer straight (see ForwardResult)."""
    name: str
    key: int                           # names the call: the result carries it back
    # Only there: each stage answers its caller with `shard.handed_on` as soon as it has handed
    # the batch on, and a stage that cannot hand it on tells `name` with `shard.failed`.
    only: bool = False


@message("shard.forward")
class Forward:
    """One step of work in the flattened layout of services.shard.batch.ForwardBatch.

    The layout (positions, query_lens, page_table) travels in the header as int lists, not as
    tensor frames: a decode step's is a few ints, and every frame costs each hop more than its
    ints do (bench/header_cost.py)."""
    batch_id: int
    first_layer: int                   # the receiver must hold layers starting here
    positions: list[int]               # (T,) each token's position in its sequence
    query_lens: list[int]              # (S,) tokens of each sequence
    page_table: list[list[int]]        # (S, its pages) each sequence's KV pages, in order
    tokens: Tensor | None = None       # int32 (T,), to the first shard
    hidden: Tensor | None = None       # float32 (T, D) in the hop's codec, to later shards
    want_logits: Tensor | None = None  # bool (S,); None: every sequence samples
    sampling: list[SamplingParams] = field(default_factory=list)  # one per sampling sequence, in order
    steps: list[int] = field(default_factory=list)  # per sampling row: index of the token it samples
    history: Tensor | None = None      # int32: prompt+generated ids of sampling sequences, end to end
    history_lens: list[int] = field(default_factory=list)
    return_logits: bool = False        # diagnostics and parity tests only
    # The scheduler's pipeline, in layer order: each shard hands on to route[hop + 1] and to no
    # other, since only the shards the scheduler planned for hold the batch's KV.
    route: list[RouteStage] = field(default_factory=list)
    hop: int = 0                       # the receiver's index in route
    reply_to: ReplyTo | None = None    # also send the result straight there (the last shard)
    # The figures of the stages before (see ForwardReply), for the last shard's answer, and when
    # (wall clock, s) the sender sent this message: the receiver's one-way hop latency.
    hop_ms: dict[str, float] = field(default_factory=dict)
    hop_bytes: dict[str, int] = field(default_factory=dict)
    hop_latency_ms: dict[str, float] = field(default_factory=dict)
    sent_at: float = 0.0

    def check(self):
        if self.batch_id < 0 or self.first_layer < 0:
            raise ValueError("batch_id and first_layer must be >= 0")
        if not 0 <= self.hop < len(self.route):
            raise ValueError(f"hop {self.hop} is not a stage of the route ({len(self.route)} stages)")
        if (self.tokens is None) == (self.hidden is None):
            raise ValueError("exactly one of tokens and hidden")
        if self.return_logits and self.reply_to is not None and self.reply_to.only:
            raise ValueError("logits travel back along the chain: return_logits with reply_to.only")
        if len(self.steps) != len(self.sampling) or any(t < 0 for t in self.steps):
            raise ValueError(f"{len(self.sampling)} sampling rows need as many steps >= 0, "
                             f"got {len(self.steps)}")


@message("shard.forward_reply")
class ForwardReply:
    """What a `shard.forward` comes back with: one sampled token per sampling row, or that row's
    error (a row's bad parameters, history or logits fail that row alone)."""
    batch_id: int
    tokens: Tensor                     # int32 (S_sample,); 0 where the row failed
    logprobs: Tensor                   # float32 (S_sample,), raw distribution
    top_ids: Tensor | None = None      # int32 (S_sample, n)
    top_logprobs: Tensor | None = None
    logits: Tensor | None = None       # float32 (S_sample, V), only when return_logits
    errors: list[str] = field(default_factory=list)  # per row, "" when it sampled; []: none failed
    hop_ms: dict[str, float] = field(default_factory=dict)      # compute time per shard name, for per-hop metrics
    # Per-hop metrics, keyed by the shard the hop goes into (the batch's first hop comes from the
    # scheduler): activation (or token) payload bytes it received, its whole time with the batch
    # from receiving to replying (the rest of the route included), and, measured by the sender,
    # the hop's own latency (the onward call's round trip less the receiver's stage_ms).
    hop_bytes: dict[str, int] = field(default_factory=dict)
    stage_ms: dict[str, float] = field(default_factory=dict)
    hop_latency_ms: dict[str, float] = field(default_factory=dict)


@message("shard.result")
class ForwardResult(ForwardReply):
    """The last shard's ForwardReply, sent one-way to `Forward.reply_to` as soon as it is sampled.
    Unless ReplyTo says `only`, the same reply also travels back along the chain, and whichever
    comes first answers the batch."""
    key: int = 0                       # ReplyTo.key of the call it answers


@message("shard.handed_on")
class HandedOn:
    """A stage's answer to a `shard.forward` whose ReplyTo says `only`: it ran its layers and
    handed the batch to the next stage (the answer goes to ReplyTo.name)."""
    batch_id: int


@message("shard.failed")
class ForwardFailed:
    """Told one-way to ReplyTo.name (`only`) when the stage after `stage` failed the batch, or
    could not be reached: the error the chain of calls would have carried back."""
    key: int
    batch_id: int
    stage: str                         # the shard that called the one that failed
    code: str
    message: str
    retry_after: float = 0.0
