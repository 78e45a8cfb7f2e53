"""Rebuilding memory vectors from SQL while the service answers (SQLite and Postgres, Milvus Lite)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cluster.core.ports import Embedder
from cluster.memory.index import MilvusMemoryIndex, VectorRow
from cluster.memory.models import MemoryQuery, MemoryWrite
from cluster.memory.repository.versions import Versions
from cluster.memory.service import MemoryService
from cluster.memory.word_store import SharedWordVectors
from cluster.storage.db import Database
from tests.integration.memory.conftest import T0

pytestmark = pytest.mark.milvus

FACTS = [f"Project {i} ships from warehouse {i % 7} on weekday {i % 5}" for i in range(240)]


def sql_seqs(service: MemoryService, owner: str) -> set[int]:
    with service.db.read() as session:
        return Versions(session, owner, service.db.dialect).seqs()


def test_a_rebuild_keeps_queries_answering_and_repairs_lost_and_left_over_vectors(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    serving = MemoryService(database, embedder, index, cache_bytes=0)
    writes = [MemoryWrite(key="tea", value="Alice drinks green tea every morning")]
    writes += [MemoryWrite(key=f"fact{i}", value=text) for i, text in enumerate(FACTS)]
    serving.apply_writes("alice", writes, now=T0)
    serving.apply_write("bob", MemoryWrite(key="tea", value="Bob drinks black tea"), now=T0)
    kept = sql_seqs(serving, "alice")
    # Damage the index: some vectors lost, one left behind by a memory SQL no longer has.
    lost = sorted(kept)[1:41]  # not the first, the one the queries below look for
    index.delete("alice", lost)
    ghost = max(kept) + 10_000
    index.upsert([VectorRow(seq=ghost, owner="alice", scope_key="user", entity=None, vector=[1.0] + [0.0] * 383)])

    # The rebuild runs in "another process" (its own service and index client). Before each of its
    # writes, this one answers: the collection must hold every vector it held between two writes.
    # (During a write a replaced vector may be missing for an instant: an upsert is delete + insert.)
    rebuilding = MilvusMemoryIndex(index.client, dimension=index.dimension, collection=index.collection)
    ranks: list[Any] = []
    upsert = rebuilding.upsert

    def answer_then_upsert(rows: Any, **kwargs: Any) -> None:
        hit = serving.run_query("alice", MemoryQuery(query="which hot beverage in the morning"), now=T0).hits[0]
        ranks.append((hit.memory.key, hit.why.dense_rank))
        upsert(rows, **kwargs)

    monkeypatch.setattr(rebuilding, "upsert", answer_then_upsert)
    written = MemoryService(database, embedder, rebuilding).reindex(batch_size=32)
    assert written == len(kept) + 1  # alice's and bob's
    assert index.seqs("alice") == kept
    assert len(index.seqs("bob")) == 1
    # Every answer during the rebuild found the memory by meaning: the collection was never emptied.
    assert len(ranks) == len(range(0, len(kept), 32)) + 1  # alice's pages, bob's page
    assert set(ranks) == {("tea", 1)}


def test_a_full_rebuild_removes_the_vectors_of_an_owner_sql_no_longer_has(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex
) -> None:
    service = MemoryService(database, embedder, index)
    service.apply_writes("alice", [MemoryWrite(key="a", value="Alice keeps bees")], now=T0)
    service.apply_writes("bob", [MemoryWrite(key="b", value="Bob keeps goats")], now=T0)
    # A vector of an owner with no memory left (as a forget whose Milvus delete was lost leaves it).
    index.upsert([VectorRow(seq=10**9, owner="carol", scope_key="user", entity=None, vector=[1.0] + [0.0] * 383)])
    assert index.owners() == {"alice", "bob", "carol"}
    service.reindex("bob")  # one owner's rebuild touches only that owner
    assert index.seqs("carol") == {10**9}
    assert service.reindex() == 2
    assert index.owners() == {"alice", "bob"}
    assert index.seqs("alice") == sql_seqs(service, "alice")


def test_a_collection_made_for_another_vector_length_is_rebuilt_from_scratch(
    database: Database, embedder: Embedder, milvus_client: Any
) -> None:
    name = "m_other_length"
    MilvusMemoryIndex(milvus_client, dimension=8, collection=name).ensure()
    index = MilvusMemoryIndex(milvus_client, dimension=embedder.dimension, collection=name)
    try:
        assert index.holds_other_dimension()
        service = MemoryService(database, embedder, index)
        service.apply_writes("alice", [MemoryWrite(key="tea", value="Alice drinks green tea")], now=T0)
        assert service.reindex() == 1
        assert not index.holds_other_dimension()
        assert index.seqs("alice") == sql_seqs(service, "alice")
        assert service.run_query("alice", MemoryQuery(query="hot beverage"), now=T0).hits[0].why.dense_rank == 1
    finally:
        milvus_client.drop_collection(name)


def test_a_rebuild_of_every_owner_drops_other_embedders_word_vectors(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex
) -> None:
    service = MemoryService(database, embedder, index, embedder_name="minilm test")
    service.apply_write("alice", MemoryWrite(key="pet", value="I adopted a puppy from the shelter"), now=T0)
    service.run_query("alice", MemoryQuery(query="What kind of dog?"), now=T0)  # stores this embedder's words
    former = SharedWordVectors(database, "a former model")
    former.save({"puppy": np.ones(3, dtype=np.float32)})
    former.wait()
    assert service.words is not None
    service.words.wait()
    service.reindex(owner="alice")  # one owner: nothing else changes
    with database.read() as session:
        assert set(former.read(session, ["puppy"])) == {"puppy"}
    service.reindex()
    with database.read() as session:
        assert former.read(session, ["puppy"]) == {}
        assert set(service.words.read(session, ["puppy", "dog"])) == {"puppy", "dog"}
