"""The model's vocabulary as llguidance sees it, and one matcher per constrained request.

    grammars = Grammars(token_bytes, special_ids, eot_ids)      # once per scheduler (~0.1-1 s)
    c = grammars.compile(fmt)                                   # BadFormat: refuse the request
    words = c.mask(generated)                                   # (ceil(V/32),) uint32, or None

The matcher follows the request's generated tokens as the scheduler holds them, whatever
happened in between: a token it has not seen is fed to it, and one it saw that is no longer
there (a step dropped and run again) is rolled back, so a recovery needs nothing of it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence

import numpy as np
from llguidance import LLMatcher, LLTokenizer, TokenizerWrapper
from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

from .errors import BadFormat, GrammarError, first_line
from .formats import grammar_of, trigger_of
from .guarded import Guarded
from .triggered import Triggered

MASK_TIMES = 4096        # the latest mask times kept for the figures (bench.serve --constrained)


class _Vocabulary:
    """What llguidance's TokenizerWrapper reads: each token's bytes (control tokens named, behind
    the 0xFF byte that marks them special), and a tokenizer for the text it must write itself:
    the longest token at each place, which need not be the model's own split (it only serves
    text the grammar forces)."""

    def __init__(self, token_bytes: Sequence[bytes], special_ids: Sequence[int], eos: int):
        special = set(special_ids) | {i for i, b in enumerate(token_bytes) if not b}
        self.tokens = [b"\xff<|special_%d|>" % i if i in special else bytes(b)
                       for i, b in enumerate(token_bytes)]
        self.special_token_ids = sorted(special)
        self.eos_token_id = eos
        self.bos_token_id = None
        self._ids = {b: i for i, b in enumerate(self.tokens) if i not in special}
        self._longest = max((len(b) for b in self._ids), default=1)

    def __call__(self, text: bytes | str) -> list[int]:
        data = text.encode() if isinstance(text, str) else bytes(text)
        out, at = [], 0
        while at < len(data):
            for n in range(min(self._longest, len(data) - at), 0, -1):
                if (i := self._ids.get(data[at:at + n])) is not None:
                    out.append(i)
                    at += n
                    break
            else:
                raise ValueError(f"byte {data[at]:#x} is no token of the vocabulary")
        return out


class Grammars:
    """Compiles formats into matchers over one vocabulary, and keeps their mask times."""

    def __init__(self, token_bytes: Sequence[bytes], special_ids: Sequence[int],
                 eot_ids: Sequence[int]):
        if not eot_ids:
            raise ValueError("a vocabulary without an end-of-turn token cannot end a grammar")
        ends = sorted(eot_ids)
        self.vocab_size = len(token_bytes)
        # No "slices" (llguidance's precomputed token classes): the index then takes a third of
        # the time to build (0.5 s against 1.6 s for SmolLM2, 2.7 s against 6.1 s for Gemma 3;
        # it holds the GIL, so the scheduler's start stalls as long) and masks of JSON cost
        # about the same (measured: 6 us against 4 us p50, 0.23 ms against 0.22 ms at most).
        self.tokenizer = LLTokenizer(TokenizerWrapper(_Vocabulary(token_bytes, special_ids, ends[0])),
                                     n_vocab=self.vocab_size, eos_token=ends, slices=[])
        self.mask_times: deque[float] = deque(maxlen=MASK_TIMES)
        self._ends = ends
        # Each token's text, as a trigger is looked for in it (control tokens hold none).
        special = set(special_ids)
        self._texts = [b"" if i in special else bytes(b) for i, b in enumerate(token_bytes)]
        self._holders: dict[bytes, list[int]] = {}

    def compile(self, fmt) -> "Constraint | Triggered":
        """A fresh matcher for `fmt` (Generate.format); BadFormat says why it cannot be."""
        grammar = grammar_of(fmt)
        matcher = LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise BadFormat(first_line(matcher.get_error()))
        if (trigger := trigger_of(fmt)) is None:
            return Constraint(matcher, self.vocab_size, self.mask_times)
        return Triggered(matcher, trigger.encode(), self._texts, self._ends, self.vocab_size,
                         self.mask_times, self._holding(trigger.encode()))

    def _holding(self, trigger: bytes) -> list[int]:
        """The tokens whose text holds the whole trigger (kept per trigger: a scan of the
        vocabulary takes milliseconds)."""
        if trigger not in self._holders:
            self._holders[trigger] = [i for i, b in enumerate(self._texts) if trigger in b]
        return self._holders[trigger]

    def mask_stats(self) -> dict[str, float]:
        """Mask time per token, p50 and p99 in microseconds, over the latest masks."""
        if not self.mask_times:
            return {}
        p50, p99 = np.percentile(np.fromiter(self.mask_times, np.float64), [50, 99])
        return {"grammar_mask_us_p50": round(float(p50), 1),
                "grammar_mask_us_p99": round(float(p99), 1),
                "grammar_masks": float(len(self.mask_times))}


class Constraint(Guarded):
    """One request's matcher, and the tokens it has followed."""

    def __init__(self, matcher: LLMatcher, vocab_size: int, times: deque):
        super().__init__()
        self._matcher = matcher
        self._fed: list[int] = []
        self._buf = allocate_token_bitmask(1, vocab_size)
        self._times = times

    def _mask(self, generated: Sequence[int]) -> np.ndarray:
        """The packed mask (uint32 words) of the tokens the draw after `generated` may take."""
        t0 = time.perf_counter()
        self._follow(generated)
        fill_next_token_bitmask(self._matcher, self._buf, 0)
        if self._matcher.is_error():
            raise GrammarError(first_line(self._matcher.get_error()))
        self._times.append((time.perf_counter() - t0) * 1e6)
        return self._buf[0].view(np.uint32).copy()

    def _forced(self, generated: Sequence[int]) -> list[int]:
        """The tokens the grammar allows alone after `generated` (a schema's fixed keys, the
        closing of a call): they need no draw, and go in with the next step as one chunk."""
        self._follow(generated)
        out = self._matcher.compute_ff_tokens()
        if self._matcher.is_error():
            raise GrammarError(first_line(self._matcher.get_error()))
        return [int(t) for t in out]

    def _follow(self, generated: Sequence[int]) -> None:
        fed, n = self._fed, len(self._fed)
        # Generated tokens are only ever added, or dropped from the end: the last one fed still
        # in place means every one before it is.
        if len(generated) < n or (n and generated[n - 1] != fed[-1]):
            keep = 0
            while keep < min(n, len(generated)) and generated[keep] == fed[keep]:
                keep += 1
            if not self._matcher.rollback(n - keep):
                raise GrammarError(first_line(self._matcher.get_error()))
            del fed[keep:]
            n = keep
        new = [int(t) for t in generated[n:]]
        if new:
            if not self._matcher.consume_tokens(new):
                raise GrammarError(first_line(self._matcher.get_error()))
            fed.extend(new)
