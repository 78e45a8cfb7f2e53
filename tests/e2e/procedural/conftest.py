"""Fixtures for the procedural benchmark: a real service on SQLite and in-process MCP clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client

from cluster.auth import OwnerResolver
from cluster.services import Services, build_services
from cluster.settings import Settings
from cluster.tools import build_server


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    svc = build_services(Settings(data_dir=tmp_path))
    yield svc
    svc.close()


@pytest.fixture
def client_for(services: Services) -> Callable[[str], AbstractAsyncContextManager[Client]]:
    """An in-process client per owner, so each bench condition keeps its own trajectories."""

    @asynccontextmanager
    async def make(owner: str) -> AsyncIterator[Client]:
        async with Client(build_server(services, OwnerResolver({}, owner))) as client:
            yield client

    return make
