"""A batch's route through the shards: the scheduler names every stage; a shard only checks it.

Only the shards the scheduler planned a batch for hold the KV its page tables describe, so a
shard never picks the next one itself: it hands on to the stage the route names, and refuses
the batch when that stage (or it itself) is not the process the route was planned for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from wire.messages.shard import RouteStage


class StaleRoute(Exception):
    """The route names a shard process that is gone or was restarted: the pipeline changed, and
    the caller must plan again (re-prefilling what the lost KV held)."""


class NotLive(StaleRoute):
    """The route's next stage is not heard from now: gone, or silent for a moment on a busy
    machine (only a newer epoch proves a restart)."""


class BadRoute(ValueError):
    """The route cannot carry the batch through the model: it ends before the last layer."""


def check_self(route: Sequence[RouteStage], hop: int, name: str, epoch: int) -> None:
    """Raise StaleRoute unless this process (name, epoch) is the stage the route names at `hop`."""
    me = route[hop]
    if me.name != name:
        raise StaleRoute(f"the route names {me.name} at stage {hop}, not {name}")
    if me.epoch != epoch:
        raise StaleRoute(f"the route names {name} of epoch {me.epoch} at stage {hop}; this is epoch "
                         f"{epoch}: it restarted since the batch was planned and lacks its KV")


def next_stage(route: Sequence[RouteStage], hop: int, live_epoch: Callable[[str], int | None],
               next_layer: int) -> RouteStage:
    """The stage after `hop`, checked against what this shard sees live (`live_epoch(name)`: its
    epoch, or None when it is not live).

    A newer epoch than the route's means that shard restarted: its KV is gone. An older one only
    means this shard has not heard of the restart the scheduler has seen; the receiver checks its
    own epoch, so the batch goes on."""
    if hop + 1 >= len(route):
        raise BadRoute(f"the route ends at stage {hop} ({route[hop].name}) but layers from "
                       f"{next_layer} remain")
    nxt = route[hop + 1]
    seen = live_epoch(nxt.name)
    if seen is None:
        raise NotLive(f"{nxt.name}, stage {hop + 1} of the route (layers from {next_layer}), "
                      "is not live")
    if seen > nxt.epoch:
        raise StaleRoute(f"{nxt.name}, stage {hop + 1} of the route, restarted (epoch {seen}, the "
                         f"route names {nxt.epoch}): the KV of the batch is gone")
    return nxt


async def next_stage_heard(route: Sequence[RouteStage], hop: int, live_epoch: Callable[[str], int | None],
                           next_layer: int, heard: Callable[[str], Awaitable[object]]) -> RouteStage:
    """next_stage, but a next stage merely not live is first waited for (`heard(name)`: until
    it is heard from again, or the time to judge it dead has passed): the scheduler planned it
    live, and on a machine whose cores are all busy a heartbeat may come late, where a refusal
    costs the batch a re-run. A restarted one is refused at once."""
    try:
        return next_stage(route, hop, live_epoch, next_layer)
    except NotLive:
        await heard(route[hop + 1].name)
    return next_stage(route, hop, live_epoch, next_layer)
