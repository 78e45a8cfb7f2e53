"""The learning loop as an agent drives it over MCP, shared by the in-process, HTTP and stdio tests."""

from __future__ import annotations

import uuid
from typing import Any

from mcp import Client

from actors.engine.model.trajectories import Trajectory
from tests.unit.engine.builders import bulk_vs_single_runs

QUERY = "Import 300 products from the supplier CSV file"


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def send(client: Client, trajectory: Trajectory) -> uuid.UUID:
    """Record a trajectory as an agent would (fresh ids) and finalize it."""
    tid = uuid.uuid4()
    header = trajectory.header
    nodes = [n.model_dump(mode="json", exclude={"seq"}) for n in trajectory.nodes]
    await call(
        client,
        "record_trajectory_nodes",
        {
            "trajectory_id": str(tid),
            "nodes": nodes,
            "task": header.task,
            "agent_id": header.agent_id,
            "role": header.role,
            "task_type": header.task_type,
        },
    )
    assert trajectory.outcome is not None
    await call(client, "finalize_trajectory", {"trajectory_id": str(tid), "outcome": trajectory.outcome.status})
    return tid


async def record_lessons(client: Client) -> list[uuid.UUID]:
    """Small imports succeed item by item, large ones time out and succeed in bulk."""
    return [await send(client, run) for run in bulk_vs_single_runs()]


async def query(client: Client, **extra: Any) -> dict[str, Any]:
    """``query_experience`` with ``detail``: the full templates, so tests can read their evidence."""
    return await call(client, "query_experience", {"context": QUERY, "role": "executor", "detail": True, **extra})


async def check_served_and_feedback(client: Client) -> None:
    """The lesson is served with a prompt block, and outcome reports move its confidence both ways."""
    served = await query(client, min_confidence=0.0)
    assert served["templates"], "the bulk-import experience should be served"
    top = served["templates"][0]["template"]
    assert top["recommended"]["tool"] == "bulk_import"
    assert served["prompt_block"].startswith("[EXPERIENCE]")
    before = top["confidence"]
    up = await call(
        client,
        "report_experience_outcome",
        {"template_ids": [top["template_id"]], "succeeded": True, "trajectory_id": str(uuid.uuid4())},
    )
    assert up["changes"][0]["after"] > before
    down = await call(
        client,
        "report_experience_outcome",
        {"template_ids": [top["template_id"]], "succeeded": False, "trajectory_id": str(uuid.uuid4())},
    )
    assert down["changes"][0]["after"] < up["changes"][0]["after"]
