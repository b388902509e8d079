"""Whether a pipeline's last shard can reach the scheduler, checked once when the pipeline is
assembled: the last shard sends every answer straight there. Until its last shard (name and
epoch) has been checked, a chain is held back (the check runs meanwhile); one whose check failed
is refused with the reason, and checked again after a pause that doubles from `first_retry_s` to
`retry_s` (the shard's directory may find the scheduler later: a scheduler that was just respawned
is often refused once, by a shard that has not heard its new epoch yet, and must not wait long
for that). A batch that finds the path broken after all (`forget`) has it checked again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from wire.messages.shard import RouteStage

from .chains import Stage

log = logging.getLogger("llmbus.scheduler")

Probe = Callable[[Stage], Awaitable[None]]   # raises when the stage cannot reach the scheduler


class Reach:
    def __init__(self, probe: Probe, clock: Callable[[], float], retry_s: float = 5.0,
                 first_retry_s: float = 0.25):
        self._probe = probe
        self._clock = clock
        self.retry_s = retry_s
        self.first_retry_s = first_retry_s
        self._refusals: dict[tuple[str, int], int] = {}   # checks refused in a row
        # (name, epoch) of a last shard -> None while checked, "" when it reaches us, else why not
        self._verdicts: dict[tuple[str, int], str | None] = {}
        self._refused_at: dict[tuple[str, int], float] = {}
        self._tasks: set[asyncio.Task] = set()

    def admit(self, chains: Sequence[list[Stage] | None]) -> list[list[Stage] | None]:
        """Each chain as it is, or None where its last shard is not known to reach us."""
        return [c if c is not None and self._reaches(c[-1]) else None for c in chains]

    def refused(self) -> dict[str, str]:
        """The last shards refused now, with why: for the scheduler's status and its reasons."""
        return {name: why for (name, _), why in self._verdicts.items() if why}

    def forget(self, stage: Stage | RouteStage) -> None:
        """A batch found the path from `stage` broken: check it again before the next batch."""
        self._verdicts.pop((stage.name, stage.epoch), None)

    def _reaches(self, last: Stage) -> bool:
        key = (last.name, last.epoch)
        verdict = self._verdicts.get(key, ...)
        if verdict is ... or (verdict and self._clock() - self._refused_at[key] >= self._pause(key)):
            self._verdicts[key] = None
            task = asyncio.get_running_loop().create_task(self._check(last))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return False
        return verdict == ""

    def _pause(self, key: tuple[str, int]) -> float:
        return min(self.retry_s, self.first_retry_s * 2 ** (self._refusals.get(key, 1) - 1))

    async def _check(self, last: Stage) -> None:
        key = (last.name, last.epoch)
        try:
            await self._probe(last)
        except Exception as e:   # any failure of the check is a refusal, with its words
            why = f"{last.name} cannot reach the scheduler, where it must send every answer: {e}"
            if key not in self._refused_at:
                log.warning("pipeline refused: %s", why)
            self._verdicts[key], self._refused_at[key] = why, self._clock()
            self._refusals[key] = self._refusals.get(key, 0) + 1
            return
        self._refusals.pop(key, None)
        if self._verdicts.get(key):
            log.info("%s reaches the scheduler now", last.name)
        self._verdicts[key] = ""

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
