"""SQL trajectory store: the source of truth for trajectories and the analysis queue of record."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple, cast

from sqlalchemy import ColumnElement, Row, Table, bindparam, exists, func, insert, literal, or_, select, true, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, aliased

from actors.engine.model.trajectories import (
    AnalysisStatus,
    Node,
    NodeIn,
    Outcome,
    RecordResult,
    Trajectory,
    TrajectoryHeader,
    TrajectoryLimits,
    TrajectoryStatus,
)
from cluster.core.errors import Conflict, LeaseLost, NotFound, TrajectoryClosed
from cluster.core.types import utcnow
from cluster.trajectories.ports import RoleGrouping
from cluster.trajectories.tables import NodeRow, TrajectoryRow

# Long enough to ride out a stall (a GC pause, a slow commit) between heartbeats at a third of it,
# short enough that work a dead worker held waits seconds, not minutes.
DEFAULT_LEASE = timedelta(seconds=30)


@dataclass(frozen=True)
class RunHold:
    """How long the analysis of a multi-agent run's trajectories waits for the rest of the run.

    A trajectory with a run is claimed only once its run has been quiet for ``quiet`` (no member
    open, none started or finalized since), so a later role's failure is known when the earlier
    roles are attributed; after ``longest`` from its own finalize it is claimed anyway (a member
    left open by a crashed agent must not hold the run for ever).
    """

    quiet: timedelta = timedelta(seconds=30)
    longest: timedelta = timedelta(minutes=30)


NO_HOLD = RunHold(quiet=timedelta(0), longest=timedelta(0))


def _lapsed(now: datetime) -> ColumnElement[bool]:
    return or_(TrajectoryRow.analysis_lease_until.is_(None), TrajectoryRow.analysis_lease_until < now)


def _claimable(now: datetime) -> ColumnElement[bool]:
    """Waiting for analysis: pending, or claimed under a lease that lapsed."""
    return or_(
        TrajectoryRow.analysis_status == AnalysisStatus.PENDING.value,
        (TrajectoryRow.analysis_status == AnalysisStatus.CLAIMED.value) & _lapsed(now),
    )


# The append path runs once per recorded node: its statements are built once (their compiled form
# and cache key are reused) and run as Core statements, without the ORM's per-row bookkeeping.
_T = cast(Table, TrajectoryRow.__table__)
_N = cast(Table, NodeRow.__table__)
_LOCK_FOR_APPEND = (
    select(_T.c.status, _T.c.node_count)
    .where(_T.c.owner == bindparam("by_owner"), _T.c.trajectory_id == bindparam("by_trajectory"))
    .with_for_update()
)
_KNOWN_NODES = select(_N.c.node_id, _N.c.payload_hash).where(
    _N.c.owner == bindparam("by_owner"),
    _N.c.trajectory_id == bindparam("by_trajectory"),
    _N.c.node_id.in_(bindparam("node_ids", expanding=True)),
)
_INSERT_NODES = insert(_N)
_COUNT_NODES = (
    update(_T)
    .where(_T.c.owner == bindparam("by_owner"), _T.c.trajectory_id == bindparam("by_trajectory"))
    .values(node_count=bindparam("node_count"))
)


class SqlTrajectoryStore:
    """Durable trajectories, inside the caller's SQLAlchemy session: it never commits by itself.

    Every method is constrained by ``owner``: another owner's trajectory is ``NotFound``.
    """

    def __init__(self, session: Session, limits: TrajectoryLimits | None = None) -> None:
        self._session = session
        self._limits = limits or TrajectoryLimits()

    def open(self, owner: str, header: TrajectoryHeader) -> Trajectory:
        """Create the trajectory, or return it if an identical header exists (``Conflict`` if it differs).

        Safe under concurrency: the same first call sent twice at once (a retry while the first send
        is in flight) opens the trajectory once and finds it the second time.
        """
        row = self._row(owner, header.trajectory_id, lock=False, missing_ok=True)
        if row is None:
            # ON CONFLICT DO NOTHING rather than a plain insert: a concurrent open of the same id waits
            # for the other transaction and then inserts nothing, where a plain insert would fail
            # with a unique violation once the other commits (Postgres; SQLite writers queue anyway).
            values = {
                "trajectory_id": header.trajectory_id,
                "owner": owner,
                "agent_id": header.agent_id,
                "role": header.role,
                "task": header.task,
                "task_type": header.task_type,
                "run_id": header.run_id,
                "status": TrajectoryStatus.OPEN.value,
                "node_count": 0,
                "created_at": utcnow(),
                "analysis_status": AnalysisStatus.NONE.value,
                "analysis_attempts": 0,
            }
            dialect = self._session.get_bind().dialect.name
            self._session.execute(
                (pg_insert if dialect == "postgresql" else sqlite_insert)(_T).values(values).on_conflict_do_nothing()
            )
            row = self._row(owner, header.trajectory_id, lock=False, missing_ok=True)
            if row is None:
                # The id exists under another owner; say no more than that it is taken.
                raise Conflict(f"trajectory {header.trajectory_id} already exists")
        if _header(row) != header:
            raise Conflict(
                f"trajectory {header.trajectory_id} exists with a different header "
                f"(agent_id={row.agent_id!r}, role={row.role!r}, task_type={row.task_type!r}, "
                f"run_id={row.run_id!r})"
            )
        return _trajectory(row, ())

    def append(self, owner: str, trajectory_id: uuid.UUID, nodes: Sequence[NodeIn]) -> RecordResult:
        """Add nodes atomically: all or none.

        Raises ``NotFound`` (trajectory or a parent unknown), ``Conflict`` (same id, other payload; a
        second root), ``TrajectoryClosed`` (finalized and the node is new) or ``LimitExceeded``.
        A node identical to a stored one is a no-op. Returns every id of the batch and the new node count.
        """
        conn = self._session.connection()
        key = {"by_owner": owner, "by_trajectory": trajectory_id}
        locked = conn.execute(_LOCK_FOR_APPEND, key).first()
        if locked is None:
            raise NotFound(f"trajectory {trajectory_id} not found; open it with its header first")
        status, count = locked
        ids = [n.node_id for n in nodes]
        wanted = set(ids) | {n.parent_id for n in nodes if n.parent_id is not None}
        known: dict[uuid.UUID, str] = dict(conn.execute(_KNOWN_NODES, {**key, "node_ids": list(wanted)}).all())
        fresh: list[NodeIn] = []
        for node in nodes:
            stored = known.get(node.node_id)
            if stored is None:
                fresh.append(node)
            elif stored != node.payload_hash():
                raise Conflict(f"node {node.node_id} was already recorded with a different payload")
        if not fresh:
            return RecordResult(trajectory_id=trajectory_id, node_ids=ids, node_count=count)
        if status != TrajectoryStatus.OPEN.value:
            raise TrajectoryClosed(f"trajectory {trajectory_id} is finalized; it accepts no new nodes")
        self._limits.check_nodes(fresh, existing_count=count)
        self._check_parents(owner, trajectory_id, fresh, known)
        conn.execute(
            _INSERT_NODES, [_node_values(owner, trajectory_id, node, count + i) for i, node in enumerate(fresh)]
        )
        count += len(fresh)
        conn.execute(_COUNT_NODES, {**key, "node_count": count})
        return RecordResult(trajectory_id=trajectory_id, node_ids=ids, node_count=count)

    def _check_parents(
        self, owner: str, trajectory_id: uuid.UUID, fresh: Sequence[NodeIn], known: dict[uuid.UUID, str]
    ) -> None:
        # A parent must be stored already or come earlier in the same batch: the tree then can
        # never hold a cycle or a dangling branch.
        earlier: set[uuid.UUID] = set()
        roots = 0
        for node in fresh:
            if node.parent_id is None:
                roots += 1
            elif node.parent_id not in known and node.parent_id not in earlier:
                raise NotFound(
                    f"node {node.node_id}: parent {node.parent_id} is unknown in trajectory {trajectory_id}; "
                    "record the parent first"
                )
            earlier.add(node.node_id)
        if roots and (roots > 1 or self._has_root(owner, trajectory_id)):
            raise Conflict(f"trajectory {trajectory_id} already has a root; give the node a parent_id")

    def _has_root(self, owner: str, trajectory_id: uuid.UUID) -> bool:
        found = self._session.scalar(
            select(NodeRow.node_id)
            .where(NodeRow.owner == owner, NodeRow.trajectory_id == trajectory_id, NodeRow.parent_id.is_(None))
            .limit(1)
        )
        return found is not None

    def finalize(self, owner: str, trajectory_id: uuid.UUID, outcome: Outcome) -> Trajectory:
        """Close the trajectory and queue it for analysis.

        A repeat that agrees with the stored outcome on what it sends is a no-op: a retry that
        leaves out the summary or the served ids says nothing new.
        """
        row = self._row(owner, trajectory_id, lock=True)
        stored = row.outcome
        if row.status == TrajectoryStatus.FINALIZED.value:
            if stored is not None and _repeats(Outcome.model_validate(stored), outcome):
                return _trajectory(row, ())
            raise Conflict(f"trajectory {trajectory_id} was already finalized with another outcome")
        row.status = TrajectoryStatus.FINALIZED.value
        row.outcome = outcome.model_dump(mode="json")
        row.finalized_at = utcnow()
        row.analysis_status = AnalysisStatus.PENDING.value
        self._session.flush()
        return _trajectory(row, ())

    def load(self, owner: str, trajectory_id: uuid.UUID) -> Trajectory:
        # One round trip: the trajectory row joined to its nodes in arrival order.
        result = self._session.execute(
            select(TrajectoryRow, NodeRow)
            .outerjoin(NodeRow, NodeRow.trajectory_id == TrajectoryRow.trajectory_id)
            .where(TrajectoryRow.owner == owner, TrajectoryRow.trajectory_id == trajectory_id)
            .order_by(NodeRow.seq)
        ).all()
        if not result:
            raise NotFound(f"trajectory {trajectory_id} not found")
        row = result[0][0]
        return _trajectory(row, [n for _, n in result if n is not None])

    def load_many(self, owner: str | None, trajectory_ids: Sequence[uuid.UUID]) -> list[Trajectory]:
        """Several trajectories in one query; ``owner=None`` is for trusted batch jobs only."""
        if not trajectory_ids:
            return []
        # Plain rows, not ORM objects (a third less CPU: batch jobs read every stored trajectory),
        # and each trajectory's own columns once, not once per node.
        heads, nodes = TrajectoryRow.__table__, NodeRow.__table__
        query = select(heads).where(heads.c.trajectory_id.in_(trajectory_ids))
        if owner is not None:
            query = query.where(heads.c.owner == owner)
        found = {row.trajectory_id: row for row in self._session.execute(query)}
        by_trajectory: dict[uuid.UUID, list[Any]] = {tid: [] for tid in found}
        if found:
            listed = select(nodes).where(nodes.c.trajectory_id.in_(list(found))).order_by(nodes.c.seq)
            for node in self._session.execute(listed):
                by_trajectory[node.trajectory_id].append(node)
        return [_trajectory(found[tid], by_trajectory[tid]) for tid in trajectory_ids if tid in found]

    # --- analysis queue -------------------------------------------------------------------------
    #
    # A claim is a lease held by a named worker until ``analysis_lease_until``; the worker moves that
    # time on with :meth:`heartbeat` while it works. A claim whose heartbeats stopped lapses after one
    # short lease and goes back to the queue; a live claim of another worker is never taken.

    def claim_pending(
        self,
        limit: int,
        *,
        worker: str | None = None,
        lease: timedelta = DEFAULT_LEASE,
        run_hold: RunHold | None = None,
    ) -> list[tuple[str, uuid.UUID]]:
        """Claim up to ``limit`` finalized trajectories for ``worker`` for ``lease``, oldest first.

        Pending trajectories and claims whose lease lapsed are taken, so nothing is lost; on
        Postgres, concurrent workers skip each other's rows instead of waiting. A trajectory of a
        multi-agent run waits as ``run_hold`` says (default :class:`RunHold`).
        """
        now = utcnow()
        query = (
            select(TrajectoryRow)
            .where(_claimable(now), _run_settled(now, run_hold or RunHold()))
            .order_by(TrajectoryRow.finalized_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        rows = list(self._session.scalars(query))
        for row in rows:
            row.analysis_status = AnalysisStatus.CLAIMED.value
            row.analysis_claimed_at = now
            row.analysis_claimed_by = worker
            row.analysis_lease_until = now + lease
            row.analysis_attempts += 1
        self._session.flush()
        return [(r.owner, r.trajectory_id) for r in rows]

    def has_claimable(self) -> bool:
        """Is any trajectory waiting for analysis, or any claim's lease lapsed? A read that spares an
        idle worker the write transaction of :meth:`claim_pending` (on SQLite, the file's write lock)."""
        return self._session.scalar(select(literal(1)).where(_claimable(utcnow())).limit(1)) is not None

    def heartbeat(self, worker: str, trajectory_ids: Sequence[uuid.UUID], lease: timedelta) -> int:
        """Extend ``worker``'s claims on ``trajectory_ids`` to ``lease`` from now; returns how many it
        still holds (a claim another worker took over after it lapsed stays theirs)."""
        if not trajectory_ids:
            return 0
        result = self._session.execute(
            update(TrajectoryRow)
            .where(
                TrajectoryRow.trajectory_id.in_(list(trajectory_ids)),
                TrajectoryRow.analysis_status == AnalysisStatus.CLAIMED.value,
                TrajectoryRow.analysis_claimed_by == worker,
            )
            .values(analysis_lease_until=utcnow() + lease)
        )
        return int(result.rowcount)  # type: ignore[attr-defined]

    def expire_leases(self) -> int:
        """Put every claim whose lease lapsed back in the queue; returns how many."""
        return self._unclaim(_lapsed(utcnow()))

    def release_claims(self, worker: str) -> int:
        """Put every claim ``worker`` holds back in the queue; returns how many.

        For a worker that starts again under the same name: what it holds is left from an earlier
        life that died mid-batch, and waiting for those leases to lapse would only delay it.
        """
        return self._unclaim(TrajectoryRow.analysis_claimed_by == worker)

    def _unclaim(self, which: ColumnElement[bool]) -> int:
        result = self._session.execute(
            update(TrajectoryRow)
            .where(TrajectoryRow.analysis_status == AnalysisStatus.CLAIMED.value, which)
            .values(analysis_status=AnalysisStatus.PENDING.value, analysis_claimed_by=None, analysis_lease_until=None)
        )
        return int(result.rowcount)  # type: ignore[attr-defined]

    def mark_analysed(self, owner: str, trajectory_ids: Sequence[uuid.UUID], worker: str | None = None) -> None:
        """Close the analysis of the owner's trajectories (in the unit of work that stored their lessons).

        Raises:
            LeaseLost: ``worker`` was given and no longer holds the claim on some of them (its lease
                lapsed and another worker took them over): the caller's unit of work must roll back,
                so that each trajectory is analysed once.
        """
        ids = set(trajectory_ids)
        if not ids:
            return
        query = update(TrajectoryRow).where(TrajectoryRow.owner == owner, TrajectoryRow.trajectory_id.in_(list(ids)))
        if worker is not None:
            query = query.where(
                TrajectoryRow.analysis_status == AnalysisStatus.CLAIMED.value,
                TrajectoryRow.analysis_claimed_by == worker,
            )
        result = self._session.execute(
            query.values(
                analysis_status=AnalysisStatus.DONE.value,
                analysed_at=utcnow(),
                analysis_claimed_by=None,
                analysis_lease_until=None,
            )
        )
        held = int(result.rowcount)  # type: ignore[attr-defined]
        if worker is not None and held != len(ids):
            raise LeaseLost(
                f"worker {worker} no longer holds the claim on {len(ids) - held} of {len(ids)} trajectories; "
                "their lease lapsed and another worker analyses them"
            )

    def queue_depth(self) -> int:
        return int(
            self._session.scalar(
                select(func.count()).where(
                    TrajectoryRow.analysis_status.in_([AnalysisStatus.PENDING.value, AnalysisStatus.CLAIMED.value])
                )
            )
            or 0
        )

    def oldest_pending_at(self) -> datetime | None:
        return self._session.scalar(
            select(func.min(TrajectoryRow.finalized_at)).where(
                TrajectoryRow.analysis_status.in_([AnalysisStatus.PENDING.value, AnalysisStatus.CLAIMED.value])
            )
        )

    def run_members(self, owner: str, run_ids: Sequence[str], known: Sequence[uuid.UUID] = ()) -> list[Trajectory]:
        """The owner's finalized trajectories of these runs, but for the ``known`` ones: the other
        roles a batch needs to follow hand-offs (:mod:`actors.engine.handoff`)."""
        if not run_ids:
            return []
        ids = self._session.scalars(
            select(TrajectoryRow.trajectory_id).where(
                TrajectoryRow.owner == owner,
                TrajectoryRow.run_id.in_(sorted(set(run_ids))),
                TrajectoryRow.status == TrajectoryStatus.FINALIZED.value,
            )
        )
        skip = set(known)
        return self.load_many(owner, [i for i in ids if i not in skip])

    def history(
        self, owner: str, roles: Sequence[str] | None, task_type: str | None, limit: int = 200
    ) -> list[uuid.UUID]:
        """Ids of the owner's most recent analysed trajectories of one of ``roles`` (those sharing a
        library) and the same task type."""
        query = select(TrajectoryRow.trajectory_id).where(
            TrajectoryRow.owner == owner, TrajectoryRow.analysis_status == AnalysisStatus.DONE.value
        )
        if roles is not None:
            query = query.where(TrajectoryRow.role.in_(roles))
        if task_type is not None:
            query = query.where(TrajectoryRow.task_type == task_type)
        return list(self._session.scalars(query.order_by(TrajectoryRow.finalized_at.desc()).limit(limit)))

    def finalized_groups(
        self, owner: str | None = None, roles: RoleGrouping | None = None
    ) -> dict[tuple[str, str, str | None], list[uuid.UUID]]:
        """Finalized trajectory ids by (owner, role, task_type), oldest first: what one batch job contrasts.

        With ``roles``, the roles sharing a library form one group under the library's role."""
        library = roles.library if roles is not None else str
        query = (
            select(TrajectoryRow.owner, TrajectoryRow.role, TrajectoryRow.task_type, TrajectoryRow.trajectory_id)
            .where(TrajectoryRow.status == TrajectoryStatus.FINALIZED.value)
            .order_by(TrajectoryRow.finalized_at)
        )
        if owner is not None:
            query = query.where(TrajectoryRow.owner == owner)
        groups: dict[tuple[str, str, str | None], list[uuid.UUID]] = {}
        for row_owner, role, task_type, trajectory_id in self._session.execute(query):
            groups.setdefault((row_owner, library(role), task_type), []).append(trajectory_id)
        return groups

    def finalized_entries(self, owner: str, roles: RoleGrouping | None = None) -> list[FinalizedEntry]:
        """The owner's finalized trajectories without their nodes, oldest first: what a job splits
        and groups before it reads the trajectories page by page (:meth:`load_many`).

        With ``roles``, each entry carries its library's role (the roles sharing a library pool)."""
        library = roles.library if roles is not None else str
        query = (
            select(
                TrajectoryRow.trajectory_id,
                TrajectoryRow.role,
                TrajectoryRow.task_type,
                TrajectoryRow.run_id,
                TrajectoryRow.finalized_at,
                TrajectoryRow.created_at,
            )
            .where(TrajectoryRow.owner == owner, TrajectoryRow.status == TrajectoryStatus.FINALIZED.value)
            .order_by(TrajectoryRow.finalized_at, TrajectoryRow.created_at, TrajectoryRow.trajectory_id)
        )
        return [
            FinalizedEntry(tid, library(role), task_type, run_id, finalized_at or created_at, created_at)
            for tid, role, task_type, run_id, finalized_at, created_at in self._session.execute(query)
        ]

    def newest_finalized(self, owner: str | None = None) -> dict[str, datetime]:
        """Each owner's latest finalize time (of one owner, or every owner): what a batch job has seen."""
        query = (
            select(TrajectoryRow.owner, func.max(TrajectoryRow.finalized_at))
            .where(TrajectoryRow.status == TrajectoryStatus.FINALIZED.value)
            .group_by(TrajectoryRow.owner)
        )
        if owner is not None:
            query = query.where(TrajectoryRow.owner == owner)
        return {row_owner: newest for row_owner, newest in self._session.execute(query) if newest is not None}

    def recent(self, owner: str, limit: int = 100) -> list[TrajectoryEntry]:
        """The owner's latest trajectories without their nodes, newest first (the console's list)."""
        query = (
            select(TrajectoryRow)
            .where(TrajectoryRow.owner == owner)
            .order_by(TrajectoryRow.created_at.desc(), TrajectoryRow.trajectory_id)
            .limit(limit)
        )
        return [
            TrajectoryEntry(
                header=_header(row),
                status=TrajectoryStatus(row.status),
                outcome=(row.outcome or {}).get("status"),
                node_count=row.node_count,
                created_at=row.created_at,
                analysis=AnalysisStatus(row.analysis_status),
            )
            for row in self._session.scalars(query)
        ]

    def _row(self, owner: str, trajectory_id: uuid.UUID, *, lock: bool, missing_ok: bool = False) -> TrajectoryRow:
        query = select(TrajectoryRow).where(TrajectoryRow.owner == owner, TrajectoryRow.trajectory_id == trajectory_id)
        if lock:
            # Serialise appends to one trajectory so node counts and seq numbers stay exact.
            query = query.with_for_update()
        row = self._session.scalar(query)
        if row is None and not missing_ok:
            raise NotFound(f"trajectory {trajectory_id} not found; open it with its header first")
        return row  # type: ignore[return-value]


def _run_settled(now: datetime, hold: RunHold) -> ColumnElement[bool]:
    """No run, or its run is quiet (see :class:`RunHold`), or it has waited long enough."""
    if hold.quiet <= timedelta(0):
        return true()
    other = aliased(TrajectoryRow)
    since = now - hold.quiet
    busy = exists().where(
        other.owner == TrajectoryRow.owner,
        other.run_id == TrajectoryRow.run_id,
        or_(
            other.status == TrajectoryStatus.OPEN.value,
            other.created_at > since,
            other.finalized_at > since,
        ),
    )
    return or_(TrajectoryRow.run_id.is_(None), ~busy, TrajectoryRow.finalized_at < now - hold.longest)


class FinalizedEntry(NamedTuple):
    """One finalized trajectory's header fields, as :meth:`SqlTrajectoryStore.finalized_entries` lists them."""

    trajectory_id: uuid.UUID
    role: str
    task_type: str | None
    run_id: str | None
    finalized_at: datetime
    created_at: datetime


class TrajectoryEntry(NamedTuple):
    """One trajectory's header and state without its nodes, as :meth:`SqlTrajectoryStore.recent` lists them."""

    header: TrajectoryHeader
    status: TrajectoryStatus
    outcome: str | None
    node_count: int
    created_at: datetime
    analysis: AnalysisStatus


def _header(row: TrajectoryRow | Row[Any]) -> TrajectoryHeader:
    return TrajectoryHeader(
        trajectory_id=row.trajectory_id,
        agent_id=row.agent_id,
        role=row.role,
        task=row.task,
        task_type=row.task_type,
        run_id=row.run_id,
    )


def _node_values(owner: str, trajectory_id: uuid.UUID, node: NodeIn, seq: int) -> dict[str, Any]:
    return {
        "trajectory_id": trajectory_id,
        "node_id": node.node_id,
        "owner": owner,
        "parent_id": node.parent_id,
        "seq": seq,
        "timestamp_ms": node.timestamp,
        "context_snapshot": node.context_snapshot,
        "available_actions": list(node.available_actions),
        "chosen_action": node.chosen_action,
        "action_params": node.action_params,
        "execution_result": node.execution_result.model_dump(mode="json"),
        "llm_reasoning": node.llm_reasoning,
        "payload_hash": node.payload_hash(),
    }


def _node(row: NodeRow | Row[Any]) -> Node:
    return Node(
        node_id=row.node_id,
        parent_id=row.parent_id,
        timestamp=row.timestamp_ms,
        context_snapshot=row.context_snapshot,
        available_actions=row.available_actions,
        chosen_action=row.chosen_action,
        action_params=row.action_params,
        execution_result=row.execution_result,  # type: ignore[arg-type]
        llm_reasoning=row.llm_reasoning,
        seq=row.seq,
    )


def _trajectory(row: TrajectoryRow | Row[Any], nodes: Sequence[NodeRow | Row[Any]]) -> Trajectory:
    return Trajectory(
        header=_header(row),
        owner=row.owner,
        status=TrajectoryStatus(row.status),
        outcome=Outcome.model_validate(row.outcome) if row.outcome is not None else None,
        created_at=row.created_at,
        finalized_at=row.finalized_at,
        nodes=tuple(_node(n) for n in nodes),
    )


def _repeats(stored: Outcome, again: Outcome) -> bool:
    """``again`` says nothing ``stored`` does not: the same status, and a summary and served ids
    that are either left out or the same."""
    return (
        again.status == stored.status
        and again.summary in (None, stored.summary)
        and (not again.served_template_ids or set(again.served_template_ids) == set(stored.served_template_ids))
    )
