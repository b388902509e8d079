"""Property: under any sequence of events no request is dropped and no page leaks or is freed twice."""

from collections import Counter

from hypothesis import event, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from services.scheduler.batching import PromptTooLong, QueueFull, Request, SampledToken, Scheduler, SchedulerConfig

from .harness import TOKEN_BYTES, run_to_end

SYSTEM = (7, 8, 7, 8, 5, 5, 5, 5)   # a shared "system prompt": two full pages
PIECES = ["a", "b", "\n", "STOP", "ST", "OP", "line that repeats\n", ""]


class SchedulerEvents(RuleBasedStateMachine):
    @initialize(pages=st.integers(6, 14), budget=st.integers(1, 24), inflight=st.integers(1, 3),
                seqs=st.integers(1, 6))
    def build(self, pages, budget, inflight, seqs):
        self.sched = Scheduler(SchedulerConfig(
            num_pages=pages, page_size=4, context_length=24, max_batch_tokens=budget,
            max_batch_seqs=seqs, max_inflight=inflight, max_queue=6, eos_ids={0},
            loop_repeats=2, loop_window=4, loop_min_chars=5,
            token_bytes=tuple(p.encode() for p in PIECES) + TOKEN_BYTES[len(PIECES):]))
        self.submitted: list[str] = []
        self.finishes: Counter[str] = Counter()
        self.plans = []

    def _record(self, outputs):
        for o in outputs:
            if o.finish is not None:
                self.finishes[o.request_id] += 1

    @rule(shared=st.sampled_from([(), SYSTEM, SYSTEM + (9, 9, 9, 9)]),
          suffix=st.lists(st.integers(1, 3), min_size=1, max_size=14),
          max_tokens=st.integers(1, 30), priority=st.sampled_from(["high", "normal", "low"]),
          stop=st.sampled_from([(), ("STOP",)]))
    def submit(self, shared, suffix, max_tokens, priority, stop):
        prompt = shared + tuple(suffix)
        rid = f"r{len(self.submitted)}"
        try:
            self.sched.submit(Request(rid, tuple(prompt), max_tokens, priority, stop))
        except QueueFull as e:
            assert e.retry_after > 0 and not self.sched.is_tracked(rid)
            return
        except PromptTooLong:
            assert len(prompt) >= 24 and not self.sched.is_tracked(rid)
            return
        self.submitted.append(rid)

    @rule()
    def schedule(self):
        plan = self.sched.schedule()
        if plan is not None:
            for c in plan.chunks:
                assert len(c.page_table) * 4 >= c.start + len(c.token_ids)
                assert 0 < len(c.token_ids) and c.start >= c.cached
            self.plans.append(plan)

    @precondition(lambda self: self.plans)
    @rule(which=st.integers(0, 2), data=st.data())
    def complete(self, which, data):
        plan = self.plans.pop(which % len(self.plans))
        # Token t reads PIECES[t]; 0 is also EOS.
        samples = {c.request_id: SampledToken(data.draw(st.integers(0, len(PIECES) - 1)))
                   for c in plan.chunks if c.sample}
        if plan.batch_id in self.sched.inflight:
            self._record(self.sched.complete(plan.batch_id, samples))

    @precondition(lambda self: self.plans)
    @rule(how=st.sampled_from(["abort", "retry", "refuse"]))
    def abort_oldest(self, how):
        plan = self.plans.pop(0)
        if plan.batch_id not in self.sched.inflight:
            return
        if how == "abort":
            self.sched.abort_batch(plan.batch_id)
        elif how == "retry":
            self._record(self.sched.retry_batch(plan.batch_id, "test"))
        else:
            self._record(self.sched.refuse_batch(plan.batch_id, "test"))

    @precondition(lambda self: self.submitted)
    @rule(i=st.integers(0, 100), how=st.sampled_from(["cancel", "fail", "reset"]))
    def end_or_reset(self, i, how):
        rid = self.submitted[i % len(self.submitted)]
        if how == "cancel":
            out = self.sched.cancel(rid)
        elif how == "fail":
            out = self.sched.fail(rid, "test")
        else:
            self.sched.reset_sequence(rid)
            out = None
        self._record([out] if out else [])

    @rule()
    def shard_failure(self):
        self.sched.reset_for_recovery()
        self.plans.clear()

    @precondition(lambda self: self.submitted)
    @rule()
    def pipeline_gone_for_good(self):
        self._record(self.sched.fail_all("test: layers unserved past the budget"))
        self.plans.clear()

    @invariant()
    def every_request_is_finished_once_or_still_tracked(self):
        self.sched.check()
        for rid in self.submitted:
            assert self.finishes[rid] + self.sched.is_tracked(rid) == 1, rid

    def teardown(self):
        # From any reachable state, the requests left all finish and every page comes back.
        for plan in self.plans:
            if plan.batch_id in self.sched.inflight:
                self.sched.abort_batch(plan.batch_id)
        for rid, outs in run_to_end(self.sched).items():
            self._record(outs)
        assert all(self.finishes[rid] == 1 for rid in self.submitted)
        stats = self.sched.stats()
        event(f"preemptions: {min(stats.get('preemptions', 0), 3)}")
        event(f"prefix hits: {stats['prefix_hit_tokens'] > 0}")
        assert stats["pages_used"] == 0
        assert stats["pages_free"] + stats["pages_evictable"] == stats["pages_total"]


SchedulerEvents.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                             deadline=None)
test_no_request_dropped_no_page_leaked = SchedulerEvents.TestCase
