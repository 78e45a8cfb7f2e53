"""Memory vectors in a Milvus collection, derived from the SQL rows and rebuildable from them.

Each row is immutable: one memory version's vector plus the scalar fields every search filters
on. Owner, entity and scope are stored as SHA-256 digests, so filter expressions are built from
hex strings only and no caller text is ever spliced into one. Mutable state (superseded, archived,
expiry) stays in SQL, which has the last word on every candidate.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from cluster.core.errors import StoreUnavailable
from cluster.core.types import Frozen

logger = logging.getLogger(__name__)

COLLECTION = "memories"
NO_ENTITY = ""


def digest(value: str) -> str:
    """A filter-safe stand-in for a caller-supplied string (owner, entity, scope key)."""
    return hashlib.sha256(value.encode()).hexdigest()[:32]


class VectorRow(Frozen):
    seq: int = Field(ge=0, description="The SQL row's primary key.")
    owner: str
    scope_key: str
    entity: str | None
    vector: list[float]


class VectorHit(Frozen):
    seq: int
    similarity: float


class MilvusMemoryIndex:
    """Memory vectors in Milvus (Lite file or server), every operation constrained by owner.

    Args:
        client: an open ``pymilvus.MilvusClient``; the caller owns it (one process owns a Lite file).
        dimension: vector size; must match the embedder.
        collection: collection name.
        index_type: ``FLAT`` (exact; Milvus Lite 2.5 searches 100k rows in about 10 ms) or
            ``IVF_FLAT`` (``nlist`` clusters, ``nprobe`` of them searched per query).
    """

    def __init__(
        self,
        client: Any,
        *,
        dimension: int,
        collection: str = COLLECTION,
        index_type: str = "FLAT",
        nlist: int = 256,
        nprobe: int = 32,
    ) -> None:
        if index_type not in ("FLAT", "IVF_FLAT"):
            raise ValueError(f"index_type must be FLAT or IVF_FLAT, not {index_type!r}")
        self.client = client
        self.dimension = dimension
        self.collection = collection
        self.index_type = index_type
        self.nlist = nlist
        self.nprobe = nprobe
        self._ready = False

    def ensure(self) -> None:
        """Create the collection if it does not exist (idempotent)."""
        if self._ready:
            return
        try:
            if not self.client.has_collection(self.collection):
                self._create()
            self.client.load_collection(self.collection)
        except Exception as exc:
            raise StoreUnavailable(f"Milvus collection {self.collection!r} is not available: {exc}") from exc
        self._ready = True

    def _create(self) -> None:
        from pymilvus import DataType

        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("seq", DataType.INT64, is_primary=True)
        schema.add_field("owner", DataType.VARCHAR, max_length=32)
        schema.add_field("scope", DataType.VARCHAR, max_length=32)
        schema.add_field("entity", DataType.VARCHAR, max_length=32)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=self.dimension)
        params = self.client.prepare_index_params()
        extra = {"nlist": self.nlist} if self.index_type == "IVF_FLAT" else {}
        params.add_index("vector", index_type=self.index_type, metric_type="IP", params=extra)
        self.client.create_collection(self.collection, schema=schema, index_params=params)
        logger.info("created Milvus collection %s (%s, dim %s)", self.collection, self.index_type, self.dimension)

    def insert(self, rows: Sequence[VectorRow]) -> None:
        if not rows:
            return
        self.ensure()
        data = [
            {
                "seq": row.seq,
                "owner": digest(row.owner),
                "scope": digest(row.scope_key),
                "entity": digest(row.entity) if row.entity is not None else NO_ENTITY,
                "vector": row.vector,
            }
            for row in rows
        ]
        try:
            self.client.insert(self.collection, data)
        except Exception as exc:
            raise StoreUnavailable(f"Milvus insert failed: {exc}") from exc

    def search(
        self,
        owner: str,
        vector: Sequence[float],
        limit: int,
        *,
        entity: str | None = None,
        scope_key: str | None = None,
        params: dict[str, Any] | None = None,
    ) -> list[VectorHit]:
        """Nearest vectors of this owner (and entity/scope, if given), best first."""
        self.ensure()
        clauses = [f'owner == "{digest(owner)}"']
        if entity is not None:
            clauses.append(f'entity == "{digest(entity)}"')
        if scope_key is not None:
            clauses.append(f'scope == "{digest(scope_key)}"')
        try:
            found = self.client.search(
                self.collection,
                data=[list(vector)],
                limit=min(limit, 16_384),
                filter=" and ".join(clauses),
                output_fields=[],
                search_params={"metric_type": "IP", "params": params or self._search_params()},
                # Another process may have written: read every acknowledged write.
                consistency_level="Strong",
            )
        except Exception as exc:
            raise StoreUnavailable(f"Milvus search failed: {exc}") from exc
        return [VectorHit(seq=int(hit["id"]), similarity=float(hit["distance"])) for hit in found[0]]

    def _search_params(self) -> dict[str, Any]:
        return {"nprobe": self.nprobe} if self.index_type == "IVF_FLAT" else {}

    def delete(self, owner: str, seqs: Sequence[int]) -> None:
        if not seqs:
            return
        self.ensure()
        ids = ", ".join(str(int(s)) for s in seqs)
        try:
            self.client.delete(self.collection, filter=f'owner == "{digest(owner)}" and seq in [{ids}]')
        except Exception as exc:
            raise StoreUnavailable(f"Milvus delete failed: {exc}") from exc

    def delete_owner(self, owner: str) -> None:
        self.ensure()
        try:
            self.client.delete(self.collection, filter=f'owner == "{digest(owner)}"')
        except Exception as exc:
            raise StoreUnavailable(f"Milvus delete failed: {exc}") from exc

    def count(self, owner: str) -> int:
        self.ensure()
        rows = self.client.query(self.collection, filter=f'owner == "{digest(owner)}"', output_fields=["count(*)"])
        return int(rows[0]["count(*)"]) if rows else 0

    def seqs(self, owner: str) -> set[int]:
        """Every vector id this owner has (for consistency checks and tests)."""
        self.ensure()
        rows = self.client.query(self.collection, filter=f'owner == "{digest(owner)}"', output_fields=["seq"])
        return {int(r["seq"]) for r in rows}

    def reset(self) -> None:
        """Drop and recreate the collection (before a full rebuild from SQL)."""
        try:
            if self.client.has_collection(self.collection):
                self.client.drop_collection(self.collection)
        except Exception as exc:
            raise StoreUnavailable(f"Milvus drop failed: {exc}") from exc
        self._ready = False
        self.ensure()
