"""Trajectory capture through the official MCP client, in process (no port)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from mcp import Client

from cluster.services import Services

pytestmark = pytest.mark.anyio


def node(parent: str | None = None, status: str = "success", **extra: Any) -> dict[str, Any]:
    return {
        "node_id": str(uuid.uuid4()),
        "parent_id": parent,
        "context_snapshot": {"goal": "submit the form"},
        "available_actions": ["click", "type"],
        "chosen_action": "click",
        "action_params": {"selector": "#submit-btn"},
        "execution_result": {"status": status},
        **extra,
    }


async def test_recording_a_branching_trajectory_and_finalizing_it(client: Client, services: Services) -> None:
    tid = str(uuid.uuid4())
    root = node()
    first = await client.call_tool(
        "record_trajectory_node", {"trajectory_id": tid, "node": root, "task": "submit", "agent_id": "a1"}
    )
    assert not first.is_error, first.content
    assert first.structured_content["node_count"] == 1
    children = [node(root["node_id"], "failure"), node(root["node_id"])]
    batch = await client.call_tool("record_trajectory_nodes", {"trajectory_id": tid, "nodes": children})
    assert batch.structured_content["node_count"] == 3
    done = await client.call_tool("finalize_trajectory", {"trajectory_id": tid, "outcome": "success"})
    assert done.structured_content["queued_for_analysis"] is True
    stored = services.capture.load("local", uuid.UUID(tid))
    assert len(stored.nodes) == 3
    assert stored.outcome is not None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"node": node(parent=str(uuid.uuid4())), "task": "t", "agent_id": "a"}, "NotFound: node .* parent"),
        ({"node": node(context_snapshot={"goal": "x" * 3000}), "task": "t", "agent_id": "a"}, "LimitExceeded"),
        ({"node": {"chosen_action": "click"}, "task": "t", "agent_id": "a"}, "available_actions"),
        ({"node": node(timestamp="yesterday"), "task": "t", "agent_id": "a"}, "timestamp"),
        ({"node": node()}, "NotFound: trajectory .* open it"),
        ({"node": node(), "task": "t"}, "send both task and agent_id"),
    ],
)
async def test_bad_calls_return_a_clear_error(client: Client, arguments: dict[str, Any], message: str) -> None:
    result = await client.call_tool("record_trajectory_node", {"trajectory_id": str(uuid.uuid4()), **arguments})
    assert result.is_error
    assert re.search(message, result.content[0].text), result.content[0].text


async def test_a_finalized_trajectory_rejects_new_nodes_over_mcp(client: Client) -> None:
    tid = str(uuid.uuid4())
    root = node()
    await client.call_tool("record_trajectory_node", {"trajectory_id": tid, "node": root, "task": "t", "agent_id": "a"})
    await client.call_tool("finalize_trajectory", {"trajectory_id": tid, "outcome": "failure"})
    result = await client.call_tool("record_trajectory_node", {"trajectory_id": tid, "node": node(root["node_id"])})
    assert result.is_error
    assert "TrajectoryClosed" in result.content[0].text


async def test_run_id_is_in_the_schema_and_stored_with_the_trajectory(client: Client, services: Services) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    for name in ("record_trajectory_node", "record_trajectory_nodes"):
        assert "run_id" in tools[name].input_schema["properties"], name
    assert "run_id" in (tools["record_trajectory_node"].description or "")
    tid = str(uuid.uuid4())
    result = await client.call_tool(
        "record_trajectory_node",
        {"trajectory_id": tid, "node": node(), "task": "plan", "agent_id": "p1", "role": "planner", "run_id": "r-7"},
    )
    assert not result.is_error, result.content
    assert services.capture.load("local", uuid.UUID(tid)).header.run_id == "r-7"


async def test_a_bad_run_id_is_refused_naming_the_field(client: Client) -> None:
    result = await client.call_tool(
        "record_trajectory_node",
        {"trajectory_id": str(uuid.uuid4()), "node": node(), "task": "t", "agent_id": "a", "run_id": ""},
    )
    assert result.is_error
    assert "run_id" in result.content[0].text


async def test_finalize_again_with_the_same_outcome_and_no_summary_changes_nothing(client: Client) -> None:
    # Issue 48: a retry that left out the summary was a Conflict.
    tid = "retried-finalize"
    await client.call_tool(
        "record_trajectory_node", {"trajectory_id": tid, "node": node(), "task": "t", "agent_id": "a"}
    )
    first = await client.call_tool(
        "finalize_trajectory", {"trajectory_id": tid, "outcome": "success", "summary": "imported 300 rows"}
    )
    assert not first.is_error, first.content
    again = await client.call_tool("finalize_trajectory", {"trajectory_id": tid, "outcome": "success"})
    assert not again.is_error, again.content
    other = await client.call_tool("finalize_trajectory", {"trajectory_id": tid, "outcome": "failure"})
    assert other.is_error
    assert "Conflict" in other.content[0].text  # type: ignore[union-attr]
