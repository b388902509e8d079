"""Per-request sampling parameters, checked once when built so the sampler never sees bad ones."""

import dataclasses
import math
import numbers
import secrets

SEED_LIMIT = 1 << 64
MAX_TOP_LOGPROBS = 20
# Below this a temperature is treated as greedy: dividing float32 logits by it would only
# produce ties and overflow, and the limit T -> 0 of the distribution is argmax anyway.
GREEDY_TEMPERATURE = 1e-5


class BadSamplingParams(ValueError):
    """A sampling parameter is out of range; the message names it and the allowed range."""

    def __init__(self, name: str, value, allowed: str):
        super().__init__(f"sampling parameter {name}={value!r} is invalid: must be {allowed}")
        self.name = name
        self.value = value


def fresh_seed() -> int:
    """A new random seed for a request that gave none; pick it once, at admission."""
    return secrets.randbits(64)


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to pick the next token of one request.

    temperature 0 is greedy; top_k 0, top_p 1.0, min_p 0 and repetition_penalty 1.0 are off.
    repetition_penalty follows llama.cpp/HF (on prompt + generated tokens); presence and
    frequency penalties follow OpenAI (on generated tokens only). The random draw for
    generated token number `step` is a pure function of (seed, step); seed=None must be
    replaced by the caller (`resolved()`) before sampling, so a re-prefill after a crash
    continues with the same tokens.
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

    def __post_init__(self):
        _check_float(self, "temperature", lambda v: 0.0 <= v <= 100.0, "in [0, 100]")
        _check_float(self, "top_p", lambda v: 0.0 < v <= 1.0, "in (0, 1]")
        _check_float(self, "min_p", lambda v: 0.0 <= v <= 1.0, "in [0, 1]")
        _check_float(self, "repetition_penalty", lambda v: 0.0 < v <= 10.0, "in (0, 10]")
        _check_float(self, "presence_penalty", lambda v: -2.0 <= v <= 2.0, "in [-2, 2]")
        _check_float(self, "frequency_penalty", lambda v: -2.0 <= v <= 2.0, "in [-2, 2]")
        _check_int(self, "top_k", lambda v: v >= 0, "an int >= 0")
        _check_int(self, "top_logprobs", lambda v: 0 <= v <= MAX_TOP_LOGPROBS,
                   f"an int in [0, {MAX_TOP_LOGPROBS}]")
        if self.seed is not None:
            _check_int(self, "seed", lambda v: 0 <= v < SEED_LIMIT, "None or an int in [0, 2**64)")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE

    @property
    def penalized(self) -> bool:
        return (self.repetition_penalty != 1.0 or self.presence_penalty != 0.0
                or self.frequency_penalty != 0.0)

    def resolved(self) -> "SamplingParams":
        """These params with a fresh seed if none was given (call once per request)."""
        return self if self.seed is not None else dataclasses.replace(self, seed=fresh_seed())


def _check_float(p, name, ok, allowed):
    v = getattr(p, name)
    # bool is an int subclass; True as a temperature is a caller bug, not 1.0.
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise BadSamplingParams(name, v, f"a number {allowed}")
    v = float(v)
    if math.isnan(v) or not ok(v):
        raise BadSamplingParams(name, v, allowed)
    object.__setattr__(p, name, v)


def _check_int(p, name, ok, allowed):
    v = getattr(p, name)
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not ok(int(v)):
        raise BadSamplingParams(name, v, allowed)
    object.__setattr__(p, name, int(v))
