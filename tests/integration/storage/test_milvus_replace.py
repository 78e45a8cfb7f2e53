"""A row being rewritten is never missing from a read, on Milvus Lite and on a Milvus server.

A writer keeps rewriting every row of an owner (the confidence changes, as a confidence update
does) while a reader searches and queries; every read must find every row. Each test stops by
itself: the reader makes a fixed number of reads, then tells the writer to stop.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cluster.storage.milvus import (
    MilvusLiteServer,
    RowLock,
    engine_name,
    lite_path,
    open_milvus,
    row_lock,
    served_uri,
)
from cluster.storage.milvus_collection import CollectionSpec, Kind, MilvusCollection, ScalarField

pytestmark = pytest.mark.milvus

OWNER = "alice"
KEYS = [str(uuid.UUID(int=i + 1)) for i in range(8)]
READS = 40
# Only a bound: the writer stops when the reader is done, long before this many writes.
MAX_WRITES = 1_000_000
DIMENSION = 4


@dataclass
class Count:
    """What the writer's thread reports (a process reports through a shared ``Value``)."""

    value: int = 0


def spec(name: str) -> CollectionSpec:
    return CollectionSpec(
        name=name,
        primary=ScalarField("key", Kind.VARCHAR, 36),
        dimension=DIMENSION,
        scalars=(ScalarField("confidence", Kind.FLOAT), ScalarField("updated_at", Kind.INT64)),
    )


def rows(write: int) -> list[dict[str, Any]]:
    """Every row of the owner as write number ``write`` leaves it: only confidence and time change."""
    confidence = 0.8 if write % 2 else 0.9
    return [
        {
            "key": key,
            "owner": OWNER,
            "confidence": confidence,
            "updated_at": write,
            "vector": [1.0, 0.1 * i, 0.0, 0.0],
        }
        for i, key in enumerate(KEYS)
    ]


def read_all(collection: MilvusCollection) -> tuple[set[str], set[str]]:
    """The keys a search above the confidence threshold finds, and the keys a query by key finds."""
    found = collection.search(OWNER, [1.0, 0.0, 0.0, 0.0], len(KEYS), at_least={"confidence": 0.7})
    queried = collection.query(OWNER, KEYS, ["key"])
    return {str(key) for key, _, _ in found}, {str(row["key"]) for row in queried}


def rewrite(target: str, name: str, started: Any, stop: Any, writes: Any) -> None:
    """The writer: rewrites every row until ``stop`` is set (or ``MAX_WRITES``); runs in a thread or a process."""
    client = open_milvus(target, dedicated=True)
    try:
        collection = MilvusCollection(client, spec(name), timeout=30.0)
        for write in range(1, MAX_WRITES + 1):
            collection.upsert(rows(write))
            writes.value = write
            started.set()
            if stop.is_set():
                return
    finally:
        client.close()


@pytest.fixture(scope="module")
def lite_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Lite file served by this process, as the deployment runs it; clients open it by path."""
    path: Path = tmp_path_factory.mktemp("milvus-replace") / "replace.db"
    with MilvusLiteServer(path):
        yield str(path)


@pytest.fixture(params=["lite", pytest.param("server", marks=pytest.mark.milvus_server)])
def target(request: pytest.FixtureRequest) -> str:
    """Where the collection lives: a served Lite file, then the session's Milvus server."""
    return str(request.getfixturevalue("lite_file" if request.param == "lite" else "milvus_server_uri"))


@pytest.fixture
def collection(target: str) -> Iterator[MilvusCollection]:
    """The reader's view of a fresh collection holding the owner's rows."""
    client = open_milvus(target, dedicated=True)
    view = MilvusCollection(client, spec(f"r_{uuid.uuid4().hex[:12]}"), timeout=30.0)
    view.reset()
    view.upsert(rows(0), fresh=True)
    yield view
    view.drop()
    client.close()


