"""Memory vectors in a Milvus collection, derived from the SQL rows and rebuildable from them.

A typed view over :class:`cluster.storage.milvus_collection.MilvusCollection`, which owns the
owner filter, the filter-literal policy, timeouts, upsert-only writes and error mapping. Each row
is one memory version's vector plus the scalar fields every search filters on (owner, entity,
scope). Mutable state (superseded, archived, expiry) stays in SQL, which has the last word on
every candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

from pydantic import Field

from cluster.core.types import Frozen
from cluster.storage.milvus_collection import CollectionSpec, Kind, MilvusCollection, ScalarField, literal

# Version 2 of the schema: owner, entity and scope as text (version 1, "memories", held digests).
# Migration 0004 queues every memory for indexing, so maintenance fills this collection by itself.
COLLECTION = "memory_vectors"
NO_ENTITY = ""


class VectorRow(Frozen):
    seq: int = Field(ge=0, description="The SQL row's primary key.")
    owner: str
    scope_key: str
    entity: str | None
    vector: list[float]


class VectorHit(NamedTuple):
    """One nearest vector (a tuple: a query reads a hundred or more)."""

    seq: int
    similarity: float


def memory_spec(
    name: str = COLLECTION,
    *,
    dimension: int,
    index_type: Literal["FLAT", "IVF_FLAT"] = "FLAT",
    nlist: int = 256,
    nprobe: int = 32,
) -> CollectionSpec:
    return CollectionSpec(
        name=name,
        primary=ScalarField("seq", Kind.INT64),
        dimension=dimension,
        # Byte lengths for the longest names the SQL columns allow, in 4-byte UTF-8.
        scalars=(ScalarField("scope", Kind.VARCHAR, 880), ScalarField("entity", Kind.VARCHAR, 800)),
        index_type=index_type,
        nlist=nlist,
        nprobe=nprobe,
    )


class MilvusMemoryIndex:
    """Memory vectors in Milvus (Lite file or server), every operation constrained by owner.

    Args:
        client: an open ``pymilvus.MilvusClient``; the caller owns it (one process owns a Lite file).
        dimension: vector size; must match the embedder.
        collection: collection name.
        index_type: ``FLAT`` (exact; Milvus Lite 2.5 searches 100k rows in about 10-25 ms) or
            ``IVF_FLAT`` (``nlist`` clusters, ``nprobe`` of them searched per query).
        timeout: seconds per Milvus call.
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
        timeout: float = 10.0,
    ) -> None:
        if index_type not in ("FLAT", "IVF_FLAT"):
            raise ValueError(f"index_type must be FLAT or IVF_FLAT, not {index_type!r}")
        spec = memory_spec(collection, dimension=dimension, index_type=index_type, nlist=nlist, nprobe=nprobe)  # type: ignore[arg-type]
        self.rows = MilvusCollection(client, spec, timeout=timeout)

    @property
    def client(self) -> Any:
        return self.rows.client

    @property
    def dimension(self) -> int:
        return self.rows.spec.dimension

    @property
    def collection(self) -> str:
        return self.rows.name

    @staticmethod
    def check(owner: str, scope_key: str, entity: str | None) -> None:
        """Refuse, before anything is stored, the values no filter could name (see ``literal``).

        Raises:
            InvalidInput: one of them holds a control character.
        """
        literal(owner, "owner")
        literal(scope_key, "scope")
        if entity is not None:
            literal(entity, "entity")

    def ensure(self) -> None:
        """Create the collection if it does not exist (idempotent)."""
        self.rows.ensure()

    def upsert(self, rows: Sequence[VectorRow], *, fresh: bool = False) -> None:
        """Write vectors; a seq already indexed is replaced (so a retried write is harmless).

        ``fresh``: these seqs were just drawn, so none can be indexed yet (see ``MilvusCollection.upsert``).
        """
        self.rows.upsert(
            [
                {
                    "seq": row.seq,
                    "owner": row.owner,
                    "scope": row.scope_key,
                    "entity": row.entity if row.entity is not None else NO_ENTITY,
                    "vector": row.vector,
                }
                for row in rows
            ],
            fresh=fresh,
        )

    def search(
        self,
        owner: str,
        vector: Sequence[float],
        limit: int,
        *,
        entity: str | None = None,
        scope_key: str | None = None,
    ) -> list[VectorHit]:
        """Nearest vectors of this owner (and entity/scope, if given), best first."""
        equals: dict[str, str] = {}
        if entity is not None:
            equals["entity"] = entity
        if scope_key is not None:
            equals["scope"] = scope_key
        return [VectorHit(int(key), score) for key, score, _ in self.rows.search(owner, vector, limit, equals=equals)]

    def delete(self, owner: str, seqs: Sequence[int]) -> None:
        """Remove these rows' vectors; the seqs are the owner's, read from SQL (Milvus deletes by key alone)."""
        self.rows.delete(list(seqs))

    def seqs(self, owner: str) -> set[int]:
        """Every vector id this owner has (for rebuilds, consistency checks and tests)."""
        return {int(key) for key in self.rows.ids(owner)}

    def owners(self) -> set[str]:
        """Every owner with a vector (for rebuilds: SQL may no longer know one)."""
        return self.rows.owners()

    def holds_other_dimension(self) -> bool:
        """Whether the collection was made for vectors of another length (another embedder's)."""
        stored = self.rows.stored_dimension()
        return stored is not None and stored != self.dimension

    def reset(self) -> None:
        """Drop and recreate the collection (before a full rebuild from SQL)."""
        self.rows.reset()
