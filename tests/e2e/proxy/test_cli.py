"""``hindsight proxy`` as an agent's MCP config starts it: a process of its own over stdio or HTTP,
recording in process into the data directory."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mcp import Client, StdioServerParameters

from actors.engine.model.trajectories import Trajectory
from cluster.net import free_port
from cluster.services import build_services
from cluster.settings import Settings
from tests.cli_process import cli
from tests.e2e.proxy.conftest import ENTITY, finalized, upstreams

pytestmark = pytest.mark.anyio


def _config(tmp_path: Path, **hindsight: object) -> Path:
    path = tmp_path / "proxy.json"
    path.write_text(json.dumps({"mcpServers": upstreams(tmp_path), "hindsight": hindsight}))
    return path


def _stored(data_dir: Path) -> list[Trajectory]:
    services = build_services(Settings(data_dir=data_dir))
    try:
        return finalized(services.db)
    finally:
        services.close()


def test_a_bad_config_is_one_line_and_exit_code_1(tmp_path: Path) -> None:
    path = tmp_path / "proxy.json"
    path.write_text(json.dumps({"mcpServers": {"memory": {"args": ["x"]}}}))
    done = cli("proxy", "--config", str(path), data_dir=tmp_path)
    assert done.returncode == 1
    assert "mcpServers.memory" in done.stderr
    assert "give either command" in done.stderr
    missing = cli("proxy", "--config", str(tmp_path / "absent.json"), data_dir=tmp_path)
    assert missing.returncode == 1
    assert "cannot read it" in missing.stderr


async def test_over_stdio_an_agent_session_becomes_one_trajectory(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "cluster.cli", "proxy", "--config", str(_config(tmp_path, task="keep a graph"))],
        env={**os.environ, "HINDSIGHT_DATA_DIR": str(data_dir)},
    )
    async with Client(params) as client:
        assert not (await client.call_tool("create_entities", {**ENTITY, "token": "t0p-secret"})).is_error
        assert not (await client.call_tool("read_graph", {})).is_error
    [trajectory] = _stored(data_dir)
    assert trajectory.header.task == "keep a graph"
    assert [n.chosen_action for n in trajectory.nodes] == ["create_entities", "read_graph"]
    assert trajectory.nodes[0].action_params["token"] == "[redacted]"


@contextlib.contextmanager
def _http_proxy(tmp_path: Path, data_dir: Path) -> Iterator[str]:
    """``hindsight proxy --http`` running; yields its MCP URL, then stops it as an operator does (SIGTERM)."""
    port = free_port()
    command = [sys.executable, "-m", "cluster.cli", "proxy", "--config", str(_config(tmp_path))]
    process = subprocess.Popen(
        [*command, "--http", f"127.0.0.1:{port}"], env={**os.environ, "HINDSIGHT_DATA_DIR": str(data_dir)}
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, "the proxy exited"
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the proxy did not listen"
                time.sleep(0.2)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully (the proxy finalizes and drains), then re-raises the signal.
        assert process.wait(30) == -signal.SIGTERM


async def test_over_http_each_mcp_session_is_a_trajectory(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with _http_proxy(tmp_path, data_dir) as url:
        async with Client(url, mode="legacy") as first, Client(url, mode="legacy") as second:
            await first.call_tool("create_entities", ENTITY)
            await second.call_tool("read_graph", {})
            await first.call_tool("read_graph", {})
        # A client without MCP sessions (protocol 2026-07-28) names its task's session in _meta.
        async with Client(url) as modern:
            run = {"hindsight/session": "run-7", "hindsight/task": "check the graph"}
            await modern.call_tool("read_graph", {}, meta=run)
            await modern.call_tool("hindsight_finalize", {"outcome": "failure"}, meta=run)
    stored = _stored(data_dir)
    by_actions = sorted([n.chosen_action for n in t.nodes] for t in stored)
    assert by_actions == [["create_entities", "read_graph"], ["read_graph"], ["read_graph"]]
    [named] = [t for t in stored if t.header.task == "check the graph"]
    assert named.outcome is not None
    assert named.outcome.status.value == "failure"
