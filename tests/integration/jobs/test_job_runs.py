"""Job leases on SQLite and Postgres: one run at a time, due on its interval, resumed from its watermark."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from cluster.core.errors import LeaseLost
from cluster.jobs.repository import SqlJobStore
from cluster.jobs.runs import JobContext, JobOutcome, JobRuns, RunReport, Work
from cluster.storage.db import Database

HOUR = timedelta(hours=1)
LEASE = timedelta(seconds=30)


def run(runs: JobRuns, work: Work, *, force: bool = False) -> RunReport | None:
    return runs.run("nightly", "maintenance", work, interval=HOUR, lease=LEASE, force=force)


def test_two_schedulers_never_run_one_job_at_once(database: Database) -> None:
    first, second = JobRuns(database, "host-a/scheduler"), JobRuns(database, "host-b/scheduler")
    inside, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow(context: JobContext) -> JobOutcome:
        calls.append(context.name)
        inside.set()
        assert release.wait(10)
        return JobOutcome({"rows": 3})

    worker = threading.Thread(target=run, args=(first, slow))
    worker.start()
    try:
        assert inside.wait(10)
        # The second scheduler finds the job held, even when told to run it now.
        assert run(second, slow) is None
        assert run(second, slow, force=True) is None
        [state] = second.states()
        assert state.holder == "host-a/scheduler"
    finally:
        release.set()
        worker.join()
    assert calls == ["nightly"]
    [state] = first.states()
    assert (state.holder, state.runs, state.result, state.last_error) == (None, 1, {"rows": 3}, None)
    assert state.duration_s is not None
    assert state.last_success_at is not None


def test_a_job_is_due_again_only_after_its_interval(database: Database) -> None:
    runs = JobRuns(database, "host-a/scheduler")

    def done(_context: JobContext) -> JobOutcome:
        return JobOutcome({"rows": 0})

    assert run(runs, done) is not None
    assert run(runs, done) is None  # ran a moment ago; due in an hour
    assert run(runs, done, force=True) is not None  # `jobs run` does not wait for it
    with database.transaction() as session:
        store = SqlJobStore(session)
        later = datetime.now(UTC) + HOUR + timedelta(seconds=1)
        assert store.acquire("nightly", "host-a/scheduler", interval=HOUR, lease=LEASE, now=later) is not None


def test_a_run_killed_midway_is_resumed_from_its_watermark_by_the_next_holder(database: Database) -> None:
    # What a scheduler that died mid-run leaves: its lease (lapsed now) and its last checkpoint.
    with database.transaction() as session:
        store = SqlJobStore(session)
        store.ensure("nightly", "consolidate")
        assert store.acquire("nightly", "dead-host/scheduler", interval=HOUR, lease=timedelta(0)) is not None
        store.checkpoint("nightly", "dead-host/scheduler", {"owners": {"team-a": "2026-01-01T00:00:00+00:00"}})
    seen: list[tuple[object, bool]] = []

    def resume(context: JobContext) -> JobOutcome:
        seen.append((context.watermark, context.resumed))
        assert context.watermark is not None
        return JobOutcome({"rows": 1}, {"owners": {**context.watermark["owners"], "team-b": "later"}})

    report = run(JobRuns(database, "live-host/scheduler"), resume)
    assert report is not None
    assert (report.resumed, report.rows, report.error) == (True, 1, None)
    assert seen == [({"owners": {"team-a": "2026-01-01T00:00:00+00:00"}}, True)]
    with database.read() as session:
        state = SqlJobStore(session).state("nightly")
    assert state is not None
    assert state.watermark == {"owners": {"team-a": "2026-01-01T00:00:00+00:00", "team-b": "later"}}
    assert (state.holder, state.runs) == (None, 2)


def test_a_failed_run_records_its_error_and_keeps_its_checkpoint(database: Database) -> None:
    runs = JobRuns(database, "host-a/scheduler")

    def failing(context: JobContext) -> JobOutcome:
        context.checkpoint({"done": ["team-a"]})
        raise RuntimeError("Milvus is down")

    report = run(runs, failing)
    assert report is not None
    assert report.error == "RuntimeError: Milvus is down"
    [state] = runs.states()
    assert state.last_error == "RuntimeError: Milvus is down"
    assert state.watermark == {"done": ["team-a"]}
    assert state.last_success_at is None
    assert state.holder is None


def test_a_checkpoint_after_the_lease_was_taken_over_is_refused(database: Database) -> None:
    with database.transaction() as session:
        store = SqlJobStore(session)
        store.ensure("nightly", "reindex")
        assert store.acquire("nightly", "host-a/scheduler", interval=HOUR, lease=timedelta(0)) is not None
    with database.transaction() as session:
        assert SqlJobStore(session).acquire("nightly", "host-b/scheduler", interval=HOUR, lease=LEASE) is not None
    with pytest.raises(LeaseLost), database.transaction() as session:
        SqlJobStore(session).checkpoint("nightly", "host-a/scheduler", {"done": []})
