"""ORM mappings for the experience library: templates, their confidence history and served outcomes.

SQL is the source of truth: the full template (``model``) lives here, Milvus only holds its vector
and the filter fields, and ``ExperienceService.reindex`` rebuilds Milvus from these rows.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, Float, ForeignKeyConstraint, Index, Integer, String, Text, Uuid, false
from sqlalchemy.orm import Mapped, mapped_column

from cluster.storage.db import Base, PortableJSON, UtcDateTime


class ExperienceTemplateRow(Base):
    __tablename__ = "experience_templates"

    template_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(200))
    task_type: Mapped[str | None] = mapped_column(String(200))
    signature: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(16))
    parent_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    confidence: Mapped[float] = mapped_column(Float)
    # The whole ExperienceTemplate as JSON (mode="json"): the columns above are copies for filtering.
    model: Mapped[dict[str, Any]] = mapped_column(PortableJSON)
    # The text that was embedded, and a hash of the template's content for import de-duplication.
    text: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)
    # Set with every change of the row, cleared once Milvus holds that version: vectors are written
    # after the commit, and a failure there must leave work behind, not lose it.
    index_pending: Mapped[bool] = mapped_column(Boolean, default=True, server_default=false())

    __table_args__ = (
        Index("ix_experience_templates_owner_role", "owner", "role"),
        Index("ix_experience_templates_index_pending", "index_pending", "owner"),
        Index("ix_experience_templates_owner_signature", "owner", "signature"),
        Index("ix_experience_templates_owner_hash", "owner", "content_hash"),
    )


class ConfidenceChangeRow(Base):
    """One row per confidence change: before/after, why, and the trajectory that caused it."""

    __tablename__ = "experience_confidence_history"

    change_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    template_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    before: Mapped[float | None] = mapped_column(Float)
    after: Mapped[float] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(String(16))
    trajectory_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    at: Mapped[datetime] = mapped_column(UtcDateTime)
    seq: Mapped[int] = mapped_column(Integer)

    __table_args__ = (
        ForeignKeyConstraint(["template_id"], ["experience_templates.template_id"], ondelete="CASCADE"),
        Index("ix_experience_confidence_history_template", "owner", "template_id", "seq"),
    )


class ServedOutcomeRow(Base):
    """A counted outcome report: its primary key makes a retried report a no-op."""

    __tablename__ = "experience_outcomes"

    template_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    trajectory_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    succeeded: Mapped[bool] = mapped_column()
    at: Mapped[datetime] = mapped_column(UtcDateTime)

    __table_args__ = (ForeignKeyConstraint(["template_id"], ["experience_templates.template_id"], ondelete="CASCADE"),)
