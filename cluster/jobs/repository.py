"""SQL store of scheduled jobs: take a job's lease when it is due, beat it, checkpoint, finish.

A job's row is its lease: ``holder`` runs it until ``lease_until``, which heartbeats move on. A
lease whose beats stopped lapses, and the next scheduler that finds the job due takes it; a run
that never finished is due at once, and starts from the watermark its last checkpoint stored.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cluster.core.errors import LeaseLost, NotFound
from cluster.core.types import utcnow
from cluster.jobs.models import JobState
from cluster.jobs.tables import JobRow


class SqlJobStore:
    """Job rows inside one SQLAlchemy session; the caller's unit of work commits."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def ensure(self, name: str, kind: str) -> None:
        """Create the job's row if it has none (a concurrent creator's row is kept)."""
        if self._session.get(JobRow, name) is not None:
            return
        try:
            with self._session.begin_nested():
                self._session.add(JobRow(name=name, kind=kind, runs=0))
        except IntegrityError:
            pass  # another scheduler created it first: the same row

    def acquire(
        self,
        name: str,
        holder: str,
        *,
        interval: timedelta,
        lease: timedelta,
        force: bool = False,
        now: datetime | None = None,
    ) -> JobState | None:
        """Take the job for ``holder`` if nobody else holds it and it is due (or ``force``).

        Due: never run, the last run never finished, or ``interval`` has passed since it ended.
        Returns the job as it was before this run (its watermark is where to start), or None.
        """
        now = now or utcnow()
        row = self._session.scalar(select(JobRow).where(JobRow.name == name).with_for_update())
        if row is None:
            raise NotFound(f"job {name} has no state row; ensure() it first")
        if row.holder is not None and row.holder != holder and row.lease_until is not None and row.lease_until >= now:
            return None
        before = _state(row)
        due = before.finished_at is None or before.unfinished or now >= before.finished_at + interval
        if not (due or force):
            return None
        row.holder = holder
        row.lease_until = now + lease
        row.started_at = now
        row.runs += 1
        self._session.flush()
        return before

    def heartbeat(self, name: str, holder: str, lease: timedelta) -> bool:
        """Move ``holder``'s lease on to ``lease`` from now; False if it no longer holds the job."""
        result = self._session.execute(
            update(JobRow).where(JobRow.name == name, JobRow.holder == holder).values(lease_until=utcnow() + lease)
        )
        return int(result.rowcount) == 1  # type: ignore[attr-defined]

    def checkpoint(self, name: str, holder: str, watermark: dict[str, Any]) -> None:
        """Store how far the run got, so that a run taking over after a crash starts there.

        Raises:
            LeaseLost: ``holder`` no longer holds the job.
        """
        result = self._session.execute(
            update(JobRow).where(JobRow.name == name, JobRow.holder == holder).values(watermark=watermark)
        )
        if int(result.rowcount) != 1:  # type: ignore[attr-defined]
            raise LeaseLost(f"{holder} no longer holds job {name}")

    def finish(
        self,
        name: str,
        holder: str,
        *,
        duration_s: float,
        result: dict[str, Any] | None,
        watermark: dict[str, Any] | None,
        error: str | None,
        now: datetime | None = None,
    ) -> None:
        """End ``holder``'s run: release the lease and record how it went (``error`` None: it succeeded).

        Raises:
            LeaseLost: ``holder`` no longer holds the job (its lease lapsed and another took it).
        """
        now = now or utcnow()
        values: dict[str, Any] = {
            "holder": None,
            "lease_until": None,
            "finished_at": now,
            "duration_s": duration_s,
            "last_error": error,
        }
        if error is None:
            values |= {"result": result, "watermark": watermark, "last_success_at": now}
        outcome = self._session.execute(
            update(JobRow).where(JobRow.name == name, JobRow.holder == holder).values(**values)
        )
        if int(outcome.rowcount) != 1:  # type: ignore[attr-defined]
            raise LeaseLost(f"{holder} no longer holds job {name}")

    def state(self, name: str) -> JobState | None:
        row = self._session.get(JobRow, name)
        return None if row is None else _state(row)

    def states(self) -> list[JobState]:
        """Every job that ever had a row, by name."""
        return [_state(r) for r in self._session.scalars(select(JobRow).order_by(JobRow.name))]


def _state(row: JobRow) -> JobState:
    return JobState(
        name=row.name,
        kind=row.kind,
        holder=row.holder,
        lease_until=row.lease_until,
        runs=row.runs,
        started_at=row.started_at,
        finished_at=row.finished_at,
        duration_s=row.duration_s,
        result=row.result,
        watermark=row.watermark,
        last_error=row.last_error,
        last_success_at=row.last_success_at,
    )
