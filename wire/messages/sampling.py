"""How to pick the next token of one request: the sampling parameters, declared once with their
ranges. `scheduler.generate` carries them flat (Generate inherits this record) and every row of
a `shard.forward` carries one. The ranges are checked where a request is admitted (the
scheduler's admission calls `validate`; the gateway's tables check its own, narrower ranges),
not again on the way: a decode step carries what admission let through."""

from __future__ import annotations

import dataclasses
import secrets

from ..failures import BAD_SAMPLING
from ..schema import record

SEED_LIMIT = 1 << 64
# Beyond any vocabulary, and small enough for every array index type; the sampler clamps to V.
MAX_TOP_K = (1 << 31) - 1
MAX_TOP_LOGPROBS = 20

# name -> (lowest, highest, lowest allowed, highest allowed, the range as a user reads it)
_FLOATS = {
    "temperature": (0.0, 100.0, True, True, "in [0, 100]"),
    "top_p": (0.0, 1.0, False, True, "in (0, 1]"),
    "min_p": (0.0, 1.0, True, True, "in [0, 1]"),
    "repetition_penalty": (0.0, 10.0, False, True, "in (0, 10]"),
    "presence_penalty": (-2.0, 2.0, True, True, "in [-2, 2]"),
    "frequency_penalty": (-2.0, 2.0, True, True, "in [-2, 2]"),
}
_INTS = {
    "top_k": (0, MAX_TOP_K, f"an int in [0, {MAX_TOP_K}] (0: off)"),
    "top_logprobs": (0, MAX_TOP_LOGPROBS, f"an int in [0, {MAX_TOP_LOGPROBS}]"),
    "seed": (0, SEED_LIMIT - 1, "None or an int in [0, 2**64)"),
}


class BadSamplingParams(ValueError):
    """A sampling parameter is out of range; the message names it and the allowed range."""

    code = BAD_SAMPLING   # the failure code a refused request gets

    def __init__(self, name: str, value, allowed: str):
        super().__init__(f"sampling parameter {name}={value!r} is invalid: must be {allowed}")
        self.name = name
        self.value = value


def fresh_seed() -> int:
    """A new random seed for a request that gave none; pick it once, at admission."""
    return secrets.randbits(64)


@record
class SamplingParams:
    """How to pick the next token of one request.

    temperature 0 is greedy; top_k 0, top_p 1.0, min_p 0 and repetition_penalty 1.0 are off.
    repetition_penalty follows llama.cpp/HF (on prompt + generated tokens); presence and
    frequency penalties follow OpenAI (on generated tokens only). The random draw for
    generated token number `step` is a pure function of (seed, step); seed=None is replaced
    once, at admission (`resolved()`), so a re-prefill after a crash draws the same tokens.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    top_logprobs: int = 0

    def validate(self) -> None:
        """Raise BadSamplingParams naming the first field out of its range."""
        for name, (lo, hi, lo_in, hi_in, allowed) in _FLOATS.items():
            v = getattr(self, name)
            # bool is an int subclass: True as a temperature is a caller's bug, not 1.0.
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise BadSamplingParams(name, v, f"a number {allowed}")
            # Written so that NaN fails every comparison and lands here too, as do +-inf.
            if not ((lo <= v if lo_in else lo < v) and (v <= hi if hi_in else v < hi)):
                raise BadSamplingParams(name, v, allowed)
        for name, (lo, hi, allowed) in _INTS.items():
            v = getattr(self, name)
            if name == "seed" and v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise BadSamplingParams(name, v, allowed)

    @property
    def penalized(self) -> bool:
        """Whether a penalty is on, so the sampler needs the tokens the request has seen."""
        return (self.repetition_penalty != 1.0 or self.presence_penalty != 0.0
                or self.frequency_penalty != 0.0)

    def resolved(self) -> SamplingParams:
        """These params with a fresh seed if none was given (call once per request)."""
        return self if self.seed is not None else dataclasses.replace(self, seed=fresh_seed())

    @classmethod
    def of(cls, carrier) -> SamplingParams:
        """The sampling parameters of an object that carries them among other fields (a Generate)."""
        return cls(**{f.name: getattr(carrier, f.name) for f in dataclasses.fields(cls)})
