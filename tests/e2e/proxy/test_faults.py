"""Faults: an upstream that dies or hangs answers a clear error and is restarted; a recorder that
cannot record leaves every call as it was."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from cluster.client import http_client
from cluster.net import free_port
from cluster.proxy.config import UpstreamSpec
from cluster.services import Services
from tests.e2e.proxy.conftest import ENTITY, config, finalized, in_process, proxied, upstream_process

pytestmark = pytest.mark.anyio


async def _until_answers(client: Client, tool: str, timeout_s: float = 20.0) -> str:
    """Call ``tool`` until it succeeds (the restart done); its text."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await client.call_tool(tool, {})
        if not result.is_error:
            return result.content[0].text  # type: ignore[union-attr]
        assert time.monotonic() < deadline, result.content
        await anyio.sleep(0.2)


async def test_an_upstream_that_dies_answers_a_clear_error_and_is_restarted(tmp_path: Path, services: Services) -> None:
    async with proxied(config(tmp_path), in_process(services)) as client:
        assert not (await client.call_tool("create_entities", ENTITY)).is_error
        first = upstream_process("server-memory")
        first.kill()
        first.wait(5)
        failed = await client.call_tool("read_graph", {})
        assert failed.is_error
        text = failed.content[0].text  # type: ignore[union-attr]
        assert text.startswith("UpstreamUnavailable: server 'memory' stopped while running read_graph")
        assert "restarted" in text
        # The new process reads the same file: the graph written before the crash is there.
        assert "Ada" in await _until_answers(client, "read_graph")
        assert upstream_process("server-memory").pid != first.pid
        # The other upstream never noticed.
        assert not (await client.call_tool("list_allowed_directories", {})).is_error
    [trajectory] = finalized(services.db)
    assert [n.execution_result.status.value for n in trajectory.nodes][:2] == ["success", "failure"]


async def test_an_upstream_that_hangs_times_out_with_a_clear_error_and_is_restarted(
    tmp_path: Path, services: Services
) -> None:
    async with proxied(config(tmp_path, call_timeout_s=1.0), in_process(services)) as client:
        hung = upstream_process("server-memory")
        os.kill(hung.pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            failed = await client.call_tool("read_graph", {})
            assert time.monotonic() - start < 5
            assert failed.is_error
            assert "UpstreamTimeout" in failed.content[0].text  # type: ignore[union-attr]
            await _until_answers(client, "read_graph")
            assert upstream_process("server-memory").pid != hung.pid
        finally:
            if hung.is_running():
                os.kill(hung.pid, signal.SIGKILL)


async def test_a_recorder_that_cannot_record_never_alters_or_blocks_a_call(tmp_path: Path, services: Services) -> None:
    """hindsight unreachable (nothing listens on the port): calls answer as with a working recorder."""
    cfg = config(tmp_path, drain_s=0.5)
    async with proxied(cfg, in_process(services)) as client:
        recorded = [await client.call_tool("create_entities", ENTITY), await client.call_tool("read_graph", {})]
    (tmp_path / "memory.jsonl").unlink()
    nowhere = f"http://127.0.0.1:{free_port()}/mcp/"
    async with proxied(cfg, lambda: http_client(nowhere, timeout=2.0)) as client:
        start = time.monotonic()
        unrecorded = [await client.call_tool("create_entities", ENTITY), await client.call_tool("read_graph", {})]
        assert time.monotonic() - start < 2.0
    assert [r.model_dump() for r in unrecorded] == [r.model_dump() for r in recorded]
    assert len(finalized(services.db)) == 1  # only the first run's


async def test_an_unknown_tool_is_a_clear_error(tmp_path: Path, services: Services) -> None:
    async with proxied(config(tmp_path), in_process(services)) as client:
        unknown = await client.call_tool("no_such_tool", {})
        assert unknown.is_error
        assert "Unknown tool: no_such_tool" in unknown.content[0].text  # type: ignore[union-attr]


async def test_records_made_while_hindsight_is_down_land_once_it_is_back(tmp_path: Path, services: Services) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}/mcp/"
    reachable = in_process(services)
    attempts = 0

    def connect() -> Client:
        nonlocal attempts
        attempts += 1
        return http_client(nowhere, timeout=2.0) if attempts <= 2 else reachable()

    async with proxied(config(tmp_path), connect) as client:
        for _ in range(3):
            assert not (await client.call_tool("read_graph", {})).is_error
    assert attempts >= 3
    [trajectory] = finalized(services.db)
    assert [n.chosen_action for n in trajectory.nodes] == ["read_graph"] * 3


async def test_an_upstream_that_cannot_start_leaves_the_others_serving(tmp_path: Path, services: Services) -> None:
    cfg = config(tmp_path, call_timeout_s=30.0)
    servers = {**cfg.servers, "ghost": UpstreamSpec(command=str(tmp_path / "no-such-server"))}
    cfg = cfg.model_copy(update={"servers": servers})
    async with proxied(cfg, in_process(services)) as client:
        start = time.monotonic()
        names = {t.name for t in (await client.list_tools()).tools}
        assert time.monotonic() - start < 5  # the list never waits for a server that is down
        assert {"read_graph", "list_directory"} <= names
        assert not (await client.call_tool("read_graph", {})).is_error
