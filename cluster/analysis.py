"""Off-path attribution: claim finalized trajectories from the SQL queue, attribute, learn templates.

The SQL store is the queue of record. A claim is a lease: a worker that dies before marking its
batch analysed leaves the lease to expire, and another worker claims the batch again.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from sqlalchemy.orm import Session

from actors.engine import attribute_batch, served_feedback
from cluster.core.errors import HindsightError, NotFound
from cluster.experience.models import LearnReport
from cluster.experience.templates import ExperienceTemplate
from cluster.storage.db import Database
from cluster.trajectories.models import Trajectory
from cluster.trajectories.repository import SqlTrajectoryStore

logger = logging.getLogger(__name__)


class ExperienceLearner(Protocol):
    """What analysis needs from the experience library."""

    def learn_in(self, session: Session, owner: str, templates: Sequence[ExperienceTemplate]) -> LearnReport: ...

    def report_outcome(
        self, owner: str, template_ids: Sequence[uuid.UUID], succeeded: bool, trajectory_id: uuid.UUID | None = None
    ) -> object: ...

    def index_pending(self, owner: str | None = None) -> int: ...


def learn_batch(
    db: Database,
    experience: ExperienceLearner,
    owner: str,
    templates: Sequence[ExperienceTemplate],
    analysed: Sequence[uuid.UUID],
) -> LearnReport:
    """Merge a batch's templates into the owner's library and mark the batch analysed, in one
    transaction; then index the new versions, outside it.

    A retried batch neither loses nor double-counts evidence: the merge counts each piece of
    provenance once, and the trajectories read as analysed only with their lessons stored.
    """
    with db.transaction() as session:
        report = experience.learn_in(session, owner, templates)
        SqlTrajectoryStore(session).mark_analysed(owner, analysed)
    experience.index_pending(owner)
    return report


class AnalysisFailed(HindsightError):
    """Every owner of a claimed batch failed: the batch as a whole is retried after its lease."""


@dataclass(frozen=True)
class BatchReport:
    trajectories: int
    templates: int


class AnalysisService:
    """Runs one attribution batch at a time; every Ray worker owns one."""

    def __init__(
        self,
        db: Database,
        experience: ExperienceLearner,
        *,
        batch_size: int = 10,
        history_limit: int = 200,
        lease: timedelta = timedelta(minutes=5),
        scorer: str = "default",
    ) -> None:
        self.db = db
        self.experience = experience
        self.batch_size = batch_size
        self.history_limit = history_limit
        self.lease = lease
        self.scorer = scorer

    def run_once(self) -> BatchReport:
        """Claim, attribute and learn from one batch; an empty queue returns zero counts.

        First it writes any template vectors a Milvus failure left behind (usually none: one query).
        """
        self.experience.index_pending()
        with self.db.transaction() as session:
            claimed = SqlTrajectoryStore(session).claim_pending(self.batch_size, self.lease)
        if not claimed:
            return BatchReport(0, 0)
        by_owner: dict[str, list[uuid.UUID]] = defaultdict(list)
        for owner, trajectory_id in claimed:
            by_owner[owner].append(trajectory_id)
        learned = failed = 0
        for owner, ids in by_owner.items():
            # Contrast only within one owner's evidence: owners never see each other's runs. One
            # owner's failure must not hold up the others: its claims stay and are retried.
            try:
                learned += self._analyse(owner, ids)
            except HindsightError:
                logger.exception("analysis of %d trajectories of %s failed; they will be retried", len(ids), owner)
                failed += 1
        if failed and failed == len(by_owner):
            raise AnalysisFailed(f"every owner of the batch failed ({failed})")
        return BatchReport(len(claimed), learned)

    def _analyse(self, owner: str, ids: list[uuid.UUID]) -> int:
        with self.db.read() as session:
            store = SqlTrajectoryStore(session)
            batch = store.load_many(owner, ids)
            history = self._history(store, owner, batch)
        results = attribute_batch(batch, history, scorer=self.scorer)
        templates = [t for result in results for t in result.templates]
        # Learning and marking the batch analysed commit together, so a retried batch never
        # counts its evidence twice.
        learn_batch(self.db, self.experience, owner, templates, ids)
        for trajectory in batch:
            self._feedback(owner, trajectory)
        logger.info("analysed %d trajectories of %s: %d templates", len(batch), owner, len(templates))
        return len(templates)

    def _history(self, store: SqlTrajectoryStore, owner: str, batch: Sequence[Trajectory]) -> list[Trajectory]:
        if self.history_limit == 0:
            return []
        current = {t.trajectory_id for t in batch}
        kinds = {(t.header.role, t.header.task_type) for t in batch}
        ids: list[uuid.UUID] = []
        for role, task_type in sorted(kinds, key=str):
            ids.extend(i for i in store.history(owner, role, task_type, self.history_limit) if i not in current)
        return store.load_many(owner, ids)

    def _feedback(self, owner: str, trajectory: Trajectory) -> None:
        verdicts = served_feedback(trajectory)
        if not verdicts:
            return
        try:
            self.experience.report_outcome(
                owner, list(verdicts), next(iter(verdicts.values())), trajectory.trajectory_id
            )
        except NotFound:
            # Checked at finalize; a template gone since then only loses this one report.
            logger.warning("trajectory %s names an experience that no longer exists", trajectory.trajectory_id)
