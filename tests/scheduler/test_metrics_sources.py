"""What the scheduler sums for the gateway's /metrics: queue time (admission to first batch)
and bytes and latency per shard hop."""

import numpy as np

import wire
from services.scheduler.batching import Scheduler
from services.scheduler.pipelines.hops import HopStats
from wire.messages.shard import ForwardReply

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


def _reply(**kw) -> ForwardReply:
    z = wire.Tensor(np.zeros(1, np.int32))
    return ForwardReply(batch_id=0, tokens=z, logprobs=wire.Tensor(np.zeros(1, np.float32)), **kw)


def test_each_hop_is_charged_its_bytes_and_the_senders_call_less_the_receivers_time():
    hops = HopStats("scheduler-0")
    reply = _reply(hop_bytes={"s0": 40, "s1": 11520},
                   stage_ms={"s0": 30.0, "s1": 12.0},
                   hop_latency_ms={"s1": 0.75})
    hops.record(["s0", "s1"], reply, call_ms=31.5)
    hops.record(["s0", "s1"], reply, call_ms=30.5)
    assert hops.stats() == {
        "hop.batches.scheduler-0>s0": 2, "hop.bytes.scheduler-0>s0": 80,
        "hop.latency_ms.scheduler-0>s0": 2.0,            # (31.5 - 30) + (30.5 - 30)
        "hop.batches.s0>s1": 2, "hop.bytes.s0>s1": 23040, "hop.latency_ms.s0>s1": 1.5}


def test_a_shard_that_reports_no_hop_figures_ends_the_accounting_there():
    hops = HopStats("sched")
    hops.record(["s0", "s1"], _reply(hop_bytes={"s0": 8}, stage_ms={"s0": 1.0}), call_ms=1.25)
    assert hops.stats() == {"hop.batches.sched>s0": 1, "hop.bytes.sched>s0": 8,
                            "hop.latency_ms.sched>s0": 0.25}
