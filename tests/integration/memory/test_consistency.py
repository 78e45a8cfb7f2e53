"""Derived state stays honest: caches across service instances, vectors after a Milvus failure,
seqs that never repeat, queries that never wait for the writer."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cluster.core.errors import StoreUnavailable
from cluster.core.ports import Embedder
from cluster.memory.index import MilvusMemoryIndex
from cluster.memory.models import MemoryForget, MemoryQuery, MemoryUpdate, MemoryWrite
from cluster.memory.policy import Ttl
from cluster.memory.repository.versions import Versions
from cluster.memory.service import MemoryService
from cluster.storage.db import Database
from cluster.storage.milvus import MilvusLiteServer, open_milvus
from tests.integration.memory.conftest import T0

pytestmark = pytest.mark.milvus


def ids(result: Any) -> list[uuid.UUID]:
    return [hit.memory.memory_id for hit in result.hits]


@pytest.fixture
def other(database: Database, embedder: Embedder, index: MilvusMemoryIndex) -> MemoryService:
    """A second service on the same stores: another replica, with a cache of its own."""
    return MemoryService(database, embedder, index)


def test_a_memory_forgotten_through_one_instance_is_never_served_by_another(
    memory: MemoryService, other: MemoryService
) -> None:
    tea = memory.apply_write("alice", MemoryWrite(key="tea", value="Alice drinks green tea"), now=T0).memory_id
    assert ids(other.run_query("alice", MemoryQuery(query="green tea"), now=T0)) == [tea]
    assert other.run_query("alice", MemoryQuery(query="green tea"), now=T0).cached
    memory.apply_forget("alice", MemoryForget(memory_id=tea))
    after = other.run_query("alice", MemoryQuery(query="green tea"), now=T0)
    assert not after.cached
    assert ids(after) == []


def test_updates_and_superseding_writes_through_one_instance_reach_the_others_cache(
    memory: MemoryService, other: MemoryService
) -> None:
    first = memory.apply_write("alice", MemoryWrite(key="city", value="Alice lives in Lisbon"), now=T0).memory_id
    assert ids(other.run_query("alice", MemoryQuery(query="where does Alice live"), now=T0)) == [first]
    updated = memory.apply_update("alice", MemoryUpdate(memory_id=first, value="Alice lives in Porto"))
    seen = other.run_query("alice", MemoryQuery(query="where does Alice live"), now=T0 + timedelta(seconds=1))
    assert ids(seen) == [updated.memory_id]
    superseding = memory.apply_write(
        "alice", MemoryWrite(key="city", value="Alice lives in Braga"), now=T0 + timedelta(seconds=2)
    ).memory_id
    seen = other.run_query("alice", MemoryQuery(query="where does Alice live"), now=T0 + timedelta(seconds=3))
    assert ids(seen) == [superseding]
    assert seen.hits[0].memory.value == "Alice lives in Braga"


def test_archive_and_purge_through_one_instance_reach_the_others_cache(
    memory: MemoryService, other: MemoryService
) -> None:
    bike = memory.apply_write("alice", MemoryWrite(key="bike", value="Alice sold her old bike"), now=T0).memory_id
    code = memory.apply_write(
        "alice", MemoryWrite(key="otp", value="Alice's one-time bike lock code is 4821", ttl=Ttl.window(600)), now=T0
    ).memory_id
    assert set(ids(other.run_query("alice", MemoryQuery(query="bike"), now=T0))) == {bike, code}
    memory.purge_expired(T0 + timedelta(hours=1))
    assert ids(other.run_query("alice", MemoryQuery(query="bike"), now=T0)) == [bike]
    memory.decay_and_archive(T0 + timedelta(days=365))
    assert ids(other.run_query("alice", MemoryQuery(query="bike"), now=T0)) == []


def test_another_owners_change_leaves_the_entry_cached(memory: MemoryService, other: MemoryService) -> None:
    memory.apply_write("alice", MemoryWrite(key="tea", value="Alice drinks green tea"), now=T0)
    other.run_query("alice", MemoryQuery(query="tea"), now=T0)
    memory.apply_write("bob", MemoryWrite(key="tea", value="Bob drinks black tea"), now=T0)
    assert other.run_query("alice", MemoryQuery(query="tea"), now=T0).cached


def test_seqs_are_never_handed_out_again(memory: MemoryService) -> None:
    first = memory.apply_write("alice", MemoryWrite(key="a", value="first note"), now=T0).memory_id
    with memory.db.read() as session:
        seq = Versions(session, "alice", memory.db.dialect).get(first).seq
    memory.apply_forget(
        "alice", MemoryForget(memory_id=first)
    )  # the newest row goes: a plain SQLite rowid would be reused
    second = memory.apply_write("alice", MemoryWrite(key="b", value="second note"), now=T0).memory_id
    with memory.db.read() as session:
        assert Versions(session, "alice", memory.db.dialect).get(second).seq > seq


def test_a_query_does_not_wait_for_a_writer(memory: MemoryService) -> None:
    tea = memory.apply_write("alice", MemoryWrite(key="tea", value="Alice drinks green tea"), now=T0).memory_id
    answered = threading.Event()
    found: list[uuid.UUID] = []

    def query() -> None:
        found.extend(ids(memory.run_query("alice", MemoryQuery(query="green tea"), now=T0)))
        answered.set()

    with memory.db.transaction():  # holds SQLite's writer lock (and this process's queue for it)
        worker = threading.Thread(target=query)
        worker.start()
        assert answered.wait(60), "the query queued behind the open write transaction"
    worker.join()
    assert found == [tea]


def test_accesses_reach_sql_by_batch_and_other_instances_see_them(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex, memory: MemoryService
) -> None:
    def activity_elsewhere() -> float:
        # A fresh instance: no cache, no accesses of its own waiting.
        fresh = MemoryService(database, embedder, index)
        return fresh.run_query("alice", MemoryQuery(query="green tea", top_k=1), now=day30).hits[0].why.activity

    memory.apply_write("alice", MemoryWrite(key="tea", value="Alice drinks green tea"), now=T0)
    day30 = T0 + timedelta(days=30)
    memory.run_query("alice", MemoryQuery(query="green tea"), now=day30)
    assert activity_elsewhere() == pytest.approx(0.5)  # still waiting in this process
    assert memory.flush_accesses() == 1
    assert activity_elsewhere() == pytest.approx(1.5)


@pytest.fixture
def dead_index(tmp_path: Path, embedder: Embedder) -> Iterator[MilvusMemoryIndex]:
    """A memory index whose Milvus went away after the collection was made."""
    path = tmp_path / "dead.db"
    server = MilvusLiteServer(path)
    server.start()
    client = open_milvus(str(path))
    index = MilvusMemoryIndex(client, dimension=embedder.dimension, collection="dead", timeout=2.0)
    index.ensure()
    server.stop()
    yield index
    client.close()


def test_a_milvus_failure_after_the_commit_loses_nothing(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex, dead_index: MilvusMemoryIndex
) -> None:
    broken = MemoryService(database, embedder, dead_index)
    tea = broken.apply_write(
        "alice", MemoryWrite(key="tea", value="Alice drinks green tea"), now=T0
    ).memory_id  # the write stands
    with pytest.raises(StoreUnavailable):
        broken.run_query("alice", MemoryQuery(query="green tea"), now=T0)
    assert broken.get("alice", tea).value == "Alice drinks green tea"
    healthy = MemoryService(database, embedder, index)
    assert healthy.sync_index() == 1  # maintenance does the queued work
    assert len(index.seqs("alice")) == 1
    hit = healthy.run_query("alice", MemoryQuery(query="a beverage in the morning"), now=T0).hits[0]
    assert hit.memory.memory_id == tea
    assert hit.why.dense_rank == 1
    assert healthy.sync_index() == 0


def test_the_owners_next_write_redoes_queued_vector_work(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex, dead_index: MilvusMemoryIndex
) -> None:
    broken = MemoryService(database, embedder, dead_index)
    broken.apply_write("alice", MemoryWrite(key="tea", value="Alice drinks green tea"), now=T0)
    gone = broken.apply_write("alice", MemoryWrite(key="cat", value="Alice has a cat"), now=T0).memory_id
    broken.apply_forget("alice", MemoryForget(memory_id=gone))  # the delete is queued as well
    healthy = MemoryService(database, embedder, index, index_retry_after=timedelta(0))
    healthy.apply_write("alice", MemoryWrite(key="car", value="Alice drives a blue car"), now=T0)
    assert len(index.seqs("alice")) == 2
    assert healthy.sync_index() == 0


def test_a_change_made_in_another_process_is_never_served_from_this_processs_cache(
    database: Database, embedder: Embedder, tmp_path: Path
) -> None:
    path = tmp_path / "shared.db"
    with MilvusLiteServer(path):
        client = open_milvus(str(path))
        try:
            index = MilvusMemoryIndex(client, dimension=embedder.dimension)
            here = MemoryService(database, embedder, index)
            tea = here.apply_write("alice", MemoryWrite(key="tea", value="Alice drinks green tea"), now=T0).memory_id
            city = here.apply_write("alice", MemoryWrite(key="city", value="Alice lives in Lisbon"), now=T0).memory_id
            assert ids(here.run_query("alice", MemoryQuery(query="green tea", top_k=1), now=T0)) == [tea]
            assert ids(here.run_query("alice", MemoryQuery(query="where does Alice live", top_k=1), now=T0)) == [city]
            child = subprocess.run(
                [sys.executable, "-c", CHILD, database.url, str(path), str(tea), str(city)],
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
            assert child.returncode == 0, child.stderr
            assert tea not in ids(here.run_query("alice", MemoryQuery(query="green tea", top_k=1), now=T0))
            moved = here.run_query("alice", MemoryQuery(query="where does Alice live", top_k=1), now=T0)
            assert not moved.cached
            assert [h.memory.value for h in moved.hits] == ["Alice lives in Porto"]
        finally:
            client.close()


# Another replica: the same database and Milvus, its own process and cache.
CHILD = """
import sys, uuid
from cluster.memory.models import MemoryForget, MemoryUpdate
from cluster.services import build_memory_service
from cluster.settings import load_settings
url, milvus, tea, city = sys.argv[1:]
service = build_memory_service(load_settings(database_url=url, milvus_uri=milvus))
service.apply_forget("alice", MemoryForget(memory_id=uuid.UUID(tea)))
service.apply_update("alice", MemoryUpdate(memory_id=uuid.UUID(city), value="Alice lives in Porto"))
service.index.client.close()
service.db.dispose()
"""
