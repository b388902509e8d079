"""Pipelines (one policy per replica pipeline), played without I/O: new requests spread over the
pipelines in rotation, a lost pipeline's sequences move to a survivor and end exactly as they
would have undisturbed, and what is out of rotation says why."""

from __future__ import annotations

from services.scheduler.batching import Scheduler
from services.scheduler.pipelines.breaker import BreakerConfig, Breakers
from services.scheduler.pipelines.replicas import Pipeline, Pipelines
from services.scheduler.pipelines.chains import Stage

from .harness import ManualClock, req, run_to_end, small, step

CHAINS = {"p0": [Stage("a0", 1, 0, 15, 32, 4), Stage("b0", 1, 15, 30, 32, 4)],
          "p1": [Stage("a1", 1, 0, 15, 32, 4), Stage("b1", 1, 15, 30, 32, 4)]}


class Bus:
    """Which pipelines are whole now: what `assign_pipelines` would say of the directory."""

    def __init__(self):
        self.whole = dict(CHAINS)

    def assign(self, current):
        out = [self.whole.get(f"p{i}") for i in range(len(current))]
        return out + [self.whole[k] for k in sorted(self.whole) if int(k[1:]) >= len(current)]


def lanes_of(bus: Bus, clock: ManualClock, **breaker) -> Pipelines:
    pipelines = Pipelines(bus.assign, lambda name, chain: Pipeline(name, Scheduler(small(), clock)),
                  Breakers(BreakerConfig(**breaker)), clock)
    pipelines.refresh()
    return pipelines


def test_each_whole_chain_is_a_lane_and_requests_go_to_the_least_loaded():
    pipelines = lanes_of(Bus(), ManualClock())
    assert [(pipeline.name, pipeline.shards) for pipeline in pipelines] == [("p0", ["a0", "b0"]), ("p1", ["a1", "b1"])]
    for i in range(5):
        pipelines.submit(req(f"r{i}", first=10 * i + 1))
    p0, p1 = pipelines.pipelines
    assert (p0.policy.load, p1.policy.load) == (3, 2)
    assert pipelines.pipeline_of("r1") is p1 and pipelines.is_tracked("r4")


def test_a_lost_pipeline_hands_its_sequences_to_the_survivor_and_no_answer_changes():
    want = run_to_end(_submitted(Scheduler(small()), 4))

    bus, clock = Bus(), ManualClock()
    pipelines = lanes_of(bus, clock)
    for i in range(4):
        pipelines.submit(req(f"r{i}", first=10 * i + 1, max_tokens=6))
    p0, p1 = pipelines.pipelines
    outs: dict[str, list] = {}
    for _ in range(3):                       # prefill and two decodes on both
        for pipeline in (p0, p1):
            _, got = step(pipeline.policy)
            for o in got:
                outs.setdefault(o.request_id, []).append(o)
    on_p1 = {rid for rid in outs if pipelines.pipeline_of(rid) is p1}
    generated = {rid: list(p1.policy._seqs[rid].tokens[6:]) for rid in on_p1}
    p1_prompts = {rid: p1.policy._seqs[rid].request.prompt for rid in on_p1}
    assert all(len(g) == 3 for g in generated.values())
    del bus.whole["p1"]                      # b1 died: p1 has no pipeline now
    pipelines.refresh()
    clock.t += 4.9                           # a shard late with its heartbeats comes back
    assert pipelines.rebalance() == 0            # with its KV: nothing moves yet
    clock.t += 0.1
    assert pipelines.rebalance() == 2
    assert not p1.policy.has_work() and p0.policy.load == 4
    fed: dict[str, list[int]] = {rid: [] for rid in on_p1}
    while any(len(fed[rid]) < 9 for rid in on_p1):
        plan, got = step(p0.policy)          # the moved ones come back: prompt + generated
        for c in plan.chunks:
            if c.request_id in fed and len(fed[c.request_id]) < 9:
                fed[c.request_id] += c.token_ids
        for o in got:
            outs.setdefault(o.request_id, []).append(o)
    for rid in on_p1:
        prompt = list(p1_prompts[rid])
        assert fed[rid] == prompt + generated[rid]
    for rid, got in run_to_end(p0.policy).items():
        outs.setdefault(rid, []).extend(got)
    assert {rid: "".join(o.text for o in o_) for rid, o_ in outs.items()} == \
        {rid: "".join(o.text for o in o_) for rid, o_ in want.items()}
    assert p1.policy.stats()["moved_out"] == 2 and p0.policy.stats()["moved_in"] == 2
    info = {i["name"]: i for i in pipelines.info()}
    assert not info["p1"]["in_rotation"] and "not whole" in info["p1"]["why"]
    assert info["p0"]["in_rotation"]


