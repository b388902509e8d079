"""The route policy of a shard (services/shard/route.py): whom it hands on to, and when it refuses."""

import pytest

from services.shard.route import BadRoute, NotLive, StaleRoute, check_self, next_stage, next_stage_heard
from wire.messages.shard import RouteStage

ROUTE = [RouteStage("shard-0", 100), RouteStage("shard-13", 200), RouteStage("shard-25", 300)]


def seen(**epochs):
    return lambda name: epochs.get(name.replace("-", "_"))


def test_a_shard_is_the_stage_at_its_hop_or_refuses():
    check_self(ROUTE, 1, "shard-13", 200)
    with pytest.raises(StaleRoute, match="names shard-13 at stage 1, not shard-0"):
        check_self(ROUTE, 1, "shard-0", 100)
    with pytest.raises(StaleRoute, match="epoch 200 at stage 1; this is epoch 201"):
        check_self(ROUTE, 1, "shard-13", 201)          # restarted since the batch was planned


def test_the_next_stage_is_the_one_the_route_names_not_another_holder():
    # shard-13b holds the same layers and is less loaded: it is no business of this shard.
    assert next_stage(ROUTE, 0, seen(shard_13=200, shard_13b=1), 13) == ROUTE[1]
    # It has not heard of a restart the scheduler planned for: the receiver decides.
    assert next_stage(ROUTE, 1, seen(shard_25=299), 25) == ROUTE[2]


def test_a_next_stage_gone_or_restarted_is_a_stale_route():
    with pytest.raises(StaleRoute, match="shard-13, stage 1 of the route .layers from 13., is not live"):
        next_stage(ROUTE, 0, seen(shard_13b=1), 13)
    with pytest.raises(StaleRoute, match="restarted .epoch 201, the route names 200."):
        next_stage(ROUTE, 0, seen(shard_13=201), 13)


def test_a_route_ending_early_is_bad():
    with pytest.raises(BadRoute, match="ends at stage 2 .shard-25. but layers from 30 remain"):
        next_stage(ROUTE, 2, seen(), 30)


async def test_a_next_stage_unheard_for_a_moment_is_waited_for_and_one_restarted_is_not():
    epochs, asked = {}, []

    async def heard_again(name):        # its heartbeats come again while the shard waits
        asked.append(name)
        epochs[name.replace("-", "_")] = 200

    live = lambda name: epochs.get(name.replace("-", "_"))          # noqa: E731
    assert await next_stage_heard(ROUTE, 0, live, 13, heard_again) == ROUTE[1]
    assert asked == ["shard-13"]

    async def never(name):              # gone for good: the wait ends, and so does the batch
        asked.append(name)

    with pytest.raises(NotLive, match="shard-25, stage 2 of the route .layers from 25., is not live"):
        await next_stage_heard(ROUTE, 1, seen(), 25, never)
    assert issubclass(NotLive, StaleRoute) and asked == ["shard-13", "shard-25"]
    with pytest.raises(StaleRoute, match="restarted .epoch 201, the route names 200."):
        await next_stage_heard(ROUTE, 0, seen(shard_13=201), 13, never)
    assert asked == ["shard-13", "shard-25"]                       # not waited for
