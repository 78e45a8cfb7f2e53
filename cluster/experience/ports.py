"""The vector index the experience service needs. ``cluster.experience.index`` implements it on Milvus."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from actors.engine.model.templates import ExperienceTemplate


@dataclass(frozen=True)
class IndexRow:
    """One template as the index stores it. ``task_type`` "" means "any task type".

    ``version`` is the library version the template belongs to (it never changes).
    """

    template_id: uuid.UUID
    owner: str
    role: str
    task_type: str | None
    confidence: float
    created_at: datetime
    updated_at: datetime
    vector: Sequence[float]
    version: int = 1

    @classmethod
    def of(cls, owner: str, template: ExperienceTemplate, vector: Sequence[float], *, version: int) -> IndexRow:
        """The row of ``template``'s current state in library ``version`` (filter fields copied from the template)."""
        return cls(
            template_id=template.template_id,
            owner=owner,
            role=template.role,
            task_type=template.task_type,
            confidence=template.confidence,
            created_at=template.created_at,
            updated_at=template.updated_at,
            vector=vector,
            version=version,
        )


@dataclass(frozen=True)
class Hit:
    template_id: uuid.UUID
    score: float
    """Cosine similarity of the query and the template text (inner product of unit vectors)."""


class ExperienceIndex(Protocol):
    """Template vectors plus filter fields, derived from SQL and rebuildable from it.

    Every read and delete is constrained by ``owner``. Writes are upserts (a retried write never
    duplicates a row). Any backend failure raises ``StoreUnavailable``.
    """

    @property
    def dimension(self) -> int: ...

    def ensure_collection(self) -> None:
        """Create the collection if missing; idempotent."""
        ...

    def upsert(self, rows: Sequence[IndexRow]) -> None: ...

    def set_confidence(self, owner: str, changes: dict[uuid.UUID, tuple[float, datetime]]) -> set[uuid.UUID]:
        """Update confidence and update time of the owner's rows; returns the ids it found and updated."""
        ...

    def search(
        self,
        owner: str,
        vector: Sequence[float],
        *,
        limit: int,
        version: int,
        roles: Sequence[str] | None = None,
        task_type: str | None = None,
        min_confidence: float = 0.0,
    ) -> list[Hit]:
        """The owner's nearest rows of library ``version`` passing the filters, best first (score = cosine)."""
        ...

    def ids(self, owner: str) -> set[uuid.UUID]: ...

    def delete(self, owner: str, template_ids: Sequence[uuid.UUID]) -> None: ...

    def owners(self) -> set[str]:
        """Every owner with a row (a full rebuild visits them: SQL may no longer know one)."""
        ...
