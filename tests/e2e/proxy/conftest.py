"""The proxy in front of the reference MCP servers from npm (server-memory, server-filesystem), driven
by the official MCP client, recording into hindsight's own tools in process."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client

from actors.engine.model.trajectories import Trajectory
from cluster.auth import OwnerResolver
from cluster.proxy.config import ProxyConfig
from cluster.proxy.server import build_proxy_server
from cluster.services import Services
from cluster.storage.db import Database
from cluster.tools import build_server
from cluster.trajectories.repository import SqlTrajectoryStore

ENTITY = {"entities": [{"name": "Ada", "entityType": "person", "observations": ["writes programs"]}]}
"""One knowledge-graph entity, as server-memory's create_entities takes it."""

SERVERS = Path(__file__).parent / "servers" / "node_modules" / ".bin"


def server_bin(name: str) -> str:
    path = SERVERS / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make tests/e2e/proxy/servers/node_modules/.installed` (npm ci)")
    return str(path)


def upstreams(tmp_path: Path) -> dict[str, Any]:
    """server-memory (a knowledge graph in a file) and server-filesystem (rooted in tmp_path/files)."""
    files = tmp_path / "files"
    files.mkdir(exist_ok=True)
    (files / "notes.txt").write_text("hello from the filesystem\n")
    return {
        "memory": {
            "command": server_bin("mcp-server-memory"),
            "env": {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl"), "PATH": os.environ["PATH"]},
        },
        "files": {"command": server_bin("mcp-server-filesystem"), "args": [str(files)]},
    }


def config(tmp_path: Path, **hindsight: Any) -> ProxyConfig:
    return ProxyConfig.model_validate({"mcpServers": upstreams(tmp_path), "hindsight": hindsight})


def in_process(services: Services) -> Callable[[], Client]:
    """hindsight's own MCP tools in this process, as the local owner."""
    server = build_server(services, OwnerResolver({}, "local"))
    return lambda: Client(server)


@contextlib.asynccontextmanager
async def proxied(cfg: ProxyConfig, connect: Callable[[], Client], mode: str = "auto") -> AsyncIterator[Client]:
    """The official client connected to the proxy in process (``mode`` as ``Client`` takes it);
    leaving it stops the proxy, which finalizes open trajectories and drains its records."""
    async with Client(build_proxy_server(cfg, connect), mode=mode) as client:
        yield client


def finalized(db: Database, owner: str = "local") -> list[Trajectory]:
    """Every finalized trajectory of ``owner``, oldest first."""
    with db.read() as session:
        store = SqlTrajectoryStore(session)
        ids = [i for group in store.finalized_groups(owner).values() for i in group]
        return store.load_many(owner, ids)


def upstream_process(command_part: str) -> psutil.Process:
    """The running upstream whose command line contains ``command_part`` (a child of this process)."""
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if any(command_part in part for part in child.cmdline()):
                return child
    raise AssertionError(f"no upstream process running {command_part}")
