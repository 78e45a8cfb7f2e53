"""Analysis leases: heartbeats keep a long batch's claim, a stalled worker's late result is dropped,
and a restarted Ray worker takes back at once what its earlier life held.

Issue 15, part 3: after a restart, work the dead worker had claimed waited out a fixed 5-minute lease.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from actors.engine.model.templates import ExperienceTemplate
from actors.engine.model.trajectories import NodeIn, Outcome, Trajectory
from actors.engine.retire import ActionOutcome
from actors.pool import start_pool, stop_pool
from cluster.analysis import AnalysisService
from cluster.experience.models import LearnReport
from cluster.experience.service import ExperienceService
from cluster.serve_config import AttributionConfig
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from cluster.trajectories.repository import SqlTrajectoryStore
from cluster.trajectories.tables import TrajectoryRow
from tests.reliability.service import deadline_loop
from tests.unit.engine.builders import bulk_vs_single_runs

pytestmark = [pytest.mark.reliability, pytest.mark.milvus]

OWNER = "shop-team"


def store_runs(db: Database, runs: Sequence[Trajectory]) -> list[uuid.UUID]:
    with db.transaction() as session:
        store = SqlTrajectoryStore(session)
        for run in runs:
            store.open(OWNER, run.header)
            store.append(
                OWNER,
                run.header.trajectory_id,
                [NodeIn.model_validate(n.model_dump(exclude={"seq"})) for n in run.nodes],
            )
            assert run.outcome is not None
            store.finalize(OWNER, run.header.trajectory_id, Outcome(status=run.outcome.status))
    return [r.header.trajectory_id for r in runs]


def analysis_rows(db: Database, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int, str | None]]:
    """Each trajectory's analysis status, how often it was claimed and by whom it is claimed now."""
    with db.read() as session:
        rows = session.execute(
            select(
                TrajectoryRow.trajectory_id,
                TrajectoryRow.analysis_status,
                TrajectoryRow.analysis_attempts,
                TrajectoryRow.analysis_claimed_by,
            ).where(TrajectoryRow.trajectory_id.in_(list(ids)))
        )
        return {tid: (status, attempts, worker) for tid, status, attempts, worker in rows}


class PausedLearner:
    """The real experience service, but learning waits until the test lets it go on: a batch that
    takes as long as the test needs, at the point where a worker holds claims and has not committed."""

    def __init__(self, inner: ExperienceService) -> None:
        self.inner = inner
        self.learning = threading.Event()
        self.go_on = threading.Event()

    def learn_in(
        self,
        session: Session,
        owner: str,
        templates: Sequence[ExperienceTemplate],
        outcomes: Sequence[ActionOutcome] = (),
    ) -> LearnReport:
        self.learning.set()
        assert self.go_on.wait(60), "the test never let the batch go on"
        return self.inner.learn_in(session, owner, templates, outcomes)

    def report_outcome(
        self, owner: str, template_ids: Sequence[uuid.UUID], succeeded: bool, trajectory_id: uuid.UUID | None = None
    ) -> object:
        return self.inner.report_outcome(owner, template_ids, succeeded, trajectory_id)

    def index_pending(self, owner: str | None = None) -> int:
        return self.inner.index_pending(owner)


class Background:
    """``run_once`` of a worker on a thread, so the test can act while the batch is under way."""

    def __init__(self, analysis: AnalysisService) -> None:
        self.result: Any = None
        self._thread = threading.Thread(target=self._run, args=(analysis,))
        self._thread.start()

    def _run(self, analysis: AnalysisService) -> None:
        try:
            self.result = analysis.run_once()
        except BaseException as exc:  # surfaced by join()
            self.result = exc

    def join(self) -> Any:
        self._thread.join(60)
        assert not self._thread.is_alive()
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


def lease_outlived(db: Database, ids: Sequence[uuid.UUID], lease: timedelta) -> bool:
    """Whether every claim has run longer than one lease and is still held: its heartbeat moved it."""
    with db.read() as session:
        rows = session.execute(
            select(TrajectoryRow.analysis_claimed_at, TrajectoryRow.analysis_lease_until).where(
                TrajectoryRow.trajectory_id.in_(list(ids))
            )
        ).all()
    now = datetime.now(UTC)
    return all(claimed + lease < now < until for claimed, until in rows)


# On SQLite a paused learn transaction would hold the database's single write lock, which every other
# writer (the second worker, the heartbeat) needs too: these two scenarios need concurrent writers.
on_postgres = pytest.mark.parametrize("database", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)


