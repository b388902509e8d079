"""Re-prefill after a loss: interrupted sequences come back oldest first, `max_refill_tokens` a
batch, beside the decodes of those already back, and go on exactly as undisturbed."""

from services.scheduler.batching import Scheduler

from .harness import req, run_to_end, samples_for, small, step

REQUESTS = {"a": 10, "b": 30, "c": 50, "d": 70}          # id -> first prompt token, in arrival order


def stack(**config) -> Scheduler:
    sched = Scheduler(small(max_batch_tokens=32, max_refill_tokens=8, **config))
    for rid, first in REQUESTS.items():
        sched.submit(req(rid, n=6, first=first, max_tokens=10))
    return sched


def tokens(outs) -> dict[str, list[int]]:
    return {rid: [o.token_id for o in got if o.token_id is not None] for rid, got in outs.items()}


def test_interrupted_sequences_come_back_oldest_first_a_few_tokens_a_batch_beside_decodes():
    undisturbed = tokens(run_to_end(stack()))
    sched = stack()
    before: dict[str, list] = {}
    for _ in range(3):                                 # prefill, then two decodes: 8 tokens each
        _, got = step(sched)
        for o in got:
            before.setdefault(o.request_id, []).append(o)
    sched.reset_for_recovery()
    sched.submit(req("late", n=6, first=90, max_tokens=3))   # arrives after the loss
    back, plans = [], []
    while len(back) < len(REQUESTS):
        plan, got = step(sched)
        plans.append(plan)
        ids = {c.request_id: len(c.token_ids) for c in plan.chunks}
        refill = {rid: n for rid, n in ids.items() if rid in REQUESTS and rid not in back}
        assert sum(refill.values()) <= 8, plan           # the re-prefill pace, not the full budget
        assert {rid: ids.get(rid) for rid in back} == {rid: 1 for rid in back}, plan  # decodes
        if "late" in ids:                               # no newcomer jumps an interrupted one
            assert "d" in ids or any("d" in (c.request_id for c in p.chunks) for p in plans[:-1])
        back += [o.request_id for o in got if o.request_id in REQUESTS and o.request_id not in back]
        for o in got:
            before.setdefault(o.request_id, []).append(o)
        sched.check()
    assert back == list(REQUESTS)                       # oldest first
    assert len(plans) > 2 and sum(len(c.token_ids) for c in plans[0].chunks) == 8
    rest = run_to_end(sched)
    for rid, outs in rest.items():
        before.setdefault(rid, []).extend(outs)
    got = tokens(before)
    assert {rid: got[rid] for rid in REQUESTS} == undisturbed


def test_without_a_loss_prefills_take_the_whole_budget():
    sched = stack()
    plan, _ = step(sched)
    assert sum(len(c.token_ids) for c in plan.chunks) == 24   # four prompts of 6: no pace
