"""Drives a Scheduler the way the service shell will, playing the last shard's sampler."""

from services.scheduler.batching import Request, SampledToken, Scheduler, SchedulerConfig


class ManualClock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


# Token t reads "w{t} "; EOS (0) reads as nothing; LINE is a whole line of text.
LINE = 120
TOKEN_BYTES = tuple(b"" if t == 0 else b"same line again\n" if t == LINE else f"w{t} ".encode()
                    for t in range(128))


def small(**kw) -> SchedulerConfig:
    base = dict(num_pages=32, page_size=4, context_length=64, max_batch_tokens=16,
                max_batch_seqs=8, max_inflight=1, max_queue=16, eos_ids={0},
                token_bytes=TOKEN_BYTES)
    base.update(kw)
    return SchedulerConfig(**base)


def req(rid, n=6, max_tokens=4, first=1, **kw) -> Request:
    return Request(rid, tuple(range(first, first + n)), max_tokens, **kw)


def token_for(chunk) -> int:
    """Deterministic stand-in for the sampler: depends on seed and step, never EOS (0)."""
    return 1 + (chunk.seed * 31 + chunk.step * 7 + len(chunk.request_id)) % 97


def samples_for(plan, token=token_for):
    return {c.request_id: SampledToken(token(c)) for c in plan.chunks if c.sample}


def step(sched: Scheduler, token=token_for):
    """Schedule one batch and complete it at once; return (plan, outputs) or (None, [])."""
    plan = sched.schedule()
    if plan is None:
        return None, []
    return plan, sched.complete(plan.batch_id, samples_for(plan, token))


def run_to_end(sched: Scheduler, max_steps=10_000):
    """Step until nothing is left; return {request_id: [outputs]}."""
    outs: dict[str, list] = {}
    for _ in range(max_steps):
        plan, got = step(sched)
        for o in got:
            outs.setdefault(o.request_id, []).append(o)
        sched.check()
        if plan is None:
            break
    assert not sched.has_work(), "scheduler stalled with work left"
    return outs
