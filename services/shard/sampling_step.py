"""The last shard's sampling step, pure: logits and the batch's sampling rows in, the reply's
arrays out. A row that is not SamplingParams, whose history or logits are bad, or that makes the
sampler raise, fails alone with its reason; the other rows keep their tokens. The parameters'
ranges are not checked again here: the scheduler's admission checked them, once per request
(the gateway before it), and a decode step only carries what admission let through."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kernels.sampling import BadLogits, BadSamplerInput, SampleResult, sample
from wire.failures import BAD_BATCH, BAD_LOGITS, BAD_SAMPLING, INTERNAL
from wire.messages.sampling import SamplingParams

# How a row's failure is named for the scheduler, which ends that request with it.
_CODES = ((BadLogits, BAD_LOGITS), (BadSamplerInput, BAD_BATCH))


@dataclass(frozen=True)
class StepResult:
    """One entry per sampling row; a failed row has token 0, logprob 0 and its reason in errors."""

    tokens: np.ndarray        # (S,) int32
    logprobs: np.ndarray      # (S,) float32
    top_ids: np.ndarray       # (S, n) int32, n the widest top_logprobs asked for
    top_logprobs: np.ndarray  # (S, n) float32
    errors: list[str]         # (S,) "" where the row sampled

    @property
    def failed(self) -> bool:
        return any(self.errors)


def split_histories(flat: np.ndarray, lens: Sequence[int], rows: int) -> list[np.ndarray]:
    """The per-row histories of a Forward's flat history tensor; [] lens: no row sent one.

    Raises BadSamplerInput when the lengths do not cut the tensor into `rows` pieces: that is
    the batch's framing, no single row's fault."""
    if not lens:
        if flat.size:
            raise BadSamplerInput(f"a history of {flat.size} ids came without history_lens")
        return [np.zeros(0, np.int32)] * rows
    if len(lens) != rows or min(lens) < 0 or sum(lens) != flat.shape[0]:
        raise BadSamplerInput(f"history_lens {list(lens)[:8]} do not cut the {flat.shape[0]} "
                              f"history ids into {rows} rows")
    cuts = np.cumsum([0, *lens])
    return [flat[cuts[i]:cuts[i + 1]] for i in range(rows)]


def sample_rows(logits: np.ndarray, params: Sequence, steps: Sequence[int],
                histories: Sequence[np.ndarray],
                sampler: Callable[..., SampleResult] = sample) -> StepResult:
    """Sample every row of logits (S, V) float32 that can be, and name why each other row cannot.

    Rows are sampled together; when that raises, each row is sampled alone to find the
    culprits (a row's draw depends only on its own inputs, so the survivors' tokens are the
    same either way)."""
    S = len(params)
    if logits.ndim != 2 or logits.shape[0] != S or len(steps) != S or len(histories) != S:
        raise BadSamplerInput(f"{getattr(logits, 'shape', '?')} logits for {S} sampling rows, "
                              f"{len(steps)} steps and {len(histories)} histories")
    errors = [_params_error(p) for p in params]
    good = [b for b in range(S) if not errors[b]]
    parts: list[tuple[list[int], SampleResult]] = []
    if good:
        try:
            parts.append((good, _sample_subset(sampler, logits, params, steps, histories, good)))
        except Exception:  # any failure here is some row's: find out whose
            for b in good:
                try:
                    parts.append(([b], _sample_subset(sampler, logits, params, steps, histories, [b])))
                except Exception as e:  # reported as the row's error
                    errors[b] = _reason(e)
    return _assemble(S, parts, errors)


def _params_error(p) -> str:
    if not isinstance(p, SamplingParams):
        return f"{BAD_SAMPLING}: sampling row is a {type(p).__name__}, not SamplingParams"
    return ""


def _sample_subset(sampler, logits, params, steps, histories, rows: list[int]) -> SampleResult:
    sel = rows if len(rows) < logits.shape[0] else slice(None)
    return sampler(logits[sel], [params[b] for b in rows], [histories[b] for b in rows],
                   [steps[b] for b in rows])


def _reason(e: Exception) -> str:
    code = next((c for t, c in _CODES if isinstance(e, t)), INTERNAL)
    detail = str(e) if code != INTERNAL else f"{type(e).__name__}: {e}"
    return f"{code}: {detail}"[:500]


def _assemble(S: int, parts, errors: list[str]) -> StepResult:
    n = max((r.top_ids.shape[1] for _, r in parts), default=0)
    tokens, logprobs = np.zeros(S, np.int32), np.zeros(S, np.float32)
    top_ids, top_lp = np.zeros((S, n), np.int32), np.full((S, n), -np.inf, np.float32)
    for rows, r in parts:
        w = r.top_ids.shape[1]
        tokens[rows] = r.tokens
        logprobs[rows] = r.logprobs
        top_ids[rows, :w] = r.top_ids
        top_lp[rows, :w] = r.top_logprobs
    return StepResult(tokens, logprobs, top_ids, top_lp, errors)
