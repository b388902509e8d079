"""SamplingParams.validate() refuses every field at and past its range with BadSamplingParams
naming the field; the scheduler's admission refuses the same values as bad_sampling. The wire
checks only their types on decode: the ranges are checked once, at admission."""

import math

import numpy as np
import pytest

import wire
from wire.messages.sampling import MAX_TOP_K, BadSamplingParams, SamplingParams
from wire.messages.scheduler import Generate
from wire.messages.shard import Forward
from wire.schema import from_wire
from services.scheduler.batching.admission import check_sampling
from services.scheduler.batching.errors import BadSampling

RANGE = [  # the right type, out of range
    ("temperature", -0.1), ("temperature", math.nan), ("temperature", math.inf),
    ("temperature", -math.inf), ("temperature", 100.5),
    ("top_k", -1), ("top_k", MAX_TOP_K + 1), ("top_k", 2**63),
    ("top_p", 0.0), ("top_p", 1.01), ("top_p", math.nan), ("top_p", math.inf),
    ("min_p", -0.01), ("min_p", 1.5), ("min_p", math.nan),
    ("repetition_penalty", 0.0), ("repetition_penalty", -1.0), ("repetition_penalty", 10.5),
    ("repetition_penalty", math.nan), ("repetition_penalty", math.inf),
    ("presence_penalty", 2.5), ("presence_penalty", -2.01), ("presence_penalty", math.nan),
    ("frequency_penalty", -3.0), ("frequency_penalty", math.nan),
    ("seed", -1), ("seed", 2**64), ("seed", -2**63),
    ("top_logprobs", -1), ("top_logprobs", 21),
]
TYPE = [  # not a value of the field's type at all: bool is not a number here
    ("temperature", "1"), ("temperature", True), ("temperature", None), ("top_k", 1.5),
    ("top_k", True), ("top_p", False), ("frequency_penalty", False), ("seed", 1.0), ("seed", True),
    ("top_logprobs", 2.0), ("top_logprobs", False),
]

EDGES = dict(temperature=[0, 0.0, 100.0], top_k=[0, MAX_TOP_K], top_p=[1e-9, 1.0], min_p=[0.0, 1.0],
             repetition_penalty=[1e-9, 10.0], presence_penalty=[-2.0, 2], frequency_penalty=[-2, 2.0],
             seed=[None, 0, 2**64 - 1], top_logprobs=[0, 20])


@pytest.mark.parametrize("name, value", RANGE + TYPE + [("top_k", np.int64(3))])
def test_out_of_range_is_refused_naming_the_field_and_its_range(name, value):
    with pytest.raises(BadSamplingParams) as e:
        SamplingParams(**{name: value}).validate()
    assert e.value.name == name and name in str(e.value) and "must be" in str(e.value)


@pytest.mark.parametrize("name, value", [(n, v) for n, vs in EDGES.items() for v in vs])
def test_the_edges_of_every_range_are_accepted(name, value):
    SamplingParams(**{name: value}).validate()


@pytest.mark.parametrize("name, value", RANGE)
def test_a_generate_out_of_range_is_refused_at_admission_as_bad_sampling(name, value):
    # What a client sends: the flat fields of scheduler.generate; decoded as they are, refused
    # where the request is admitted.
    g = from_wire(Generate, {"prompt": "hi", name: value}, None)
    with pytest.raises(BadSampling) as e:
        check_sampling(SamplingParams.of(g))
    assert e.value.reason == "bad_sampling" and f"sampling parameter {name}=" in str(e.value)


@pytest.mark.parametrize("name, value", TYPE)
def test_a_generate_field_of_the_wrong_type_is_refused_on_decode(name, value):
    with pytest.raises(wire.BadFrame) as e:
        from_wire(Generate, {"prompt": "hi", name: value}, None)
    assert e.value.code == "bad_frame" and f"body.{name}" in str(e.value)


def test_generate_carries_the_fields_flat_and_checks_its_own_rule_too():
    g = from_wire(Generate, {"prompt": "hi", "top_k": 7, "seed": 3}, None)
    assert SamplingParams.of(g) == SamplingParams(top_k=7, seed=3)
    with pytest.raises(wire.BadFrame, match="exactly one of") as e:
        from_wire(Generate, {"top_k": 7}, None)
    assert e.value.code == "bad_frame"


def test_forward_needs_one_step_per_sampling_row():
    t = {"dtype": "int32", "shape": [1], "codec": "raw", "frame": 0}
    body = {"batch_id": 1, "first_layer": 0, "positions": [0], "query_lens": [1],
            "page_table": [[0]], "tokens": t, "sampling": [{}], "steps": [], "route": [{"name": "shard-0", "epoch": 1}]}
    with pytest.raises(wire.BadFrame, match="steps"):
        from_wire(Forward, body, lambda v, p: wire.Tensor(np.zeros(1, np.int32)))


def test_defaults_are_plain_sampling():
    p = SamplingParams()
    p.validate()
    assert not p.penalized and p.seed is None


def test_penalized_says_whether_the_history_is_needed():
    assert SamplingParams(repetition_penalty=1.1).penalized
    assert SamplingParams(presence_penalty=-0.5).penalized
    assert SamplingParams(frequency_penalty=0.1).penalized
    assert not SamplingParams(temperature=0.3, top_k=5).penalized


def test_resolved_fills_seed_once_and_keeps_given_seed():
    p = SamplingParams()
    a, b = p.resolved(), p.resolved()
    assert a.seed is not None and a.seed != b.seed and 0 <= a.seed < 2**64
    assert a.resolved() is a
    assert SamplingParams(seed=5).resolved().seed == 5


def test_frozen():
    with pytest.raises(AttributeError):
        SamplingParams().temperature = 0.5
