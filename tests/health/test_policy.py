"""The watcher's pure policy: who is dead or stalled, when to respawn, when to give up."""

import pytest

from services.health.policy import HealthConfig, HealthPolicy

CFG = HealthConfig(heartbeat_interval=0.5, heartbeat_misses=3, stall_window=10.0,
                   busy_grace=10.0, backoff_first=0.5, backoff_max=4.0, restart_budget=3,
                   budget_window=60.0)


def up(name="shard-0", now=0.0, cpu=1.0):
    p = HealthPolicy(CFG)
    p.started(name, now)
    p.cpu(name, cpu, now)
    p.heard(name, epoch=1, load=0.0, progress=0, now=now)
    return p


def kinds(actions):
    return [(a.kind, a.name) for a in actions]


def test_alive_while_heartbeats_come_and_dead_after_three_missed():
    p = up()
    for t in (0.5, 1.0, 1.5):
        p.heard("shard-0", 1, 0.0, 0, t)
        assert p.decide(t) == []
    assert p.decide(1.5 + 1.5) == []                  # exactly 3 intervals: not yet
    (kill,) = p.decide(1.5 + 1.51)
    assert (kill.kind, kill.name) == ("kill", "shard-0") and "3 missed" in kill.reason
    assert [e.kind for e in p.pop_events()] == ["service_up", "service_down"]
    assert p.decide(3.2) == []                        # killed once, waiting for its exit


def test_silent_but_burning_cpu_is_busy_not_dead_up_to_the_grace():
    p = up()
    for t in (1.0, 2.0, 3.0, 4.0):                    # a long native call: no heartbeat, CPU moves
        p.cpu("shard-0", 1.0 + t, t)
        assert p.decide(t) == []
    for t in range(5, 11):
        p.cpu("shard-0", 1.0 + t, t)
        assert p.decide(t) == []
    p.cpu("shard-0", 12.0, 10.5)
    assert kinds(p.decide(10.5)) == [("kill", "shard-0")]   # past the grace: silent too long


def test_stalled_when_it_has_work_no_progress_and_no_cpu():
    p = up()
    for t in range(1, 13):                            # progress 7 from t=1, then never again
        p.heard("shard-0", 1, load=2.0, progress=7, now=float(t))
        if t <= 11:
            assert p.decide(float(t)) == [], t
    (kill,) = p.decide(12.0)
    assert kill.kind == "kill" and "stalled" in kill.reason


def test_a_long_prefill_with_cpu_moving_is_not_stalled():
    p = up()
    for t in range(1, 30):
        p.heard("shard-0", 1, load=1.0, progress=7, now=float(t))
        p.cpu("shard-0", float(t), float(t))
        assert p.decide(float(t)) == []


def test_idle_is_never_stalled():
    p = up()
    for t in range(1, 30):
        p.heard("shard-0", 1, load=0.0, progress=7, now=float(t))
        assert p.decide(float(t)) == []


def test_respawn_at_once_then_with_doubling_backoff_then_give_up():
    p = up()
    waits = []
    t = 0.0
    for n in range(3):
        p.exited("shard-0", 1, t)
        start = t
        while not (acts := p.decide(t)):
            t += 0.25
        assert kinds(acts) == [("respawn", "shard-0")]
        waits.append(t - start)
        p.started("shard-0", t)
        p.heard("shard-0", n + 2, 0.0, 0, t)
    assert waits == [0.0, 0.5, 1.0]
    p.exited("shard-0", 1, t)
    (give_up,) = p.decide(t)
    assert give_up.kind == "give_up" and "exited with status 1" in give_up.reason
    assert p.view()["shard-0"] == {"state": "failed", "restarts": 3,
                                   "last_error": "exited with status 1"}
    assert "service_failed" in [e.kind for e in p.pop_events()]
    assert p.decide(t + 1000) == []                   # given up stays given up


def test_restarts_older_than_the_window_no_longer_count():
    p = up()
    for t in (0.0, 100.0, 200.0, 300.0, 400.0):      # one crash every 100 s: never given up
        p.exited("shard-0", 1, t)
        assert kinds(p.decide(t)) == [("respawn", "shard-0")]
        p.started("shard-0", t)


def test_a_killed_process_is_respawned_once_its_exit_is_seen():
    p = up()
    assert kinds(p.decide(2.0)) == [("kill", "shard-0")]
    assert p.decide(2.1) == []                        # not before it is gone
    p.exited("shard-0", -9, 2.1)
    assert kinds(p.decide(2.1)) == [("respawn", "shard-0")]
    assert "no heartbeat" in p.view()["shard-0"]["last_error"]
    assert [e.kind for e in p.pop_events()] == ["service_up", "service_down"]  # one down, not two


def test_a_paused_process_heard_again_in_time_is_left_alone():
    p = up()
    p.heard("shard-0", 1, 1.0, 3, 1.4)               # then paused for 1.5 s: within 3 misses
    p.heard("shard-0", 1, 1.0, 4, 2.9)
    assert p.decide(2.9) == []


def test_config_is_checked():
    with pytest.raises(ValueError):
        HealthConfig(heartbeat_interval=0)
    with pytest.raises(ValueError):
        HealthConfig(restart_budget=0)


def test_a_stopped_process_is_killed_once_it_misses_one_heartbeat():
    p = up()                                          # heard at 0.0; SIGSTOP at 0.2
    p.stopped("shard-0", True)
    assert p.decide(0.5) == []                        # its next heartbeat is not late yet
    (kill,) = p.decide(0.51)
    assert kill.kind == "kill" and "stopped" in kill.reason
    p.exited("shard-0", -9, 0.6)
    assert kinds(p.decide(0.6)) == [("respawn", "shard-0")]
    p.started("shard-0", 0.6)                         # a new process: not stopped
    assert p.decide(0.6 + 1.0) == []


def test_a_stopped_process_continued_before_it_missed_a_heartbeat_is_left_alone():
    p = up()
    p.stopped("shard-0", True)
    assert p.decide(0.4) == []
    p.stopped("shard-0", False)                       # SIGCONT: the ordinary rule again
    assert p.decide(1.4) == []
    assert kinds(p.decide(1.51)) == [("kill", "shard-0")]


def test_a_process_stopped_while_starting_counts_its_silence_from_its_start():
    p = HealthPolicy(CFG)
    p.started("shard-0", 10.0)
    assert p.decide(12.0) == []                       # starting, not stopped: never silent
    p.stopped("shard-0", True)
    assert kinds(p.decide(12.0)) == [("kill", "shard-0")]


def test_stopped_misses_is_checked():
    with pytest.raises(ValueError):
        HealthConfig(stopped_misses=0)
