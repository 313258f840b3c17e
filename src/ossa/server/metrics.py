"""Prometheus metrics of the server (prometheus-client), with vLLM's metric names under ``ossa:``.

Engine state (running/waiting requests, KV-cache usage, prefix-cache queries/hits, token counters)
is read from ``engine.stats()`` when /metrics is scraped, so nothing is counted per token in Python;
per-request latencies (TTFT, TPOT, end-to-end) are observed once when a request finishes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_TTFT_BUCKETS = (
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
_TPOT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
_E2E_BUCKETS = (0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0)


class _EngineCollector(Collector):
    def __init__(self, stats: Callable[[], dict[str, Any]], model_name: str) -> None:
        self._stats = stats
        self._model = model_name

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        labels = ["model_name"]
        value = [self._model]

        def gauge(name: str, doc: str, v: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=labels)
            g.add_metric(value, v)
            return g

        def counter(name: str, doc: str, v: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=labels)
            c.add_metric(value, v)
            return c

        yield gauge("ossa:num_requests_running", "Requests in the running batch.", s["num_running"])
        yield gauge("ossa:num_requests_waiting", "Requests waiting to be scheduled.", s["num_waiting"])
        yield gauge(
            "ossa:kv_cache_usage_perc",
            "Fraction of KV-cache blocks in use (0-1).",
            float(s["kv_usage_percent"]) / 100.0,
        )
        yield gauge("ossa:num_kv_blocks", "KV-cache blocks in the pool.", s["num_blocks"])
        queries, hits = float(s["prefix_queries"]), float(s["prefix_hits"])
        yield counter("ossa:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", queries)
        yield counter("ossa:prefix_cache_hits", "Prompt tokens found in the prefix cache.", hits)
        yield gauge(
            "ossa:prefix_cache_hit_rate",
            "Prefix-cache hits / queries since start.",
            hits / queries if queries > 0 else 0.0,
        )
        yield counter(
            "ossa:prompt_tokens", "Prompt tokens computed (prefix hits excluded).", s["prompt_tokens"]
        )
        yield counter("ossa:generation_tokens", "Tokens generated.", s["generation_tokens"])
        yield counter(
            "ossa:num_preemptions", "Requests preempted for lack of KV blocks.", s["num_preemptions"]
        )
        # Speculative decoding, vLLM's spec_decode counters (zero when it is off).
        drafts, drafted = float(s.get("spec_num_drafts", 0)), float(s.get("spec_num_draft_tokens", 0))
        accepted = float(s.get("spec_num_accepted_tokens", 0))
        yield counter(
            "ossa:spec_decode_num_drafts", "Verification steps (one per sequence step with a draft).", drafts
        )
        yield counter("ossa:spec_decode_num_draft_tokens", "Draft tokens verified.", drafted)
        yield counter("ossa:spec_decode_num_accepted_tokens", "Draft tokens accepted.", accepted)
        per_pos = CounterMetricFamily(
            "ossa:spec_decode_num_accepted_tokens_per_pos",
            "Verifications that accepted the draft token at this position.",
            labels=[*labels, "position"],
        )
        for pos, n in enumerate(s.get("spec_accepted_per_pos", [])):
            per_pos.add_metric([*value, str(pos)], float(n))
        yield per_pos
        yield gauge(
            "ossa:spec_decode_acceptance_rate",
            "Accepted / drafted tokens since start.",
            accepted / drafted if drafted > 0 else 0.0,
        )
        yield gauge(
            "ossa:spec_decode_mean_accepted_length",
            "Tokens a verification step appended on average (1 + accepted drafts) since start.",
            1.0 + accepted / drafts if drafts > 0 else 0.0,
        )


class ServerMetrics:
    """A private registry (so several apps can live in one process) with the server's metrics."""

    def __init__(self, stats: Callable[[], dict[str, Any]], model_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.model_name = model_name
        self.registry.register(_EngineCollector(stats, model_name))
        labels = ["model_name"]
        self.ttft = Histogram(
            "ossa:time_to_first_token_seconds",
            "Time to first token.",
            labels,
            buckets=_TTFT_BUCKETS,
            registry=self.registry,
        ).labels(model_name)
        self.tpot = Histogram(
            "ossa:time_per_output_token_seconds",
            "Mean time per output token after the first.",
            labels,
            buckets=_TPOT_BUCKETS,
            registry=self.registry,
        ).labels(model_name)
        self.e2e = Histogram(
            "ossa:e2e_request_latency_seconds",
            "End-to-end request latency.",
            labels,
            buckets=_E2E_BUCKETS,
            registry=self.registry,
        ).labels(model_name)
        self.requests = Counter(
            "ossa:request_success",
            "Finished requests by finish reason.",
            ["model_name", "finished_reason"],
            registry=self.registry,
        )

    def observe_finished(self, out: Any, num_generated_tokens: int) -> None:
        """Records one finished request from its final ``RequestOutput`` (engine timestamps)."""
        m = out.metrics
        arrival, first, done = m.arrival_time, m.first_token_time or 0.0, m.finished_time or 0.0
        if arrival > 0 and first >= arrival:
            self.ttft.observe(first - arrival)
        if arrival > 0 and done >= arrival:
            self.e2e.observe(done - arrival)
        n_children = max(1, len(out.outputs))
        per_child = num_generated_tokens / n_children
        if first > 0 and done > first and per_child > 1:
            self.tpot.observe((done - first) / (per_child - 1))
        reasons = {c.finish_reason for c in out.outputs if c.finish_reason} or {"abort"}
        for r in reasons:
            self.requests.labels(self.model_name, r).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
