"""DirectReplies: a batch's call ends with the last shard's straight answer, and ends as the chain
of calls would have when anything fails. The chain is a stand-in the test drives step by step;
tests/shard/test_shard_processes.py runs the same messages through real shard processes."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import wire
from bus.errors import CallTimeout, PeerDead, PeerRestarted, RemoteError
from services.scheduler.pipelines.direct import DirectReplies
from wire.messages.shard import (Forward, ForwardFailed, ForwardReply, ForwardResult, HandedOn,
                                 RouteStage)

ROUTE = [RouteStage("s0", 10), RouteStage("s1", 11), RouteStage("s2", 12)]


def forward(batch_id: int = 1, route=ROUTE) -> Forward:
    return Forward(batch_id=batch_id, first_layer=0, positions=[0], query_lens=[1],
                   page_table=[[0]], tokens=wire.Tensor(np.zeros(1, np.int32)), route=list(route))


def reply(batch_id: int, token: int, cls=ForwardReply, **kw):
    return cls(batch_id=batch_id, tokens=wire.Tensor(np.array([token], np.int32)),
               logprobs=wire.Tensor(np.array([-0.5], np.float32)), **kw)


class Chain:
    """The call to the first shard: records what was sent and answers when the test says."""

    def __init__(self):
        self.sent: list[Forward] = []
        self.answers: asyncio.Queue = asyncio.Queue()

    async def __call__(self, first: str, body: Forward, timeout: float):
        assert first == body.route[0].name
        self.sent.append(body)
        answer = await self.answers.get()
        if isinstance(answer, BaseException):
            raise answer
        return answer


async def started(d: DirectReplies, chain: Chain, body: Forward, timeout: float = 5.0):
    task = asyncio.create_task(d.call("s0", body, timeout))
    while len(chain.sent) < 1 + getattr(chain, "_seen", 0):
        await asyncio.sleep(0)
    chain._seen = len(chain.sent)
    return task, chain.sent[-1]


async def heard(d: DirectReplies, chain: Chain) -> None:
    """One batch answered straight by s2: later batches to s2 of this epoch go `only`."""
    task, sent = await started(d, chain, forward(batch_id=100))
    d.received("s2", 12, reply(100, 1, ForwardResult, key=sent.reply_to.key))
    await task
    chain.answers.put_nowait(reply(100, 1))   # the chain's copy, late


async def handed_on(d: DirectReplies, chain: Chain, batch_id: int = 2, timeout: float = 5.0):
    """A batch sent `only` once s2 was heard from, that the first stage has handed on."""
    await heard(d, chain)
    task, sent = await started(d, chain, forward(batch_id=batch_id), timeout)
    assert sent.reply_to.only
    chain.answers.put_nowait(HandedOn(batch_id=batch_id))
    return task, sent


async def test_until_the_last_shard_is_heard_from_the_answer_comes_both_ways_and_the_first_wins():
    chain = Chain()
    d = DirectReplies("sched", chain)
    task, sent = await started(d, chain, forward())
    assert sent.reply_to.name == "sched" and not sent.reply_to.only and sent.sent_at > 0
    d.received("s2", 12, reply(1, 7, ForwardResult, key=sent.reply_to.key))
    got = await task
    assert got.tokens.array().tolist() == [7]
    chain.answers.put_nowait(reply(1, 7))            # the chain's copy comes after: counted only
    await asyncio.sleep(0.01)
    assert d.counters["answered_straight"] == 1
    # No straight answer: the chain's is taken.
    task, sent = await started(d, chain, forward(batch_id=2, route=[RouteStage("s0", 10),
                                                                   RouteStage("s9", 1)]))
    chain.answers.put_nowait(reply(2, 9))
    assert (await task).tokens.array().tolist() == [9]
    assert d.counters["answered_by_chain"] == 1
    await d.close()


async def test_a_result_is_taken_only_from_the_process_the_route_ends_at_for_a_waiting_call():
    chain = Chain()
    d = DirectReplies("sched", chain)
    task, sent = await started(d, chain, forward())
    key = sent.reply_to.key
    d.received("s2", 99, reply(1, 5, ForwardResult, key=key))      # another run of s2
    d.received("s1", 11, reply(1, 5, ForwardResult, key=key))      # not the last stage
    d.received("s2", 12, reply(1, 5, ForwardResult, key=key + 1))  # another call
    assert d.counters["refused"] == 2 and d.counters["late"] == 1
    assert not task.done()
    d.received("s2", 12, reply(1, 6, ForwardResult, key=key))
    assert (await task).tokens.array().tolist() == [6]
    d.received("s2", 12, reply(1, 6, ForwardResult, key=key))      # again: late
    assert d.counters["late"] == 2
    chain.answers.put_nowait(reply(1, 6))
    await d.close()


async def test_a_chain_failure_before_the_answer_ends_the_call_with_it():
    chain = Chain()
    d = DirectReplies("sched", chain)
    task, _ = await started(d, chain, forward())
    chain.answers.put_nowait(RemoteError("kv_missing", "gone", peer="s0"))
    with pytest.raises(RemoteError) as e:
        await task
    assert e.value.code == "kv_missing"
    await d.close()


async def test_once_heard_each_stage_answers_handed_on_and_the_answer_comes_straight_only():
    chain = Chain()
    answered = []
    d = DirectReplies("sched", chain, lambda route, r, ms: answered.append((route, r.batch_id, ms)))
    task, sent = await handed_on(d, chain)
    await asyncio.sleep(0.01)
    assert not task.done()                            # handed on: the answer is still to come
    d.received("s2", 12, reply(2, 3, ForwardResult, key=sent.reply_to.key))
    assert (await task).tokens.array().tolist() == [3]
    assert d.counters["handed_on"] == 1
    # Its hop figures come from the straight answer (the chain brought none back).
    assert [(route, b) for route, b, _ in answered] == [(["s0", "s1", "s2"], 2)]
    await d.close()


async def test_a_later_stage_that_fails_the_batch_is_told_and_the_call_fails_with_its_error():
    chain = Chain()
    d = DirectReplies("sched", chain)
    task, sent = await handed_on(d, chain)
    failure = ForwardFailed(key=sent.reply_to.key, batch_id=2, stage="s1", code="stale_route",
                            message="s2 restarted", retry_after=0.0)
    d.failed("s9", 1, failure)                         # not a stage of the route: refused
    assert d.counters["refused"] == 1
    d.failed("s1", 11, failure)
    with pytest.raises(RemoteError) as e:
        await task
    assert (e.value.code, e.value.peer) == ("stale_route", "s1")
    await d.close()


@pytest.mark.parametrize("epoch, error", [(None, PeerDead), (13, PeerRestarted)])
async def test_a_stage_lost_while_the_answer_is_awaited_ends_the_call_as_the_chain_would(epoch, error):
    chain = Chain()
    d = DirectReplies("sched", chain)
    task, _ = await handed_on(d, chain)
    d.lost("s1", 11)          # the epoch the route names: not a restart
    d.lost("s7", None)        # not on the route
    await asyncio.sleep(0.01)
    assert not task.done()
    d.lost("s1", epoch)
    with pytest.raises(error):
        await task
    await d.close()


async def test_no_answer_in_time_is_a_timeout_and_the_next_batch_goes_both_ways_again():
    chain = Chain()
    d = DirectReplies("sched", chain)
    task, _ = await handed_on(d, chain, timeout=0.2)
    with pytest.raises(CallTimeout):
        await task
    task, sent = await started(d, chain, forward(batch_id=3))
    assert not sent.reply_to.only
    chain.answers.put_nowait(reply(3, 4))
    assert (await task).tokens.array().tolist() == [4]
    await d.close()


async def test_a_last_shard_that_cannot_reach_us_sends_batches_both_ways_again():
    chain = Chain()
    d = DirectReplies("sched", chain)
    await heard(d, chain)
    task, sent = await started(d, chain, forward(batch_id=2))
    assert sent.reply_to.only
    chain.answers.put_nowait(RemoteError("unreachable", "s2 could not send the result", peer="s0"))
    with pytest.raises(RemoteError):
        await task
    task, sent = await started(d, chain, forward(batch_id=3))
    assert not sent.reply_to.only
    chain.answers.put_nowait(reply(3, 4))
    await task
    await d.close()


async def test_a_cancelled_call_cancels_its_chain_call():
    chain = Chain()
    d = DirectReplies("sched", chain)
    task, _ = await started(d, chain, forward())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await d.close()
    assert not d._chains and not d._waiting


async def test_a_route_of_one_stage_is_one_call_along_the_chain():
    chain = Chain()
    d = DirectReplies("sched", chain)
    task, sent = await started(d, chain, forward(route=ROUTE[:1]))
    assert sent.reply_to is None
    chain.answers.put_nowait(reply(1, 2))
    assert (await task).tokens.array().tolist() == [2]
    await d.close()
