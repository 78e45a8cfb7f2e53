"""The tool list as a model reads it, listed through the official MCP client (issue 48).

Every turn of an agent carries it: it must stay small, describe every parameter (nested ones too),
read as prose (no docstring indentation) and name the rules a caller must follow.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client

from bench.tool_list_size import BUDGET_BYTES
from cluster.services import Services
from cluster.tools.ids import trajectory_uuid

pytestmark = pytest.mark.anyio


def parameters(schema: dict[str, Any], where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property of ``schema`` and of the models it defines, named by where it is."""
    for name, body in schema.get("properties", {}).items():
        yield f"{where}.{name}", body
    for model, body in schema.get("$defs", {}).items():
        yield from parameters(body, f"{where}/{model}")


async def listed(client: Client) -> list[dict[str, Any]]:
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in (await client.list_tools()).tools]


async def test_the_tool_list_fits_the_budget_and_publishes_no_output_schema(client: Client) -> None:
    tools = await listed(client)
    size = len(json.dumps({"tools": tools}, separators=(",", ":"), ensure_ascii=False).encode())
    assert size <= BUDGET_BYTES, f"tools/list is {size} bytes, over {BUDGET_BYTES}"
    assert [t["name"] for t in tools if "outputSchema" in t] == []


async def test_every_parameter_has_a_description_written_as_one_line(client: Client) -> None:
    for tool in await listed(client):
        assert " ".join(tool["description"].split()) == tool["description"], tool["name"]
        for where, body in parameters(tool["inputSchema"], tool["name"]):
            description = body.get("description")
            assert description, f"{where} has no description"
            assert " ".join(description.split()) == description, where


async def test_the_rules_a_caller_must_follow_are_in_the_descriptions(client: Client) -> None:
    tools = {t["name"]: t for t in await listed(client)}
    record = tools["record_trajectory_node"]
    assert "first call opens the trajectory and must send task and agent_id" in record["description"]
    task = record["inputSchema"]["properties"]["task"]["description"]
    assert "with the first call" in task
    # Real defaults, as the service applies them.
    assert tools["memory_query"]["inputSchema"]["properties"]["top_k"]["default"] == 5
    assert "default 5" in tools["query_experience"]["inputSchema"]["properties"]["top_k"]["description"]


async def test_structured_content_still_comes_without_an_output_schema(client: Client) -> None:
    result = await client.call_tool("memory_write", {"key": "timezone", "value": "Europe/Berlin"})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["version"] == 1
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]


def node(parent: str | None = None) -> dict[str, Any]:
    return {
        "node_id": str(uuid.uuid4()),
        "parent_id": parent,
        "available_actions": ["bulk_import", "add_item"],
        "chosen_action": "bulk_import",
        "execution_result": {"status": "success"},
    }


async def test_an_agent_names_its_trajectory_itself(client: Client, services: Services) -> None:
    root = node()
    opened = await client.call_tool(
        "record_trajectory_node", {"trajectory_id": "checkout-42", "node": root, "task": "import", "agent_id": "a"}
    )
    assert not opened.is_error, opened.content
    assert opened.structured_content is not None
    assert opened.structured_content["trajectory_id"] == "checkout-42"
    added = await client.call_tool(
        "record_trajectory_node", {"trajectory_id": "checkout-42", "node": node(root["node_id"])}
    )
    assert not added.is_error, added.content
    assert added.structured_content is not None
    assert added.structured_content["node_count"] == 2
    closed = await client.call_tool("finalize_trajectory", {"trajectory_id": "checkout-42", "outcome": "success"})
    assert not closed.is_error, closed.content
    stored = services.capture.load("local", trajectory_uuid("local", "checkout-42"))
    assert stored.header.task == "import"
    assert len(stored.nodes) == 2
    assert stored.status == "finalized"


@pytest.mark.parametrize("name", ["", "x" * 65, "tab\there", " padded", "line\nbreak"])
async def test_a_trajectory_name_must_be_short_and_printable(client: Client, name: str) -> None:
    result = await client.call_tool(
        "record_trajectory_node", {"trajectory_id": name, "node": node(), "task": "t", "agent_id": "a"}
    )
    assert result.is_error
    assert "trajectory_id" in result.content[0].text  # type: ignore[union-attr]


def test_two_owners_using_one_name_get_two_trajectories() -> None:
    assert trajectory_uuid("alice", "t1") != trajectory_uuid("bob", "t1")
    assert trajectory_uuid("alice", "t1") == trajectory_uuid("alice", "t1")
    same = uuid.uuid4()
    assert trajectory_uuid("alice", str(same)) == same


async def test_an_agent_reads_one_experience_whole_and_only_its_own(client: Client, services: Services) -> None:
    from tests.integration.experience.factories import template

    stored = services.experience.add_template("local", template("bulk_import", avoid="add_item", confidence=0.8))
    result = await client.call_tool("read_experience", {"template_id": str(stored.template_id)})
    assert not result.is_error, result.content
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.startswith("When a product import has more than 20 rows with a uniform schema, prefer bulk_import")
    assert text.endswith("Confidence 0.80.")
    assert result.structured_content is not None
    assert result.structured_content["template_id"] == str(stored.template_id)
    assert "support" in result.structured_content
    theirs = services.experience.add_template("someone-else", template("stream_import"))
    refused = await client.call_tool("read_experience", {"template_id": str(theirs.template_id)})
    assert refused.is_error
    assert "NotFound" in refused.content[0].text  # type: ignore[union-attr]
