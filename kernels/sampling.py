"""The last shard's sampler: logits (B, V) in, token ids with log-probabilities out.

Order per row: penalties -> temperature -> top-k -> top-p -> min-p -> one draw u = U(seed, step)
walked through the kept tokens' weights in id order (inverse CDF).
Reported log-probabilities are those of the raw model distribution (logits as given,
temperature 1, no penalties or filters), as OpenAI and vLLM report them by default.

A row's parameters are any object with the fields of wire.messages.sampling.SamplingParams
(temperature, top_k, top_p, min_p, the three penalties, seed, top_logprobs) and its
`penalized` flag; their ranges are checked where they are declared, not here.
"""

import dataclasses
from collections.abc import Sequence

import numpy as np

from kernels._sampling_xp import array_module, to_host
from kernels.penalties import apply_penalties
from kernels.sampling_filters import keep_mask
from kernels.sampling_rng import uniforms

# Ids per block of the two-level inverse-CDF walk; 49152 = 192 blocks.
BLOCK = 256
# Below this a temperature is treated as greedy: dividing float32 logits by it would only
# produce ties and overflow, and the limit T -> 0 of the distribution is argmax anyway.
GREEDY_TEMPERATURE = 1e-5

__all__ = ["BadLogits", "BadSamplerInput", "GREEDY_TEMPERATURE", "SampleResult", "greedy",
           "sample"]


def greedy(p) -> bool:
    """Whether a row takes the argmax rather than a random draw."""
    return p.temperature < GREEDY_TEMPERATURE


class BadLogits(ValueError):
    """Rows of logits hold NaN or +inf, or are all -inf: the forward pass went wrong for them."""

    def __init__(self, rows, detail: str = ""):
        rows = [int(r) for r in rows]
        super().__init__(detail or f"logits rows {rows} hold NaN/+inf or only -inf")
        self.rows = rows


class BadSamplerInput(ValueError):
    """What comes with the logits is inconsistent: lengths, steps, history token ids, or a
    sampled row without a seed."""


@dataclasses.dataclass(frozen=True)
class SampleResult:
    """Host arrays: the chosen tokens and raw log-probabilities, plus the raw top-n per row.

    n is the largest top_logprobs in the batch; row b uses only its first params[b].top_logprobs.
    """

    tokens: np.ndarray        # (B,) int32
    logprobs: np.ndarray      # (B,) float32, log p(token) under softmax(raw logits), <= 0
    top_ids: np.ndarray       # (B, n) int32, most likely first, ties by lowest id
    top_logprobs: np.ndarray  # (B, n) float32, descending


def sample(logits, params: Sequence, histories: Sequence, steps: Sequence[int]) -> SampleResult:
    """Pick one token per row of logits (B, V) float32 (numpy or cupy; never modified).

    histories[b]: prompt + generated token ids so far (host ints); steps[b]: how many of them
    were generated, i.e. the index of the token being sampled. A non-greedy row needs a seed
    (SamplingParams.resolved()); its draw depends only on (seed, step), never on the batch.
    Greedy rows (temperature 0) take the argmax of the penalized logits, lowest id on ties.
    -inf logits are never sampled; NaN, +inf or all -inf raise BadLogits.
    """
    xp = array_module(logits)
    B, V = _check_batch(logits, params, histories, steps)
    rowmax = logits.max(axis=1)  # (B,) NaN propagates, so this also finds NaN rows
    bad = np.flatnonzero(to_host(xp.isnan(rowmax) | xp.isinf(rowmax)))
    if bad.size:
        raise BadLogits(bad)

    z = logits
    if any(p.penalized for p in params):
        z = apply_penalties(logits.copy(), params, histories, steps, xp)

    tokens = xp.argmax(z, axis=1)  # (B,) greedy for every row; sampled rows are overwritten
    rows = [b for b, p in enumerate(params) if not greedy(p)]
    if rows:
        sel = slice(None) if len(rows) == B else xp.asarray(np.array(rows, dtype=np.int64))
        tokens[sel] = _draw(z[sel], [params[b] for b in rows], [steps[b] for b in rows], xp)

    # Raw log-softmax (B, V) only at the few ids needed, via the row's log-sum-exp.
    lse = rowmax + xp.log(xp.exp(logits - rowmax[:, None]).sum(axis=1))  # (B,) float32
    ar = xp.arange(B)
    logprobs = logits[ar, tokens] - lse
    n = max((p.top_logprobs for p in params), default=0)
    top_ids = _top_n(logits, n, xp)
    top_lp = logits[ar[:, None], top_ids] - lse[:, None]
    return SampleResult(to_host(tokens).astype(np.int32), to_host(logprobs),
                        to_host(top_ids).astype(np.int32), to_host(top_lp))


def _draw(z, params, steps, xp):
    """Inverse-CDF draw over the kept tokens of each row, in id order, with u = U(seed, step)."""
    f32 = lambda vals: xp.asarray(np.array(vals, dtype=np.float32))  # noqa: E731
    temp = f32([p.temperature for p in params])
    zmax = z.max(axis=1)
    # Subtract the max before dividing: z / T overflows to inf for small T, (z - max) / T cannot.
    w = xp.exp((z - zmax[:, None]) / temp[:, None])  # (S, V) float32, best token weighs 1
    total = w.sum(axis=1)
    V = z.shape[1]
    # Clamped here: top_k >= V keeps every token, and a huge top_k must not overflow int64.
    keep = keep_mask(z, w, total, zmax, temp,
                     xp.asarray(np.array([min(p.top_k, V) for p in params], dtype=np.int64)),
                     f32([p.top_p for p in params]), f32([p.min_p for p in params]), xp)
    u = xp.asarray(uniforms([p.seed for p in params], steps))
    return _inverse_cdf(xp.where(keep, w, xp.float32(0)), u, xp)


