"""The vector index the experience service needs. ``cluster.stores.experience_index`` implements it on Milvus."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from cluster.stores.experience_index import Hit, IndexRow


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

    def set_confidence(self, owner: str, changes: dict[uuid.UUID, tuple[float, datetime]]) -> int:
        """Update confidence and update time of the owner's rows; returns how many were found."""
        ...

    def search(
        self,
        owner: str,
        vector: Sequence[float],
        *,
        limit: int,
        role: str | None = None,
        task_type: str | None = None,
        min_confidence: float = 0.0,
    ) -> list[Hit]:
        """The owner's nearest rows passing the filters, best first (score = cosine)."""
        ...

    def ids(self, owner: str) -> set[uuid.UUID]: ...

    def delete(self, owner: str, template_ids: Sequence[uuid.UUID]) -> None: ...

    def drop(self) -> None:
        """Remove every row of every owner (full rebuild only)."""
        ...
