"""SamplingParams refuses out-of-range values with BadSamplingParams, at construction."""

import math

import numpy as np
import pytest

from kernels.sampling import BadSamplingParams, SamplingParams

BAD = [
    ("temperature", -0.1), ("temperature", math.nan), ("temperature", math.inf),
    ("temperature", 101.0), ("temperature", "1"), ("temperature", True),
    ("top_k", -1), ("top_k", 1.5), ("top_k", True),
    ("top_p", 0.0), ("top_p", 1.01), ("top_p", math.nan),
    ("min_p", -0.01), ("min_p", 1.5), ("min_p", math.nan),
    ("repetition_penalty", 0.0), ("repetition_penalty", -1.0), ("repetition_penalty", math.nan),
    ("presence_penalty", 2.5), ("presence_penalty", -2.01), ("presence_penalty", math.nan),
    ("frequency_penalty", -3.0), ("frequency_penalty", math.nan),
    ("seed", -1), ("seed", 2**64), ("seed", 1.0),
    ("top_logprobs", -1), ("top_logprobs", 21), ("top_logprobs", 2.0),
]


@pytest.mark.parametrize("name, value", BAD)
def test_out_of_range_raises(name, value):
    with pytest.raises(BadSamplingParams) as e:
        SamplingParams(**{name: value})
    assert e.value.name == name and name in str(e.value)


def test_edges_are_accepted_and_normalized():
    p = SamplingParams(temperature=0, top_k=np.int64(40), top_p=1, min_p=1.0,
                       repetition_penalty=np.float32(1.1), presence_penalty=-2,
                       frequency_penalty=2, seed=2**64 - 1, top_logprobs=20)
    assert type(p.top_k) is int and type(p.temperature) is float
    assert type(p.repetition_penalty) is float
    assert p.greedy and p.penalized


def test_defaults_are_plain_sampling():
    p = SamplingParams()
    assert not p.greedy and not p.penalized and p.seed is None


def test_resolved_fills_seed_once_and_keeps_given_seed():
    p = SamplingParams()
    a, b = p.resolved(), p.resolved()
    assert a.seed is not None and a.seed != b.seed
    assert a.resolved() is a
    assert SamplingParams(seed=5).resolved().seed == 5


def test_frozen():
    with pytest.raises(AttributeError):
        SamplingParams().temperature = 0.5
