"""The experience index on Milvus: template vectors plus the fields queries filter on.

A typed view over :class:`cluster.storage.milvus_collection.MilvusCollection`, which owns the
owner filter, the filter-literal policy, timeouts, upsert-only writes and error mapping. Milvus
holds derived data only (SQL is the source of truth), so everything here can be rebuilt by
``ExperienceService.reindex``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cluster.experience.ports import Hit, IndexRow
from cluster.storage.milvus_collection import CollectionSpec, IndexType, Kind, MilvusCollection, ScalarField

# Named anew when the ``version`` field came: the first release's "experience_templates" has no
# such field. A new deployment creates this one; an upgraded one fills it from SQL (the 0006
# migration marks every template "to index") and may drop the old collection.
DEFAULT_COLLECTION = "experience_library"
_SCALARS = ("template_id", "owner", "version", "role", "task_type", "confidence", "created_at", "updated_at")


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def experience_spec(
    name: str = DEFAULT_COLLECTION,
    *,
    dimension: int = 384,
    index_type: IndexType = "FLAT",
    nlist: int = 256,
    nprobe: int = 32,
) -> CollectionSpec:
    """The experience collection's fields: the filter fields of a query, among them the library version."""
    return CollectionSpec(
        name=name,
        primary=ScalarField("template_id", Kind.VARCHAR, 36),
        dimension=dimension,
        scalars=(
            ScalarField("version", Kind.INT64),
            ScalarField("role", Kind.VARCHAR, 200),
            ScalarField("task_type", Kind.VARCHAR, 200),
            ScalarField("confidence", Kind.FLOAT),
            ScalarField("created_at", Kind.INT64),
            ScalarField("updated_at", Kind.INT64),
        ),
        index_type=index_type,
        nlist=nlist,
        nprobe=nprobe,
        owner_length=200,
    )


class MilvusExperienceIndex:
    """Template vectors in one Milvus collection, shared by all owners and isolated by filter.

    Implements :class:`cluster.experience.ports.ExperienceIndex`.

    Args:
        client: a connected client (see ``cluster.storage.milvus.open_milvus``).
        dimension: vector length; must match the embedder.
        collection: collection name.
        index_type: ``FLAT`` (exact; the measured default) or an approximate index.
        timeout: seconds per Milvus call.
    """

    def __init__(
        self,
        client: Any,
        *,
        dimension: int = 384,
        collection: str = DEFAULT_COLLECTION,
        index_type: IndexType = "FLAT",
        nlist: int = 256,
        nprobe: int = 32,
        timeout: float = 10.0,
    ) -> None:
        spec = experience_spec(collection, dimension=dimension, index_type=index_type, nlist=nlist, nprobe=nprobe)
        self.rows = MilvusCollection(client, spec, timeout=timeout)

    @property
    def dimension(self) -> int:
        return self.rows.spec.dimension

    @property
    def collection(self) -> str:
        return self.rows.name

    def ready(self) -> bool:
        """For health checks: the server answers and the collection exists."""
        return self.rows.ready()

    def ensure_collection(self) -> None:
        """Create and load the collection if it does not exist (idempotent)."""
        self.rows.ensure()

    def upsert(self, rows: Sequence[IndexRow], batch_size: int = 2000) -> None:
        self.rows.upsert(
            [
                {
                    "template_id": str(r.template_id),
                    "vector": r.vector,
                    "owner": r.owner,
                    "version": r.version,
                    "role": r.role,
                    "task_type": r.task_type or "",
                    "confidence": r.confidence,
                    "created_at": _ms(r.created_at),
                    "updated_at": _ms(r.updated_at),
                }
                for r in rows
            ],
            batch_size,
        )

    def set_confidence(self, owner: str, changes: dict[uuid.UUID, tuple[float, datetime]]) -> set[uuid.UUID]:
        """Update confidence and ``updated_at`` of indexed templates; returns the ids found and updated.

        Milvus Lite has no partial update, so the stored vectors are read back and re-upserted; a
        query meanwhile finds each template with its old confidence or its new one, never without
        it (see ``MilvusCollection.upsert``). A read by key can miss a row that is there (Milvus
        Lite 2.5.1, right after heavy writes; see docs/milvus-lite.md), so the caller must treat an
        id not returned as not updated.
        """
        if not changes:
            return set()
        rows = self.rows.query(owner, [str(t) for t in changes], _SCALARS, with_vector=True)
        found: set[uuid.UUID] = set()
        for row in rows:
            template_id = uuid.UUID(row["template_id"])
            confidence, at = changes[template_id]
            row["confidence"] = confidence
            row["updated_at"] = _ms(at)
            found.add(template_id)
        self.rows.upsert(rows)
        return found

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
        """Nearest templates of ``owner``'s library ``version`` above ``min_confidence``, best first.

        ``roles`` restricts to templates of those roles; ``task_type`` to that task type or to
        templates for any task type (stored with an empty task type).
        """
        any_of: dict[str, list[str]] = {}
        if roles is not None:
            any_of["role"] = list(roles)
        if task_type is not None:
            any_of["task_type"] = [task_type, ""]
        hits = self.rows.search(
            owner,
            vector,
            limit,
            equals={"version": version},
            any_of=any_of or None,
            at_least={"confidence": min_confidence},
        )
        return [Hit(uuid.UUID(str(key)), score) for key, score, _ in hits]

    def ids(self, owner: str) -> set[uuid.UUID]:
        """Every template id indexed for ``owner``."""
        return {uuid.UUID(str(key)) for key in self.rows.ids(owner)}

    def owners(self) -> set[str]:
        """Every owner with a vector (for full rebuilds: SQL may no longer know one)."""
        return self.rows.owners()

    def delete(self, owner: str, template_ids: Sequence[uuid.UUID]) -> None:
        """Remove these templates' vectors; the ids are the owner's, read from SQL (Milvus deletes by key alone)."""
        self.rows.delete([str(t) for t in template_ids])

    def drop(self) -> None:
        """Remove the whole collection (every owner): only for a full rebuild."""
        self.rows.drop()

    def count(self, owner: str) -> int:
        return self.rows.count(owner)
