"""A model of llmbus's shard pipeline, from measured parts. Pure: numbers in, numbers out.

A decode micro-batch of b rows goes scheduler -> stage 1 -> ... -> stage S -> scheduler: each
stage runs its layers and the last the head; each of the S + 1 hops costs half the round trip,
the bytes over the link's rate, and the software of its two ends (a stage's CPU spends it beside
its compute). With M micro-batches in flight, each sequence gets one token per cycle, and a cycle
lasts at least one micro-batch's round trip and at least what the busiest stage must do for all
M; where every host shares one CPU (the namespace hosts of bench/rpc_compare.py on one machine)
the stages' work together bounds it too: a stage alone keeps a share u of that CPU busy (its
threads over the cores, at most 1: u = 1 where one stage's threads fill the machine, and two
stages at once only contend):

    rate(C) = C / max(T(b), M * max_s t_s(b))                          each host its own CPU
    rate(C) = C / max(T(b), M * max_s t_s(b), M * u * sum_s t_s(b))    hosts sharing one CPU
    t_s(b) = compute_s(b) + sw,    T(b) = sum_s t_s(b) + sw + (S + 1) * hop(b) + step,    b = C / M

The time to first token is one prefill of the prompt through every stage, the head for its last
row, and the S + 1 hops with the prompt's activations and their software.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Costs:
    """One host's measured costs, in seconds, for one model shape."""
    layer_decode: dict[int, float]      # rows (one token of each of b sequences) -> per layer
    layer_prefill: dict[int, float]     # tokens of one sequence's chunk -> per layer
    head: dict[int, float]              # rows -> output norm, head and greedy sampling
    hop_overhead: float                 # software of one hop, both ends (loopback)
    step_overhead: float                # the scheduler's per micro-batch (plan, send, results)
    d_model: int
    n_layers: int
    codec_bytes: float = 2.0            # fp16 activations between stages
    header_bytes: int = 600             # a Forward's header and envelope

    @staticmethod
    def from_json(d: dict) -> "Costs":
        """From `measure`'s JSON; a key that is no field (older parts files' thread_gain) is left out."""
        tables = {k: {int(x): float(y) for x, y in d[k].items()}
                  for k in ("layer_decode", "layer_prefill", "head")}
        known = {f.name for f in fields(Costs)}
        return Costs(**{k: v for k, v in {**d, **tables}.items() if k in known})


@dataclass(frozen=True)
class Link:
    rtt_s: float
    bytes_per_s: float

    def hop(self, payload_bytes: float) -> float:
        return self.rtt_s / 2 + payload_bytes / self.bytes_per_s


@dataclass(frozen=True)
class Pipeline:
    costs: Costs
    link: Link
    stages: tuple[int, ...]             # layers of each host, in order
    cpu_share: float | None = None      # hosts sharing one CPU: the share a stage alone keeps busy

    def stage_compute(self, rows: float) -> list[float]:
        """Each stage's compute for one micro-batch of `rows` decode rows."""
        c = self.costs
        t = [n * at(c.layer_decode, rows) for n in self.stages]
        t[-1] += at(c.head, rows)
        return t

    def hop_s(self, rows: float) -> float:
        """A hop's time on the wire for `rows` activations (its software apart)."""
        c = self.costs
        return self.link.hop(rows * c.d_model * c.codec_bytes + c.header_bytes)

    def cycle(self, compute: list[float], rows: float, inflight: float) -> float:
        """Seconds for one token of every sequence, given each stage's compute per micro-batch."""
        c = self.costs
        busy = [x + c.hop_overhead for x in compute]
        trip = sum(busy) + c.hop_overhead + (len(compute) + 1) * self.hop_s(rows) + c.step_overhead
        most = inflight * max(busy)
        if self.cpu_share is not None:
            most = max(most, inflight * self.cpu_share * sum(busy))
        return max(trip, most)

    def round_trip(self, rows: float) -> float:
        return self.cycle(self.stage_compute(rows), rows, 1.0)

    def decode_rate(self, concurrency: int, inflight: float) -> float:
        """Tokens/s of `concurrency` sequences decoding in `inflight` micro-batches."""
        m = max(1.0, min(float(inflight), float(concurrency)))
        rows = concurrency / m
        return concurrency / self.cycle(self.stage_compute(rows), rows, m)

    def best_inflight(self, concurrency: int, share: float = 0.97) -> tuple[int, float]:
        """The fewest micro-batches in flight that reach `share` of the best rate, and that rate."""
        rates = [(m, self.decode_rate(concurrency, m)) for m in range(1, concurrency + 1)]
        top = max(r for _, r in rates)
        return next((m, r) for m, r in rates if r >= share * top)

    def first_token(self, compute: float, prompt_tokens: int) -> float:
        """Seconds to the first token, given the prefill's compute over every stage and the head."""
        c = self.costs
        hops = (len(self.stages) + 1) * (self.hop_s(prompt_tokens) + c.hop_overhead)
        return compute + hops + c.step_overhead

    def ttft(self, prompt_tokens: int) -> float:
        c = self.costs
        compute = sum(n * at(c.layer_prefill, prompt_tokens) for n in self.stages) + at(c.head, 1)
        return self.first_token(compute, prompt_tokens)


def at(table: dict[int, float], x: float) -> float:
    """Piecewise-linear in x through the measured points; straight on past the last two."""
    xs = sorted(table)
    if len(xs) == 1:
        return table[xs[0]] * x / xs[0]
    i = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1)
    x0, x1 = xs[i - 1], xs[i]
    return table[x0] + (table[x1] - table[x0]) * (x - x0) / (x1 - x0)


def even_stages(n_layers: int, hosts: int) -> tuple[int, ...]:
    """n_layers cut into `hosts` contiguous ranges as even as they go (at most one layer each
    when there are more hosts than layers: the rest hold none and are left out)."""
    hosts = min(hosts, n_layers)
    q, r = divmod(n_layers, hosts)
    return tuple(q + (1 if i < r else 0) for i in range(hosts))
