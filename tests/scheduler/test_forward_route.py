"""A planned micro-batch goes out as `shard.forward` carrying its route: the pipeline it was planned on."""

import numpy as np
import pytest

import wire
from services.scheduler.batching.batches import MicroBatch, SeqChunk
from services.scheduler.pipelines.forward import to_forward
from services.scheduler.pipelines.chains import Stage
from wire.messages.sampling import SamplingParams
from wire.messages.shard import Forward, ReplyTo, RouteStage

CHAIN = [Stage("shard-0", 11, 0, 13, 64, 16), Stage("shard-13", 22, 13, 25, 64, 16),
         Stage("shard-25", 33, 25, 30, 64, 16)]


def plan() -> MicroBatch:
    return MicroBatch(batch_id=7, page_size=16, chunks=(
        SeqChunk("a", (1, 2, 3), 0, 0, (4,), True, 0, 0),
        SeqChunk("b", (9,), 20, 0, (5, 6), True, 0, 3)))


def roundtrip(f: Forward) -> Forward:
    """As the answers of a call (pipelines/answers.py) send it: named for the result to come back."""
    f = wire.evolve(f, reply_to=ReplyTo("scheduler-0", 1))
    return wire.decode([bytes(x) for x in wire.encode(wire.Message(f, sender="t", epoch=1))]).body


def test_the_forward_names_every_stage_of_the_chain_with_its_epoch():
    f = roundtrip(to_forward(plan(), {"a": SamplingParams(), "b": SamplingParams(temperature=0.0)}, {}, CHAIN))
    assert f.route == [RouteStage("shard-0", 11), RouteStage("shard-13", 22), RouteStage("shard-25", 33)]
    assert f.hop == 0 and f.first_layer == 0
    assert f.positions == [0, 1, 2, 20]
    assert f.steps == [0, 3]


@pytest.mark.parametrize("route,hop", [([], 0), ([RouteStage("shard-0", 1)], 1),
                                       ([RouteStage("shard-0", 1)], -1)])
def test_a_forward_without_its_receiver_in_the_route_is_a_bad_frame(route, hop):
    f = to_forward(plan(), {"a": SamplingParams(), "b": SamplingParams()}, {}, CHAIN)
    bad = Forward(**{**{k: getattr(f, k) for k in f.__dataclass_fields__}, "route": route, "hop": hop})
    with pytest.raises(wire.BadFrame, match="hop"):
        roundtrip(bad)


def test_a_forward_that_names_nowhere_for_its_answer_is_a_bad_frame():
    f = to_forward(plan(), {"a": SamplingParams(), "b": SamplingParams()}, {}, CHAIN)
    with pytest.raises(wire.BadFrame, match="reply_to"):
        wire.decode([bytes(x) for x in wire.encode(wire.Message(f, sender="t", epoch=1))])


def test_only_constrained_rows_carry_a_mask_and_it_travels_as_sent():
    mask = np.arange(3, dtype=np.uint32)
    f = roundtrip(to_forward(plan(), {"a": SamplingParams(), "b": SamplingParams()}, {}, CHAIN,
                             {"b": mask}))
    assert f.mask_rows == [1] and f.masks.array().dtype == np.uint32
    assert np.array_equal(f.masks.array(), mask[None, :])
    free = roundtrip(to_forward(plan(), {"a": SamplingParams(), "b": SamplingParams()}, {}, CHAIN))
    assert free.mask_rows == [] and free.masks is None        # unconstrained rows pay nothing


@pytest.mark.parametrize("rows, masks", [([1], None), ([], np.zeros((1, 3), np.uint32)),
                                         ([2], np.zeros((1, 3), np.uint32)),
                                         ([1, 0], np.zeros((2, 3), np.uint32))])
def test_masks_that_do_not_name_their_rows_are_a_bad_frame(rows, masks):
    f = to_forward(plan(), {"a": SamplingParams(), "b": SamplingParams()}, {}, CHAIN)
    bad = Forward(**{**{k: getattr(f, k) for k in f.__dataclass_fields__}, "mask_rows": rows,
                     "masks": None if masks is None else wire.Tensor(masks)})
    with pytest.raises(wire.BadFrame, match="mask_rows"):
        roundtrip(bad)