def read_while_rewritten(
    collection: MilvusCollection,
    start: Callable[[], None],
    alive: Callable[[], bool],
    started: Any,
    stop: Any,
    writes: Any,
) -> None:
    """Start the writer, make ``READS`` reads while it writes, stop it; every read must find every row."""
    start()
    try:
        assert started.wait(60), "the writer wrote nothing"
        first = writes.value
        for read in range(READS):
            searched, queried = read_all(collection)
            assert searched == set(KEYS), f"read {read}: the search missed {sorted(set(KEYS) - searched)}"
            assert queried == set(KEYS), f"read {read}: the query missed {sorted(set(KEYS) - queried)}"
        assert alive(), "the writer ended before the reads did"
        assert writes.value > first, "no write ran while the reads did"
    finally:
        stop.set()


def test_a_row_being_rewritten_is_never_missing_from_a_search_or_a_query(
    target: str, collection: MilvusCollection
) -> None:
    started, stop = threading.Event(), threading.Event()
    writes = Count()
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            rewrite(target, collection.name, started, stop, writes)
        except BaseException as exc:  # re-raised by the test: the cause of whatever the reads saw
            failures.append(exc)
            started.set()

    thread = threading.Thread(target=writer, name="rewriter")
    try:
        read_while_rewritten(collection, thread.start, thread.is_alive, started, stop, writes)
    finally:
        thread.join(timeout=120)
        if failures:
            raise failures[0]
    assert not thread.is_alive()
    assert collection.count(OWNER) == len(KEYS)


def test_a_row_rewritten_by_another_process_is_never_missing(target: str, collection: MilvusCollection) -> None:
    # The deployment's shape: a worker process writes, a replica process reads, one engine.
    context = multiprocessing.get_context("spawn")
    started, stop, writes = context.Event(), context.Event(), context.Value("q", 0)
    process = context.Process(target=rewrite, args=(target, collection.name, started, stop, writes))
    try:
        read_while_rewritten(collection, process.start, process.is_alive, started, stop, writes)
    finally:
        process.join(timeout=120)
    assert process.exitcode == 0
    assert collection.count(OWNER) == len(KEYS)


def _locked(lock: RowLock, mode: int) -> bool:
    """Whether the rows lock is held so that ``mode`` cannot be taken now (probed without waiting)."""
    fd = os.open(lock.rows_path, os.O_RDWR)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_reads_share_the_lite_row_lock_and_a_rewrite_holds_it_alone() -> None:
    lock = RowLock(f"test-{uuid.uuid4().hex}")
    try:
        with lock.reading(), lock.reading():  # two readers at once
            assert _locked(lock, fcntl.LOCK_EX)
            assert not _locked(lock, fcntl.LOCK_SH)
        with lock.writing():
            assert _locked(lock, fcntl.LOCK_SH)
        assert not _locked(lock, fcntl.LOCK_EX)
    finally:
        lock.discard()


def test_every_client_of_one_lite_engine_takes_the_same_lock(lite_file: str) -> None:
    # A Ray worker is handed the URI the owner serves; a local process opens the file's path.
    uri = served_uri(lite_path(lite_file))
    assert uri is not None
    by_path, by_uri = open_milvus(lite_file, dedicated=True), open_milvus(uri, dedicated=True)
    try:
        first, second = row_lock(by_path, 10.0), row_lock(by_uri, 10.0)
        assert first is not None
        assert second is not None
        assert first.rows_path == second.rows_path
    finally:
        by_path.close()
        by_uri.close()
    assert engine_name("http://localhost:19530") == engine_name("tcp://127.0.0.1:19530/")


@pytest.mark.milvus_server
def test_a_milvus_server_needs_no_row_lock(milvus_server_uri: str) -> None:
    # Its upsert writes the delete and the insert under one timestamp; reads are snapshots.
    client = open_milvus(milvus_server_uri, dedicated=True)
    try:
        assert row_lock(client, 10.0) is None
    finally:
        client.close()
