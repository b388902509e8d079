"""Waiting on a condition with a deadline, never for a fixed time."""

from __future__ import annotations

import asyncio
import time


async def wait_until(cond, timeout: float = 5.0, every: float = 0.02) -> None:
    """Return once `cond()` holds; AssertionError if it never does within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition never held")
        await asyncio.sleep(every)
