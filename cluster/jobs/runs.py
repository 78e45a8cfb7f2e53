"""One run of a scheduled job under its lease: take it when due, heartbeat while it works, record how it went.

Any number of schedulers may try a job at once: the one whose :meth:`JobRuns.run` takes the lease
runs it, the others return at once. The run's work checkpoints a watermark as it goes; a scheduler
that dies mid-run stops heartbeating, its lease lapses, and the next scheduler re-runs the job from
the last watermark stored (the work is written so that redoing the part after it is harmless).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cluster.core.errors import LeaseLost
from cluster.jobs.models import JobState
from cluster.jobs.repository import SqlJobStore
from cluster.storage.db import Database
from cluster.storage.heartbeat import Heartbeat

logger = logging.getLogger(__name__)

Watermark = dict[str, Any]


@dataclass(frozen=True)
class JobOutcome:
    """What a job's work returns: its result (``rows`` counted in the metrics) and final watermark."""

    result: dict[str, Any]
    watermark: Watermark | None = None

    @property
    def rows(self) -> int:
        rows = self.result.get("rows", 0)
        return rows if isinstance(rows, int) else 0


@dataclass
class JobContext:
    """Handed to a job's work: where the last run got to, and how to record progress."""

    name: str
    watermark: Watermark | None
    resumed: bool
    """The last run never finished: this one carries on from its watermark."""
    checkpoint: Callable[[Watermark], None]
    progress: Callable[[str], None] = field(default=lambda _message: None)


@dataclass(frozen=True)
class RunReport:
    name: str
    started_at: datetime
    duration_s: float
    resumed: bool
    result: dict[str, Any] | None
    error: str | None
    rows: int = 0


Work = Callable[[JobContext], JobOutcome]


class JobRuns:
    """Runs jobs in ``holder``'s name on one database; every scheduler (and ``jobs run``) owns one."""

    def __init__(self, db: Database, holder: str) -> None:
        self.db = db
        self.holder = holder

    def states(self) -> list[JobState]:
        with self.db.read() as session:
            return SqlJobStore(session).states()

    def run(
        self,
        name: str,
        kind: str,
        work: Work,
        *,
        interval: timedelta,
        lease: timedelta,
        force: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> RunReport | None:
        """Run the job once if it is due (or ``force``) and nobody else holds it; None if it was not run.

        A failure of the work is recorded as the run's error and returned, never raised: the next
        run is due after ``interval`` and starts from the last watermark checkpointed.
        """
        now = datetime.now(UTC)
        with self.db.transaction() as session:
            store = SqlJobStore(session)
            store.ensure(name, kind)
            before = store.acquire(name, self.holder, interval=interval, lease=lease, force=force, now=now)
        if before is None:
            return None
        resumed = before.unfinished
        if resumed:
            logger.info("job %s: resuming a run that did not finish (%s)", name, before.watermark)
        context = JobContext(
            name=name,
            watermark=before.watermark,
            resumed=resumed,
            checkpoint=lambda watermark: self._checkpoint(name, watermark),
        )
        if progress is not None:
            context.progress = progress
        started = time.perf_counter()
        outcome: JobOutcome | None = None
        error: str | None = None
        with Heartbeat(lambda: self._renew(name, lease), lease.total_seconds() / 3, f"job heartbeat {name}"):
            try:
                outcome = work(context)
            except Exception as exc:
                # A run's top level: its error is the run's result; the scheduler carries on.
                logger.exception("job %s failed", name)
                error = f"{type(exc).__name__}: {exc}"
        duration = time.perf_counter() - started
        try:
            with self.db.transaction() as session:
                SqlJobStore(session).finish(
                    name,
                    self.holder,
                    duration_s=duration,
                    result=None if outcome is None else outcome.result,
                    watermark=None if outcome is None else outcome.watermark,
                    error=error,
                )
        except LeaseLost as exc:
            # Held past its lease (a stall longer than a lease): another scheduler took the job and
            # runs it again from the watermark; this run's record is theirs to write.
            logger.warning("job %s: %s", name, exc)
            error = str(exc)
        return RunReport(
            name=name,
            started_at=now,
            duration_s=duration,
            resumed=resumed,
            result=None if outcome is None else outcome.result,
            error=error,
            rows=0 if outcome is None else outcome.rows,
        )

    def _renew(self, name: str, lease: timedelta) -> bool:
        """One heartbeat: move the lease on; False once another scheduler has the job."""
        with self.db.transaction() as session:
            held = SqlJobStore(session).heartbeat(name, self.holder, lease)
        if not held:
            logger.warning("%s lost its lease on job %s", self.holder, name)
        return held

    def _checkpoint(self, name: str, watermark: Watermark) -> None:
        with self.db.transaction() as session:
            SqlJobStore(session).checkpoint(name, self.holder, watermark)