@on_postgres
def test_a_heartbeat_keeps_the_claim_of_a_batch_that_outlasts_its_lease(experience: ExperienceService) -> None:
    db = experience.db
    ids = store_runs(db, bulk_vs_single_runs())
    lease = timedelta(seconds=1)
    paused = PausedLearner(experience)
    slow = AnalysisService(db, paused, batch_size=50, worker="host-a/0", lease=lease, heartbeat=lease / 5)
    other = AnalysisService(db, experience, batch_size=50, worker="host-b/0", lease=lease)
    running = Background(slow)
    try:
        assert paused.learning.wait(60)
        for _ in deadline_loop(30, "the claims did not outlive their first lease"):
            if lease_outlived(db, ids, lease):
                break
        # The first worker is alive and beating: its batch is not taken from it.
        assert other.run_once().trajectories == 0
    finally:
        paused.go_on.set()
    assert running.join().trajectories == len(ids)
    assert analysis_rows(db, ids) == dict.fromkeys(ids, ("done", 1, None))


@on_postgres
def test_a_worker_that_stalls_past_its_lease_loses_the_batch_and_it_is_learned_once(
    experience: ExperienceService,
) -> None:
    db = experience.db
    ids = store_runs(db, bulk_vs_single_runs())
    paused = PausedLearner(experience)
    # No heartbeat before the lease of zero lapses: the worker is as good as dead to the others.
    stalled = AnalysisService(
        db, paused, batch_size=50, worker="host-a/0", lease=timedelta(0), heartbeat=timedelta(hours=1)
    )
    other = AnalysisService(db, experience, batch_size=50, worker="host-b/0")
    running = Background(stalled)
    try:
        assert paused.learning.wait(60)
        report = other.run_once()
        assert (report.trajectories, report.reclaimed) == (len(ids), len(ids))
    finally:
        paused.go_on.set()
    late = running.join()
    assert (late.trajectories, late.lost, late.templates) == (0, len(ids), 0)
    assert analysis_rows(db, ids) == dict.fromkeys(ids, ("done", 2, None))
    assert experience.count(OWNER) == report.templates > 0


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[None]:
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, _temp_dir="/tmp/ray-tests", log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def wait_analysed(db: Database, ids: Sequence[uuid.UUID], timeout_s: float) -> None:
    for _ in deadline_loop(timeout_s, f"{len(ids)} trajectories were not analysed"):
        if {status for status, _, _ in analysis_rows(db, ids).values()} == {"done"}:
            break


@pytest.mark.ray
@pytest.mark.slow
def test_a_killed_ray_worker_comes_back_and_takes_its_claims_back_at_once(tmp_path: Path, ray_instance: None) -> None:
    import ray

    settings = Settings(data_dir=tmp_path)
    upgrade(settings.sql_url())
    db = Database(settings.sql_url())
    pool = "test-host:pool"
    mine, live, gone = f"{pool}/attribution-0", "other-host:pool/attribution-0", "gone-host:pool/attribution-0"
    ids = store_runs(db, bulk_vs_single_runs())
    with db.transaction() as session:
        store = SqlTrajectoryStore(session)
        # What a run that died mid-batch leaves: claims in worker 0's name with most of an hour to go,
        # a claim of a live worker elsewhere, and one of a worker that is gone (its lease lapsed).
        store.claim_pending(2, worker=mine, lease=timedelta(hours=1))
        store.claim_pending(1, worker=live, lease=timedelta(hours=1))
        store.claim_pending(1, worker=gone, lease=timedelta(0))
    foreign = [tid for tid, (_, _, worker) in analysis_rows(db, ids).items() if worker == live]
    workers = start_pool(settings, AttributionConfig(workers=1, poll_interval_s=0.05, lease_s=5), pool=pool)
    try:
        # Well inside the hour the old claims had left (and the 5 minutes of a fixed lease).
        wait_analysed(db, [i for i in ids if i not in foreign], 90)
        assert analysis_rows(db, foreign) == dict.fromkeys(foreign, ("claimed", 1, live))

        # Now the worker's own process dies while it holds claims: Ray starts it again, and the new
        # life takes them back and carries on with the queue.
        more = store_runs(db, bulk_vs_single_runs())
        with db.transaction() as session:
            SqlTrajectoryStore(session).claim_pending(3, worker=mine, lease=timedelta(hours=1))
        ray.kill(workers[0], no_restart=False)
        wait_analysed(db, more, 90)
    finally:
        stop_pool(workers)
        db.dispose()
    assert {attempts for _, attempts, _ in analysis_rows(db, more).values()} <= {1, 2}
