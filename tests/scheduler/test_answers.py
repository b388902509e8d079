"""Answers: a batch's call ends with the last shard's answer, sent straight to the caller, or with
the error that ended the batch anywhere on its route. The shards are a stand-in the test drives
step by step; tests/shard/test_shard_processes.py runs the same messages through real shards."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import wire
from bus.errors import CallTimeout, PeerDead, PeerRestarted, RemoteError
from services.scheduler.pipelines.answers import Answers
from wire.messages.shard import Forward, ForwardFailed, ForwardResult, HandedOn, Hop, RouteStage

ROUTE = [RouteStage("s0", 10), RouteStage("s1", 11), RouteStage("s2", 12)]


def forward(batch_id: int = 1, route=ROUTE) -> Forward:
    return Forward(batch_id=batch_id, first_layer=0, positions=[0], query_lens=[1],
                   page_table=[[0]], tokens=wire.Tensor(np.zeros(1, np.int32)), route=list(route))


def result(sent: Forward, token: int) -> ForwardResult:
    return ForwardResult(batch_id=sent.batch_id, key=sent.reply_to.key,
                         tokens=wire.Tensor(np.array([token], np.int32)),
                         logprobs=wire.Tensor(np.array([-0.5], np.float32)),
                         hops=[Hop(s.name, 4, 0.1, 1.0) for s in ROUTE])


class FirstStage:
    """The call to the first shard: records what was sent and answers when the test says."""

    def __init__(self):
        self.sent: list[Forward] = []
        self.replies: asyncio.Queue = asyncio.Queue()

    async def __call__(self, first: str, body: Forward, timeout: float):
        assert first == body.route[0].name
        self.sent.append(body)
        reply = await self.replies.get()
        if isinstance(reply, BaseException):
            raise reply
        return reply


async def started(a: Answers, first: FirstStage, body: Forward, timeout: float = 5.0):
    n = len(first.sent)
    task = asyncio.create_task(a.forward("s0", body, timeout))
    while len(first.sent) == n:
        await asyncio.sleep(0)
    return task, first.sent[-1]


@pytest.fixture
def rig():
    first = FirstStage()
    return Answers("sched", first), first


async def test_the_last_shards_result_ends_the_call_once_the_first_stage_handed_it_on(rig):
    a, first = rig
    task, sent = await started(a, first, forward())
    assert sent.reply_to.name == "sched" and sent.sent_at > 0
    first.replies.put_nowait(HandedOn(batch_id=1))
    await asyncio.sleep(0)
    assert not task.done()                              # handed on: the answer is still to come
    a.received("s2", 12, result(sent, 7))
    got = await task
    assert got.tokens.array().tolist() == [7] and [h.shard for h in got.hops] == ["s0", "s1", "s2"]
    a.received("s2", 12, result(sent, 7))               # a copy after the call ended: counted
    assert a.counters["late"] == 1


async def test_a_result_from_anyone_but_the_routes_last_process_is_refused(rig):
    a, first = rig
    task, sent = await started(a, first, forward())
    first.replies.put_nowait(HandedOn(batch_id=1))
    a.received("s1", 11, result(sent, 1))               # a stage, but not the last
    a.received("s2", 99, result(sent, 2))               # the last, in another epoch
    a.received("s9", 12, result(sent, 3))               # no stage at all
    assert a.counters["refused"] == 3 and not task.done()
    a.received("s2", 12, result(sent, 4))
    assert (await task).tokens.array().tolist() == [4]


async def test_a_later_stages_failure_told_straight_ends_the_call_with_its_code(rig):
    a, first = rig
    task, sent = await started(a, first, forward())
    first.replies.put_nowait(HandedOn(batch_id=1))
    a.failed("s0", 10, ForwardFailed(key=sent.reply_to.key, batch_id=1, stage="s0",
                                     code="kv_missing", message="s1: kv_missing: no pages"))
    with pytest.raises(RemoteError) as e:
        await task
    assert (e.value.code, e.value.peer) == ("kv_missing", "s0")
    assert a.counters["failed.kv_missing"] == 1


async def test_the_first_stages_own_error_or_a_wrong_reply_ends_the_call(rig):
    a, first = rig
    task, _ = await started(a, first, forward())
    first.replies.put_nowait(RemoteError("stale_route", "s0 restarted", peer="s0"))
    with pytest.raises(RemoteError, match="stale_route"):
        await task
    task, _ = await started(a, first, forward(batch_id=2))
    first.replies.put_nowait(ForwardResult(batch_id=2, key=0, tokens=wire.Tensor(np.zeros(1, np.int32)),
                                           logprobs=wire.Tensor(np.zeros(1, np.float32))))
    with pytest.raises(RemoteError) as e:
        await task
    assert e.value.code == "bad_reply"


@pytest.mark.parametrize("epoch, error", [(None, PeerDead), (13, PeerRestarted)])
async def test_a_stage_lost_under_the_call_ends_it_and_an_older_epoch_does_not(rig, epoch, error):
    a, first = rig
    task, _ = await started(a, first, forward())
    first.replies.put_nowait(HandedOn(batch_id=1))
    a.lost("s1", 11)                  # the epoch the route names, heard again: nothing lost
    a.lost("elsewhere", None)
    await asyncio.sleep(0)
    assert not task.done()
    a.lost("s1", epoch)
    with pytest.raises(error):
        await task


async def test_no_answer_within_the_time_limit_is_a_timeout(rig):
    a, first = rig
    task, _ = await started(a, first, forward(), timeout=0.05)
    first.replies.put_nowait(HandedOn(batch_id=1))
    with pytest.raises(CallTimeout, match="batch 1"):
        await task


async def test_on_a_route_of_one_stage_the_result_is_the_reply(rig):
    a, first = rig
    task, sent = await started(a, first, forward(route=ROUTE[:1]))
    first.replies.put_nowait(result(sent, 5))
    assert (await task).tokens.array().tolist() == [5]
    task, sent = await started(a, first, forward(batch_id=2))     # three stages: it must come told
    first.replies.put_nowait(result(sent, 6))
    with pytest.raises(RemoteError, match="bad_reply"):
        await task
