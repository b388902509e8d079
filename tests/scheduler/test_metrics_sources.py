"""What the scheduler sums for the gateway's /metrics: queue time (admission to first batch)
and bytes and latency per shard hop."""

from services.scheduler.batching import Scheduler
from services.scheduler.pipelines.hops import HopStats
from wire.messages.shard import Hop

from .harness import ManualClock, req, small, step


def test_queue_time_runs_from_admission_to_the_first_batch_only():
    clock = ManualClock()
    sched = Scheduler(small(max_batch_tokens=6, max_batch_seqs=1), clock=clock)
    sched.submit(req("a", n=6, first=1))
    sched.submit(req("b", n=6, first=50))      # waits behind a: one sequence per batch
    clock.t += 2.0
    plan, _ = step(sched)                      # a's prompt, 2 s after admission
    assert [c.request_id for c in plan.chunks] == ["a"]
    clock.t += 3.0
    while "b" not in [c.request_id for c in plan.chunks]:
        plan, _ = step(sched)                  # a decodes to its end, then b's prompt
    s = sched.stats()
    assert s["queue_time_count"] == 2 and s["queue_time_s"] == 2.0 + 5.0
    clock.t += 10.0
    step(sched)                                # b decodes: no longer queued, adds nothing
    assert sched.stats()["queue_time_s"] == 7.0


def test_each_hop_is_charged_the_bytes_and_the_one_way_latency_its_receiver_appended():
    hops = HopStats("scheduler-0")
    batch = [Hop("s0", 40, 1.5, 30.0), Hop("s1", 11520, 0.75, 12.0)]
    hops.record(batch)
    hops.record([Hop("s0", 40, 0.5, 29.0), Hop("s1", 11520, 0.75, 12.0)])
    assert hops.stats() == {
        "hop.batches.scheduler-0>s0": 2, "hop.bytes.scheduler-0>s0": 80,
        "hop.latency_ms.scheduler-0>s0": 2.0,
        "hop.batches.s0>s1": 2, "hop.bytes.s0>s1": 23040, "hop.latency_ms.s0>s1": 1.5}
