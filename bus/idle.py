"""A deadline on the silences of a stream: the task waiting for its next event is cancelled
when one wait lasts `seconds` (RpcClient.stream turns that into CallTimeout). One timer per
silent period, where asyncio.wait_for around each wait makes a task and a timer for every
event: at concurrency 32 that was the largest cost the gateway added per token."""

from __future__ import annotations

import asyncio


class IdleWatch:
    def __init__(self, seconds: float):
        self.seconds = seconds
        self.fired = False
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Task | None = None   # the task waiting now; None between waits
        self._since = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def waiting(self) -> None:
        """The current task starts waiting for the next event."""
        self._waiter = asyncio.current_task()
        self._since = self._loop.time()
        if self._timer is None:
            self._timer = self._loop.call_at(self._since + self.seconds, self._check)

    def got(self) -> None:
        """An event came: the wait is over."""
        self._waiter = None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._waiter is None:
            return        # between waits: the next wait arms the timer again
        due = self._since + self.seconds
        if self._loop.time() >= due:
            self.fired = True
            self._waiter.cancel()
        else:             # this wait began after the timer was set: check again at its end
            self._timer = self._loop.call_at(due, self._check)
