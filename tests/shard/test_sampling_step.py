"""The last shard's sampling step, without sockets: zero rows, and rows that fail alone."""

import numpy as np
import pytest

from kernels.sampling import BadSamplerInput, sample
from services.shard.sampling_step import sample_rows, split_histories
from wire.messages.sampling import SamplingParams

V = 64
GREEDY = SamplingParams(temperature=0.0)


def logits_of(rows: int) -> np.ndarray:
    return np.random.default_rng(rows).standard_normal((rows, V)).astype(np.float32)


def raw_logprob(row: np.ndarray, token: int) -> float:
    z = row.astype(np.float64)   # the reference in float64, from the definition
    return float(z[token] - z.max() - np.log(np.exp(z - z.max()).sum()))


def no_history(n):
    return [np.zeros(0, np.int32)] * n


def test_zero_rows_give_empty_arrays_and_no_errors():
    r = sample_rows(np.zeros((0, V), np.float32), [], [], [])
    assert r.tokens.shape == (0,) and r.tokens.dtype == np.int32
    assert r.logprobs.shape == (0,) and r.logprobs.dtype == np.float32
    assert r.top_ids.shape == (0, 0) and r.top_logprobs.shape == (0, 0)
    assert r.errors == [] and not r.failed


def test_good_rows_sample_as_greedy_says_with_raw_logprobs():
    x = logits_of(3)
    r = sample_rows(x, [GREEDY] * 3, [0, 5, 9], no_history(3))
    assert r.tokens.tolist() == x.argmax(axis=1).tolist() and not r.failed
    for b in range(3):
        assert r.logprobs[b] == pytest.approx(raw_logprob(x[b], int(x[b].argmax())), abs=1e-5)


@pytest.mark.parametrize("spoil, code", [
    (lambda x, p, h: p.__setitem__(1, {"temperature": 0.0}), "bad_sampling: sampling row is a dict"),
    (lambda x, p, h: x.__setitem__((1, 3), np.nan), "bad_logits"),
    (lambda x, p, h: x.__setitem__(1, -np.inf), "bad_logits"),
    (lambda x, p, h: h.__setitem__(1, np.array([V + 5], np.int32)), "bad_batch: histories"),
    (lambda x, p, h: p.__setitem__(1, SamplingParams(temperature=0.7)), "bad_batch: params[0] samples without a seed"),
])
def test_one_bad_row_fails_alone_and_the_others_keep_their_tokens(spoil, code):
    x = logits_of(4)
    params = [GREEDY] * 4
    hist = no_history(4)
    spoil(x, params, hist)
    r = sample_rows(x, params, [0, 0, 0, 0], hist)
    assert r.errors[1].startswith(code), r.errors[1]
    assert [bool(e) for e in r.errors] == [False, True, False, False]
    good = [0, 2, 3]
    assert r.tokens[good].tolist() == x[good].argmax(axis=1).tolist()
    for b in good:
        assert r.logprobs[b] == pytest.approx(raw_logprob(x[b], int(r.tokens[b])), abs=1e-5)


def test_a_row_that_makes_the_sampler_raise_is_found_and_fails_alone():
    calls = []

    def fragile(logits, params, histories, steps):
        calls.append(len(params))
        if any(p.seed == 13 for p in params):
            raise RuntimeError("kernel fault on seed 13")
        return sample(logits, params, histories, steps)

    x = logits_of(3)
    params = [SamplingParams(temperature=0.0, seed=1), SamplingParams(temperature=0.0, seed=13),
              SamplingParams(temperature=0.0, seed=2)]
    r = sample_rows(x, params, [0, 0, 0], no_history(3), sampler=fragile)
    assert r.errors[0] == r.errors[2] == ""
    assert r.errors[1] == "internal: RuntimeError: kernel fault on seed 13"
    assert r.tokens[[0, 2]].tolist() == x[[0, 2]].argmax(axis=1).tolist()
    assert calls == [3, 1, 1, 1]   # the batch once, then each row alone


def test_sampled_rows_draw_the_same_tokens_whether_a_neighbour_fails_or_not():
    x = logits_of(4)
    mine = [SamplingParams(temperature=0.9, top_p=0.9, seed=s, top_logprobs=3) for s in (5, 6, 7)]
    alone = sample_rows(x[[0, 2, 3]], mine, [4, 4, 4], no_history(3))
    x[1, 0] = np.inf
    crowd = sample_rows(x, [mine[0], GREEDY, *mine[1:]], [4, 0, 4, 4], no_history(4))
    assert crowd.errors[1].startswith("bad_logits")
    assert crowd.tokens[[0, 2, 3]].tolist() == alone.tokens.tolist()
    np.testing.assert_array_equal(crowd.top_ids[[0, 2, 3]], alone.top_ids)


def test_top_alternatives_are_as_wide_as_the_widest_row_asked():
    x = logits_of(3)
    params = [SamplingParams(temperature=0.0, top_logprobs=2), SamplingParams(temperature=-5.0),
              SamplingParams(temperature=0.0, top_logprobs=5)]
    r = sample_rows(x, params, [0, 0, 0], no_history(3))
    assert r.top_ids.shape == (3, 5) and r.top_ids.dtype == np.int32
    for b in (0, 2):
        want = np.argsort(-x[b], kind="stable")[:params[b].top_logprobs]
        assert r.top_ids[b, :len(want)].tolist() == want.tolist()


def test_histories_are_cut_by_their_lengths_or_refused_as_the_batch_framing():
    flat = np.arange(5, dtype=np.int32)
    a, b = split_histories(flat, [2, 3], 2)
    assert a.tolist() == [0, 1] and b.tolist() == [2, 3, 4]
    assert [h.size for h in split_histories(np.zeros(0, np.int32), [], 3)] == [0, 0, 0]
    for lens, rows in [([2, 2], 2), ([5], 2), ([6, -1], 2)]:
        with pytest.raises(BadSamplerInput):
            split_histories(flat, lens, rows)
    with pytest.raises(BadSamplerInput):
        split_histories(flat, [], 2)


def test_rows_that_do_not_match_the_logits_are_the_batch_framing():
    with pytest.raises(BadSamplerInput):
        sample_rows(logits_of(2), [GREEDY], [0], no_history(1))
