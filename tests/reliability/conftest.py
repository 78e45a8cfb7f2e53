"""Fixtures for tests that run ``hindsight serve`` as a real process, or call the tools in process."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.embedding import OnnxMiniLMEmbedder
from cluster.experience.index import MilvusExperienceIndex
from cluster.experience.service import ExperienceService
from cluster.net import HaproxyGuard
from cluster.storage.db import Database
from cluster.storage.milvus import MilvusLiteServer, open_milvus
from tests.e2e.conftest import anyio_backend, client, services
from tests.reliability.service import ServeProcess, short_tmp

# The in-process services and official MCP client of the end-to-end tests, for the tool tests here.
__all__ = ["anyio_backend", "client", "services"]


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    path = short_tmp()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[ServeProcess]]:
    """Processes a test starts; whatever is left of them is ended afterwards."""
    processes: list[ServeProcess] = []
    yield processes
    for process in processes:
        process.cleanup()
        # The HAProxy run directory of the data directory (outside it: socket paths stay short).
        guard = HaproxyGuard.for_data_dir(process.data_dir, "127.0.0.1", base=process.ray_tmp)
        shutil.rmtree(guard.run_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def embedder() -> OnnxMiniLMEmbedder:
    onnx = OnnxMiniLMEmbedder()
    onnx.load()
    return onnx


@pytest.fixture
def experience(database: Database, tmp_path: Path, embedder: OnnxMiniLMEmbedder) -> Iterator[ExperienceService]:
    """The experience service on the test's database and a Milvus Lite of its own."""
    with MilvusLiteServer(tmp_path / "milvus.db") as server:
        client = open_milvus(str(server.path))
        yield ExperienceService(database, MilvusExperienceIndex(client), embedder)
        client.close()
