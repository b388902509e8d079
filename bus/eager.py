"""Starting a coroutine at once, as Python 3.12's eager tasks do: its first step runs now, on
the caller's stack, and only what is left after its first suspension becomes a task.

A task's first step waits for a turn of the event loop (~50 us on a busy machine, on every hop of
a decode step). Code that runs eagerly must not ask for asyncio.current_task() before it first
suspends: until then the current task is the caller's.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine
from typing import Any


def start(coro: Coroutine) -> asyncio.Task | None:
    """Run `coro` up to its first suspension now; None when it finished, else the task that runs
    the rest. What it raises in its first step is raised here."""
    try:
        yielded = coro.send(None)
    except StopIteration:
        return None
    return asyncio.get_running_loop().create_task(_rest(coro, yielded))


async def _rest(coro: Coroutine, yielded: Any) -> Any:
    return await _resumed(coro, yielded)


@types.coroutine
def _resumed(coro: Coroutine, yielded: Any):
    """Drive a started coroutine on from what it last yielded (a future the task waits on, or
    None for a bare yield), passing in every value and exception the task sends."""
    while True:
        try:
            sent = yield yielded
        except BaseException as e:   # a cancel, or the error of the future it waited on
            try:
                yielded = coro.throw(e)
            except StopIteration as stop:
                return stop.value
            continue
        try:
            yielded = coro.send(sent)
        except StopIteration as stop:
            return stop.value
