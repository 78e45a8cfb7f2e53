"""Off-path attribution: claim finalized trajectories from the SQL queue, attribute, learn templates.

The SQL store is the queue of record. A claim is a lease in a worker's name that a heartbeat
extends while the worker works on its batch. A worker that dies stops heartbeating: its lease lapses
after ``lease`` and another worker claims the batch again; the same worker started again takes its
claims back at once (:meth:`AnalysisService.release_own_claims`). A worker whose lease lapsed
anyway (it stalled longer than a lease) finds out when it commits, and its result is rolled back,
so each trajectory is analysed once.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from sqlalchemy.orm import Session

from actors.engine import Scorer, attribute_batch, get_scorer, served_feedback
from actors.engine.model.templates import ExperienceTemplate
from actors.engine.model.trajectories import Trajectory
from actors.engine.retire import ActionOutcome
from cluster.core.errors import HindsightError, InvalidInput, LeaseLost, NotFound
from cluster.experience.models import LearnReport, RoleLibraries
from cluster.experience.roles import pooled_roles
from cluster.storage.db import Database
from cluster.storage.heartbeat import Heartbeat
from cluster.trajectories.repository import DEFAULT_LEASE, RunHold, SqlTrajectoryStore

logger = logging.getLogger(__name__)


def load_scorer(name: str, modules: Sequence[str] = ()) -> Scorer:
    """Import ``modules``, where scorers of one's own register themselves, then return the scorer
    registered as ``name``: the one way every runtime finds its scorer (the ``scorer`` and
    ``scorer_modules`` settings, or ``reprocess``'s and ``evaluate``'s options).

    Call it in each process that attributes: a Ray actor imports the modules anew. Importing a
    module twice registers nothing twice (Python imports it once).

    Raises:
        InvalidInput: a module cannot be imported, or no scorer is registered as ``name`` (the
            message lists those that are).
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise InvalidInput(f"scorer module {module!r} cannot be imported: {exc}") from exc
    return get_scorer(name)


class ExperienceLearner(Protocol):
    """What analysis needs from the experience library."""

    def learn_in(
        self,
        session: Session,
        owner: str,
        templates: Sequence[ExperienceTemplate],
        outcomes: Sequence[ActionOutcome] = (),
    ) -> LearnReport: ...

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
    worker: str | None = None,
    outcomes: Sequence[ActionOutcome] = (),
) -> LearnReport:
    """Merge a batch's templates into the owner's library and mark the batch analysed, in one
    transaction; then index the new versions, outside it.

    A retried batch neither loses nor double-counts evidence: the merge counts each piece of
    provenance once, and the trajectories read as analysed only with their lessons stored.

    Raises:
        LeaseLost: ``worker`` no longer holds the claim on the batch; nothing was stored.
    """
    with db.transaction() as session:
        report = experience.learn_in(session, owner, templates, outcomes)
        SqlTrajectoryStore(session).mark_analysed(owner, analysed, worker)
    experience.index_pending(owner)
    return report


class AnalysisFailed(HindsightError):
    """Every owner of a claimed batch failed: the batch as a whole is retried once its lease lapses."""


@dataclass(frozen=True)
class BatchReport:
    trajectories: int
    templates: int
    reclaimed: int = 0
    """Claims of other workers whose lease had lapsed, put back in the queue before this claim."""
    lost: int = 0
    """Claimed trajectories whose lease lapsed during the batch: another worker analyses them."""


def process_worker() -> str:
    """A worker name for a process that has no stable one: its claims lapse after a lease if it dies."""
    return f"{socket.gethostname()}/{os.getpid()}"


