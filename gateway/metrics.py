"""Prometheus series of the gateway (its own registry, no globals): requests by protocol and
status, tokens and latencies of every generation it relays, and at each scrape what the
scheduler's stats say (running, waiting, KV page use, prefix hits, time per shard, queue time,
bytes and latency of each shard hop)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.core import CounterMetricFamily, SummaryMetricFamily

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_GAP = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56)

CONTENT_TYPE = CONTENT_TYPE_LATEST

# scheduler.stats key -> (gauge name, help)
_SCHEDULER_GAUGES = {
    "running": ("num_requests_running", "requests in the shard pipeline"),
    "waiting": ("num_requests_waiting", "requests waiting for admission"),
    "page_use": ("kv_cache_usage_perc", "share of KV pages in use (0..1)"),
    "prefix_hit_rate": ("prefix_cache_hit_rate", "share of prompt tokens found in the prefix cache"),
    "tokens_per_s": ("generation_tokens_per_second", "tokens the scheduler produces per second"),
}


class Metrics:
    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.requests = Counter("llmbus_http_requests", "HTTP requests answered",
                                ["protocol", "endpoint", "status"], registry=r)
        self.prompt_tokens = Counter("llmbus_prompt_tokens", "prompt tokens of finished requests",
                                     registry=r)
        self.generation_tokens = Counter("llmbus_generation_tokens",
                                         "tokens generated for finished requests", registry=r)
        self.ttft = Histogram("llmbus_time_to_first_token_seconds",
                              "from sending a request to its first token", buckets=_LATENCY,
                              registry=r)
        self.itl = Histogram("llmbus_inter_token_latency_seconds",
                             "between a request's tokens", buckets=_GAP, registry=r)
        self.e2e = Histogram("llmbus_e2e_request_latency_seconds",
                             "from sending a request to its end", buckets=_LATENCY, registry=r)
        self.admission = Histogram("llmbus_request_admission_seconds",
                                   "from sending a request to the scheduler admitting it",
                                   buckets=_LATENCY, registry=r)
        self.finished = Counter("llmbus_requests_finished", "generations by finish reason",
                                ["reason"], registry=r)
        self.tokenizer_retries = Counter("llmbus_tokenizer_retries", "tokenizer calls asked again "
                                         "after their tokenizer was lost", registry=r)
        self.carried = Counter("llmbus_requests_carried", "requests carried across the loss of "
                               "their scheduler (each counted once)", registry=r)
        self.scheduler = {k: Gauge(f"llmbus_{name}", text, registry=r)
                          for k, (name, text) in _SCHEDULER_GAUGES.items()}
        self.shard_compute = Gauge("llmbus_shard_compute_seconds",
                                   "compute time each shard reported for its hop, in total",
                                   ["shard"], registry=r)
        self.bus = _SchedulerTotals()
        r.register(self.bus)
        self.pipeline_batches = Gauge("llmbus_pipeline_batch_seconds",
                                      "round-trip time of batches through the pipeline, in total",
                                      registry=r)

    def generation(self, started: float, admitted: float | None,
                   token_events: list[tuple[float, int]], prompt_tokens: int,
                   completion_tokens: int, reason: str, ended: float) -> None:
        """One relayed generation, timed by the gateway (perf_counter seconds); token_events
        are (arrival, tokens in it): tokens that came together share the gap before them."""
        self.prompt_tokens.inc(prompt_tokens)
        self.generation_tokens.inc(completion_tokens)
        self.finished.labels(reason).inc()
        self.e2e.observe(ended - started)
        if admitted is not None:
            self.admission.observe(admitted - started)
        if token_events:
            self.ttft.observe(token_events[0][0] - started)
        for (a, _), (b, n) in zip(token_events, token_events[1:]):
            for _ in range(n):
                self.itl.observe((b - a) / n)

    def scheduler_stats(self, stats: dict[str, float]) -> None:
        for key, gauge in self.scheduler.items():
            if key in stats:
                gauge.set(stats[key])
        for key, value in stats.items():
            if key.startswith("driver.compute_ms."):
                self.shard_compute.labels(key.removeprefix("driver.compute_ms.")).set(value / 1e3)
        if "driver.batch_ms" in stats:
            self.pipeline_batches.set(stats["driver.batch_ms"] / 1e3)
        self.bus.stats = stats

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _SchedulerTotals:
    """Series the scheduler sums for us (scheduler.stats), exposed as counters and summaries
    as they were at the last scrape: queue time, and bytes and latency per shard hop."""

    def __init__(self):
        self.stats: dict[str, float] = {}

    def describe(self):
        return []   # families are known only from the stats; nothing to check at register

    def collect(self):
        s = self.stats
        queue = SummaryMetricFamily("llmbus_queue_time_seconds",
                                    "from admission by the scheduler to the request's first batch")
        queue.add_metric([], s.get("queue_time_count", 0.0), s.get("queue_time_s", 0.0))
        yield queue
        hops = sorted(k.removeprefix("hop.batches.") for k in s if k.startswith("hop.batches."))
        nbytes = CounterMetricFamily("llmbus_shard_hop_bytes",
                                     "activation (or token) payload bytes sent over each hop "
                                     "of the shard route (from>to)", labels=["hop"])
        latency = SummaryMetricFamily("llmbus_shard_hop_latency_seconds",
                                      "each batch's time on a hop of the shard route: the "
                                      "sender's call less the receiver's own time", labels=["hop"])
        for hop in hops:
            nbytes.add_metric([hop], s.get(f"hop.bytes.{hop}", 0.0))
            latency.add_metric([hop], s[f"hop.batches.{hop}"],
                               s.get(f"hop.latency_ms.{hop}", 0.0) / 1e3)
        yield nbytes
        yield latency
