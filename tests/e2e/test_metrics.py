"""Metrics across processes, without Ray: real processes write the shared files, one scrape sums them.

The deployed service (replicas and workers on Ray Serve) is covered in test_service.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster.metrics import MULTIPROC_ENV, CounterFold, Metrics, metrics_dir, reset_metrics_dir

pytestmark = pytest.mark.anyio


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text; 0 when the series does not exist yet."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


def count_in_process(directory: Path, code: str) -> None:
    """Run ``code`` with ``metrics`` (a :class:`Metrics`) in a new process sharing ``directory``."""
    script = "from cluster.metrics import Metrics\nmetrics = Metrics()\nassert metrics.shared\n" + textwrap.dedent(code)
    env = {**os.environ, MULTIPROC_ENV: str(directory)}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)


def test_one_scrape_sums_what_every_process_counted(tmp_path: Path) -> None:
    directory = tmp_path / "metrics"
    reset_metrics_dir(directory)
    count_in_process(directory, 'metrics.observe_tool("memory_write", 0.01, True)\n' * 3)
    count_in_process(directory, 'metrics.observe_tool("memory_write", 0.02, True)\nmetrics.observe_batch(0.5, 4, 2)')
    count_in_process(directory, "metrics.observe_batch_failure()")
    text = Metrics(shared=directory).render().decode()
    assert sample(text, "hindsight_tool_calls_total", tool="memory_write", outcome="ok") == 4
    assert sample(text, "hindsight_tool_latency_seconds_count", tool="memory_write") == 4
    assert sample(text, "hindsight_trajectories_analysed_total") == 4
    assert sample(text, "hindsight_templates_learned_total") == 2
    assert sample(text, "hindsight_attribution_batch_seconds_count") == 1
    assert sample(text, "hindsight_attribution_failures_total") == 1


def test_a_new_run_starts_from_zero(tmp_path: Path) -> None:
    directory = metrics_dir(tmp_path)
    reset_metrics_dir(directory)
    count_in_process(directory, 'metrics.observe_tool("memory_write", 0.01, True)')
    env = reset_metrics_dir(directory)
    assert env == {MULTIPROC_ENV: str(directory)}
    assert sample(Metrics(shared=directory).render().decode(), "hindsight_tool_calls_total") == 0


def test_an_empty_poll_of_the_queue_is_not_a_batch() -> None:
    metrics = Metrics()
    metrics.observe_batch(0.001, 0, 0)
    text = metrics.render().decode()
    assert sample(text, "hindsight_attribution_batch_seconds_count") == 0
    assert sample(text, "hindsight_trajectories_analysed_total") == 0


async def test_a_tool_that_calls_another_tool_is_counted_once() -> None:
    metrics = Metrics()

    @metrics.timed("record_trajectory_nodes")
    async def many(n: int) -> int:
        return n

    @metrics.timed("record_trajectory_node")
    async def one() -> int:
        return await many(1)

    assert await one() == 1
    assert await many(2) == 2
    text = metrics.render().decode()
    assert sample(text, "hindsight_tool_calls_total", tool="record_trajectory_node", outcome="ok") == 1
    assert sample(text, "hindsight_tool_calls_total", tool="record_trajectory_nodes", outcome="ok") == 1


async def test_a_failing_tool_is_counted_as_an_error() -> None:
    metrics = Metrics()

    @metrics.timed("memory_forget")
    async def forget() -> None:
        raise LookupError("no such memory")

    with pytest.raises(LookupError):
        await forget()
    assert sample(metrics.render().decode(), "hindsight_tool_calls_total", tool="memory_forget", outcome="error") == 1


def test_counts_a_component_keeps_are_added_once() -> None:
    metrics = Metrics()
    hits = [0]
    fold = CounterFold(metrics.cache_hits, lambda: hits[0])
    metrics.on_sync(fold)
    hits[0] = 3
    metrics.sync()
    metrics.sync()
    hits[0] = 0  # the component started counting again (a cleared cache)
    metrics.sync()
    hits[0] = 2
    assert sample(metrics.render().decode(), "hindsight_memory_cache_hits_total") == 5


def test_a_metric_no_process_counted_yet_is_described(tmp_path: Path) -> None:
    directory = tmp_path / "metrics"
    reset_metrics_dir(directory)
    text = Metrics(shared=directory).render().decode()
    assert "# HELP hindsight_tool_calls_total MCP tool calls" in text
    assert "# TYPE hindsight_attribution_failures_total counter" in text
