"""Fixtures for the procedural benchmark: a real service on SQLite and in-process MCP clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
from mcp import Client

from cluster.auth import OwnerResolver
from cluster.services import Services
from cluster.tools import build_server


@pytest.fixture
def client_for(services: Services) -> Callable[[str], AbstractAsyncContextManager[Client]]:
    """An in-process client per owner, so each bench condition keeps its own trajectories."""

    @asynccontextmanager
    async def make(owner: str) -> AsyncIterator[Client]:
        async with Client(build_server(services, OwnerResolver({}, owner))) as client:
            yield client

    return make
