"""Messages of the shard pipeline. A batch goes one way: the scheduler calls the first shard with
`shard.forward`, each stage runs its layers and calls the next stage the route names, and the
last shard samples and sends the answer (token ids, never logits) straight to `Forward.reply_to`
as a one-way `shard.result` (on a route of one stage, where the scheduler is the shard's caller,
the result is the reply). Each other stage answers its caller with `shard.handed_on` once it has
handed the batch on (or with its own typed error); a stage whose next stage fails the batch, or
cannot be reached, tells `reply_to` with a one-way `shard.failed`. Whether the last shard can
reach the scheduler is checked once, when the scheduler assembles a pipeline."""

from __future__ import annotations

from dataclasses import field

from ..schema import message, record
from ..tensor import Tensor
from .sampling import SamplingParams


POOL_KINDS = ("sum", "last", "first")   # how a shard pools a sequence's rows of one batch


@record
class RouteStage:
    """One shard of a batch's route: the process (name) and the run of it (epoch) that holds the KV."""
    name: str
    epoch: int


@record
class ReplyTo:
    """Where the batch's answer goes: the service `name` (the scheduler), for its call `key`."""
    name: str
    key: int                           # names the call: the result (or failure) carries it back
    epoch: int = 0                     # the caller's run: the shards' KV follows its page tables


@record
class Hop:
    """One stage's figures for a batch, appended by the stage as it hands the batch on (the last
    stage's go with the result): what the scheduler's per-hop metrics are made of."""
    shard: str
    bytes: int                         # activation (or token) payload bytes this stage received
    latency_ms: float                  # one way, from the sender's clock (Forward.sent_at) to its own
    compute_ms: float                  # its layers (the last stage's: with the sampler)


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
    reply_to: ReplyTo | None = None    # where the last shard sends the answer (required on the wire)
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
    hops: list[Hop] = field(default_factory=list)   # the figures of the stages before
    sent_at: float = 0.0               # when (wall clock, s) the sender sent this message
    # Rows whose next token a grammar restricts (indices into `sampling`, ascending) and the
    # tokens each may draw: packed bitmasks, uint32 (len(mask_rows), ceil(V/32)), token t allowed
    # where bit t % 32 of word t // 32 is set. The last shard masks before sampling; every
    # stage hands them on untouched. Unconstrained rows carry nothing.
    mask_rows: list[int] = field(default_factory=list)
    masks: Tensor | None = None
    # Sequences (indices into query_lens, ascending) whose pooled hidden states the last shard
    # returns (embeddings), and how each pools its rows of this batch, after the model's final
    # norm: "sum" (a mean's share: the scheduler adds the chunks and divides), "last" or "first".
    # They need not sample (want_logits False); every stage hands them on untouched.
    pool_rows: list[int] = field(default_factory=list)
    pool_kinds: list[str] = field(default_factory=list)

    def check(self):
        if self.batch_id < 0 or self.first_layer < 0:
            raise ValueError("batch_id and first_layer must be >= 0")
        if not 0 <= self.hop < len(self.route):
            raise ValueError(f"hop {self.hop} is not a stage of the route ({len(self.route)} stages)")
        if (self.tokens is None) == (self.hidden is None):
            raise ValueError("exactly one of tokens and hidden")
        if len(self.steps) != len(self.sampling) or any(t < 0 for t in self.steps):
            raise ValueError(f"{len(self.sampling)} sampling rows need as many steps >= 0, "
                             f"got {len(self.steps)}")
        if self.reply_to is None:
            raise ValueError("reply_to is required: the last shard sends the answer there")
        if (self.masks is None) != (not self.mask_rows) or sorted(set(self.mask_rows)) != \
                self.mask_rows or any(not 0 <= r < len(self.sampling) for r in self.mask_rows):
            raise ValueError(f"mask_rows {self.mask_rows[:8]} must be distinct sampling rows in "
                             f"order, given exactly when masks are")
        if len(self.pool_kinds) != len(self.pool_rows) or sorted(set(self.pool_rows)) != \
                self.pool_rows or any(not 0 <= r < len(self.query_lens) for r in self.pool_rows) \
                or any(k not in POOL_KINDS for k in self.pool_kinds):
            raise ValueError(f"pool_rows {self.pool_rows[:8]} must be distinct sequences in order, "
                             f"each with a pool kind of {POOL_KINDS}")


@message("shard.handed_on")
class HandedOn:
    """A stage's answer to a `shard.forward`: it ran its layers and handed the batch to the next
    stage (the last stage: sent the result to `reply_to`)."""
    batch_id: int


@message("shard.result")
class ForwardResult:
    """The batch's answer, sent one-way by the last shard to `Forward.reply_to`: one sampled token
    per sampling row, or that row's error (a row's bad parameters, history or logits fail that row
    alone)."""
    batch_id: int
    key: int                           # ReplyTo.key of the call it answers
    tokens: Tensor                     # int32 (S_sample,); 0 where the row failed
    logprobs: Tensor                   # float32 (S_sample,), raw distribution
    top_ids: Tensor | None = None      # int32 (S_sample, n)
    top_logprobs: Tensor | None = None
    logits: Tensor | None = None       # float32 (S_sample, V), only when return_logits
    errors: list[str] = field(default_factory=list)  # per row, "" when it sampled; []: none failed
    hops: list[Hop] = field(default_factory=list)    # every stage's, in route order
    pooled: Tensor | None = None       # float32 (len(Forward.pool_rows), D), when it asked


@message("shard.failed")
class ForwardFailed:
    """Told one-way to `Forward.reply_to` when the stage after `stage` failed the batch, or could
    not be reached: the error that stage answered with (its code from wire.failures)."""
    key: int
    batch_id: int
    stage: str                         # the shard that called the one that failed
    code: str
    message: str
    retry_after: float = 0.0
