"""bus.eager: a coroutine's first step runs at once, the rest in a task that behaves as if the
coroutine had been a task from the start; and a service's eager handlers, over real sockets."""

from __future__ import annotations

import asyncio

import pytest
import zmq.asyncio

import wire
from bus import eager
from bus.errors import RemoteError
from bus.service import Service, handles
from wire.messages.bus import EchoReply

from .serving import client_of, running
from .test_rpc import config


async def test_a_coroutine_that_never_suspends_finishes_inside_start():
    seen = []

    async def work():
        seen.append("ran")

    assert eager.start(work()) is None
    assert seen == ["ran"]


async def test_the_first_step_runs_before_start_returns_and_the_task_gives_the_result():
    seen = []
    gate = asyncio.get_running_loop().create_future()

    async def work():
        seen.append("first")
        got = await gate
        await asyncio.sleep(0)   # a bare yield is passed through too
        seen.append("rest")
        return got * 2

    task = eager.start(work())
    assert seen == ["first"] and isinstance(task, asyncio.Task) and not task.done()
    gate.set_result(21)
    assert await task == 42
    assert seen == ["first", "rest"]


async def test_an_error_of_the_awaited_future_is_raised_inside_the_coroutine():
    gate = asyncio.get_running_loop().create_future()

    async def work():
        try:
            await gate
        except KeyError as e:
            return f"caught {e}"

    task = eager.start(work())
    gate.set_exception(KeyError("k"))
    assert await task == "caught 'k'"


async def test_an_error_after_the_first_step_ends_the_task_with_it():
    async def work():
        await asyncio.sleep(0)
        raise ValueError("later")

    with pytest.raises(ValueError, match="later"):
        await eager.start(work())


async def test_an_error_in_the_first_step_is_raised_by_start():
    async def work():
        raise ValueError("at once")

    with pytest.raises(ValueError, match="at once"):
        eager.start(work())


async def test_cancelling_the_task_cancels_the_coroutine_where_it_waits():
    cleaned = []

    async def work():
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append(asyncio.current_task())

    task = eager.start(work())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [task]   # after its first suspension the coroutine runs in the task


@wire.message("test.eager_now")
class Now:
    text: str


@wire.message("test.eager_later")
class Later:
    text: str


@wire.message("test.eager_fails")
class Fails:
    pass


class EagerService(Service):
    kind = "test"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.release = asyncio.Event()
        self.order: list[str] = []

    @handles(Now, eager=True)
    async def now(self, msg):
        self.order.append(msg.body.text)
        return EchoReply(text=msg.body.text)

    @handles(Later, eager=True)
    async def later(self, msg):
        self.order.append(msg.body.text)
        await self.release.wait()
        return EchoReply(text="after " + msg.body.text)

    @handles(Fails, eager=True)
    async def fails(self, msg):
        raise RuntimeError("eager bug")


@pytest.fixture
async def service():
    async with running(EagerService(config("eager"), ctx=zmq.asyncio.Context.instance())) as s:
        yield s


async def test_eager_handlers_answer_whether_or_not_they_suspend(service):
    async with client_of(service) as c:
        waiting = asyncio.ensure_future(c.start_call(Later(text="a"), timeout=5))   # sent now
        # The one that suspends holds nothing up: later requests are read and answered.
        assert (await c.call(Now(text="b"), timeout=5)).text == "b"
        assert not waiting.done() and service.order == ["a", "b"]
        assert len(service._inflight) == 1   # the suspended one, in a task a drain waits for
        service.release.set()
        assert (await waiting).text == "after a"
        with pytest.raises(RemoteError) as e:
            await c.call(Fails(), timeout=5)
        assert e.value.code == "internal" and "eager bug" in str(e.value)
        assert (await c.call(Now(text="c"), timeout=5)).text == "c"   # the loop reads on
    assert service.counters["errors.internal"] == 1
