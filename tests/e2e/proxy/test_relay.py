"""Over stdio the proxy relays plain tool calls as JSON-RPC beside the SDK (cluster/proxy/relay.py):
the agent gets the same answers as through the SDK's server, in either protocol era, and every call
is recorded."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client

from cluster.proxy.config import ProxyConfig
from cluster.services import Services, build_services
from cluster.settings import Settings
from tests.e2e.proxy.conftest import ENTITY, finalized, in_process, proxied, upstreams

pytestmark = pytest.mark.anyio


def _servers(tmp_path: Path, run: str) -> dict[str, Any]:
    """The reference servers on one folder of files, each run with a knowledge graph of its own."""
    servers = upstreams(tmp_path)
    servers["memory"]["env"]["MEMORY_FILE_PATH"] = str(tmp_path / f"{run}.jsonl")
    return servers


async def _answers(client: Client, files: Path) -> list[Any]:
    """What the agent gets for a few calls: results as JSON, a refusal as its code and message."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("list_directory", {"path": str(files)}),
        ("read_text_file", {"path": str(files / "absent.txt")}),  # an isError result
        ("create_entities", ENTITY),
        ("read_graph", {}),  # structured content under an output schema
        ("read_text_file", {"path": 7}),  # arguments the upstream refuses
    ]
    answers: list[Any] = []
    for name, arguments in calls:
        try:
            result = await client.call_tool(name, arguments)
        except MCPError as exc:
            answers.append((exc.code, exc.message))
        else:
            answers.append(result.model_dump(by_alias=True, mode="json", exclude_none=True))
    return answers


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_relayed_calls_answer_as_the_sdk_does_and_are_recorded(
    tmp_path: Path, services: Services, mode: str
) -> None:
    files = tmp_path / "files"
    sdk_config = ProxyConfig.model_validate({"mcpServers": _servers(tmp_path, "sdk"), "hindsight": {"task": "t"}})
    async with proxied(sdk_config, in_process(services), mode=mode) as client:
        through_sdk = await _answers(client, files)

    config = tmp_path / "proxy.json"
    config.write_text(json.dumps({"mcpServers": _servers(tmp_path, "relay"), "hindsight": {"task": "relayed"}}))
    data_dir = tmp_path / "data"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "cluster.cli", "proxy", "--config", str(config)],
        env={**os.environ, "HINDSIGHT_DATA_DIR": str(data_dir)},
    )
    log = tmp_path / "proxy.log"
    with log.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
            relayed = await _answers(client, files)

    assert relayed == through_sdk
    assert through_sdk[1]["isError"]
    assert through_sdk[4]["isError"]
    assert through_sdk[3]["structuredContent"]["entities"][0]["name"] == "Ada"
    assert "5 tool call(s) relayed" in log.read_text()
    stored = build_services(Settings(data_dir=data_dir))
    try:
        [trajectory] = finalized(stored.db)
    finally:
        stored.close()
    assert [n.chosen_action for n in trajectory.nodes] == [
        "list_directory", "read_text_file", "create_entities", "read_graph", "read_text_file"
    ]  # fmt: skip
    statuses = [n.execution_result.status.value for n in trajectory.nodes]
    assert statuses == ["success", "failure", "success", "success", "failure"]
