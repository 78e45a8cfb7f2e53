"""Credit across roles through the real store: a planner's plan that fails verification later in
its run teaches the planner's library, on SQLite and Postgres."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from actors.engine.model.templates import ExperienceTemplate
from actors.engine.model.trajectories import AnalysisStatus, NodeIn, Outcome, Trajectory, TrajectoryHeader
from cluster.analysis import AnalysisService
from cluster.experience.repository import SqlExperienceStore
from cluster.experience.service import ExperienceService
from cluster.storage.db import Database
from cluster.trajectories.repository import NO_HOLD, RunHold, SqlTrajectoryStore
from cluster.trajectories.tables import TrajectoryRow
from tests.unit.engine.roles import executor, planner, sync_runs

pytestmark = pytest.mark.milvus

OWNER = "sync-team"


def store(db: Database, runs: list[Trajectory], *, finalize: bool = True) -> list[uuid.UUID]:
    """Store in list order, so each run's roles start planner, executor, verifier."""
    with db.transaction() as session:
        trajectories = SqlTrajectoryStore(session)
        for run in runs:
            trajectories.open(OWNER, run.header)
            nodes = [NodeIn.model_validate(n.model_dump(exclude={"seq"})) for n in run.nodes]
            trajectories.append(OWNER, run.trajectory_id, nodes)
            if finalize:
                assert run.outcome is not None
                trajectories.finalize(OWNER, run.trajectory_id, Outcome(status=run.outcome.status))
    return [r.trajectory_id for r in runs]


def library(db: Database) -> list[ExperienceTemplate]:
    with db.read() as session:
        repo = SqlExperienceStore(session)
        return [t for t, _ in repo.iter_owner(OWNER, version=repo.active_version(OWNER))]


def drain(service: AnalysisService) -> int:
    analysed = 0
    while (report := service.run_once()).trajectories:
        analysed += report.trajectories
    return analysed


@pytest.mark.parametrize("batch_size", [50, 1])
def test_a_plan_that_fails_verification_teaches_the_planners_library(
    database: Database, experience: ExperienceService, batch_size: int
) -> None:
    ids = store(database, sync_runs())
    # One batch holding every role, or one trajectory at a time: the run's other roles come from the store.
    assert drain(AnalysisService(database, experience, batch_size=batch_size, run_hold=NO_HOLD)) == len(ids)
    templates = library(database)
    planner_lessons = [t for t in templates if t.role == "planner"]
    assert {(t.recommended.tool, t.avoid and t.avoid.tool) for t in planner_lessons} == {
        ("plan_incremental", "plan_bulk")
    }
    assert all(t.signature.startswith(f"{t.role}|") for t in templates)
    served = experience.query_experience(OWNER, "choose how to sync", role="planner", min_confidence=0.0)
    assert {s.template.template_id for s in served.templates} == {t.template_id for t in planner_lessons}
    if batch_size > 1:
        (lesson,) = planner_lessons
        assert [p.render() for p in lesson.condition.predicates] == ["live_writes == True"]
        assert (lesson.support.successes, lesson.support.failures) == (2, 3)
    assert experience.query_experience(OWNER, "choose how to sync", role="executor", min_confidence=0.0).templates == ()
    # Analysed exactly once: nothing is claimed again and the support stays.
    assert AnalysisService(database, experience, run_hold=NO_HOLD).run_once().trajectories == 0
    assert library(database) == templates


def test_an_executors_own_mistake_teaches_the_planner_nothing(
    database: Database, experience: ExperienceService
) -> None:
    runs = []
    for i, live in enumerate([False, False, True]):
        run_id = f"own-{i}"
        runs += [planner("plan_bulk", 1000 + i, live, run_id), executor("plan_bulk", run_id, own_mistake=True)]
    store(database, runs)
    AnalysisService(database, experience, batch_size=50, run_hold=NO_HOLD).run_once()
    assert [t for t in library(database) if t.role == "planner"] == []


def test_a_runs_trajectories_wait_until_the_run_is_quiet(database: Database, experience: ExperienceService) -> None:
    plan, run, _check = sync_runs()[:3]
    alone = planner("plan_bulk", 100, False, None)
    store(database, [plan, alone])
    store(database, [run], finalize=False)
    with database.transaction() as session:
        claimed = SqlTrajectoryStore(session).claim_pending(10, run_hold=RunHold(quiet=timedelta(hours=1)))
    # A trajectory without a run is analysed at once; the planner waits for its open executor.
    assert [i for _, i in claimed] == [alone.trajectory_id]
    with database.transaction() as session:
        waited = SqlTrajectoryStore(session).claim_pending(
            10, run_hold=RunHold(quiet=timedelta(hours=1), longest=timedelta(0))
        )
    assert [i for _, i in waited] == [plan.trajectory_id], "held no longer than the longest wait"


def test_run_id_is_stored_and_a_run_member_reads_back_its_run(database: Database) -> None:
    header = TrajectoryHeader(agent_id="v1", role="verifier", task="check", run_id="run-x")
    with database.transaction() as session:
        SqlTrajectoryStore(session).open(OWNER, header)
    with database.read() as session:
        row = session.scalar(select(TrajectoryRow).where(TrajectoryRow.trajectory_id == header.trajectory_id))
    assert row is not None
    assert row.run_id == "run-x"
    assert row.analysis_status == AnalysisStatus.NONE.value
