"""Shared end-to-end fixtures: in-process services and MCP client, and one Ray instance per session
(Ray costs seconds and ~0.5 GiB to start)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from mcp import Client

from cluster.auth import OwnerResolver
from cluster.services import Services, build_services
from cluster.settings import Settings
from cluster.storage.milvus import MilvusLiteServer
from cluster.tools import build_server
from tests.milvus_server import emptied_after


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def services(tmp_path: Path, shared_lite: MilvusLiteServer) -> Iterator[Services]:
    """Every service of one process on a fresh SQLite file and the session's Lite file, emptied after the test."""
    svc = build_services(Settings(data_dir=tmp_path, milvus_uri=str(shared_lite.path)))
    try:
        with emptied_after(svc.milvus):
            yield svc
    finally:
        svc.close()


@pytest.fixture
async def client(services: Services) -> AsyncIterator[Client]:
    """The official MCP client, connected in process as the local owner."""
    async with Client(build_server(services, OwnerResolver({}, "local"))) as c:
        yield c


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    attempts = 3
    for attempt in range(attempts):
        if ray.is_initialized():
            break
        try:
            ray.init(num_cpus=2, include_dashboard=False, _temp_dir="/tmp/ray-tests", log_to_driver=False)
        except Exception:
            # Every Ray test of the session depends on this start, and a start can fail on this box:
            # the GCS missing its deadline under load (RuntimeError), or a node that never registers
            # after a helper process aborted (a plain Exception; seen once in a fresh-clone run).
            ray.shutdown()
            if attempt == attempts - 1:
                raise
            time.sleep(2)
    yield
    from ray import serve

    serve.shutdown()
    ray.shutdown()
