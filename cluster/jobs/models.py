"""What ``hindsight jobs list`` shows of a job: its lease, its last run and where it got to."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from cluster.core.types import Frozen


class JobState(Frozen):
    """One job's row: who holds it, how its last run went, and its watermark."""

    name: str
    kind: str
    holder: str | None = Field(default=None, description="The scheduler running it now (None: nobody).")
    lease_until: datetime | None = None
    runs: int = Field(default=0, ge=0, description="Runs started, resumed ones included.")
    started_at: datetime | None = Field(default=None, description="Start of the last run.")
    finished_at: datetime | None = Field(default=None, description="End of the last run that ended.")
    duration_s: float | None = None
    result: dict[str, Any] | None = Field(default=None, description="What the last run did (rows, templates, ...).")
    watermark: dict[str, Any] | None = Field(
        default=None, description="Where the job got to: a resumed run starts here."
    )
    last_error: str | None = Field(default=None, description="The error of the last run, if it failed.")
    last_success_at: datetime | None = None

    @property
    def unfinished(self) -> bool:
        """The last run started and never ended: its scheduler died or still runs it."""
        return self.started_at is not None and (self.finished_at is None or self.finished_at < self.started_at)
