"""The raw log of observed turns in SQL: cheap to write, re-evaluated later (:mod:`cluster.memory.promotion`)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from cluster.core.types import Frozen
from cluster.memory.policy.promotion import LogStatus, spoken
from cluster.memory.tables import MemoryLogRow


class LoggedTurnRow(Frozen):
    """A raw interaction to log, or one logged."""

    log_id: uuid.UUID
    session_id: str
    speaker: str
    text: str
    at: datetime
    metadata: dict[str, Any]
    status: LogStatus
    memory_id: uuid.UUID | None = None
    evaluated_at: datetime | None = None


class LoggedRow(Frozen):
    """A logged turn as re-evaluation reads it, with its place in the log."""

    seq: int
    log_id: uuid.UUID
    session_id: str
    speaker: str
    text: str
    at: datetime
    metadata: dict[str, Any]
    status: LogStatus


def pending_owners(session: Session) -> list[str]:
    """Every owner with turns waiting for re-evaluation."""
    return list(session.scalars(select(MemoryLogRow.owner).where(MemoryLogRow.status == LogStatus.PENDING).distinct()))


class TurnLog:
    """One owner's raw log in one unit of work."""

    def __init__(self, session: Session, owner: str) -> None:
        self.session = session
        self.owner = owner

    def add(self, turn: LoggedTurnRow) -> None:
        self.session.add(
            MemoryLogRow(
                log_id=turn.log_id,
                owner=self.owner,
                session_id=turn.session_id,
                speaker=turn.speaker,
                text=turn.text,
                at=turn.at,
                meta=turn.metadata,
                status=turn.status,
                memory_id=turn.memory_id,
                evaluated_at=turn.evaluated_at,
            )
        )
        self.session.flush()

    def get(self, log_id: uuid.UUID) -> LoggedTurnRow | None:
        row = self.session.scalar(
            select(MemoryLogRow).where(MemoryLogRow.owner == self.owner, MemoryLogRow.log_id == log_id)
        )
        if row is None:
            return None
        return LoggedTurnRow(
            log_id=row.log_id,
            session_id=row.session_id,
            speaker=row.speaker,
            text=row.text,
            at=row.at,
            metadata=row.meta,
            status=row.status,
            memory_id=row.memory_id,
            evaluated_at=row.evaluated_at,
        )

    def since_pending(self) -> list[LoggedRow]:
        """The owner's log from its oldest pending turn on, in time order."""
        first = self.session.scalar(
            select(func.min(MemoryLogRow.at)).where(
                MemoryLogRow.owner == self.owner, MemoryLogRow.status == LogStatus.PENDING
            )
        )
        if first is None:
            return []
        rows = self.session.scalars(
            select(MemoryLogRow)
            .where(MemoryLogRow.owner == self.owner, MemoryLogRow.at >= first)
            .order_by(MemoryLogRow.at, MemoryLogRow.seq)
        )
        return [
            LoggedRow(
                seq=r.seq,
                log_id=r.log_id,
                session_id=r.session_id,
                speaker=r.speaker,
                text=r.text,
                at=r.at,
                metadata=r.meta,
                status=r.status,
            )
            for r in rows
        ]

    def beside(self, session_id: str, at: datetime, seq: int | None, *, after: bool) -> str | None:
        """The session's turn logged just before (or after) the one at ``at`` with ``seq``, as
        :func:`~cluster.memory.policy.promotion.spoken` reads it (``seq`` ``None``: a turn not logged
        yet, which follows every turn logged at ``at``)."""
        r = MemoryLogRow
        stmt = select(r.speaker, r.text).where(r.owner == self.owner, r.session_id == session_id)
        if after:
            side = r.at > at if seq is None else or_(r.at > at, and_(r.at == at, r.seq > seq))
            stmt = stmt.where(side).order_by(r.at, r.seq)
        else:
            side = r.at <= at if seq is None else or_(r.at < at, and_(r.at == at, r.seq < seq))
            stmt = stmt.where(side).order_by(r.at.desc(), r.seq.desc())
        found = self.session.execute(stmt.limit(1)).first()
        return None if found is None else spoken(found.speaker, found.text)

    def mark(self, log_id: uuid.UUID, status: LogStatus, at: datetime, memory_id: uuid.UUID | None) -> None:
        self.session.execute(
            update(MemoryLogRow)
            .where(and_(MemoryLogRow.owner == self.owner, MemoryLogRow.log_id == log_id))
            .values(status=status, evaluated_at=at, memory_id=memory_id)
        )
