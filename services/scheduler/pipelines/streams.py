"""What the service keeps per request beside the policy: its stream of events to the caller."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from wire.messages.sampling import SamplingParams

from ..batching.batches import Output


@dataclass
class StreamEvent:
    """One policy Output on its way to the caller, with the alternatives the sampler returned."""

    output: Output
    top_ids: list[int] = field(default_factory=list)
    top_logprobs: list[float] = field(default_factory=list)


class RequestStream:
    """Events of one request on their way to its caller, and how its tokens are sampled."""

    def __init__(self, request_id: str, prompt_tokens: int, sampling: SamplingParams,
                 completed: int = 0, constraint=None, pooled=None):
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self.sampling = sampling
        # The request's grammar (grammar.matcher.Constraint), None for free text: the driver
        # asks it for the mask of each token the request samples.
        self.constraint = constraint
        # An embedding's parts as they come back (pooling.Pooled), None for generation.
        self.pooled = pooled
        self.events: asyncio.Queue[StreamEvent] = asyncio.Queue()
        self.completion_tokens = completed   # a continuation's tokens count as generated
        self.finished = False

    def deliver(self, event: StreamEvent) -> bool:
        """Queue an event for the caller; False, and nothing queued, once the request has ended.
        A finish is the stream's last event, whatever comes after it: a batch's token can reach
        here after a step that ran before its delivery ended the request (a deadline, say)."""
        if self.finished:
            return False
        self.finished = event.output.finish is not None
        if event.output.token_id is not None:
            self.completion_tokens += 1
        self.events.put_nowait(event)
        return True
