"""Penalties change exactly the logits of seen tokens, by the documented formulas."""

import numpy as np

from kernels.penalties import apply_penalties
from kernels.sampling import sample
from wire.messages.sampling import SamplingParams

LOGITS = np.array([2.0, -2.0, 1.0, 0.5, -1.0], dtype=np.float32)


def penalize(params, history, step, logits=LOGITS):
    z = np.array([logits], dtype=np.float32)
    return apply_penalties(z, [params], [np.array(history, dtype=np.int64)], [step])[0]


def test_repetition_divides_positive_multiplies_negative_over_whole_history():
    # History = prompt [0, 1] + generated [1]: repetition counts the prompt too.
    z = penalize(SamplingParams(repetition_penalty=2.0), [0, 1, 1], step=1)
    assert z.tolist() == [1.0, -4.0, 1.0, 0.5, -1.0]
    assert z.dtype == np.float32


def test_repetition_below_one_rewards_seen_tokens():
    z = penalize(SamplingParams(repetition_penalty=0.5), [0, 4], step=0)
    assert z.tolist() == [4.0, -2.0, 1.0, 0.5, -0.5]


def test_presence_and_frequency_count_generated_tokens_only():
    # Prompt [2, 2], generated [3, 3, 3, 4]: token 2 is untouched, 3 seen 3 times, 4 once.
    p = SamplingParams(presence_penalty=0.5, frequency_penalty=0.25)
    z = penalize(p, [2, 2, 3, 3, 3, 4], step=4)
    want = LOGITS.copy()
    want[3] -= np.float32(0.5 + 0.25 * 3)
    want[4] -= np.float32(0.5 + 0.25 * 1)
    np.testing.assert_array_equal(z, want)
    assert z.dtype == np.float32


def test_negative_presence_encourages_and_no_generated_tokens_means_no_change():
    z = penalize(SamplingParams(presence_penalty=-1.0), [0, 1], step=1)
    assert z.tolist() == [2.0, -1.0, 1.0, 0.5, -1.0]
    z = penalize(SamplingParams(presence_penalty=2.0, frequency_penalty=2.0), [0, 1], step=0)
    assert z.tolist() == LOGITS.tolist()


def test_repetition_then_presence_as_llama_cpp():
    p = SamplingParams(repetition_penalty=2.0, presence_penalty=1.0)
    assert penalize(p, [0], step=1).tolist() == [0.0, -2.0, 1.0, 0.5, -1.0]


def test_rows_penalized_independently():
    z = np.tile(LOGITS, (3, 1))
    params = [SamplingParams(repetition_penalty=2.0), SamplingParams(),
              SamplingParams(frequency_penalty=1.0)]
    hist = [np.array([0]), np.array([0, 1, 2]), np.array([2, 2])]
    apply_penalties(z, params, hist, [0, 3, 2])
    assert z[0].tolist() == [1.0, -2.0, 1.0, 0.5, -1.0]
    assert z[1].tolist() == LOGITS.tolist()
    assert z[2].tolist() == [2.0, -2.0, -1.0, 0.5, -1.0]


def test_minus_inf_stays_minus_inf():
    logits = np.array([1.0, -np.inf], dtype=np.float32)
    z = penalize(SamplingParams(repetition_penalty=1.5, presence_penalty=-2.0), [1, 1], 2,
                 logits=logits)
    assert np.isneginf(z[1])


def test_greedy_follows_penalized_logits_but_reports_raw_logprob():
    x = np.array([[3.0, 2.9, 0.0]], dtype=np.float32)
    r = sample(x, [SamplingParams(temperature=0, frequency_penalty=1.0)],
               [np.array([0])], [1])
    assert r.tokens[0] == 1
    raw = x[0].astype(np.float64) - np.log(np.exp(x[0].astype(np.float64)).sum())
    np.testing.assert_allclose(r.logprobs[0], raw[1], atol=1e-6)
