"""Wait on a condition with a deadline, never a fixed sleep: for async and plain tests alike."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Callable


async def until(cond: Callable[[], Any], timeout: float = 10.0, every: float = 0.02, what: str = "") -> Any:
    """Await until `cond()` (plain or async) returns something true and return it; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or 'condition'} not met within {timeout:g}s (last: {value!r})")
        await asyncio.sleep(every)


def until_sync(cond: Callable[[], Any], timeout: float = 10.0, every: float = 0.05, what: str = "") -> Any:
    """`until` for plain tests: poll `cond()` until it returns something true; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or 'condition'} not met within {timeout:g}s (last: {value!r})")
        time.sleep(every)
