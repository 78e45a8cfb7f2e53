"""ORM mapping of scheduled jobs' state: one row per job name."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from cluster.storage.db import Base, PortableJSON, UtcDateTime


class JobRow(Base):
    __tablename__ = "scheduled_jobs"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    # A run is a lease its scheduler keeps alive with heartbeats, as the analysis claims are: a
    # scheduler that dies stops beating and another takes the job over once the lease lapses.
    holder: Mapped[str | None] = mapped_column(String(200))
    lease_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    runs: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    duration_s: Mapped[float | None] = mapped_column(Float)
    result: Mapped[dict[str, Any] | None] = mapped_column(PortableJSON)
    watermark: Mapped[dict[str, Any] | None] = mapped_column(PortableJSON)
    last_error: Mapped[str | None] = mapped_column(Text)
    last_success_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
