"""The scheduler actor on the shared Ray instance: a job with a one-second interval runs on it, and
its runs show in ``hindsight jobs list`` and in the service's metrics."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from actors.pool import start_background, start_scheduler, stop_pool, wait_ready
from cluster.jobs.models import JobState
from cluster.jobs.repository import SqlJobStore
from cluster.metrics import Metrics, reset_metrics_dir
from cluster.serve_config import AttributionConfig, MaintenanceConfig, MaintenanceJob, ServeConfig
from cluster.services import job_samples
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from pipelines.jobs import run_job
from tests.cli_process import cli_json
from tests.e2e.test_metrics import sample

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.milvus]


def job_state(db: Database, name: str) -> JobState | None:
    with db.read() as session:
        return SqlJobStore(session).state(name)


def wait_for_runs(db: Database, name: str, runs: int, timeout: float) -> JobState:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = job_state(db, name)
        if state is not None and state.runs >= runs and not state.unfinished:
            return state
        time.sleep(0.1)
    raise AssertionError(f"job {name} did not finish {runs} runs in {timeout}s: {job_state(db, name)}")


def test_a_job_runs_on_its_interval_in_the_pool_and_shows_in_jobs_list(ray_session: None, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    upgrade(settings.sql_url())
    config = ServeConfig(
        attribution=AttributionConfig(workers=0),
        maintenance=MaintenanceConfig(enabled=False),
        jobs={"upkeep": MaintenanceJob(kind="maintenance", interval_s=1)},
    )
    env = reset_metrics_dir(tmp_path / "metrics")
    db = Database(settings.sql_url())
    workers = start_background(settings, config, env, run_job=run_job)
    try:
        wait_ready(workers, 60)
        first = wait_for_runs(db, "upkeep", 1, 60)
        second = wait_for_runs(db, "upkeep", 2, 60)
    finally:
        stop_pool(workers)
    try:
        assert first.finished_at is not None
        assert second.started_at is not None
        # Run again once its interval had passed since the last run ended, not before.
        assert (second.started_at - first.finished_at).total_seconds() >= 1
        assert second.last_error is None
        assert second.result is not None
        assert second.result["rows"] == 0

        path = tmp_path / "serve.yaml"
        path.write_text(config.model_dump_json())  # JSON is YAML
        [upkeep] = cli_json("jobs", "list", "-c", str(path), data_dir=tmp_path)
        assert upkeep["name"] == "upkeep"
        assert upkeep["runs"] >= 2
        assert upkeep["last_success_at"] is not None

        # Counted in the scheduler's process, read from the shared files; the last success from SQL.
        metrics = Metrics(shared=tmp_path / "metrics")
        final = job_state(db, "upkeep")
        assert final is not None
        assert final.last_success_at is not None
        metrics.watch_jobs(lambda: job_samples(db))
        text = metrics.render().decode()
        assert sample(text, "hindsight_job_runs_total", job="upkeep", outcome="ok") >= 2
        assert sample(text, "hindsight_job_duration_seconds_count", job="upkeep") >= 2
        assert (
            sample(text, "hindsight_job_last_success_timestamp_seconds", job="upkeep")
            == final.last_success_at.timestamp()
        )
        assert sample(text, "hindsight_job_last_rows", job="upkeep") == 0
        assert sample(text, "hindsight_job_last_duration_seconds", job="upkeep") == final.duration_s
    finally:
        db.dispose()


def test_a_job_run_at_start_runs_once_when_the_scheduler_starts_though_not_due(
    ray_session: None, tmp_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path)
    upgrade(settings.sql_url())
    db = Database(settings.sql_url())
    try:
        # It ran a moment ago (another life of the service) and is due again in an hour.
        with db.transaction() as session:
            store = SqlJobStore(session)
            store.ensure("upkeep", "maintenance")
            store.acquire("upkeep", "earlier/scheduler", interval=timedelta(hours=1), lease=timedelta(minutes=1))
            store.finish("upkeep", "earlier/scheduler", duration_s=0.1, result={"rows": 0}, watermark=None, error=None)
        job = MaintenanceJob(kind="maintenance", interval_s=3600, run_at_start=True)
        scheduler = start_scheduler(settings, {"upkeep": job}, run_job=run_job)
        try:
            wait_ready([scheduler], 60)
            state = wait_for_runs(db, "upkeep", 2, 60)
        finally:
            stop_pool([scheduler])
        assert state.runs == 2
        assert state.last_error is None
    finally:
        db.dispose()
