"""Prometheus metrics of the whole service, whichever process counts and whichever replica is scraped.

A deployed service is several processes: two or more Serve replicas (behind HAProxy a scrape reaches
one of them) and the attribution workers. Counters and histograms therefore use prometheus-client's
multiprocess mode: every process writes its values to memory-mapped files in one shared directory, and
a scrape of any replica sums the files of all of them (see docs/service.md for the measurements behind
this choice). The runner points ``PROMETHEUS_MULTIPROC_DIR`` of the replicas and workers at
:func:`metrics_dir` and empties it at each start (:func:`reset_metrics_dir`).

Gauges are not kept in files: queue depth and lag are read from SQL when a scrape asks, which is
correct across processes because the SQL store is shared. A process without the shared directory (the
stdio server, in-process tests, ``serve run`` without the variable) reports its own counts, as before.

Each :class:`Metrics` owns its registry, so one test process can build many services.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import shutil
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Literal, ParamSpec, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, values
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
JOB_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)
BATCH_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

# prometheus-client's own switch. It is read when the library is imported, so it must be in a
# process's environment when the process starts: it travels as a Ray runtime environment variable.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# The tool call a coroutine is inside of: a tool that delegates to another tool is counted once.
_current_tool: contextvars.ContextVar[str | None] = contextvars.ContextVar("hindsight_tool", default=None)


def metrics_dir(data_dir: Path) -> Path:
    """Where the processes of the service on ``data_dir`` write their metric files."""
    return data_dir / "metrics"


def reset_metrics_dir(directory: Path) -> dict[str, str]:
    """Empty ``directory`` for a new run and return the environment its processes need.

    Called once per service start, before any replica or worker exists: files of an earlier run's
    processes would otherwise be summed into this run's counters.
    """
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return {MULTIPROC_ENV: str(directory)}


def shared_dir() -> Path | None:
    """The directory this process shares its metrics through, or ``None`` if it keeps them alone.

    prometheus-client chooses its value store when it is imported; the environment variable alone
    does not say which one this process got.
    """
    if not getattr(values.ValueClass, "_multiprocess", False):
        return None
    directory = os.environ.get(MULTIPROC_ENV)
    return Path(directory) if directory else None


@dataclass(frozen=True)
class QueueState:
    """The attribution queue as SQL sees it at scrape time."""

    depth: int
    lag_seconds: float


class _ReadAtScrape(Generic[T]):
    """A collector that reads its state from SQL at each scrape instead of holding gauges in files:
    SQL is shared, so every replica reports the same. ``read`` is set by the service; ``gauges``
    turns what it returns into metric families."""

    def __init__(self, what: str, gauges: Callable[[T], Iterable[Metric]]) -> None:
        self.what = what
        self.gauges = gauges
        self.read: Callable[[], T] | None = None

    def collect(self) -> Iterator[Metric]:
        if self.read is None:
            return
        try:
            state = self.read()
        except Exception:
            # A store that is down must not fail the whole scrape; /health reports it.
            logger.exception("cannot read %s for /metrics", self.what)
            return
        yield from self.gauges(state)


def _queue_gauges(state: QueueState) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "hindsight_attribution_queue_depth", "Finalized trajectories awaiting analysis", value=state.depth
    )
    yield GaugeMetricFamily(
        "hindsight_attribution_lag_seconds", "Age of the oldest trajectory awaiting analysis", value=state.lag_seconds
    )


@dataclass(frozen=True)
class JobSample:
    """A scheduled job's last run as SQL records it at scrape time."""

    name: str
    last_success: float | None
    """Unix time of the last run that succeeded."""
    duration_s: float | None
    rows: int | None


def _job_gauges(samples: list[JobSample]) -> Iterator[Metric]:
    """The jobs' last runs: correct whichever scheduler ran them."""
    success = GaugeMetricFamily(
        "hindsight_job_last_success_timestamp_seconds", "Unix time the job last succeeded", labels=["job"]
    )
    duration = GaugeMetricFamily(
        "hindsight_job_last_duration_seconds", "Duration of the job's last run", labels=["job"]
    )
    rows = GaugeMetricFamily("hindsight_job_last_rows", "Rows the job's last successful run handled", labels=["job"])
    for sample in samples:
        for family, value in ((success, sample.last_success), (duration, sample.duration_s), (rows, sample.rows)):
            if value is not None:
                family.add_metric([sample.name], value)
    yield from (success, duration, rows)


