"""The deadline on a stream's silences (bus/idle.py), which RpcClient.stream keeps."""

from __future__ import annotations

import asyncio

import pytest

from bus.idle import IdleWatch


async def _consume(queue: asyncio.Queue, watch: IdleWatch, busy: float = 0.0) -> list:
    got = []
    while True:
        watch.waiting()
        item = await queue.get()
        watch.got()
        if item is None:
            return got
        got.append(item)
        await asyncio.sleep(busy)      # the consumer's own work between waits


async def test_a_silent_wait_is_cancelled_and_says_so():
    watch = IdleWatch(0.05)
    queue: asyncio.Queue = asyncio.Queue()
    with pytest.raises(asyncio.CancelledError):
        await _consume(queue, watch)    # nothing ever comes
    assert watch.fired
    watch.close()


async def test_a_stream_that_keeps_talking_is_never_cancelled():
    watch = IdleWatch(5.0)
    queue: asyncio.Queue = asyncio.Queue()

    async def produce():
        for i in range(200):
            queue.put_nowait(i)
            await asyncio.sleep(0)
        queue.put_nowait(None)

    got, _ = await asyncio.gather(_consume(queue, watch), produce())
    assert got == list(range(200)) and not watch.fired
    watch.close()


async def test_time_between_waits_is_not_silence():
    # The consumer works longer than the deadline after each event; the stream itself is
    # never silent while it is waited on, so nothing is cancelled.
    watch = IdleWatch(0.05)
    queue: asyncio.Queue = asyncio.Queue()
    for i in range(3):
        queue.put_nowait(i)
    queue.put_nowait(None)
    assert await _consume(queue, watch, busy=0.12) == [0, 1, 2]
    assert not watch.fired
    watch.close()
