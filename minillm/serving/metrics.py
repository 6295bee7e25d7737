"""serving/metrics.py — the server's Prometheus metrics (GET /metrics), with vLLM's metric
names.

Counters and histograms are fed by the engine thread (AsyncEngine calls `on_step`, `on_token`,
`on_finish`); gauges (requests running and waiting, KV blocks in use) and the prefix cache's
totals are read from the engine when Prometheus scrapes. The names are vLLM's
(`vllm:num_requests_running`, `vllm:time_to_first_token_seconds`, ...), each fed the same
quantity as vLLM's: `vllm:inter_token_latency_seconds` gets every gap between two tokens,
`vllm:request_time_per_output_token_seconds` one mean gap per finished request. So a dashboard
built for `vllm serve` reads this server too. Each app has its own registry: two servers in one
process do not share counts.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

# vLLM's buckets (seconds), trimmed: a CPU step is milliseconds to seconds
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
TOKEN_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
)


class _EngineCollector:
    """Values read from the engine at scrape time (ints and lengths, read without a lock)."""

    def __init__(self, engine, model_name: str):
        self.engine, self.labels = engine, {"model_name": model_name}

    def collect(self):
        sched = self.engine.scheduler
        for name, doc, value in [
            ("vllm:num_requests_running", "Requests in the running batch.", len(sched.running)),
            (
                "vllm:num_requests_waiting",
                "Requests waiting to be admitted.",
                len(sched.waiting),
            ),
            ("minillm:kv_cache_usage_blocks", "KV blocks in use.", sched.pool.num_allocated),
            (
                "vllm:kv_cache_usage_perc",
                "Fraction of KV blocks in use (0 to 1).",
                sched.pool.num_allocated / sched.pool.num_blocks,
            ),
        ]:
            g = GaugeMetricFamily(name, doc, labels=list(self.labels))
            g.add_metric(list(self.labels.values()), value)
            yield g
        stats = self.engine.stats
        for name, doc, value in [
            (
                "vllm:prefix_cache_queries",
                "Prompt tokens looked up in the prefix cache.",
                stats.num_query_tokens,
            ),
            (
                "vllm:prefix_cache_hits",
                "Prompt tokens found in the prefix cache.",
                stats.num_hit_tokens,
            ),
        ]:
            c = CounterMetricFamily(name, doc, labels=list(self.labels))
            c.add_metric(list(self.labels.values()), value)
            yield c


class ServerMetrics:
    def __init__(self, engine, model_name: str):
        self.registry = CollectorRegistry()
        labels, self.label = ["model_name"], {"model_name": model_name}
        reg = dict(registry=self.registry, labelnames=labels)
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Prompt tokens computed (prefill).", **reg
        )
        self.generation_tokens = Counter("vllm:generation_tokens", "Tokens generated.", **reg)
        self.preemptions = Counter(
            "vllm:num_preemptions",
            "Requests preempted (blocks freed, recomputed later).",
            **reg,
        )
        self.success = Counter(
            "vllm:request_success",
            "Requests finished, by finish_reason.",
            registry=self.registry,
            labelnames=labels + ["finished_reason"],
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token.",
            buckets=TTFT_BUCKETS,
            **reg,
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Time between two tokens of a request.",
            buckets=TOKEN_BUCKETS,
            **reg,
        )
        self.tpot = Histogram(  # one sample per finished request; the gaps go to self.itl
            "vllm:request_time_per_output_token_seconds",
            "Each finished request's mean time per output token after the first.",
            buckets=TOKEN_BUCKETS,
            **reg,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Request latency, arrival to last token.",
            buckets=E2E_BUCKETS,
            **reg,
        )
        self.registry.register(_EngineCollector(engine, model_name))
        for m in (
            self.prompt_tokens,
            self.generation_tokens,
            self.preemptions,
            self.ttft,
            self.itl,
            self.tpot,
            self.e2e,
        ):
            m.labels(
                **self.label
            )  # a labelled metric shows no sample until its child exists: show zeros

    def on_step(self, plans) -> None:
        for plan in plans:
            prefill = sum(c.num_new for c in plan.chunks if c.kind == "prefill")
            if prefill:
                self.prompt_tokens.labels(**self.label).inc(prefill)
            if plan.preempted:
                self.preemptions.labels(**self.label).inc(len(plan.preempted))

    def on_token(self, gap: float, first: bool) -> None:
        (self.ttft if first else self.itl).labels(**self.label).observe(gap)
        self.generation_tokens.labels(**self.label).inc()

    def on_finish(
        self, num_output: int, e2e: float, after_first: float, finish_reason: str
    ) -> None:
        if num_output > 1:
            self.tpot.labels(**self.label).observe(after_first / (num_output - 1))
        self.e2e.labels(**self.label).observe(e2e)
        self.success.labels(finished_reason=finish_reason, **self.label).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