def _inverse_cdf(wk, u, xp):
    """Per row, the first id whose running weight exceeds u * total, walking ids in order.

    Two levels so only one block per row needs a (sequential, slow) cumsum: block sums, their
    running total, then the running total inside the chosen block.
    """
    S, V = wk.shape
    nb = -(-V // BLOCK)
    if nb * BLOCK != V:
        wk = xp.concatenate([wk, xp.zeros((S, nb * BLOCK - V), dtype=np.float32)], axis=1)
    blocks = wk.reshape(S, nb, BLOCK)
    bs = blocks.sum(axis=2)  # (S, nb)
    cb = xp.cumsum(bs, axis=1)  # running total at each block's end
    target = u * cb[:, -1]  # (S,) float32
    blk = _first_above_or_last_weighted(cb, target, bs, xp)
    ar = xp.arange(S)
    before = xp.where(blk > 0, cb[ar, xp.maximum(blk - 1, 0)], xp.float32(0))
    inner_w = blocks[ar, blk]  # (S, BLOCK)
    j = _first_above_or_last_weighted(xp.cumsum(inner_w, axis=1), target - before, inner_w, xp)
    return blk * BLOCK + j


def _first_above_or_last_weighted(running, target, weights, xp):
    """First index where running > target: its weight is > 0, as running only grows there.
    Where rounding leaves target at or past the end (u * total rounding up to total, or a block
    sum and its cumsum rounding apart), the last index with weight."""
    hit = running > target[:, None]
    last = weights.shape[1] - 1 - xp.argmax(weights[:, ::-1] > 0, axis=1)
    return xp.where(hit.any(axis=1), xp.argmax(hit, axis=1), last)


def _top_n(logits, n, xp):
    """(B, n) ids of the n largest raw logits, descending, ties by lowest id (exactly, so a
    row's alternatives do not depend on the n other rows asked for)."""
    B, V = logits.shape
    if n == 0:
        return xp.zeros((B, 0), dtype=np.int64)
    n = min(n, V)
    ids = xp.argpartition(-logits, n - 1, axis=1)[:, :n] if n < V else xp.tile(xp.arange(V), (B, 1))
    ids = _sort_desc_by_value_then_id(logits, ids, xp)
    # argpartition picks arbitrary members of a tie group cut by the n-th place; redo those
    # rows (rare: exact ties in real logits) with a full stable sort.
    thr = xp.take_along_axis(logits, ids[:, -1:], axis=1)  # (B, 1) n-th largest value
    cut = np.flatnonzero(to_host((logits == thr).sum(axis=1) > (xp.take_along_axis(
        logits, ids, axis=1) == thr).sum(axis=1)))
    if cut.size:
        rows = xp.asarray(cut)
        ids[rows] = xp.argsort(-logits[rows], axis=1, kind="stable")[:, :n]
    return ids


def _sort_desc_by_value_then_id(logits, ids, xp):
    by_id = xp.take_along_axis(ids, xp.argsort(ids, axis=1), axis=1)
    vals = xp.take_along_axis(logits, by_id, axis=1)
    return xp.take_along_axis(by_id, xp.argsort(-vals, axis=1, kind="stable"), axis=1)


def _check_batch(logits, params, histories, steps):
    if getattr(logits, "ndim", None) != 2 or logits.dtype != np.float32 or logits.shape[1] == 0:
        raise BadLogits([], f"logits must be a 2-D float32 array, got "
                            f"{getattr(logits, 'dtype', type(logits))} {getattr(logits, 'shape', '')}")
    B, V = logits.shape
    if not (len(params) == len(histories) == len(steps) == B):
        raise BadSamplerInput(f"batch of {B} logits rows needs as many params, histories and steps; "
                       f"got {len(params)}, {len(histories)}, {len(steps)}")
    for b, (p, h, s) in enumerate(zip(params, histories, steps)):
        if not greedy(p) and p.seed is None:
            raise BadSamplerInput(f"params[{b}] samples without a seed: resolve the seed once, "
                                  "at admission (SamplingParams.resolved())")
        h = np.asarray(h)
        if h.ndim != 1 or (h.size and h.dtype.kind not in "iu"):
            raise BadSamplerInput(f"histories[{b}] must be a 1-D array of token ids")
        if h.size and (h.min() < 0 or h.max() >= V):
            raise BadSamplerInput(f"histories[{b}] holds token ids outside [0, {V})")
        # Only penalties read the history; an unpenalized row may come without one.
        limit = h.size if p.penalized else 1 << 62
        if not isinstance(s, (int, np.integer)) or not 0 <= s <= limit:
            raise BadSamplerInput(f"steps[{b}]={s!r} must be an int in [0, len(histories[{b}])={h.size}]"
                           if p.penalized else f"steps[{b}]={s!r} must be an int >= 0")
    return B, V
