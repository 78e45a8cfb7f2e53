"""The whole loop in one process: official MCP client → tools → SQL queue → attribution → Milvus Lite."""

from __future__ import annotations

import json
import re

import pytest
from mcp import Client

from actors.engine.model.templates import RETRY_NOTE
from cluster.embedding import CachedEmbedder
from cluster.services import Services, analysis_for
from tests.e2e.loop import call, check_served_and_feedback, query, record_lessons, send
from tests.unit.engine.builders import GEOCODE_ACTIONS, flaky_geocode_runs

pytestmark = [pytest.mark.anyio, pytest.mark.milvus]


async def test_an_empty_library_serves_nothing(client: Client) -> None:
    served = await query(client)
    assert served == {"experiences": [], "templates": [], "prompt_block": ""}


async def test_finalized_trajectories_become_served_experience(client: Client, services: Services) -> None:
    await record_lessons(client)
    analysis = analysis_for(services)
    report = analysis.run_once()
    assert report.trajectories == 6
    assert report.templates >= 1
    assert analysis.run_once().trajectories == 0
    await check_served_and_feedback(client)


async def test_experience_is_role_tagged(client: Client, services: Services) -> None:
    await record_lessons(client)
    analysis_for(services).run_once()
    planner = await query(client, role="planner", min_confidence=0.0)
    assert planner["templates"] == []
    everyone = await query(client, role="planner", min_confidence=0.0, include_other_roles=True)
    assert everyone["templates"]


async def test_memory_tools_write_query_update_forget(client: Client) -> None:
    written = await call(client, "memory_write", {"key": "timezone", "value": "User lives in Lisbon (UTC+0)"})
    found = (await call(client, "memory_query", {"query": "where does the user live"}))["memories"]
    assert found[0]["memory_id"] == written["memory_id"]
    updated = await call(client, "memory_update", {"memory_id": written["memory_id"], "value": "Moved to Tokyo"})
    assert updated["superseded_id"] == written["memory_id"]
    current = (await call(client, "memory_query", {"query": "where does the user live"}))["memories"]
    assert [m["value"] for m in current] == ["Moved to Tokyo"]
    await call(client, "memory_forget", {"memory_id": updated["memory_id"]})
    assert (await call(client, "memory_query", {"query": "where does the user live"}))["memories"] == []


async def test_a_memory_query_answers_lean_unless_asked_for_detail(client: Client) -> None:
    """By default a model reads one line per memory (key, value, day, id) and the structured answer
    holds the same few fields; detail adds the whole memory and why it matched."""
    metadata = {"date": "8 May 2023", "speaker": "Caroline", "session": 3}
    written = await call(
        client,
        "memory_write",
        {"key": "D3:4", "value": "Caroline: I went to a support group yesterday", "metadata": metadata},
    )
    result = await client.call_tool("memory_query", {"query": "support group"})
    lean = result.structured_content or {}
    assert lean["hits"] == []
    assert lean["memories"] == [
        {
            "memory_id": written["memory_id"],
            "key": "D3:4",
            "value": "Caroline: I went to a support group yesterday",
            "version": 1,
            "day": "2023-05-08",
            "score": lean["memories"][0]["score"],
            "stages": lean["memories"][0]["stages"],
        }
    ]
    assert "lexical" in lean["memories"][0]["stages"]
    text = result.content[0].text
    short = written["memory_id"].replace("-", "")[:8]
    assert text == f"1. [D3:4] Caroline: I went to a support group yesterday (2023-05-08; id {short}, v1)"
    full = await call(client, "memory_query", {"query": "support group", "detail": True})
    assert full["memories"] == lean["memories"]
    [hit] = full["hits"]
    assert hit["memory"]["metadata"] == metadata
    assert hit["why"]["stages"] == lean["memories"][0]["stages"]
    assert len(json.dumps(lean)) < len(json.dumps(full)) / 2


