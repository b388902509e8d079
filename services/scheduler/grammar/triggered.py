"""A grammar that holds from where its trigger appears in the answer on: a tool call the model
opens when it decides to (`tool_choice` auto), as `<tool_call>`.

    c = Triggered(matcher, b"<tool_call>", texts, ends, vocab_size, times)
    c.mask(generated)      # None while the answer is free text: the row carries no mask
    c.forced(generated)    # what the call's grammar forces, once the call is open

The answer is free text until its end holds the trigger, or the start of it. From the token
where that began, a matcher follows the tokens (its grammar: any text up to the trigger, then
the call), and masks each draw: one call of a listed tool with valid arguments, closed. Then the
answer is free again, and the next call is held the same way. The start of a trigger that turns
out to be text ("<b>") lets the matcher go again. So free text computes no mask and sends
none; only the tokens from a trigger's first byte to the call's end do, where the answer may
still end for as long as the trigger is not whole.

A token that holds the whole trigger and something the call cannot start with would open a
call no grammar could follow: while the answer is free, such tokens (if the vocabulary has any)
are masked out, with a mask computed once.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence

import numpy as np
from llguidance import LLMatcher
from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

from .errors import GrammarError, first_line
from .guarded import Guarded


class Triggered(Guarded):
    """One request's triggered grammar, and where its answer stands."""

    holds_whole_answer = False

    def __init__(self, matcher: LLMatcher, trigger: bytes, texts: Sequence[bytes],
                 ends: Sequence[int], vocab_size: int, times: deque,
                 holders: Sequence[int] = ()):
        super().__init__()
        self._fresh = matcher            # never fed: each call the answer opens gets a copy
        self._matcher = matcher
        self._trigger = trigger
        self._texts = texts              # each token's bytes (b"" for control tokens)
        self._ends = list(ends)
        self._buf = allocate_token_bitmask(1, vocab_size)
        self._times = times
        self._seen: list[int] = []       # the generated tokens followed so far
        self._scan = 0                   # the text before this token holds no start of a trigger
        self._start: int | None = None   # the token the matcher began at; None: free text
        self._text = b""                 # the text from `_start` on
        self._opened = False             # the trigger is whole in `_text`
        self._free = self._free_mask(holders, vocab_size)

    def _mask(self, generated: Sequence[int]) -> np.ndarray | None:
        """The packed mask for the draw after `generated`; None when any token may come."""
        self._follow(generated)
        if self._start is None:
            return self._free
        t0 = time.perf_counter()
        fill_next_token_bitmask(self._matcher, self._buf, 0)
        if self._matcher.is_error():
            raise GrammarError(first_line(self._matcher.get_error()))
        words = self._buf[0].view(np.uint32).copy()
        if not self._opened:     # it may yet be text, and the answer may end with it
            for e in self._ends:
                words[e >> 5] |= np.uint32(1 << (e & 31))
        self._times.append((time.perf_counter() - t0) * 1e6)
        return words

    def _forced(self, generated: Sequence[int]) -> list[int]:
        """The tokens an open call's grammar allows alone after `generated`."""
        self._follow(generated)
        if self._start is None or not self._opened:
            return []
        out = self._matcher.compute_ff_tokens()
        if self._matcher.is_error():
            raise GrammarError(first_line(self._matcher.get_error()))
        return [int(t) for t in out]

    def _follow(self, generated: Sequence[int]) -> None:
        seen = self._seen
        if len(generated) < len(seen) or (seen and generated[len(seen) - 1] != seen[-1]):
            # A step was dropped and runs again (recovery): follow the answer from its start.
            seen.clear()
            self._scan, self._start = 0, None
        while len(seen) < len(generated):
            if self._start is None:
                at = self._trigger_start(generated)
                if at is None:
                    seen.extend(int(t) for t in generated[len(seen):])
                    self._scan = len(seen)
                    return
                seen.extend(int(t) for t in generated[len(seen):at])
                self._begin(at)
            t = int(generated[len(seen)])
            if not self._matcher.consume_token(t):
                raise GrammarError(first_line(self._matcher.get_error()))
            seen.append(t)
            self._text += self._texts[t]
            if not self._opened:
                self._opened = self._trigger in self._text
                if not self._opened and not _ends_in_start(self._text, self._trigger):
                    self._end()              # it was text after all
            elif self._matcher.is_accepting():
                self._end()                  # the call is closed

    def _trigger_start(self, generated: Sequence[int]) -> int | None:
        """The token (at or after `_scan`) where a trigger, whole or begun at the end, starts."""
        pieces = [self._texts[int(t)] for t in generated[self._scan:]]
        text = b"".join(pieces)
        at = text.find(self._trigger)
        for k in range(min(len(self._trigger) - 1, len(text)), 0, -1):
            if self._trigger.startswith(text[-k:]):
                at = len(text) - k if at < 0 else min(at, len(text) - k)
                break
        if at < 0:
            return None
        for i, piece in enumerate(pieces):
            if at < len(piece):
                return self._scan + i
            at -= len(piece)
        return None      # not reached: `at` lies inside the text

    def _begin(self, at: int) -> None:
        self._matcher = self._fresh.deep_copy()
        self._start, self._text, self._opened = at, b"", False

    def _end(self) -> None:
        self._start, self._scan = None, len(self._seen)

    def _free_mask(self, holders: Sequence[int], vocab_size: int) -> np.ndarray | None:
        """While the answer is free: every token but those that hold the whole trigger and
        cannot start a call; None when there are none (almost always)."""
        bad = [int(t) for t in holders if not self._fresh.deep_copy().consume_token(int(t))]
        if not bad:
            return None
        words = np.full((vocab_size + 31) // 32, 0xFFFFFFFF, np.uint32)
        for t in bad:
            words[t >> 5] &= np.uint32(~(1 << (t & 31)) & 0xFFFFFFFF)
        return words


def _ends_in_start(text: bytes, trigger: bytes) -> bool:
    """Whether `text` ends with the start of `trigger`."""
    return any(trigger.startswith(text[-k:]) for k in range(1, min(len(trigger), len(text) + 1)))