def _vector_gauges(stale: dict[str, bool]) -> Iterator[Metric]:
    """Which vector collections another embedder built."""
    family = GaugeMetricFamily(
        "hindsight_vectors_stale",
        "1 when the collection's vectors were built by another embedder than the service's (reindex)",
        labels=["collection"],
    )
    for collection, flag in sorted(stale.items()):
        family.add_metric([collection], 1.0 if flag else 0.0)
    yield family


class _SharedFiles:
    """Every process's metric files, described as this process describes its metrics.

    The files hold values only: a metric no process has counted yet would be missing from the
    scrape, and every help text would read "Multiprocess metric".
    """

    def __init__(self, directory: Path, local: CollectorRegistry) -> None:
        self._files = MultiProcessCollector(None, path=str(directory))  # type: ignore[no-untyped-call]
        self._local = local

    def collect(self) -> Iterator[Metric]:
        described = {metric.name: metric for metric in self._local.collect()}
        for metric in self._files.collect():  # type: ignore[no-untyped-call]
            own = described.pop(metric.name, None)
            if own is not None:
                metric.documentation = own.documentation
            yield metric
        for own in described.values():
            yield Metric(own.name, own.documentation, own.type)


class Metrics:
    """The service's metrics; counted by whichever process does the work.

    Args:
        shared: the directory the service's processes share; default: this process's
            :func:`shared_dir`.
    """

    def __init__(self, shared: Path | None = None) -> None:
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
        self.cache_hits = Counter("hindsight_memory_cache_hits", "Memory query cache hits", registry=r)
        self.cache_misses = Counter("hindsight_memory_cache_misses", "Memory query cache misses", registry=r)
        self.templates_learned = Counter(
            "hindsight_templates_learned", "Templates created or merged by attribution", registry=r
        )
        self.trajectories_analysed = Counter("hindsight_trajectories_analysed", "Trajectories attributed", registry=r)
        self.batch_duration = Histogram(
            "hindsight_attribution_batch_seconds",
            "Duration of an attribution batch that claimed at least one trajectory",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.batch_failures = Counter("hindsight_attribution_failures", "Attribution batches that raised", registry=r)
        self.lease_reclaims = Counter(
            "hindsight_attribution_lease_reclaims",
            "Analysis claims put back in the queue: lapsed (their worker stopped heartbeating) or "
            "released by a worker starting again under the name that held them",
            ["reason"],
            registry=r,
        )
        self.leases_lost = Counter(
            "hindsight_attribution_leases_lost",
            "Claimed trajectories whose lease lapsed before their worker committed; the work was dropped",
            registry=r,
        )
        self.job_runs = Counter(
            "hindsight_job_runs", "Scheduled job runs, by job and outcome (ok, error)", ["job", "outcome"], registry=r
        )
        self.job_rows = Counter("hindsight_job_rows", "Rows scheduled job runs handled", ["job"], registry=r)
        self.job_duration = Histogram(
            "hindsight_job_duration_seconds",
            "Duration of a scheduled job run",
            ["job"],
            buckets=JOB_BUCKETS,
            registry=r,
        )
        self._queue = _ReadAtScrape("the attribution queue", _queue_gauges)
        self._jobs = _ReadAtScrape("the scheduled jobs", _job_gauges)
        self._vectors = _ReadAtScrape("the vector builds", _vector_gauges)
        self._syncs: list[Callable[[], None]] = []
        self.shared = shared if shared is not None else shared_dir()
        if self.shared is None:
            r.register(self._queue)
            r.register(self._jobs)
            r.register(self._vectors)
            self._scrape = r
        else:
            # The files hold every process's counters (this one's included); the registry above
            # only routes this process's increments into them.
            self._scrape = CollectorRegistry()
            self._scrape.register(_SharedFiles(self.shared, r))
            self._scrape.register(self._queue)
            self._scrape.register(self._jobs)
            self._scrape.register(self._vectors)

    # ------------------------------------------------------------------------------- the MCP tools

    def observe_tool(self, tool: str, seconds: float, ok: bool) -> None:
        """Count one tool call and its latency."""
        self.tool_calls.labels(tool, "ok" if ok else "error").inc()
        self.tool_latency.labels(tool).observe(seconds)
        self.sync()

    def timed(self, tool: str) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
        """Decorate an MCP tool: count its calls, outcome and latency.

        A tool that awaits another decorated tool (``record_trajectory_node`` delegating to
        ``record_trajectory_nodes``) is counted once, under the name the caller called.
        """

        def wrap(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
            @functools.wraps(fn)
            async def inner(*args: P.args, **kwargs: P.kwargs) -> R:
                if _current_tool.get() is not None:
                    return await fn(*args, **kwargs)
                token = _current_tool.set(tool)
                start = time.perf_counter()
                ok = False
                try:
                    result = await fn(*args, **kwargs)
                    ok = True
                    return result
                finally:
                    _current_tool.reset(token)
                    self.observe_tool(tool, time.perf_counter() - start, ok)

            return inner

        return wrap

    # --------------------------------------------------------------------------- attribution workers

    def observe_batch(self, seconds: float, trajectories: int, templates: int) -> None:
        """Count one attribution batch; an empty poll of the queue is not a batch."""
        if trajectories == 0:
            return
        self.batch_duration.observe(seconds)
        self.trajectories_analysed.inc(trajectories)
        self.templates_learned.inc(templates)

    def observe_batch_failure(self) -> None:
        """Count an attribution batch that raised (its lease lapses and it is retried)."""
        self.batch_failures.inc()

    def observe_reclaims(self, reason: Literal["lapsed", "restart"], claims: int) -> None:
        """Count claims put back in the queue (see ``cluster.analysis``)."""
        if claims:
            self.lease_reclaims.labels(reason).inc(claims)

    def observe_leases_lost(self, trajectories: int) -> None:
        """Count trajectories a worker held past its lease: a lease too short for the batches."""
        if trajectories:
            self.leases_lost.inc(trajectories)

    # ------------------------------------------------------------------------------ scheduled jobs

    def observe_job(self, job: str, seconds: float, rows: int, ok: bool) -> None:
        """Count one run of a scheduled job (in the scheduler's process: the shared files carry it)."""
        self.job_runs.labels(job, "ok" if ok else "error").inc()
        self.job_duration.labels(job).observe(seconds)
        if rows:
            self.job_rows.labels(job).inc(rows)

    def watch_jobs(self, read: Callable[[], list[JobSample]]) -> None:
        """Read the jobs' last runs with ``read`` at every scrape."""
        self._jobs.read = read

    def watch_vectors(self, read: Callable[[], dict[str, bool]]) -> None:
        """Read with ``read`` at every scrape which collections are stale (collection -> stale)."""
        self._vectors.read = read

    # ---------------------------------------------------------------------------------- the scrape

    def watch_queue(self, read: Callable[[], QueueState]) -> None:
        """Read the attribution queue with ``read`` at every scrape (one reader per service)."""
        self._queue.read = read

    def on_sync(self, sync: Callable[[], None]) -> None:
        """Run ``sync`` after every tool call and before a scrape.

        For counts a component keeps itself (the memory cache's hits and misses): ``sync`` adds
        what changed to the shared counters, so a scrape of another replica sees them too.
        """
        self._syncs.append(sync)

    def sync(self) -> None:
        """Fold every component's own counts into the shared counters now."""
        for sync in self._syncs:
            sync()

    def render(self) -> bytes:
        """The Prometheus text of the whole service (or of this process when it shares nothing)."""
        self.sync()
        return generate_latest(self._scrape)


class CounterFold:
    """Adds the growth of a plain ``int`` another component counts to a Prometheus counter.

    Thread-safe: tools call it on the event loop, scrapes from a worker thread.
    """

    def __init__(self, counter: Counter, read: Callable[[], int]) -> None:
        self._counter = counter
        self._read = read
        self._seen = 0
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            now = self._read()
            if now > self._seen:
                self._counter.inc(now - self._seen)
            # A component that resets its count (a cleared cache) starts a new run from zero.
            self._seen = now