class AnalysisService:
    """Runs one attribution batch at a time; every Ray worker owns one."""

    def __init__(
        self,
        db: Database,
        experience: ExperienceLearner,
        *,
        batch_size: int = 10,
        history_limit: int = 200,
        worker: str | None = None,
        lease: timedelta = DEFAULT_LEASE,
        heartbeat: timedelta | None = None,
        scorer: str = "default",
        run_hold: RunHold | None = None,
        roles: RoleLibraries | None = None,
    ) -> None:
        self.db = db
        self.experience = experience
        self.batch_size = batch_size
        self.history_limit = history_limit
        self.worker = worker or process_worker()
        self.lease = lease
        # Three beats per lease: one lost beat (a slow commit) does not lose the claims.
        self.heartbeat = heartbeat or lease / 3
        self.scorer = scorer
        self.run_hold = run_hold or RunHold()
        self.roles = roles or RoleLibraries()

    def release_own_claims(self) -> int:
        """Put back in the queue what this worker's name holds: for a worker (re)starting, whose
        earlier life died mid-batch. Returns how many claims were released."""
        with self.db.transaction() as session:
            released = SqlTrajectoryStore(session).release_claims(self.worker)
        if released:
            logger.info("%s took back %d claims of its earlier run", self.worker, released)
        return released

    def run_once(self) -> BatchReport:
        """Claim, attribute and learn from one batch; an empty queue returns zero counts.

        First it writes any template vectors a Milvus failure left behind (usually none: one query).
        An empty queue is found by a read: an idle worker polls without taking the write lock.
        """
        self.experience.index_pending()
        with self.db.read() as session:
            if not SqlTrajectoryStore(session).has_claimable():
                return BatchReport(0, 0)
        with self.db.transaction() as session:
            store = SqlTrajectoryStore(session)
            reclaimed = store.expire_leases()
            claimed = store.claim_pending(self.batch_size, worker=self.worker, lease=self.lease, run_hold=self.run_hold)
        if reclaimed:
            logger.info("%d claims of stopped workers lapsed and went back to the queue", reclaimed)
        if not claimed:
            return BatchReport(0, 0, reclaimed=reclaimed)
        by_owner: dict[str, list[uuid.UUID]] = defaultdict(list)
        for owner, trajectory_id in claimed:
            by_owner[owner].append(trajectory_id)
        learned = failed = lost = 0
        ids = [i for _, i in claimed]
        with Heartbeat(lambda: self._renew(ids), self.heartbeat.total_seconds(), f"heartbeat {self.worker}"):
            for owner, ids in by_owner.items():
                # Contrast only within one owner's evidence: owners never see each other's runs. One
                # owner's failure must not hold up the others: its claims lapse after the batch and
                # are retried.
                try:
                    learned += self._analyse(owner, ids)
                except LeaseLost:
                    logger.warning("%s: the lease on %d trajectories of %s lapsed", self.worker, len(ids), owner)
                    lost += len(ids)
                except HindsightError:
                    logger.exception("analysis of %d trajectories of %s failed; they will be retried", len(ids), owner)
                    failed += 1
        if failed and failed == len(by_owner):
            raise AnalysisFailed(f"every owner of the batch failed ({failed})")
        return BatchReport(len(claimed) - lost, learned, reclaimed=reclaimed, lost=lost)

    def _analyse(self, owner: str, ids: list[uuid.UUID]) -> int:
        with self.db.read() as session:
            store = SqlTrajectoryStore(session)
            batch = pooled_roles(store.load_many(owner, ids), self.roles)
            history = pooled_roles(self._history(store, owner, batch), self.roles)
            # The other roles of their runs: a later role's failure is charged to earlier hand-offs.
            known = [t.trajectory_id for t in (*batch, *history)]
            run_ids = [t.header.run_id for t in (*batch, *history) if t.header.run_id is not None]
            members = store.run_members(owner, run_ids, known)
        results = attribute_batch(batch, history, scorer=self.scorer, run_members=members)
        templates = [t for result in results for t in result.templates]
        # Served outcomes before the analysed mark: a batch marked analysed is never claimed again,
        # so an outcome left for after the mark is lost if the worker dies in between. Reported
        # again after such a death, an outcome changes nothing (one per experience and trajectory).
        for trajectory in batch:
            self._feedback(owner, trajectory)
        # Learning and marking the batch analysed commit together, so a retried batch never
        # counts its evidence twice.
        outcomes = [o for result in results for o in result.outcomes]
        learn_batch(self.db, self.experience, owner, templates, ids, self.worker, outcomes)
        logger.info("analysed %d trajectories of %s: %d templates", len(batch), owner, len(templates))
        return len(templates)

    def _renew(self, ids: Sequence[uuid.UUID]) -> bool:
        """One heartbeat: extend this worker's claims on ``ids``; a lost claim is another worker's now."""
        with self.db.transaction() as session:
            held = SqlTrajectoryStore(session).heartbeat(self.worker, ids, self.lease)
        if held < len(ids):
            logger.warning("%s lost %d of its %d claims", self.worker, len(ids) - held, len(ids))
        return True

    def _history(self, store: SqlTrajectoryStore, owner: str, batch: Sequence[Trajectory]) -> list[Trajectory]:
        if self.history_limit == 0:
            return []
        current = {t.trajectory_id for t in batch}
        kinds = {(t.header.role, t.header.task_type) for t in batch}
        ids: list[uuid.UUID] = []
        for role, task_type in sorted(kinds, key=str):
            roles = self.roles.served_roles(role)
            ids.extend(i for i in store.history(owner, roles, task_type, self.history_limit) if i not in current)
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
