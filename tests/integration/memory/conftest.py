"""Memory services on real stores: the ``database`` fixture (SQLite, then Postgres) and Milvus.

Every test runs on one Milvus Lite file per test session (opening one starts a server process),
then on the session's Milvus server (tests/milvus_server.py); each test gets a collection of its
own (on the server, one collection emptied after every test: making one there takes seconds), so
tests never see each other's vectors.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cluster.core.ports import Embedder
from cluster.embedding import CachedEmbedder, OnnxMiniLMEmbedder
from cluster.memory.index import MilvusMemoryIndex
from cluster.memory.service import MemoryService
from cluster.storage.db import Database
from cluster.storage.milvus import open_milvus
from tests.milvus_server import emptied_after

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    return CachedEmbedder(OnnxMiniLMEmbedder(threads=1), maxsize=4096)


@pytest.fixture(scope="session", params=["lite", pytest.param("server", marks=pytest.mark.milvus_server)])
def milvus_client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A client of the session's Lite file, then of the session's Milvus server."""
    if request.param == "server":
        client = open_milvus(request.getfixturevalue("milvus_server_uri"), dedicated=True)
    else:
        path: Path = tmp_path_factory.mktemp("milvus") / "memory.db"
        client = open_milvus(str(path))
    yield client
    client.close()


@pytest.fixture
def index(request: pytest.FixtureRequest, milvus_client: Any, embedder: Embedder) -> Iterator[MilvusMemoryIndex]:
    """A collection of the test's own on Lite; on the server one collection every test empties after it."""
    if request.node.callspec.params.get("milvus_client") == "server":
        with emptied_after(milvus_client):
            idx = MilvusMemoryIndex(milvus_client, dimension=embedder.dimension, collection="m_server_tests")
            idx.ensure()
            yield idx
        return
    idx = MilvusMemoryIndex(milvus_client, dimension=embedder.dimension, collection=f"m_{uuid.uuid4().hex[:12]}")
    idx.ensure()
    yield idx
    milvus_client.drop_collection(idx.collection)


@pytest.fixture
def memory(database: Database, embedder: Embedder, index: MilvusMemoryIndex) -> MemoryService:
    return MemoryService(database, embedder, index)
