"""ORM mappings for the experience library: versions, templates, their confidence history and served outcomes.

SQL is the source of truth: the full template (``model``) lives here, Milvus only holds its vector
and the filter fields, and ``ExperienceService.reindex`` rebuilds Milvus from these rows.

An owner's library exists in numbered versions (``experience_libraries``); each template belongs
to exactly one of them, for ever. ``experience_library_heads`` holds the owner's pointer to the
version queries serve: promoting or rolling back updates that one row.
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
    # The library version the template belongs to (see LibraryVersionRow); it never changes.
    version: Mapped[int] = mapped_column(Integer, server_default="1")
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
        Index("ix_experience_templates_owner_version_signature", "owner", "version", "signature"),
        Index("ix_experience_templates_owner_version_hash", "owner", "version", "content_hash"),
    )


class LibraryVersionRow(Base):
    """One version of an owner's library: how it was made and when."""

    __tablename__ = "experience_libraries"

    owner: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    # live (the library live learning started in), reprocess or import.
    source: Mapped[str] = mapped_column(String(16))
    note: Mapped[str] = mapped_column(Text, default="", server_default="")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class LibraryHeadRow(Base):
    """The owner's active version (what queries serve and live learning writes to) and the one before."""

    __tablename__ = "experience_library_heads"

    owner: Mapped[str] = mapped_column(String(200), primary_key=True)
    active_version: Mapped[int] = mapped_column(Integer)
    previous_version: Mapped[int | None] = mapped_column(Integer)
    switched_at: Mapped[datetime] = mapped_column(UtcDateTime)


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
