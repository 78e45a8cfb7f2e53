"""A worker that dies half way through a batch loses no served outcome and counts none twice.

Analysing a trajectory writes twice: the outcome it reports to the experiences it was served
(``report_outcome``, one transaction per trajectory) and the lessons learned together with the
analysed mark (``learn_batch``). Found by ``test_kill.py``: with the mark first, a ``kill -9``
between the two left trajectories analysed whose served outcomes were never counted, and nothing
ever counted them. Here the worker's death is a ``BaseException`` raised at one of the two writes:
nothing after it runs, as after a kill.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from actors.engine.model.templates import ExperienceTemplate
from actors.engine.model.trajectories import NodeIn, Outcome, Trajectory
from actors.engine.retire import ActionOutcome
from cluster.analysis import AnalysisService
from cluster.experience.models import LearnReport
from cluster.experience.service import ExperienceService
from cluster.experience.tables import ConfidenceChangeRow, ExperienceTemplateRow, ServedOutcomeRow
from cluster.storage.db import Database
from cluster.trajectories.repository import SqlTrajectoryStore
from cluster.trajectories.tables import TrajectoryRow
from tests.unit.engine.builders import bulk_vs_single_runs, insert_run

pytestmark = [pytest.mark.reliability, pytest.mark.milvus]

OWNER = "shop-team"
WORKER = "host:pool/attribution-0"


class Died(BaseException):
    """The worker's process ends here: no handler runs, nothing after it happens."""


class DiesAt:
    """The real experience service, except that the worker dies on the first call of ``point``."""

    def __init__(self, inner: ExperienceService, point: str) -> None:
        self.inner = inner
        self.point = point

    def _maybe_die(self, point: str) -> None:
        if point == self.point:
            raise Died(point)

    def learn_in(
        self,
        session: Session,
        owner: str,
        templates: Sequence[ExperienceTemplate],
        outcomes: Sequence[ActionOutcome] = (),
    ) -> LearnReport:
        self._maybe_die("learn_in")
        return self.inner.learn_in(session, owner, templates, outcomes)

    def report_outcome(
        self, owner: str, template_ids: Sequence[uuid.UUID], succeeded: bool, trajectory_id: uuid.UUID | None = None
    ) -> object:
        self._maybe_die("report_outcome")
        return self.inner.report_outcome(owner, template_ids, succeeded, trajectory_id)

    def index_pending(self, owner: str | None = None) -> int:
        return self.inner.index_pending(owner)


def store(db: Database, runs: Sequence[Trajectory], served: Sequence[uuid.UUID] = ()) -> list[uuid.UUID]:
    with db.transaction() as session:
        trajectories = SqlTrajectoryStore(session)
        for run in runs:
            trajectories.open(OWNER, run.header)
            nodes = [NodeIn.model_validate(n.model_dump(exclude={"seq"})) for n in run.nodes]
            trajectories.append(OWNER, run.header.trajectory_id, nodes)
            assert run.outcome is not None
            outcome = Outcome(status=run.outcome.status, served_template_ids=list(served))
            trajectories.finalize(OWNER, run.header.trajectory_id, outcome)
    return [r.header.trajectory_id for r in runs]


def outcomes_counted(db: Database, template: uuid.UUID, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, tuple[int, int]]:
    """Per trajectory: stored outcome reports and confidence changes it caused on ``template``."""
    with db.read() as session:
        reports = dict(
            session.execute(
                select(ServedOutcomeRow.trajectory_id, func.count())
                .where(ServedOutcomeRow.template_id == template, ServedOutcomeRow.trajectory_id.in_(list(ids)))
                .group_by(ServedOutcomeRow.trajectory_id)
            ).all()
        )
        changes = dict(
            session.execute(
                select(ConfidenceChangeRow.trajectory_id, func.count())
                .where(
                    ConfidenceChangeRow.template_id == template,
                    ConfidenceChangeRow.trajectory_id.in_(list(ids)),
                    ConfidenceChangeRow.reason.in_(("success", "failure")),
                )
                .group_by(ConfidenceChangeRow.trajectory_id)
            ).all()
        )
    return {i: (reports.get(i, 0), changes.get(i, 0)) for i in ids}


def statuses(db: Database, ids: Sequence[uuid.UUID]) -> set[str]:
    with db.read() as session:
        return set(session.scalars(select(TrajectoryRow.analysis_status).where(TrajectoryRow.trajectory_id.in_(ids))))


@pytest.mark.parametrize("point", ["report_outcome", "learn_in"])
def test_a_worker_dying_between_the_writes_of_a_batch_loses_no_served_outcome_and_counts_none_twice(
    experience: ExperienceService, point: str
) -> None:
    db = experience.db
    store(db, bulk_vs_single_runs())
    assert AnalysisService(db, experience, worker=WORKER).run_once().templates > 0
    with db.read() as session:
        template = session.scalars(
            select(ExperienceTemplateRow.template_id).where(ExperienceTemplateRow.owner == OWNER)
        ).first()
    assert template is not None
    served = store(
        db, [insert_run(30, "add_item", True, run=7), insert_run(700, "bulk_import", True, run=8)], [template]
    )

    with pytest.raises(Died):
        AnalysisService(db, DiesAt(experience, point), worker=WORKER).run_once()
    # The worker starts again under its name, as after a restart of the service.
    again = AnalysisService(db, experience, worker=WORKER)
    again.release_own_claims()
    again.run_once()

    assert statuses(db, served) == {"done"}
    assert outcomes_counted(db, template, served) == dict.fromkeys(served, (1, 1))
