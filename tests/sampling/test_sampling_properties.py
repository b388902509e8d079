"""Properties of sample() over arbitrary small batches: every token obeys its row's filters,
and no row's result depends on the rest of its batch."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.penalties import apply_penalties
from kernels.sampling import greedy, sample
from wire.messages.sampling import SamplingParams

params_st = st.builds(
    SamplingParams,
    temperature=st.one_of(st.just(0.0), st.floats(0.05, 5.0)),
    top_k=st.integers(0, 45),
    top_p=st.one_of(st.just(1.0), st.floats(0.05, 1.0)),
    min_p=st.one_of(st.just(0.0), st.floats(0.0, 0.99)),
    repetition_penalty=st.one_of(st.just(1.0), st.floats(0.5, 2.0)),
    presence_penalty=st.floats(-2.0, 2.0),
    frequency_penalty=st.floats(-2.0, 2.0),
    seed=st.integers(0, 2**64 - 1),
    top_logprobs=st.integers(0, 5),
)


@st.composite
def batches(draw):
    B, V = draw(st.integers(1, 5)), draw(st.integers(2, 40))
    # Values from a coarse grid so ties are common; some -inf, never a whole row.
    grid = st.one_of(st.integers(-8, 8).map(lambda i: i / 2), st.just(-np.inf))
    logits = np.array(draw(st.lists(st.lists(grid, min_size=V, max_size=V),
                                    min_size=B, max_size=B)), dtype=np.float32)
    logits[:, draw(st.integers(0, V - 1))] = 1.0
    params = [draw(params_st) for _ in range(B)]
    histories, steps = [], []
    for _ in range(B):
        h = draw(st.lists(st.integers(0, V - 1), max_size=12))
        histories.append(np.array(h, dtype=np.int64))
        steps.append(draw(st.integers(0, len(h))))
    return logits, params, histories, steps


@settings(max_examples=150, deadline=None)
@given(batches())
def test_each_row_same_alone_as_in_batch(b):
    logits, params, histories, steps = b
    r = sample(logits, params, histories, steps)
    for i in range(len(params)):
        one = sample(logits[i:i + 1], params[i:i + 1], histories[i:i + 1], steps[i:i + 1])
        assert one.tokens[0] == r.tokens[i]
        assert one.logprobs[0] == r.logprobs[i]
        n = params[i].top_logprobs
        assert (one.top_ids[0, :n] == r.top_ids[i, :n]).all()


@settings(max_examples=150, deadline=None)
@given(batches())
def test_tokens_obey_filters_and_logprobs_are_raw(b):
    logits, params, histories, steps = b
    r = sample(logits, params, histories, steps)
    z = apply_penalties(logits.copy(), params, histories, steps).astype(np.float64)
    raw = logits.astype(np.float64)
    lse = np.log(np.exp(raw - raw.max(1, keepdims=True)).sum(1)) + raw.max(1)
    for i, p in enumerate(params):
        t = int(r.tokens[i])
        assert np.isfinite(logits[i, t])
        assert r.logprobs[i] <= 0
        np.testing.assert_allclose(r.logprobs[i], raw[i, t] - lse[i], atol=1e-5)
        if greedy(p):
            assert t == int(np.argmax(z[i]))
            continue
        zi = z[i]
        if p.top_k:
            # Exactly k kept: strictly better tokens plus lower-id ties come first.
            rank = (zi > zi[t]).sum() + (zi[:t] == zi[t]).sum()
            assert rank < p.top_k
        w = np.exp((zi - zi.max()) / p.temperature)
        assert w[t] >= p.min_p * (1 - 1e-5)
        if p.top_p < 1:
            in_k = np.ones_like(w, dtype=bool)
            if p.top_k:
                order = np.lexsort((np.arange(len(zi)), -zi))[:p.top_k]
                in_k = np.isin(np.arange(len(zi)), order)
            above = w[in_k & (zi > zi[t])].sum()
            assert above < p.top_p * w[in_k].sum() * (1 + 1e-5)
