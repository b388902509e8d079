"""What the service keeps per request beside the policy: its stream of events and its decoder."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from services.tokenizer.stream import IncrementalDecoder
from wire.messages.sampling import SamplingParams

from .batch_plan import Output


@dataclass
class Event:
    """One policy Output with the alternatives the sampler returned for its token."""

    output: Output
    top_ids: list[int] = field(default_factory=list)
    top_logprobs: list[float] = field(default_factory=list)


class RequestStream:
    """Events of one request on their way to its caller, and the state to produce them."""

    def __init__(self, request_id: str, prompt: list[int], sampling: SamplingParams,
                 decoder: IncrementalDecoder):
        self.request_id = request_id
        self.prompt_tokens = len(prompt)
        self.sampling = sampling
        # Penalties need every token the sequence has seen; others send no history.
        self.history: list[int] | None = list(prompt) if sampling.penalized else None
        self.decoder = decoder
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.completion_tokens = 0

    def text_of(self, token_id: int) -> str:
        """Feed the decoder (once per accepted token) and return the text it completed."""
        self.completion_tokens += 1
        if self.history is not None:
            self.history.append(token_id)
        return self.decoder.push(token_id)

    def deliver(self, event: Event) -> None:
        if event.output.finish is not None:
            tail = self.decoder.flush()  # bytes held for a character that never completed
            if tail and event.output.finish.reason in ("length", "repeated_line_loop"):
                o = event.output
                event = Event(Output(o.request_id, o.token_id, o.text + tail, o.finish, o.logprob),
                              event.top_ids, event.top_logprobs)
        self.events.put_nowait(event)