def test_a_pipeline_back_within_the_grace_keeps_its_sequences():
    bus, clock = Bus(), ManualClock()
    pipelines = lanes_of(bus, clock)
    pipelines.submit(req("r0"))
    pipelines.submit(req("r1", first=40))
    del bus.whole["p1"]
    pipelines.refresh()
    clock.t += 4.0
    bus.whole["p1"] = CHAINS["p1"]
    pipelines.refresh()
    clock.t += 10.0
    assert pipelines.rebalance() == 0 and pipelines.pipelines[1].policy.load == 1


def test_a_lone_pipeline_that_breaks_keeps_its_sequences_and_waits():
    bus, clock = Bus(), ManualClock()
    del bus.whole["p1"]
    pipelines = lanes_of(bus, clock)
    pipelines.submit(req("r0"))
    step(pipelines.pipelines[0].policy)
    bus.whole.clear()
    pipelines.refresh()
    clock.t += 60.0
    assert pipelines.rebalance() == 0 and pipelines.pipelines[0].policy.load == 1
    pipelines.submit(req("r1", first=40))        # it waits there, as on a single pipeline
    assert pipelines.pipelines[0].policy.load == 2


def test_failures_take_a_lane_out_and_move_its_work_and_after_the_cool_down_it_gets_a_probe():
    clock = ManualClock(0.0)
    pipelines = lanes_of(Bus(), clock, failures=2, window_s=10, cooldown_s=5)
    p0, p1 = pipelines.pipelines
    assert [e["name"] for e in pipelines.changes()] == ["p0", "p1"] and pipelines.changes() == []
    pipelines.submit(req("r0"))
    pipelines.submit(req("r1", first=40))
    pipelines.observe(p1, None, "peer dead")
    pipelines.observe(p1, None, "peer dead")
    assert pipelines.rebalance() == 1 and p0.policy.load == 2
    (event,) = pipelines.changes()               # what the bus hears, once
    assert event["name"] == "p1" and not event["in_rotation"] and event["moved_out"] == 1
    assert pipelines.changes() == []
    pipelines.submit(req("r2", first=70))
    assert p0.policy.load == 3               # out of rotation: nothing new for p1
    info = {i["name"]: i for i in pipelines.info()}
    assert info["p1"]["state"] == "open" and "2 failed batches" in info["p1"]["why"]
    stats = pipelines.pipeline_stats()
    assert stats["pipelines.p1.in_rotation"] == 0 and stats["pipelines.p1.breaker_open"] == 1
    clock.t = 6.0                            # half-open: one request as a probe, then no more
    pipelines.submit(req("r3", first=90))
    pipelines.submit(req("r4", first=100))
    assert p1.policy.load == 1 and p0.policy.load == 4
    pipelines.observe(p1, 0.01, "")
    assert {i["name"]: i for i in pipelines.info()}["p1"]["state"] == "closed"


def test_a_slow_lane_finishes_what_it_has_but_gets_nothing_new():
    clock = ManualClock(0.0)
    pipelines = lanes_of(Bus(), clock, slow_samples=2, slow_factor=3.0)
    p0, p1 = pipelines.pipelines
    pipelines.submit(req("r0"))
    pipelines.submit(req("r1", first=40))
    for _ in range(2):
        pipelines.observe(p0, 0.01, "")
        pipelines.observe(p1, 0.05, "")
    assert pipelines.rebalance() == 0 and p1.policy.load == 1
    pipelines.submit(req("r2", first=70))
    assert p0.policy.load == 2
    assert "slow" in {i["name"]: i for i in pipelines.info()}["p1"]["why"]


def _submitted(sched: Scheduler, n: int) -> Scheduler:
    for i in range(n):
        sched.submit(req(f"r{i}", first=10 * i + 1, max_tokens=6))
    return sched
