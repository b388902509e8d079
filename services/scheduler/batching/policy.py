"""The scheduler policy: requests in, micro-batches out, sampled tokens back in. Pure: no I/O."""

import bisect
import dataclasses
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping

from wire.failures import BAD_REPLY, DEADLINE, INTERNAL, SAMPLING_FAILED

from .admission import Admission, validate
from services.tokenizer.stream import IncrementalDecoder

from .batches import MicroBatch, Draft, Output, SampledToken, SeqChunk, check_samples
from .client_text import ClientText
from .config import SchedulerConfig
from .errors import BadCompletion, DuplicateRequest, QueueFull, UnknownBatch
from .kv import KVManager
from .loop_detect import LineLoopDetector, PhraseLoopDetector
from .pacing import StepCost, prefill_budget
from .sequence import Request, Sequence, Status
from .stop_rules import Finish, StopState
from .throughput import Throughput


def pool_of_chunk(pooling: str, start: int, last: bool) -> str:
    """What the last shard pools of an embedding's chunk: every chunk's sum for a mean, the last
    chunk's last row, the first chunk's first row (cls); "" for generation, or a chunk whose
    rows its pooling does not read."""
    if pooling == "mean":
        return "sum"
    if pooling == "last":
        return "last" if last else ""
    if pooling == "cls":
        return "first" if start == 0 else ""
    return ""