async def test_update_and_forget_take_the_start_of_the_id_a_query_shows(client: Client) -> None:
    """A model reads only the first 8 hex digits of a memory's id; they are enough to change it."""
    await call(client, "memory_write", {"key": "timezone", "value": "User lives in Lisbon (UTC+0)"})
    listed = await client.call_tool("memory_query", {"query": "where does the user live"})
    short = re.search(r"; id ([0-9a-f]{8}), v1\)$", listed.content[0].text).group(1)
    assert (listed.structured_content or {})["memories"][0]["memory_id"].startswith(short)
    updated = await call(client, "memory_update", {"memory_id": short, "value": "Moved to Tokyo"})
    assert updated["superseded_id"].startswith(short)
    # Upper case, dashes and any longer prefix name the same memory.
    longer = updated["memory_id"][:13].upper()
    assert (await call(client, "memory_forget", {"memory_id": longer}))["memory_id"] == updated["memory_id"]
    assert (await call(client, "memory_query", {"query": "where does the user live"}))["memories"] == []
    for ref, message in (("0123abc", "at least 8"), ("0123abcz", "memory_id"), ("--------", "hex digits")):
        refused = await client.call_tool("memory_forget", {"memory_id": ref})
        assert refused.is_error
        assert message in refused.content[0].text, refused.content[0].text
    gone = await client.call_tool("memory_forget", {"memory_id": short})
    assert gone.is_error
    assert f"no memory has an id starting '{short}'" in gone.content[0].text


async def test_turns_of_one_conversation_are_found_by_the_words_of_the_turns_beside_them(client: Client) -> None:
    """An agent sends turns with a session id in their metadata, and no context: the service links them."""
    turns = [
        "Melanie: What have you been reading lately?",
        "Caroline: Mostly Becky Chambers, the whole Wayfarers series.",
        "Melanie: Sounds great. I finally repainted the kitchen.",
    ]
    for i, text in enumerate(turns, 1):
        await call(client, "memory_write", {"key": f"d{i}", "value": text, "metadata": {"session_id": "chat-1"}})
    found = await call(client, "memory_query", {"query": "what has she been reading lately?"})
    stages = {m["key"]: m["stages"] for m in found["memories"]}
    # d2 never says "reading": the question before it does. d3 is not beside d1, so only meaning finds it.
    assert "lexical" in stages["d2"]
    assert "lexical" not in stages.get("d3", ())


async def test_a_memory_query_answered_from_the_cache_embeds_nothing(client: Client, services: Services) -> None:
    await call(client, "memory_write", {"key": "timezone", "value": "User lives in Lisbon (UTC+0)"})
    embedder = services.memory.embedder
    assert isinstance(embedder, CachedEmbedder)  # counts the texts the tools embed
    before = embedder.hits + embedder.misses
    first = await call(client, "memory_query", {"query": "where does the user live"})
    assert embedder.hits + embedder.misses == before + 1
    again = await call(client, "memory_query", {"query": "where does the user live"})
    assert again["cached"]
    assert again["memories"] == first["memories"]
    assert embedder.hits + embedder.misses == before + 1


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("query_experience", {"context": ""}, "context must not be empty"),
        ("query_experience", {"context": "x", "top_k": 9}, "top_k"),
        ("report_experience_outcome", {"template_ids": ["not-a-uuid"], "succeeded": True}, "template_ids"),
        (
            "report_experience_outcome",
            {"template_ids": ["00000000-0000-0000-0000-000000000001"], "succeeded": True},
            "NotFound",
        ),
        ("memory_write", {"key": "k"}, "value"),
        ("memory_forget", {"memory_id": "00000000-0000-0000-0000-000000000001"}, "NotFound"),
        ("finalize_trajectory", {"trajectory_id": "00000000-0000-0000-0000-000000000001", "outcome": "won"}, "outcome"),
    ],
)
async def test_bad_calls_say_what_was_wrong(
    client: Client, tool: str, arguments: dict[str, object], message: str
) -> None:
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    assert message in result.content[0].text, result.content[0].text


async def test_a_call_that_fails_now_and_then_is_served_with_retry_advice(client: Client, services: Services) -> None:
    for run in flaky_geocode_runs(recovers=True):
        await send(client, run)
    analysis = analysis_for(services)
    while analysis.run_once().trajectories:
        pass
    situation = {
        "context": "Geocode a delivery address",
        "role": "agent",
        "task_type": "geocode",
        "context_snapshot": {"goal": "geocode the address", "has_postcode": True, "shipment": "shp_9999"},
        "available_actions": list(GEOCODE_ACTIONS),
    }
    result = await client.call_tool("query_experience", situation)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    top = result.structured_content["experiences"][0]
    assert (top["recommended"]["tool"], top["applicable"], top["retry"]) == ("geocode_structured", True, True)
    assert (top["avoid"]["tool"], top["avoid_reason"]) == ("geocode_freeform", "fails")
    assert RETRY_NOTE in result.content[0].text  # the prompt block a model reads says it too
    assert "templates" not in result.structured_content or not result.structured_content["templates"]
