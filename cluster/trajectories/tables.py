"""ORM mappings for trajectories. One mapping serves SQLite and Postgres."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKeyConstraint, Index, Integer, String, Text, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from cluster.storage.db import Base, PortableJSON, UtcDateTime


class TrajectoryRow(Base):
    __tablename__ = "trajectories"

    trajectory_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    agent_id: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(200))
    task: Mapped[str] = mapped_column(Text)
    task_type: Mapped[str | None] = mapped_column(String(200))
    # The trajectories of one multi-agent run, in start order, hand off to each other (docs/learner.md).
    run_id: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16))
    outcome: Mapped[dict[str, Any] | None] = mapped_column(PortableJSON)
    node_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finalized_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # The SQL store is the analysis queue of record: a crash loses no pending work.
    analysis_status: Mapped[str] = mapped_column(String(16), default="none")
    analysis_claimed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # A claim is a lease its worker keeps alive with heartbeats; the worker's name lets a restarted
    # worker take back at once what it held before it died.
    analysis_claimed_by: Mapped[str | None] = mapped_column(String(200))
    analysis_lease_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    analysis_attempts: Mapped[int] = mapped_column(Integer, default=0)
    analysed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)

    __table_args__ = (
        Index("ix_trajectories_analysis", "analysis_status", "finalized_at"),
        Index("ix_trajectories_run", "owner", "run_id"),
    )


class NodeRow(Base):
    __tablename__ = "trajectory_nodes"

    trajectory_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    node_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    parent_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    seq: Mapped[int] = mapped_column(Integer)
    timestamp_ms: Mapped[int] = mapped_column(BigInteger)
    context_snapshot: Mapped[dict[str, Any]] = mapped_column(PortableJSON)
    available_actions: Mapped[list[str]] = mapped_column(PortableJSON)
    chosen_action: Mapped[str] = mapped_column(String(200))
    action_params: Mapped[dict[str, Any]] = mapped_column(PortableJSON)
    execution_result: Mapped[dict[str, Any]] = mapped_column(PortableJSON)
    llm_reasoning: Mapped[str | None] = mapped_column(Text)
    payload_hash: Mapped[str] = mapped_column(String(64))

    __table_args__ = (
        ForeignKeyConstraint(["trajectory_id"], ["trajectories.trajectory_id"], ondelete="CASCADE"),
        Index("ix_trajectory_nodes_seq", "trajectory_id", "seq"),
    )