class Scheduler:
    """Admission, priorities, continuous batching, KV pages and stop rules of every request."""

    def __init__(self, config: SchedulerConfig, clock: Callable[[], float] = time.monotonic,
                 arrivals: Iterator[int] | None = None):
        self.config = config
        self.clock = clock
        self.kv = KVManager(self.config.num_pages, self.config.page_size)
        self._seqs: dict[str, Sequence] = {}          # every unfinished request
        self._waiting: list[Sequence] = []            # sorted by Sequence.key
        self._running: dict[str, Sequence] = {}       # hold KV pages
        self._inflight: dict[int, dict[str, SeqChunk]] = {}
        self._batch_ids = itertools.count(1)
        # Shared by the policies of replica pipelines: a sequence moved from one to another keeps
        # its place in the order of arrival.
        self._arrivals = arrivals if arrivals is not None else itertools.count()
        self._throughput = Throughput(self.config.throughput_window_s)
        self._step_cost = StepCost(self.config.pace_window)
        self._counts: Counter[str] = Counter()

    # ---- requests -------------------------------------------------------------------------

    def submit(self, request: Request) -> Admission:
        """Queue a request, or raise a BadRequest subclass / QueueFull(retry_after)."""
        terms = validate(request, self.config)
        if request.request_id in self._seqs:
            raise DuplicateRequest(f"request {request.request_id!r} is already running")
        if len(self._waiting) >= self.config.max_queue:
            self._counts["refused_queue_full"] += 1
            raise QueueFull(self.retry_after(), len(self._waiting))
        cfg = self.config
        # An answer a grammar holds is bounded by it, not cut by the loop stops (Request.held).
        loop = (None if request.held else
                LineLoopDetector(cfg.loop_repeats, cfg.loop_window, cfg.loop_min_chars))
        phrase = (PhraseLoopDetector(cfg.phrase_repeats, cfg.phrase_max_tokens, cfg.loop_min_chars)
                  if cfg.phrase_repeats > 0 and not request.held else None)
        stop = StopState(max_tokens=terms.max_tokens, stop=tuple(request.stop),
                         eos_ids=cfg.eos_ids, loop=loop, phrase=phrase)
        text = ClientText(IncrementalDecoder(cfg.token_bytes), stop)
        # A continuation's tokens go through its text as they did under the lost scheduler, so
        # the bytes of an unfinished character and the text a stop string may still claim are
        # held as they were: its client sees the rest, nothing twice and nothing lost.
        for token_id in request.generated:
            _, finish = text.accept(token_id)
            if finish is not None:
                self._counts["continued_finished"] += 1
                return dataclasses.replace(terms, finished=finish)
        if request.generated:
            self._counts["continued"] += 1
        deadline = None if request.deadline_s is None else self.clock() + request.deadline_s
        seq = Sequence(request, terms.max_tokens, next(self._arrivals), text, deadline)
        seq.submitted_at = self.clock()
        # A continuation's client is paused mid-answer, as after a shard loss: it comes back at
        # the pace of recoveries.
        seq.refilling = bool(request.generated)
        self._seqs[seq.request_id] = seq
        self._enqueue(seq)
        self._counts["submitted"] += 1
        return terms

    def cancel(self, request_id: str) -> Output | None:
        """End a request now and free its pages; None if it already finished."""
        return self._end(request_id, Finish("cancelled"))

    def fail(self, request_id: str, reason: str, code: str = INTERNAL) -> Output | None:
        """End a request as failed with `reason` and failure `code`; None if it already finished."""
        return self._end(request_id, Finish("failed", detail=reason, code=code))

    def expire(self) -> list[Output]:
        """End every request whose deadline has passed, failed with code `deadline`."""
        now = self.clock()
        late = [s for s in self._seqs.values() if s.deadline is not None and s.deadline <= now]
        return [self._end(s.request_id, Finish("failed", detail=(
            f"deadline: {s.request.deadline_s:.3g} s passed with {s.num_generated} of "
            f"{s.max_tokens} tokens generated"), code=DEADLINE)) for s in late]

    def next_deadline(self) -> float | None:
        """The earliest deadline of an unfinished request (policy clock), None if none has one."""
        return min((s.deadline for s in self._seqs.values() if s.deadline is not None), default=None)

    def retry_after(self) -> float:
        """Seconds until the queue has likely drained: queued tokens over recent throughput."""
        cfg = self.config
        queued = sum(s.remaining + s.max_tokens - s.num_generated for s in self._waiting)
        rate = self._throughput.rate(self.clock()) or cfg.assumed_tokens_per_s
        return min(max(queued / rate, cfg.retry_after_min_s), cfg.retry_after_max_s)

    # ---- micro-batches --------------------------------------------------------------------

    def schedule(self) -> MicroBatch | None:
        """Plan the next micro-batch and mark its sequences busy; None if nothing can run now."""
        cfg = self.config
        if len(self._inflight) >= cfg.max_inflight:
            return None
        draft = Draft(cfg.max_batch_tokens, cfg.max_batch_seqs)
        preempted: set[str] = set()
        ready = sorted((s for s in self._running.values() if not s.busy), key=lambda s: s.key)
        alone = min((s for s in itertools.chain(ready, self._waiting) if s.solo),
                    key=lambda s: s.key, default=None)
        if alone is not None and self._add_alone(alone, draft, preempted):
            return self._launch(draft)
        # Sequences interrupted by a loss come back oldest first, `max_refill_tokens` a batch,
        # so the first of them stream again after a small batch instead of all after a full one.
        refill = cfg.max_refill_tokens
        # Decode tokens first: one token each keeps streaming latency low.
        for seq in ready:
            if draft.full():
                break
            if seq.remaining != 1 or seq.status is not Status.RUNNING or seq.solo:
                continue  # prefilling, preempted, or runs alone
            if self._fit(seq, 1, draft, preempted):
                draft.add(seq, 1)
                refill -= seq.refilling      # the last token of a re-prefill
        # Then prefill chunks: running prefills and waiting requests, by priority then arrival,
        # paced while any stream decodes or a first token is on its way. A stream paused by a
        # loss comes back at the pace of recoveries alone: its pause is the stall that pacing
        # keeps from the streams already decoding, and cutting its chunks further only makes
        # the last paused stream wait longer.
        prefills = [s for s in ready if s.remaining > 1]
        paced = draft.budget
        if prefills or self._waiting:   # the fit costs ~0.1 ms: not for a batch of decodes only
            paced = self._prefill_budget(len(draft.parts), draft.budget)
        for seq in sorted(prefills + self._waiting, key=lambda s: s.key):
            if draft.full():
                break
            if seq.request_id in preempted:
                continue
            if seq.solo or (seq.refilling and refill <= 0):
                if seq.status is Status.WAITING:
                    break  # FIFO, as for any request that could not be admitted
                continue
            cap = refill if seq.refilling else max(paced, 0)
            if seq.status is Status.WAITING:
                if not self._admit(seq, draft, preempted, cap):
                    break  # FIFO: a later request does not jump a blocked earlier one
            elif seq.status is Status.RUNNING:
                n = self._fit(seq, min(seq.remaining, draft.budget, cap), draft, preempted)
                if n:
                    draft.add(seq, n)
            if seq.request_id in draft.parts:     # (what a recovery takes counts in the step)
                paced -= draft.parts[seq.request_id][1]
                if seq.refilling:
                    refill -= draft.parts[seq.request_id][1]
        if not draft.parts:
            return None
        return self._launch(draft)

    def complete(self, batch_id: int, samples: Mapping[str, SampledToken],
                 failures: Mapping[str, str] | None = None) -> list[Output]:
        """Apply a returned micro-batch: per sampling chunk, its SampledToken or, where its row
        failed on the last shard, the reason (that request ends failed). Returns what to stream."""
        failures = failures or {}
        chunks = self._inflight.get(batch_id)
        if chunks is None:
            raise UnknownBatch(f"batch {batch_id} is not in flight")
        attached = {rid: c for rid, c in chunks.items() if self._holds(rid, batch_id)}
        check_samples(batch_id, chunks, attached, samples, failures)
        vocab = len(self.config.token_bytes)
        if bad := {rid: s.token_id for rid, s in samples.items() if s.token_id >= vocab}:
            raise BadCompletion(f"batch {batch_id}: token ids {bad} are past the vocabulary ({vocab})")
        del self._inflight[batch_id]
        outputs = []
        done = 0
        for rid, chunk in attached.items():
            done += len(chunk.token_ids)
            if rid in failures:
                outputs.append(self._end(rid, Finish("failed", detail=failures[rid],
                                                     code=SAMPLING_FAILED)))
                continue
            seq = self._seqs[rid]
            seq.busy_batch = None
            seq.solo, seq.retries = False, 0
            seq.num_computed = chunk.start + len(chunk.token_ids)
            self.kv.register_full_pages(seq)
            if seq.request.pooling and seq.num_computed == len(seq.tokens):
                finish = Finish("stop")   # an embedding: its pooled states came with this batch
                self._finish(seq, finish)
                outputs.append(Output(rid, None, "", finish))
            elif chunk.sample:
                seq.refilling = False    # its whole history is back on the shards
                s = samples[rid]
                seq.tokens.append(s.token_id)
                text, finish = seq.text.accept(s.token_id)
                if finish is not None:
                    self._finish(seq, finish)
                outputs.append(Output(rid, s.token_id, text, finish, s.logprob))
        self._throughput.record(self.clock(), done)
        self._counts["tokens_computed"] += done
        return outputs

    def force(self, request_id: str, token_ids: list[int]) -> list[Output]:
        """Tokens a request's grammar forces after its last sampled one, taken as generated
        without a draw each: its next batch computes them as one prefill chunk and samples after
        them. Each goes through the stop rules as a drawn token would (max_tokens and stop
        strings end it among them); their logprob is 0 (the only token the grammar allowed).
        Returns what to stream; nothing for a request that is not waiting for its next step."""
        seq = self._seqs.get(request_id)
        if seq is None or seq.busy or seq.status is not Status.RUNNING:
            return []
        out = []
        for t in token_ids:
            seq.tokens.append(int(t))
            text, finish = seq.text.accept(int(t))
            out.append(Output(request_id, int(t), text, finish, 0.0))
            if finish is not None:
                self._finish(seq, finish)
                break
        self._counts["tokens_forced"] += len(out)
        return out

    def record_step(self, seconds_by_shard: Mapping[str, float], tokens: int) -> None:
        """A batch of `tokens` took these compute seconds on each shard: what pacing predicts from."""
        self._step_cost.record(seconds_by_shard, tokens)

    def abort_batch(self, batch_id: int) -> None:
        """A batch was lost but shard KV is intact: its sequences run the same chunk again."""
        self._abort(batch_id)

    def retry_batch(self, batch_id: int, reason: str) -> list[Output]:
        """A batch's result was unusable: its sequences run the same chunk again, except one whose
        results were unusable `max_batch_retries` times in a row: it fails with `reason`.
        Returns those failures."""
        failed = []
        for seq in self._abort(batch_id):
            seq.retries += 1
            if seq.retries >= self.config.max_batch_retries:
                failed.append(self._end(seq.request_id, Finish(
                    "failed", detail=f"{reason} ({seq.retries} times in a row)", code=BAD_REPLY)))
        self._counts["batches_retried"] += 1
        return failed

    def refuse_batch(self, batch_id: int, reason: str, code: str = INTERNAL) -> list[Output]:
        """The shards refused a batch as a whole, naming no row: with several sequences, each
        runs its chunk again in a batch of its own; a sequence refused alone fails with `reason`
        and the shards' failure `code`. Returns that failure."""
        held = self._abort(batch_id)
        if len(held) == 1:
            return [self._end(held[0].request_id, Finish("failed", detail=reason, code=code))]
        for seq in held:
            seq.solo = True
        self._counts["batches_split"] += 1
        return []

    # ---- recovery -------------------------------------------------------------------------

    def reset_sequence(self, request_id: str) -> None:
        """This sequence's KV is gone: re-prefill it later from prompt + generated tokens."""
        seq = self._seqs.get(request_id)
        if seq is not None and seq.status is not Status.WAITING:
            self._requeue_after_loss(seq)

    def reset_for_recovery(self) -> None:
        """A shard lost its KV (restart): drop every batch in flight and all cached pages; every
        sequence that held KV is re-prefilled later. No request fails for it: how long a request
        may wait for its pipeline is the driver's time budget, not a count of losses."""
        self._inflight.clear()
        for seq in list(self._running.values()):
            self._requeue_after_loss(seq)
        self.kv.drop_cache()
        self._counts["recoveries"] += 1

    def evacuate(self) -> list[Sequence]:
        """This pipeline is lost for good: hand over every unfinished sequence (each to be
        re-prefilled from prompt + generated tokens wherever it is adopted) and forget them."""
        self._inflight.clear()
        moved = list(self._seqs.values())
        for seq in moved:
            if seq.status is Status.RUNNING:
                self._requeue_after_loss(seq)
        self._waiting.clear()
        self._seqs.clear()
        self.kv.drop_cache()
        self._counts["moved_out"] += len(moved)
        return moved

    def adopt(self, seq: Sequence) -> None:
        """Take over a sequence another pipeline's policy evacuated: it is prefilled again here
        (at the pace of recoveries if it held KV there). The queue's cap does not apply: it was
        admitted already."""
        if seq.request_id in self._seqs:
            raise DuplicateRequest(f"request {seq.request_id!r} is already running")
        seq.num_computed = seq.num_cached = 0
        seq.pages, seq.page_keys = [], []
        seq.busy_batch, seq.status = None, Status.WAITING
        self._seqs[seq.request_id] = seq
        self._enqueue(seq)
        self._counts["moved_in"] += 1

    def fail_all(self, reason: str, code: str = INTERNAL) -> list[Output]:
        """End every unfinished request as failed with `reason` and `code` (its pipeline is not
        coming back)."""
        self._inflight.clear()
        return [o for rid in list(self._seqs) if (o := self.fail(rid, reason, code)) is not None]

    def _requeue_after_loss(self, seq: Sequence) -> None:
        seq.busy_batch = None  # its in-flight result, if it ever comes, is ignored
        seq.refilling = True
        self._preempt(seq)

    # ---- introspection --------------------------------------------------------------------

    def is_tracked(self, request_id: str) -> bool:
        return request_id in self._seqs

    def holds(self, request_id: str, batch_id: int) -> bool:
        """Whether the batch in flight still carries this request's chunk (a request reset or
        ended meanwhile runs its chunk again, or not at all: what the batch brings is stale)."""
        return self._holds(request_id, batch_id)

    def history(self, request_id: str) -> list[int]:
        """Every token the sequence has seen, prompt then generated: what penalties count."""
        return list(self._seqs[request_id].tokens)

    def generated(self, request_id: str) -> list[int]:
        """The tokens the sequence has generated so far (what its grammar follows)."""
        seq = self._seqs[request_id]
        return seq.tokens[seq.prompt_len:]

    @property
    def load(self) -> int:
        """Unfinished requests: what spreading requests over replica pipelines compares."""
        return len(self._seqs)

    def has_work(self) -> bool:
        return bool(self._seqs)

    @property
    def inflight(self) -> tuple[int, ...]:
        return tuple(self._inflight)

    def stats(self) -> dict[str, float]:
        pool, cache, c = self.kv.pool, self.kv.cache, self._counts
        used = sum(1 for r in pool.refcount if r > 0)
        queried = c["prefix_query_tokens"]
        rate = self._throughput.rate(self.clock())
        return {
            "pages_total": pool.num_pages, "pages_used": used, "pages_free": pool.num_free,
            "pages_cached": cache.num_indexed, "pages_evictable": cache.num_evictable,
            "page_use": used / pool.num_pages,
            "prefix_query_tokens": queried, "prefix_hit_tokens": c["prefix_hit_tokens"],
            "prefix_hit_rate": c["prefix_hit_tokens"] / queried if queried else 0.0,
            "waiting": len(self._waiting), "running": len(self._running),
            "inflight_batches": len(self._inflight), "tokens_per_s": rate or 0.0,
            **{k: v for k, v in c.items() if k not in ("prefix_query_tokens", "prefix_hit_tokens")},
        }

    def check(self) -> None:
        """Assert internal consistency (tests and debugging)."""
        self.kv.check(self._seqs.values())
        assert set(self._running) | {s.request_id for s in self._waiting} == set(self._seqs)
        assert not set(self._running) & {s.request_id for s in self._waiting}
        for seq in self._waiting:
            assert not seq.pages and not seq.busy and seq.status is Status.WAITING, seq
        for seq in self._running.values():
            assert seq.status is Status.RUNNING, seq
            assert seq.num_computed <= len(seq.pages) * self.kv.page_size, seq
            assert seq.busy_batch is None or seq.busy_batch in self._inflight, seq

    # ---- internals ------------------------------------------------------------------------

    def _admit(self, seq: Sequence, draft: Draft, preempted: set[str],
               cap: int | None = None) -> bool:
        # An embedding pools every one of its tokens' hidden states: none may come from the cache.
        hit = 0 if seq.request.pooling else self.kv.match_prefix(seq)
        n = self._fit(seq, min(seq.remaining, draft.budget, draft.budget if cap is None else cap),
                      draft, preempted)
        if n == 0:
            self.kv.release(seq)
            return False
        self._counts["prefix_query_tokens"] += len(seq.tokens)
        self._counts["prefix_hit_tokens"] += hit
        self._waiting.remove(seq)
        self._running[seq.request_id] = seq
        seq.status = Status.RUNNING
        draft.add(seq, n)
        return True

    def _add_alone(self, seq: Sequence, draft: Draft, preempted: set[str]) -> bool:
        """Put `seq` in the empty draft as its only sequence; False if its pages do not fit."""
        if seq.status is Status.WAITING:
            return self._admit(seq, draft, preempted)
        n = self._fit(seq, min(seq.remaining, draft.budget), draft, preempted)
        if n:
            draft.add(seq, n)
        return n > 0

    def _prefill_budget(self, decodes: int, budget: int) -> int:
        cfg = self.config
        # A stream decodes once it has a token and its whole history is computed (a sequence being
        # re-prefilled after a loss is prefill, not a pace to keep), or once a batch in flight
        # brings the token it samples: a first token on its way streams before this batch is done.
        out = [c for chunks in self._inflight.values() for c in chunks.values()]
        if not any(s.num_generated and s.remaining == 1 for s in self._running.values()) and \
                not any(c.sample for c in out):
            return budget
        first_token = [s.submitted_at for s in itertools.chain(self._waiting, self._running.values())
                       if not s.num_generated]
        waited = self.clock() - min(first_token) if first_token else 0.0
        # A stream's next token waits for the batches already in flight too (their shards run
        # them first): the prefill they carry counts against this step's time.
        in_flight = sum(len(c.token_ids) for c in out if len(c.token_ids) > 1)
        return prefill_budget(self._step_cost.estimate(), decodes, budget, cfg.pace_step_s,
                              cfg.pace_min_chunk, waited, cfg.pace_max_wait_s, in_flight)

    def _fit(self, seq: Sequence, want: int, draft: Draft, preempted: set[str]) -> int:
        """Grow `seq`'s pages for up to `want` more tokens, preempting later sequences if needed;
        return how many tokens fit."""
        P = self.kv.page_size
        need = -(-(seq.num_computed + want) // P) - len(seq.pages)
        if need > self.kv.available():
            victims = sorted((v for v in self._running.values()
                              if v.key > seq.key and not v.busy), key=lambda v: v.key, reverse=True)
            for victim in victims:
                if self.kv.available() >= need:
                    break
                if victim.request_id in draft.parts:
                    draft.drop(victim)
                self._preempt(victim)
                preempted.add(victim.request_id)
                self._counts["preemptions"] += 1
        if need > 0:
            self.kv.grow(seq, min(need, self.kv.available()))
        return max(0, min(want, len(seq.pages) * P - seq.num_computed))

    def _launch(self, draft: Draft) -> MicroBatch:
        batch_id = next(self._batch_ids)
        chunks = {}
        for rid, (seq, n) in draft.parts.items():
            start = seq.num_computed
            last = start + n == len(seq.tokens)
            pooling = seq.request.pooling
            chunks[rid] = SeqChunk(rid, tuple(seq.tokens[start:start + n]), start, seq.num_cached,
                                   tuple(seq.pages), last and not pooling,
                                   seq.request.seed, seq.num_generated,
                                   pool_of_chunk(pooling, start, last))
            seq.busy_batch = batch_id
            if seq.first_scheduled_at is None:   # queue time: from admission to its first batch
                seq.first_scheduled_at = self.clock()
                self._counts["queue_time_s"] += seq.first_scheduled_at - seq.submitted_at
                self._counts["queue_time_count"] += 1
        if not self._inflight:  # the pipeline was idle: its idle time must not dilute the rate
            self._throughput.started(self.clock())
        self._inflight[batch_id] = chunks
        self._counts["batches"] += 1
        return MicroBatch(batch_id, self.kv.page_size, tuple(chunks.values()))

    def _preempt(self, seq: Sequence) -> None:
        """Free the pages of a running sequence and queue it to be prefilled again."""
        self.kv.release(seq)
        del self._running[seq.request_id]
        seq.status = Status.WAITING
        self._enqueue(seq)

    def _enqueue(self, seq: Sequence) -> None:
        bisect.insort(self._waiting, seq, key=lambda s: s.key)

    def _abort(self, batch_id: int) -> list[Sequence]:
        """Drop a batch from flight; return the sequences it still held, now free to run again
        (KV writes of a chunk run twice are the same writes)."""
        chunks = self._inflight.pop(batch_id, None)
        if chunks is None:
            raise UnknownBatch(f"batch {batch_id} is not in flight")
        held = [self._seqs[rid] for rid in chunks if self._holds(rid, batch_id)]
        for seq in held:
            seq.busy_batch = None
        self._counts["batches_aborted"] += 1
        return held

    def _holds(self, request_id: str, batch_id: int) -> bool:
        seq = self._seqs.get(request_id)
        return seq is not None and seq.busy_batch == batch_id

    def _end(self, request_id: str, finish: Finish) -> Output | None:
        seq = self._seqs.get(request_id)
        if seq is None:
            return None
        self._finish(seq, finish)
        return Output(request_id, None, "", finish)

    def _finish(self, seq: Sequence, finish: Finish) -> None:
        # Pages free at once even if a batch with this sequence is in flight: shards run batches
        # in order, so that batch writes these pages before any later owner's batch does.
        self.kv.release(seq)
        if seq.status is Status.RUNNING:
            del self._running[seq.request_id]
        else:
            self._waiting.remove(seq)
        seq.status = Status.FINISHED
        seq.busy_batch = None
        del self._seqs[seq.request_id]
        self._counts[f"finished_{finish.reason}"] += 1
