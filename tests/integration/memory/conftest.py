"""Memory services on real stores: the ``database`` fixture (SQLite, then Postgres) and Milvus Lite.

One Milvus Lite file per test session (opening one starts a server process); each test gets a
collection of its own, so tests never see each other's vectors.
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

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    return CachedEmbedder(OnnxMiniLMEmbedder(threads=1), maxsize=4096)


@pytest.fixture(scope="session")
def milvus_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path: Path = tmp_path_factory.mktemp("milvus") / "memory.db"
    client = open_milvus(str(path))
    yield client
    client.close()


@pytest.fixture
def index(milvus_client: Any, embedder: Embedder) -> Iterator[MilvusMemoryIndex]:
    idx = MilvusMemoryIndex(milvus_client, dimension=embedder.dimension, collection=f"m_{uuid.uuid4().hex[:12]}")
    idx.ensure()
    yield idx
    milvus_client.drop_collection(idx.collection)


@pytest.fixture
def memory(database: Database, embedder: Embedder, index: MilvusMemoryIndex) -> MemoryService:
    return MemoryService(database, embedder, index)
