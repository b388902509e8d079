"""The liveness table decides who is alive from heartbeats alone."""

from bus.liveness import LivenessTable, PeerEntry


def entry(name="a", epoch=1, progress=0):
    return PeerEntry(name=name, kind="echo", instance="0", epoch=epoch, host="127.0.0.1",
                     rpc_port=1, pub_port=2, progress=progress)


def test_new_then_same_epoch_then_restart():
    t = LivenessTable(dead_after=1.5)
    assert t.observe(entry(epoch=1), now=0.0) == "new"
    assert t.observe(entry(epoch=1), now=0.5) is None
    assert t.observe(entry(epoch=2), now=1.0) == "restarted"
    assert t.entries["a"].epoch == 2


def test_dead_after_three_missed_heartbeats():
    t = LivenessTable(dead_after=1.5)
    t.observe(entry(), now=0.0)
    assert [e.name for e in t.live(1.5)] == ["a"]
    assert t.live(1.51) == []
    assert [e.name for e in t.expire(1.51)] == ["a"]
    assert t.entries == {}


def test_heartbeat_of_an_older_epoch_is_stale_while_the_new_one_lives():
    t = LivenessTable(dead_after=1.5)
    t.observe(entry(epoch=5), now=0.0)
    assert t.observe(entry(epoch=4), now=0.1) == "stale"
    assert t.entries["a"].epoch == 5
    assert t.stale_heartbeats == 1


def test_progress_time_moves_only_when_progress_grows():
    t = LivenessTable(dead_after=1.5)
    t.observe(entry(progress=3), now=0.0)
    t.observe(entry(progress=3), now=1.0)
    assert t.entries["a"].last_progress_at == 0.0
    t.observe(entry(progress=4), now=1.2)
    assert t.entries["a"].last_progress_at == 1.2


def test_a_name_that_expired_and_came_back_with_a_new_epoch_restarted():
    t = LivenessTable(dead_after=1.5)
    t.observe(entry(epoch=1), now=0.0)
    t.expire(now=2.0)
    assert t.observe(entry(epoch=2), now=3.0) == "restarted"
    t.expire(now=5.0)
    assert t.observe(entry(epoch=2), now=6.0) == "new"   # same process heard again
