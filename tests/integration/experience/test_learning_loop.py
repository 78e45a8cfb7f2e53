"""From stored trajectories to served experience: attribution output learned, served, and fed back."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from actors.engine import attribute_batch
from actors.engine.model.trajectories import (
    AnalysisStatus,
    NodeIn,
    Outcome,
    ResultStatus,
    Trajectory,
    TrajectoryLimits,
    TrajectoryStatus,
)
from cluster.analysis import AnalysisService, learn_batch
from cluster.core.errors import NotFound
from cluster.experience.repository import SqlExperienceStore
from cluster.experience.service import ExperienceService
from cluster.storage.db import Database
from cluster.trajectories.capture import CaptureService
from cluster.trajectories.repository import SqlTrajectoryStore
from cluster.trajectories.tables import TrajectoryRow
from tests.unit.engine.builders import bulk_vs_single_runs

pytestmark = pytest.mark.milvus

OWNER = "shop-team"


def store_runs(db: Database, owner: str, runs: list[Trajectory]) -> list[uuid.UUID]:
    with db.transaction() as session:
        store = SqlTrajectoryStore(session)
        for run in runs:
            store.open(owner, run.header)
            nodes = [NodeIn.model_validate(n.model_dump(exclude={"seq"})) for n in run.nodes]
            store.append(owner, run.header.trajectory_id, nodes)
            assert run.outcome is not None
            store.finalize(owner, run.header.trajectory_id, Outcome(status=run.outcome.status))
    return [r.header.trajectory_id for r in runs]


def analysis_status(db: Database, ids: list[uuid.UUID]) -> set[str]:
    with db.transaction() as session:
        return set(session.scalars(select(TrajectoryRow.analysis_status).where(TrajectoryRow.trajectory_id.in_(ids))))


def test_learned_templates_are_served_and_their_batch_is_marked_analysed(
    database: Database, experience: ExperienceService
) -> None:
    ids = store_runs(database, OWNER, bulk_vs_single_runs())
    with database.transaction() as session:
        store = SqlTrajectoryStore(session)
        claimed = store.claim_pending(10)
        batch = store.load_many(OWNER, [i for _, i in claimed])
    assert {i for _, i in claimed} == set(ids)
    templates = [t for result in attribute_batch(batch, []) for t in result.templates]
    assert templates, "the engine should distil the bulk-import lesson"

    report = learn_batch(database, experience, OWNER, templates, ids)
    assert report.new
    assert analysis_status(database, ids) == {AnalysisStatus.DONE.value}
    # A retried batch (same evidence) adds nothing.
    assert learn_batch(database, experience, OWNER, templates, ids).new == ()

    served = experience.query_experience(
        OWNER, "Import 300 products from the supplier CSV file", role="executor", min_confidence=0.0
    )
    assert served.templates
    assert served.templates[0].template.recommended.tool == "bulk_import"
    assert "[EXPERIENCE]" in served.prompt_block

    top = served.templates[0].template
    before = top.confidence
    experience.report_outcome(OWNER, [top.template_id], succeeded=True, trajectory_id=uuid.uuid4())
    assert experience.get_template(OWNER, top.template_id).confidence > before


def test_learning_for_one_owner_never_marks_another_owners_trajectories(
    database: Database, experience: ExperienceService
) -> None:
    ids = store_runs(database, OWNER, bulk_vs_single_runs()[:1])
    learn_batch(database, experience, "someone-else", [], ids)
    assert analysis_status(database, ids) == {AnalysisStatus.PENDING.value}


def test_two_owners_learning_the_same_rule_each_get_their_own_template(
    database: Database, experience: ExperienceService
) -> None:
    runs = bulk_vs_single_runs()
    templates = [t for result in attribute_batch(runs, []) for t in result.templates]
    first = experience.learn(OWNER, templates)
    second = experience.learn("another-team", templates)
    assert first.new
    assert set(first.new).isdisjoint(second.new)
    assert experience.count(OWNER) == experience.count("another-team") == len(first.new)


def test_one_owners_bad_served_id_does_not_stall_another_owners_learning(
    database: Database, experience: ExperienceService
) -> None:
    # The bad id reaches the queue the way a template deleted after finalize would (finalize
    # itself now refuses unknown ids): only that report is lost, both batches are learned.
    good = store_runs(database, OWNER, bulk_vs_single_runs())
    bad_runs = [
        run.model_copy(update={"outcome": Outcome(status=run.outcome.status, served_template_ids=[uuid.uuid4()])})
        for run in bulk_vs_single_runs()
        if run.outcome is not None
    ]
    with database.transaction() as session:
        store = SqlTrajectoryStore(session)
        for run in bad_runs:
            store.open("other-team", run.header)
            nodes = [NodeIn.model_validate(n.model_dump(exclude={"seq"})) for n in run.nodes]
            store.append("other-team", run.header.trajectory_id, nodes)
            assert run.outcome is not None
            store.finalize("other-team", run.header.trajectory_id, run.outcome)
    report = AnalysisService(database, experience, batch_size=50).run_once()
    assert report.trajectories == len(good) + len(bad_runs)
    assert analysis_status(database, good + [r.header.trajectory_id for r in bad_runs]) == {AnalysisStatus.DONE.value}
    assert experience.count(OWNER) > 0
    assert experience.count("other-team") > 0


def test_finalize_refuses_a_served_id_the_owner_was_never_served(database: Database) -> None:
    (run, *_) = bulk_vs_single_runs()
    capture = CaptureService(
        database, TrajectoryLimits(max_trajectory_nodes=50, max_context_bytes=2048), experiences=SqlExperienceStore
    )
    nodes = [NodeIn.model_validate(n.model_dump(exclude={"seq"})) for n in run.nodes]
    capture.record(OWNER, run.header.trajectory_id, nodes, run.header)
    with pytest.raises(NotFound, match="served_template_ids"):
        capture.finalize(
            OWNER, run.header.trajectory_id, Outcome(status=ResultStatus.SUCCESS, served_template_ids=[uuid.uuid4()])
        )
    assert capture.load(OWNER, run.header.trajectory_id).status is TrajectoryStatus.OPEN
