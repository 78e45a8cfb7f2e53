"""Prometheus metrics of one process. Each service instance owns its registry, so tests can run many."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.tool_calls = Counter("hindsight_tool_calls", "MCP tool calls", ["tool", "outcome"], registry=r)
        self.tool_latency = Histogram(
            "hindsight_tool_latency_seconds", "MCP tool call latency", ["tool"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.nodes_written = Counter("hindsight_nodes_written", "Trajectory nodes recorded", registry=r)
        self.memory_writes = Counter("hindsight_memory_writes", "Long-term memory writes", registry=r)
        self.retrieval_latency = Histogram(
            "hindsight_retrieval_latency_seconds",
            "Experience and memory query latency",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.experience_queries = Counter("hindsight_experience_queries", "query_experience calls", ["hit"], registry=r)
        self.templates_learned = Counter("hindsight_templates_learned", "Templates created or merged", registry=r)
        self.trajectories_analysed = Counter("hindsight_trajectories_analysed", "Trajectories attributed", registry=r)
        self.queue_depth = Gauge(
            "hindsight_attribution_queue_depth", "Finalized trajectories awaiting analysis", registry=r
        )
        self.queue_lag = Gauge(
            "hindsight_attribution_lag_seconds", "Age of the oldest trajectory awaiting analysis", registry=r
        )
        self.cache_hits = Gauge("hindsight_memory_cache_hits", "Memory query cache hits", registry=r)
        self.cache_misses = Gauge("hindsight_memory_cache_misses", "Memory query cache misses", registry=r)
        self._refreshers: list[Callable[[], None]] = []

    def observe_tool(self, tool: str, seconds: float, ok: bool) -> None:
        self.tool_calls.labels(tool, "ok" if ok else "error").inc()
        self.tool_latency.labels(tool).observe(seconds)

    def on_scrape(self, refresh: Callable[[], None]) -> None:
        """Register a callback that updates gauges (queue depth, cache counters) right before a scrape."""
        self._refreshers.append(refresh)

    def render(self) -> bytes:
        for refresh in self._refreshers:
            refresh()
        return generate_latest(self.registry)
