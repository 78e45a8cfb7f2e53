"""Trajectory tools: record decision points, finalize a task."""

# Annotations stay eager here: the SDK reads them.
import uuid
from collections.abc import Sequence
from typing import Annotated

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from actors.engine.model.trajectories import (
    FinalizeResult,
    NodeIn,
    Outcome,
    RecordResult,
    ResultStatus,
    TrajectoryHeader,
)
from cluster.tools.common import ToolContext, tool_errors, toolbox
from cluster.tools.registry import AtMost
from cluster.trajectories.capture import RecordCall


async def record_trajectory_node(
    trajectory_id: Annotated[uuid.UUID, Field(description="Your id for this task's trajectory (a UUID).")],
    node: NodeIn,
    ctx: ToolContext,
    task: Annotated[str | None, Field(description="The task in words; required with the first node.")] = None,
    agent_id: Annotated[str | None, Field(description="Who you are; required with the first node.")] = None,
    role: Annotated[str, Field(description="planner, executor, verifier, ...")] = "agent",
    task_type: Annotated[str | None, Field(description="A short label such as 'import' or 'form'.")] = None,
    run_id: Annotated[
        str | None,
        Field(
            description="Id of the multi-agent run (planner, executor, verifier, ...) this trajectory is "
            "one role of; with the first node. A later role's failure then also teaches the earlier roles."
        ),
    ] = None,
) -> RecordResult:
    """Record one decision point: what you saw, the actions you could take, the one you chose and what
    happened (execution_result: status success/failure/partial plus any keys of your own; cost fields
    steps, latency_ms, tokens are used to prefer cheaper actions). Send the parent's node_id as parent_id
    (none for the first node). Re-sending the same node is harmless. The first call for a trajectory must
    include task and agent_id (and run_id if it is one role of a multi-agent run). At most
    {max_trajectory_nodes} nodes per trajectory; a node's context_snapshot at most {max_context_bytes}
    bytes of JSON."""
    return await _record(ctx, trajectory_id, [node], task, agent_id, role, task_type, run_id)


async def record_trajectory_nodes(
    trajectory_id: uuid.UUID,
    nodes: Annotated[list[NodeIn], Field(min_length=1), AtMost("max_trajectory_nodes")],
    ctx: ToolContext,
    task: str | None = None,
    agent_id: str | None = None,
    role: str = "agent",
    task_type: str | None = None,
    run_id: str | None = None,
) -> RecordResult:
    """Record several nodes at once (parents before children); all are stored or none. At most
    {max_trajectory_nodes} nodes per trajectory; a node's context_snapshot at most {max_context_bytes}
    bytes of JSON."""
    return await _record(ctx, trajectory_id, nodes, task, agent_id, role, task_type, run_id)


async def finalize_trajectory(
    trajectory_id: uuid.UUID,
    outcome: Annotated[ResultStatus, Field(description="How the whole task ended.")],
    ctx: ToolContext,
    summary: Annotated[str | None, Field(max_length=2000)] = None,
    served_template_ids: Annotated[
        list[uuid.UUID], Field(description="id of every experience you were served for this task.")
    ] = [],  # noqa: B006  (the SDK reads defaults from the signature; never mutated)
) -> FinalizeResult:
    """Close the trajectory with its outcome. Returns at once; hindsight analyses it in the
    background and reports the outcome to the experiences you were served."""
    box = toolbox(ctx)
    owner = box.owner(ctx)
    with tool_errors():
        result = Outcome(status=outcome, summary=summary, served_template_ids=served_template_ids)
    trajectory = await box.capture(box.services.capture.finalize, owner, trajectory_id, result)
    return FinalizeResult(
        trajectory_id=trajectory_id, status=trajectory.status, outcome=outcome, queued_for_analysis=True
    )


TOOLS = (record_trajectory_node, record_trajectory_nodes, finalize_trajectory)
"""This module's tools, in the order the server lists them."""


async def _record(
    ctx: ToolContext,
    trajectory_id: uuid.UUID,
    nodes: Sequence[NodeIn],
    task: str | None,
    agent_id: str | None,
    role: str,
    task_type: str | None,
    run_id: str | None,
) -> RecordResult:
    """Both record tools: the first call of a trajectory opens it (``task`` and ``agent_id``)."""
    box = toolbox(ctx)
    owner = box.owner(ctx)
    header = None
    if task is not None or agent_id is not None:
        if task is None or agent_id is None:
            raise ToolError("InvalidInput: send both task and agent_id to start a trajectory")
        with tool_errors():
            header = TrajectoryHeader(
                trajectory_id=trajectory_id,
                agent_id=agent_id,
                role=role,
                task=task,
                task_type=task_type,
                run_id=run_id,
            )
    with tool_errors():
        result = await box.records.submit(RecordCall(owner, trajectory_id, nodes, header))
    box.services.metrics.nodes_written.inc(len(nodes))
    return result
