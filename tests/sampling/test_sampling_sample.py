"""sample(): greedy, determinism, log-probabilities, bad input, dtypes."""

import subprocess
import sys

import numpy as np
import pytest

from kernels.sampling import BadLogits, BadSamplerInput, sample
from wire.messages.sampling import SamplingParams
from kernels.sampling_rng import uniform

V = 49152


def batch(logits, params, steps=None, histories=None):
    B = logits.shape[0]
    steps = steps if steps is not None else [0] * B
    histories = histories if histories is not None else [np.zeros(s, np.int64) for s in steps]
    return sample(logits, params, histories, steps)


@pytest.fixture(scope="module")
def vocab_logits():
    # Real-model-like scale: a few strong candidates over a long low tail.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, V)).astype(np.float32) * np.float32(2.5)
    return x


def test_greedy_is_argmax(vocab_logits):
    r = batch(vocab_logits, [SamplingParams(temperature=0)] * 16)
    assert (r.tokens == vocab_logits.argmax(axis=1)).all()


def test_greedy_ties_pick_lowest_id():
    logits = np.array([[0, 5, 1, 5, 5]], dtype=np.float32)
    assert batch(logits, [SamplingParams(temperature=0)]).tokens[0] == 1
    assert batch(logits, [SamplingParams(top_k=1, seed=3)]).tokens[0] == 1


def test_top_k_1_equals_greedy(vocab_logits):
    params = [SamplingParams(top_k=1, temperature=1.5, seed=s) for s in range(16)]
    assert (batch(vocab_logits, params).tokens == vocab_logits.argmax(axis=1)).all()


def test_temperature_to_zero_tends_to_greedy(vocab_logits):
    greedy = vocab_logits.argmax(axis=1)
    hot = [SamplingParams(temperature=1.0, seed=s) for s in range(16)]
    assert (batch(vocab_logits, hot).tokens != greedy).any()  # T=1 does explore
    for t in (1e-2, 1e-4, 1e-9):
        cold = [SamplingParams(temperature=t, seed=s) for s in range(16)]
        assert (batch(vocab_logits, cold).tokens == greedy).all()


def test_same_seed_same_tokens_alone_or_in_any_batch(vocab_logits):
    mine = SamplingParams(temperature=0.9, top_p=0.95, top_k=40, seed=1234)
    alone = [batch(vocab_logits[:1], [mine], steps=[s]).tokens[0] for s in range(8)]
    others = [SamplingParams(temperature=0), SamplingParams(top_k=500, seed=7),
              SamplingParams(top_p=0.3, seed=8), SamplingParams(min_p=0.05, seed=9)]
    for s in range(8):
        rows = [1, 0, 2, 3, 4] if s % 2 else [0, 1, 2, 3, 4]  # my row moves around
        params = [mine if b == 0 else others[b - 1] for b in rows]
        logits = vocab_logits[rows]
        pos = rows.index(0)
        assert batch(logits, params, steps=[s] * 5).tokens[pos] == alone[s]


def test_different_seeds_differ(vocab_logits):
    row = np.repeat(vocab_logits[:1], 32, axis=0)
    a = batch(row, [SamplingParams(seed=1)] * 32, steps=list(range(32))).tokens
    b = batch(row, [SamplingParams(seed=2)] * 32, steps=list(range(32))).tokens
    assert (a != b).sum() > 24


