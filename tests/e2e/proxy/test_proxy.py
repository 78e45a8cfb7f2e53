"""The proxy forwards the reference servers' tools unchanged and records every call as a node."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from actors.engine.model.trajectories import ResultStatus
from cluster.auth import OwnerResolver
from cluster.http import build_http_app
from cluster.proxy.redact import REDACTED
from cluster.proxy.run import recording_client
from cluster.services import Services
from cluster.settings import Settings
from tests.e2e.proxy.conftest import ENTITY, config, finalized, in_process, proxied, upstreams
from tests.reliability.service import uvicorn_app

pytestmark = pytest.mark.anyio


async def test_calls_are_forwarded_unchanged_and_recorded_as_one_trajectory(tmp_path: Path, services: Services) -> None:
    direct_spec = upstreams(tmp_path)["files"]
    async with Client(StdioServerParameters(command=direct_spec["command"], args=direct_spec["args"])) as direct:
        direct_tools = (await direct.list_tools()).tools
        direct_listing = await direct.call_tool("list_directory", {"path": str(tmp_path / "files")})

    async with proxied(config(tmp_path, task="file the notes"), in_process(services)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for tool in direct_tools:
            assert tools[tool.name].input_schema == tool.input_schema
            assert tools[tool.name].description == tool.description
        assert {"create_entities", "read_graph", "hindsight_begin", "hindsight_finalize"} <= tools.keys()

        listing = await client.call_tool("list_directory", {"path": str(tmp_path / "files")})
        assert listing.content == direct_listing.content
        assert not (await client.call_tool("create_entities", ENTITY)).is_error
        graph = await client.call_tool("read_graph", {})
        assert graph.structured_content is not None
        assert [e["name"] for e in graph.structured_content["entities"]] == ["Ada"]
        missing = await client.call_tool("read_text_file", {"path": str(tmp_path / "files" / "absent.txt")})
        assert missing.is_error

    [trajectory] = finalized(services.db)
    assert trajectory.header.task == "file the notes"
    assert [n.chosen_action for n in trajectory.nodes] == [
        "list_directory", "create_entities", "read_graph", "read_text_file"
    ]  # fmt: skip
    first, second, third, fourth = trajectory.nodes
    assert [n.parent_id for n in trajectory.nodes] == [None, first.node_id, second.node_id, third.node_id]
    assert set(first.available_actions) == {t.name for t in tools.values()} - {
        "hindsight_begin", "hindsight_finalize", "hindsight_advice"
    }  # fmt: skip
    assert second.action_params == ENTITY
    assert [n.execution_result.status for n in trajectory.nodes][-1] == ResultStatus.FAILURE
    assert "absent.txt" in (fourth.execution_result.summary or "")
    # The default snapshot: the task and the calls before this one.
    assert fourth.context_snapshot["recent"][-1]["tool"] == "read_graph"
    assert trajectory.outcome is not None
    assert trajectory.outcome.status == ResultStatus.FAILURE  # its last call's


async def test_begin_and_finalize_mark_off_tasks_and_meta_carries_the_context(
    tmp_path: Path, services: Services
) -> None:
    async with proxied(config(tmp_path), in_process(services)) as client:
        begun = await client.call_tool("hindsight_begin", {"task": "remember Ada", "task_type": "graph"})
        assert not begun.is_error
        await client.call_tool("create_entities", ENTITY, meta={"hindsight/context": {"goal": "store Ada", "step": 1}})
        closed = await client.call_tool("hindsight_finalize", {"outcome": "partial", "summary": "half done"})
        assert "partial" in closed.content[0].text  # type: ignore[union-attr]
        await client.call_tool("hindsight_begin", {"task": "read it back"})
        await client.call_tool("read_graph", {})
        bad = await client.call_tool("hindsight_finalize", {"outcome": "great"})
        assert bad.is_error
        assert "outcome: one of success, failure, partial" in bad.content[0].text  # type: ignore[union-attr]

    first, second = finalized(services.db)
    assert (first.header.task, first.header.task_type, second.header.task) == ("remember Ada", "graph", "read it back")
    assert first.outcome is not None
    assert first.outcome.status == ResultStatus.PARTIAL
    assert first.outcome.summary == "half done"
    assert first.nodes[0].context_snapshot == {"goal": "store Ada", "step": 1}
    assert second.outcome is not None
    assert second.outcome.status == ResultStatus.SUCCESS


async def test_secret_arguments_are_redacted_before_storing_but_reach_the_tool(
    tmp_path: Path, services: Services
) -> None:
    secret = f"sk-{uuid.uuid4().hex}"
    arguments = {"entities": [{"name": "svc", "entityType": "account", "observations": [], "api_key": secret}]}
    async with proxied(config(tmp_path), in_process(services)) as client:
        stored = await client.call_tool("create_entities", {**arguments, "password": secret})
        assert not stored.is_error
    [trajectory] = finalized(services.db)
    params = trajectory.nodes[0].action_params
    assert params["password"] == REDACTED
    assert params["entities"][0]["api_key"] == REDACTED  # type: ignore[index,call-overload]
    assert params["entities"][0]["name"] == "svc"  # type: ignore[index,call-overload]
    assert secret not in trajectory.model_dump_json()


async def test_arguments_over_the_node_limit_are_cut_to_fit_and_the_call_still_recorded(
    tmp_path: Path, services: Services
) -> None:
    entity = {"name": "big", "entityType": "note", "observations": ["x" * 20_000]}
    async with proxied(config(tmp_path), in_process(services)) as client:
        stored = await client.call_tool("create_entities", {"entities": [entity]})
        assert not stored.is_error
    [trajectory] = finalized(services.db)
    assert trajectory.nodes[0].action_params == {"_cut": ["entities"]}


async def test_records_reach_a_hindsight_service_over_http_as_the_tokens_owner(
    tmp_path: Path, services: Services
) -> None:
    """The deployed shape: hindsight's HTTP app (bearer tokens) and the proxy configured with its URL."""
    app = build_http_app(services, OwnerResolver({"tok-alice": "alice"}, "local"))
    with uvicorn_app(app) as base:
        cfg = config(tmp_path, url=f"{base}/mcp/", token="tok-alice", task="over http")
        with recording_client(cfg, Settings(data_dir=tmp_path / "unused")) as connect:
            async with proxied(cfg, connect) as client:
                assert not (await client.call_tool("read_graph", {})).is_error
                assert not (await client.call_tool("list_allowed_directories", {})).is_error
    assert finalized(services.db) == []
    [trajectory] = finalized(services.db, owner="alice")
    assert trajectory.header.task == "over http"
    assert [n.chosen_action for n in trajectory.nodes] == ["read_graph", "list_allowed_directories"]


async def test_the_call_after_a_failed_one_hangs_beside_it(tmp_path: Path, services: Services) -> None:
    files = tmp_path / "files"
    async with proxied(config(tmp_path, task="read the notes"), in_process(services)) as client:
        await client.call_tool("read_text_file", {"path": str(files / "note.txt")})  # a failed first call
        await client.call_tool("list_directory", {"path": str(files)})
        await client.call_tool("read_text_file", {"path": str(files / "absent.txt")})
        await client.call_tool("read_text_file", {"path": str(files / "notes.txt")})
        await client.call_tool("read_graph", {})

    [trajectory] = finalized(services.db)
    root, listing, failed, retry, _graph = trajectory.nodes
    assert [n.execution_result.status for n in (root, failed)] == [ResultStatus.FAILURE] * 2
    # The learner's convention: a failed root stays the root; a retry is the failed call's sibling.
    assert [n.parent_id for n in trajectory.nodes] == [
        None, root.node_id, listing.node_id, listing.node_id, retry.node_id
    ]  # fmt: skip
