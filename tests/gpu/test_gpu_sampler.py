"""The last shard's sampler with the logits on the device (kernels.gpu.sampling.DeviceSampler): the
results of kernels.sampling.sample, from one kernel for greedy rows and from sample itself, run on
the device's arrays, for the rest; bad rows fail alone through the shard's sampling step."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.gpu.sampling import DeviceSampler
from kernels.sampling import BadLogits, sample
from services.shard.sampling_step import sample_rows
from wire.messages.sampling import SamplingParams

V = 4096


@pytest.fixture(scope="module")
def logits():
    z = (2.5 * np.random.default_rng(1).standard_normal((8, V))).astype(np.float32)
    z[3, [5, 9]] = z[3].max() + 1                     # tied best: the lower id
    return z


def run(sampler, z, params, steps=None):
    steps = steps or [3] * z.shape[0]
    return sampler(z, params, [np.arange(40)] * z.shape[0], steps)


def test_greedy_rows_from_one_kernel_are_samples(dev, logits):
    params = [SamplingParams(temperature=0, top_logprobs=n) for n in (0, 1, 5, 20, 0, 3, 2, 7)]
    got = run(DeviceSampler(dev), dev.to_device(logits), params)
    want = run(sample, logits, params)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_array_equal(got.top_ids, want.top_ids)
    np.testing.assert_allclose(got.logprobs, want.logprobs, atol=1e-4)
    np.testing.assert_allclose(got.top_logprobs, want.top_logprobs, atol=1e-4)
    assert got.tokens.dtype == np.int32 and got.logprobs.dtype == np.float32 and got.top_ids.shape == (8, 20)


def test_other_rows_go_through_sample_on_the_device(dev, logits):
    params = [SamplingParams(temperature=0.8, top_p=0.9, top_k=50, seed=s, top_logprobs=2) for s in range(7)]
    params.append(SamplingParams(temperature=0, repetition_penalty=1.3))
    got = run(DeviceSampler(dev), dev.to_device(logits), params)
    want = run(sample, logits, params)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_allclose(got.logprobs, want.logprobs, atol=1e-4)


def test_a_bad_row_fails_alone(dev, logits):
    z = logits.copy()
    z[2, 100] = np.nan
    z[5, :] = -np.inf
    params = [SamplingParams(temperature=0)] * 8
    with pytest.raises(BadLogits) as e:
        run(DeviceSampler(dev), dev.to_device(z), params)
    assert e.value.rows == [2, 5]
    res = sample_rows(dev.to_device(z), params, [0] * 8, [np.zeros(0, np.int32)] * 8, sampler=DeviceSampler(dev))
    assert [bool(x) for x in res.errors] == [False, False, True, False, False, True, False, False]
    assert res.errors[2].startswith("bad_logits")
    np.testing.assert_array_equal(np.delete(res.tokens, [2, 5]), np.delete(logits.argmax(1), [2, 5]))
