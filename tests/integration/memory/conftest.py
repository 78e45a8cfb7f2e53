"""Memory services on real stores: the ``database`` fixture (SQLite, then Postgres) and Milvus.

Every test runs on one Milvus Lite file per test session (opening one starts a server process),
then on the session's Milvus server (tests/milvus_server.py); on each, the tests share one
collection, emptied after every test (making one takes half a second on Lite, seconds on the
server), so tests never see each other's vectors.
"""

from __future__ import annotations

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
def index(milvus_client: Any, embedder: Embedder) -> Iterator[MilvusMemoryIndex]:
    """One collection per Milvus, emptied after every test (see the module docstring)."""
    with emptied_after(milvus_client):
        idx = MilvusMemoryIndex(milvus_client, dimension=embedder.dimension, collection="m_tests")
        idx.ensure()
        yield idx


@pytest.fixture
def memory(database: Database, embedder: Embedder, index: MilvusMemoryIndex) -> MemoryService:
    return MemoryService(database, embedder, index)
