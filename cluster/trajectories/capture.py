"""Trajectory capture service: one unit of work per call (or per batch of calls) over the SQL
trajectory store."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import NamedTuple

from sqlalchemy.orm import Session

from actors.engine.model.trajectories import (
    NodeIn,
    Outcome,
    RecordResult,
    Trajectory,
    TrajectoryHeader,
    TrajectoryLimits,
)
from cluster.core.errors import HindsightError, InvalidInput, NotFound
from cluster.storage.db import Database
from cluster.trajectories.ports import ServedExperiences
from cluster.trajectories.repository import SqlTrajectoryStore


class RecordCall(NamedTuple):
    """One caller's :meth:`CaptureService.record` arguments, for :meth:`CaptureService.record_batch`."""

    owner: str
    trajectory_id: uuid.UUID
    nodes: Sequence[NodeIn]
    header: TrajectoryHeader | None = None


class CaptureService:
    """Records what agents did. Every call is one transaction: when it returns, the write is durable."""

    def __init__(
        self,
        db: Database,
        limits: TrajectoryLimits | None = None,
        *,
        experiences: Callable[[Session], ServedExperiences] | None = None,
    ) -> None:
        """``experiences`` opens the experience store on a unit of work's session (the composition
        root passes ``SqlExperienceStore``), so that a finalize refuses experience ids the owner does
        not have; without it those ids are not checked."""
        self.db = db
        self.limits = limits or TrajectoryLimits()
        self.experiences = experiences

    def open(self, owner: str, header: TrajectoryHeader) -> Trajectory:
        with self.db.transaction() as session:
            return SqlTrajectoryStore(session, self.limits).open(owner, header)

    def record(
        self,
        owner: str,
        trajectory_id: uuid.UUID,
        nodes: Sequence[NodeIn],
        header: TrajectoryHeader | None = None,
    ) -> RecordResult:
        """Append nodes, opening the trajectory first when its header comes along (the first call)."""
        with self.db.transaction() as session:
            return self._record(session, RecordCall(owner, trajectory_id, nodes, header))

    def record_batch(self, calls: Sequence[RecordCall]) -> list[RecordResult | Exception]:
        """Several callers' :meth:`record` in one transaction: one write lock and one commit.

        Each call runs in a savepoint, so a call the store refuses (a bad parent, a changed node)
        fails alone and the others land. Returns each call's result or error, in order. Should the
        shared transaction itself fail, every call is tried again in a transaction of its own, so
        one caller's trouble never becomes another's.
        """
        try:
            with self.db.transaction() as session:
                outcomes: list[RecordResult | Exception] = []
                for call in calls:
                    try:
                        with session.begin_nested():
                            outcomes.append(self._record(session, call))
                    except HindsightError as exc:
                        outcomes.append(exc)
                return outcomes
        except Exception:
            if len(calls) == 1:
                raise
        return [self._record_alone(call) for call in calls]

    def _record_alone(self, call: RecordCall) -> RecordResult | Exception:
        try:
            return self.record(*call)
        except Exception as exc:
            return exc

    def _record(self, session: Session, call: RecordCall) -> RecordResult:
        owner, trajectory_id, nodes, header = call
        if header is not None and header.trajectory_id != trajectory_id:
            raise InvalidInput(
                f"header.trajectory_id {header.trajectory_id} differs from trajectory_id {trajectory_id}"
            )
        store = SqlTrajectoryStore(session, self.limits)
        if header is not None:
            store.open(owner, header)
        return store.append(owner, trajectory_id, nodes)

    def finalize(self, owner: str, trajectory_id: uuid.UUID, outcome: Outcome) -> Trajectory:
        """Close the trajectory and queue it for analysis.

        Raises:
            NotFound: the trajectory, or one of ``outcome.served_template_ids``, is not the owner's
                (checked here, so a bad id fails this call, not the background analysis).
        """
        with self.db.transaction() as session:
            if self.experiences is not None:
                served = list(dict.fromkeys(outcome.served_template_ids))
                known = self.experiences(session).existing_ids(owner, served)
                unknown = [i for i in served if i not in known]
                if unknown:
                    raise NotFound(
                        f"served_template_ids: {len(unknown)} unknown experience id(s), e.g. {unknown[0]}; "
                        "send the ids query_experience returned"
                    )
            return SqlTrajectoryStore(session, self.limits).finalize(owner, trajectory_id, outcome)

    def load(self, owner: str, trajectory_id: uuid.UUID) -> Trajectory:
        with self.db.read() as session:
            return SqlTrajectoryStore(session, self.limits).load(owner, trajectory_id)
