"""Batches whose result is unusable or refused: run again, alone when refused, failed only when
one request is to blame. Pure policy."""

from services.scheduler.batching import Scheduler

from .harness import req, run_to_end, samples_for, small, step


def three_in_one_batch(**kw):
    sched = Scheduler(small(**kw))
    for i, rid in enumerate("abc"):
        sched.submit(req(rid, n=5, first=10 + 20 * i, max_tokens=3))
    plan = sched.schedule()
    assert sorted(c.request_id for c in plan.chunks) == ["a", "b", "c"]
    return sched, plan


def test_a_refused_batch_of_several_runs_again_one_sequence_per_batch():
    sched, refused = three_in_one_batch(max_inflight=3)
    assert sched.refuse_batch(refused.batch_id, "bad_batch") == []
    alone = [sched.schedule() for _ in range(3)]
    assert [len(p.chunks) for p in alone] == [1, 1, 1]
    before = {c.request_id: c for c in refused.chunks}
    for plan in alone:
        (chunk,) = plan.chunks
        assert chunk == before[chunk.request_id]     # the same chunk, pages and positions
    assert sched.schedule() is None                  # all three in flight
    for plan in alone:
        sched.complete(plan.batch_id, samples_for(plan))
    together = sched.schedule()                      # having passed alone, they batch again
    assert sorted(c.request_id for c in together.chunks) == ["a", "b", "c"]
    sched.complete(together.batch_id, samples_for(together))
    outs = run_to_end(sched)
    assert all(o[-1].finish.reason == "length" for o in outs.values())


def test_a_sequence_refused_alone_fails_with_the_reason_and_the_others_go_on():
    sched, refused = three_in_one_batch()
    sched.refuse_batch(refused.batch_id, "shard-1: bad_sampling: top_p 7")
    first = sched.schedule()
    (out,) = sched.refuse_batch(first.batch_id, "shard-1: bad_sampling: top_p 7")
    assert out.request_id == first.chunks[0].request_id
    assert out.finish.reason == "failed" and "bad_sampling: top_p 7" in out.finish.detail
    outs = run_to_end(sched)
    assert sorted(outs) == sorted({"a", "b", "c"} - {out.request_id})
    assert all(o[-1].finish.reason == "length" for o in outs.values())
    assert sched.stats()["pages_used"] == 0 and sched.stats()["inflight_batches"] == 0


def test_a_sequence_refused_alone_runs_before_ready_decodes():
    sched = Scheduler(small(max_inflight=2))
    sched.submit(req("a", n=5, first=10, max_tokens=9))
    sched.submit(req("b", n=5, first=30, max_tokens=9))
    step(sched)                                       # both decode from now on
    plan = sched.schedule()
    sched.refuse_batch(plan.batch_id, "internal")
    first = sched.schedule()
    assert [c.request_id for c in first.chunks] == ["a"]
    second = sched.schedule()
    assert [c.request_id for c in second.chunks] == ["b"]


def test_unusable_results_rerun_the_batch_then_fail_its_requests_with_the_reason():
    sched = Scheduler(small(max_batch_retries=3))
    sched.submit(req("a", max_tokens=4))
    sched.submit(req("b", first=30, max_tokens=4))
    plan = sched.schedule()
    for _ in range(2):
        assert sched.retry_batch(plan.batch_id, "garbage") == []
        again = sched.schedule()
        assert again.chunks == plan.chunks
        plan = again
    failed = sched.retry_batch(plan.batch_id, "garbage")
    assert sorted(o.request_id for o in failed) == ["a", "b"]
    assert all(o.finish.reason == "failed" and "garbage (3 times in a row)" == o.finish.detail
               for o in failed)
    assert not sched.has_work() and sched.stats()["pages_used"] == 0


def test_a_good_result_resets_the_count_of_unusable_ones():
    sched = Scheduler(small(max_batch_retries=2))
    sched.submit(req("a", max_tokens=3))
    for _ in range(3):                                # one bad result before each good one
        plan = sched.schedule()
        assert sched.retry_batch(plan.batch_id, "garbage") == []
        plan = sched.schedule()
        sched.complete(plan.batch_id, samples_for(plan))
    assert not sched.has_work() and sched.stats()["finished_length"] == 1
