"""The experience index on Milvus: template vectors plus the fields queries filter on.

Milvus holds derived data only (SQL is the source of truth), so everything here can be rebuilt by
``ExperienceService.reindex``. Every search, query and delete carries an ``owner ==`` filter.

Rows are written with ``upsert`` (never ``insert``): Milvus Lite overwrites a duplicate primary key
but a Milvus server would keep both, and a retried write must not duplicate a template.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from pymilvus import DataType, MilvusClient

from cluster.core.errors import InvalidInput, StoreUnavailable
from cluster.experience.ports import Hit, IndexRow

logger = logging.getLogger(__name__)

DEFAULT_COLLECTION = "experience_templates"
IndexType = Literal["FLAT", "IVF_FLAT", "AUTOINDEX", "HNSW"]
_SCALARS = ["template_id", "owner", "role", "task_type", "confidence", "created_at", "updated_at"]


def literal(value: str) -> str:
    """A Milvus expression string literal. Lite 2.5 has no filter templating, so escape by hand."""
    if any(ord(c) < 32 for c in value):
        raise InvalidInput("control characters are not allowed in owner, role or task type")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


class MilvusExperienceIndex:
    """Template vectors in one Milvus collection, shared by all owners and isolated by filter.

    Args:
        client: a connected client (see ``cluster.storage.milvus.open_milvus``).
        dimension: vector length; must match the embedder.
        collection: collection name.
        index_type: ``FLAT`` (exact; the measured default) or an approximate index.
        metric: inner product on unit vectors is cosine.
    """

    def __init__(
        self,
        client: MilvusClient,
        *,
        dimension: int = 384,
        collection: str = DEFAULT_COLLECTION,
        index_type: IndexType = "FLAT",
        nlist: int = 256,
        nprobe: int = 32,
        timeout: float = 10.0,
    ) -> None:
        self.client = client
        self.dimension = dimension
        self.collection = collection
        self.index_type = index_type
        self._nlist = nlist
        self._nprobe = nprobe
        self.timeout = timeout

    def ready(self) -> bool:
        """For health checks: the server answers and the collection exists."""
        try:
            return bool(self.client.has_collection(self.collection, timeout=self.timeout))
        except Exception:  # any failure means "not ready"; the caller reports it
            return False

    def ensure_collection(self) -> None:
        """Create and load the collection if it does not exist (idempotent)."""
        try:
            if not self.client.has_collection(self.collection):
                self._create()
            self.client.load_collection(self.collection)
        except Exception as exc:  # pymilvus raises MilvusException and gRPC errors alike
            raise StoreUnavailable(f"cannot prepare Milvus collection {self.collection}: {exc}") from exc

    def _create(self) -> None:
        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("template_id", DataType.VARCHAR, is_primary=True, max_length=36)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=self.dimension)
        schema.add_field("owner", DataType.VARCHAR, max_length=200)
        schema.add_field("role", DataType.VARCHAR, max_length=200)
        schema.add_field("task_type", DataType.VARCHAR, max_length=200)
        schema.add_field("confidence", DataType.FLOAT)
        schema.add_field("created_at", DataType.INT64)
        schema.add_field("updated_at", DataType.INT64)
        params = self.client.prepare_index_params()
        index_params: dict[str, Any] = {}
        if self.index_type == "IVF_FLAT":
            index_params = {"nlist": self._nlist}
        elif self.index_type == "HNSW":
            index_params = {"M": 16, "efConstruction": 200}
        params.add_index(field_name="vector", index_type=self.index_type, metric_type="IP", params=index_params)
        self.client.create_collection(self.collection, schema=schema, index_params=params)
        logger.info("created Milvus collection %s (%s, IP, %s-d)", self.collection, self.index_type, self.dimension)

    def upsert(self, rows: Sequence[IndexRow], batch_size: int = 2000) -> None:
        for start in range(0, len(rows), batch_size):
            data = [
                {
                    "template_id": str(r.template_id),
                    "vector": list(r.vector),
                    "owner": r.owner,
                    "role": r.role,
                    "task_type": r.task_type or "",
                    "confidence": float(r.confidence),
                    "created_at": _ms(r.created_at),
                    "updated_at": _ms(r.updated_at),
                }
                for r in rows[start : start + batch_size]
            ]
            self._call("upsert", self.client.upsert, self.collection, data)

    def set_confidence(self, owner: str, changes: dict[uuid.UUID, tuple[float, datetime]]) -> int:
        """Update confidence and ``updated_at`` of indexed templates; returns how many were found.

        Milvus Lite has no partial update, so the stored vectors are read back and re-upserted.
        """
        if not changes:
            return 0
        ids = ", ".join(literal(str(t)) for t in changes)
        rows = self._call(
            "query",
            self.client.query,
            self.collection,
            filter=f"owner == {literal(owner)} and template_id in [{ids}]",
            output_fields=[*_SCALARS, "vector"],
        )
        for row in rows:
            confidence, at = changes[uuid.UUID(row["template_id"])]
            row["confidence"] = float(confidence)
            row["updated_at"] = _ms(at)
            row["vector"] = [float(x) for x in row["vector"]]
        if rows:
            self._call("upsert", self.client.upsert, self.collection, [dict(r) for r in rows])
        return len(rows)

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
        """Nearest templates of ``owner`` above ``min_confidence``, best first.

        ``role`` restricts to that role; ``task_type`` to that task type or to templates for any
        task type (stored with an empty task type).
        """
        parts = [f"owner == {literal(owner)}", f"confidence >= {float(min_confidence)!r}"]
        if role is not None:
            parts.append(f"role == {literal(role)}")
        if task_type is not None:
            parts.append(f'(task_type == {literal(task_type)} or task_type == "")')
        params: dict[str, Any] = {"nprobe": self._nprobe} if self.index_type == "IVF_FLAT" else {}
        result = self._call(
            "search",
            self.client.search,
            self.collection,
            data=[list(vector)],
            filter=" and ".join(parts),
            limit=limit,
            anns_field="vector",
            search_params={"metric_type": "IP", "params": params},
            output_fields=["template_id"],
            # Writers are other processes (attribution workers): read what they have acknowledged.
            consistency_level="Strong",
        )
        return [Hit(uuid.UUID(str(hit["id"])), float(hit["distance"])) for hit in result[0]]

    def ids(self, owner: str) -> set[uuid.UUID]:
        """Every template id indexed for ``owner``."""
        found: set[uuid.UUID] = set()
        iterator = self._call(
            "query",
            self.client.query_iterator,
            self.collection,
            batch_size=1000,
            filter=f"owner == {literal(owner)}",
            output_fields=["template_id"],
        )
        try:
            while batch := iterator.next():
                found.update(uuid.UUID(r["template_id"]) for r in batch)
        finally:
            iterator.close()
        return found

    def delete(self, owner: str, template_ids: Sequence[uuid.UUID]) -> None:
        if not template_ids:
            return
        ids = ", ".join(literal(str(t)) for t in template_ids)
        self._call(
            "delete",
            self.client.delete,
            self.collection,
            filter=f"owner == {literal(owner)} and template_id in [{ids}]",
        )

    def delete_owner(self, owner: str) -> None:
        self._call("delete", self.client.delete, self.collection, filter=f"owner == {literal(owner)}")

    def drop(self) -> None:
        """Remove the whole collection (every owner): only for a full rebuild."""
        self._call("drop", self.client.drop_collection, self.collection)

    def count(self, owner: str) -> int:
        rows = self._call(
            "count", self.client.query, self.collection, filter=f"owner == {literal(owner)}", output_fields=["count(*)"]
        )
        return int(rows[0]["count(*)"]) if rows else 0

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        # pymilvus retries failed calls with back-off; a timeout bounds that.
        kwargs.setdefault("timeout", self.timeout)
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # pymilvus raises MilvusException and gRPC errors alike
            raise StoreUnavailable(f"Milvus {what} on {self.collection} failed: {exc}") from exc
