"""Carrying one request across the loss of its scheduler, pure: what the gateway has passed on to
its client, and the continuation a scheduler that serves next runs to go on from there.

A scheduler that dies, restarts or stops ends none of its requests for their clients: the
gateway holds the request and every token it sent on, and submits the rest again as a
continuation (the same request with those tokens as `continued`, its seed and what is left of its
deadline). The new scheduler counts them as generated (the sampler's step, max_tokens, penalties)
and runs them through the request's text without sending it, so the client sees a pause, then
the rest: nothing twice, nothing lost.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from wire.failures import (DUPLICATE_REQUEST, NOT_FOUND, PEER_DEAD, PEER_RESTARTED,
                           SCHEDULER_STOPPED, failure)
from wire.messages.scheduler import Done, Generate, Started, Tokens

# The request's scheduler is gone (dead, replaced by a new epoch, stopping, or no longer known):
# the request goes on elsewhere, whatever it had streamed.
LOST = frozenset({PEER_DEAD, PEER_RESTARTED, SCHEDULER_STOPPED, NOT_FOUND})


@dataclass
class Carry:
    """One request's state as its client has it: whether it saw Started, the tokens it has."""

    request: Generate
    arrived: float                  # when the gateway took it (a monotonic clock)
    sent: list[int] = field(default_factory=list)
    seed: int | None = None         # the scheduler's, from Started (a request may give none)
    started: bool = False
    losses: int = 0                 # schedulers lost under it so far

    def take(self, ev: Any) -> Any | None:
        """The event to pass on to the client, or None: a continuation's Started is not news."""
        if isinstance(ev, Started):
            if self.started:
                return None
            self.started, self.seed = True, ev.seed
        elif isinstance(ev, Tokens):
            self.sent += ev.token_ids
        return ev

    def lost(self) -> None:
        self.losses += 1

    def bridges(self, code: str) -> bool:
        """Whether a failure with `code` is one the request waits out and goes on after: its
        scheduler is gone; or, once one was lost, a scheduler that cannot take the continuation
        yet (starting, busy, its tokenizer restarting: anything a retry can mend), or that still
        runs this request under the lost one's id."""
        if code in LOST:
            return True
        return self.losses > 0 and (failure(code).retry or code == DUPLICATE_REQUEST)

    def ended_by_loss(self, done: Done) -> bool:
        """Whether a Done is the scheduler stopping under the request, not the request's end."""
        return done.finish_reason == "failed" and done.code in LOST

    def next_request(self, now: float) -> Generate:
        """What to submit now: the request itself, or after a loss its continuation."""
        if not self.losses:
            return self.request
        r = self.request
        deadline = None if r.deadline_s is None else max(r.deadline_s - (now - self.arrived), 1e-3)
        return dataclasses.replace(r, continued=[*r.continued, *self.sent],
                                   seed=self.seed if self.seed is not None else r.seed,
                                   deadline_s=deadline)