def test_draw_is_fixed_across_versions_and_processes():
    # Golden values: a change here breaks the continuation of every recovered request.
    assert [uniform(0, 0), uniform(1, 0), uniform(1, 1), uniform(2**64 - 1, 7)] == \
        [_u(0, 0), _u(1, 0), _u(1, 1), _u(2**64 - 1, 7)]
    code = ("import numpy as np; from kernels.sampling import sample;"
            "from wire.messages.sampling import SamplingParams as P;"
            "x=np.random.default_rng(5).standard_normal((3, 1000)).astype(np.float32);"
            "print(sample(x,[P(seed=42,top_p=0.9)]*3,[np.zeros(9,int)]*3,[0,4,9]).tokens.tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    x = np.random.default_rng(5).standard_normal((3, 1000)).astype(np.float32)
    here = batch(x, [SamplingParams(seed=42, top_p=0.9)] * 3, steps=[0, 4, 9]).tokens.tolist()
    assert out.stdout.strip() == str(here)


def _u(seed, step):
    # An independent transcription of the spec: SplitMix64 finalizer, 24 high bits.
    m = 2**64 - 1

    def mix(x):
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % 2**64
        return x ^ (x >> 31)
    return (mix((mix(seed) + (step + 1) * 0x9E3779B97F4A7C15) & m) >> 40) / 2**24


def log_softmax64(x):
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def test_logprobs_are_raw_log_softmax_at_chosen(vocab_logits):
    params = [SamplingParams(temperature=0.7, top_k=50, repetition_penalty=1.3,
                             presence_penalty=1.0, seed=s, top_logprobs=5) for s in range(16)]
    hist = [np.arange(100, dtype=np.int64)] * 16
    r = batch(vocab_logits, params, steps=[10] * 16, histories=hist)
    ref = log_softmax64(vocab_logits)
    np.testing.assert_allclose(r.logprobs, ref[np.arange(16), r.tokens], atol=2e-5)
    assert (r.logprobs <= 0).all()
    np.testing.assert_allclose(r.top_logprobs, np.take_along_axis(ref, r.top_ids, 1), atol=2e-5)


def test_top_alternatives_sorted_with_argmax_first(vocab_logits):
    n = [0, 3, 20, 1] * 4
    r = batch(vocab_logits, [SamplingParams(seed=b, top_logprobs=n[b]) for b in range(16)])
    assert r.top_ids.shape == (16, 20) and r.top_logprobs.shape == (16, 20)
    assert (r.top_ids[:, 0] == vocab_logits.argmax(axis=1)).all()
    assert (np.diff(r.top_logprobs, axis=1) <= 0).all()
    want = np.argsort(-vocab_logits, axis=1, kind="stable")[:, :20]
    assert (r.top_ids == want).all()


def test_top_alternatives_ties_by_lowest_id_and_none_requested():
    logits = np.array([[1, 2, 2, 0, 2]], dtype=np.float32)
    r = batch(logits, [SamplingParams(temperature=0, top_logprobs=4)])
    assert r.top_ids.tolist() == [[1, 2, 4, 0]]
    r = batch(logits, [SamplingParams(temperature=0)])
    assert r.top_ids.shape == (1, 0) and r.top_logprobs.shape == (1, 0)


def test_outputs_are_float32_and_int32(vocab_logits):
    params = [SamplingParams(temperature=0.8, top_p=0.9, min_p=0.01, frequency_penalty=0.5,
                             seed=1, top_logprobs=2)] * 16
    r = batch(vocab_logits, params, steps=[3] * 16)
    assert r.tokens.dtype == np.int32 and r.top_ids.dtype == np.int32
    assert r.logprobs.dtype == np.float32 and r.top_logprobs.dtype == np.float32


def test_logits_not_modified(vocab_logits):
    before = vocab_logits.copy()
    batch(vocab_logits, [SamplingParams(repetition_penalty=2.0, presence_penalty=2.0,
                                        seed=1)] * 16,
          steps=[5] * 16, histories=[np.arange(50)] * 16)
    assert (vocab_logits == before).all()


def test_minus_inf_tokens_are_never_sampled():
    logits = np.full((1, 100), -np.inf, dtype=np.float32)
    logits[0, [7, 50, 93]] = [0.0, 1.0, 0.5]
    tokens = np.repeat(logits, 500, axis=0)
    r = batch(tokens, [SamplingParams(temperature=5.0, seed=3, top_logprobs=5)] * 500,
              steps=list(range(500)))
    assert set(r.tokens.tolist()) == {7, 50, 93}
    assert np.isfinite(r.logprobs).all()
    assert r.top_ids[0, :3].tolist() == [50, 93, 7]
    assert np.isneginf(r.top_logprobs[:, 3:]).all()


@pytest.mark.parametrize("poison", [np.nan, np.inf])
def test_nan_or_plus_inf_row_raises_bad_logits(poison):
    logits = np.zeros((3, 10), dtype=np.float32)
    logits[1, 4] = poison
    with pytest.raises(BadLogits) as e:
        batch(logits, [SamplingParams(temperature=0)] * 3)
    assert e.value.rows == [1]


def test_all_minus_inf_row_raises_bad_logits():
    logits = np.zeros((2, 10), dtype=np.float32)
    logits[0] = -np.inf
    with pytest.raises(BadLogits) as e:
        batch(logits, [SamplingParams(seed=1)] * 2)
    assert e.value.rows == [0]


@pytest.mark.parametrize("bad", [np.zeros((2, 10), np.float64), np.zeros(10, np.float32),
                                 np.zeros((2, 10), np.float16)])
def test_logits_must_be_2d_float32(bad):
    with pytest.raises(BadLogits):
        sample(bad, [SamplingParams(temperature=0)] * 2, [np.zeros(0, int)] * 2, [0, 0])


def test_inconsistent_inputs_raise_bad_sampler_input():
    x = np.zeros((2, 10), dtype=np.float32)
    p = [SamplingParams(temperature=0)] * 2
    h = [np.zeros(3, np.int64)] * 2
    with pytest.raises(BadSamplerInput):
        sample(x, p[:1], h, [0, 0])
    pen = [SamplingParams(temperature=0, presence_penalty=0.5)] * 2
    with pytest.raises(BadSamplerInput):
        sample(x, pen, h, [0, 4])  # penalties need the generated tokens the history lacks
    # Without penalties nothing reads the history: a decode step may come without one.
    assert sample(x, p, [np.zeros(0, np.int32)] * 2, [0, 4]).tokens.tolist() == [0, 0]
    with pytest.raises(BadSamplerInput):
        sample(x, p, [np.array([1, 10])] * 2, [0, 0])  # id 10 is outside V = 10
    with pytest.raises(BadSamplerInput):
        sample(x, p, [np.array([0.5])] * 2, [0, 0])


def test_sampled_row_without_seed_is_refused():
    x = np.zeros((1, 10), dtype=np.float32)
    with pytest.raises(BadSamplerInput, match="resolved"):
        batch(x, [SamplingParams(temperature=1.0)])
    assert batch(x, [SamplingParams(temperature=1.0).resolved()]).tokens.shape == (1,)
    assert batch(x, [SamplingParams(temperature=0)]).tokens[0] == 0  # greedy needs no seed


def test_empty_batch_gives_empty_result():
    r = sample(np.zeros((0, 10), np.float32), [], [], [])
    assert r.tokens.shape == (0,) and r.top_ids.shape == (0, 0)
    with pytest.raises(BadLogits):
        sample(np.zeros((1, 0), np.float32), [SamplingParams(temperature=0)], [[]], [0])


@pytest.mark.parametrize("top_k", [V, V + 1, 2**31 - 1, 2**63, 2**70])
def test_top_k_past_the_vocabulary_keeps_every_token(vocab_logits, top_k):
    # The sampler clamps top_k to V: past it the filter is off, and no size overflows an index.
    off = batch(vocab_logits, [SamplingParams(seed=s) for s in range(16)]).tokens
    wide = batch(vocab_logits, [SamplingParams(top_k=top_k, seed=s) for s in range(16)]).tokens
    assert wide.tolist() == off.tolist()
