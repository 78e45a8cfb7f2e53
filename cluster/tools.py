"""The MCP tool surface. Each tool parses its input, makes one service call and returns a model.

Errors raise: a hindsight error becomes a ``ToolError`` whose message the model reads (``is_error``);
anything else is a crash the SDK reports without leaking internals.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated, ParamSpec, TypeVar

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, JsonValue, ValidationError

from cluster.auth import OwnerResolver
from cluster.core.errors import HindsightError
from cluster.experience.models import ExperienceQueryResult, OutcomeReport
from cluster.memory.models import (
    MemoryForget,
    MemoryForgetResult,
    MemoryQuery,
    MemoryQueryResult,
    MemoryUpdate,
    MemoryWrite,
    MemoryWriteResult,
)
from cluster.memory.policy import MemoryScope, Ttl
from cluster.services import Services
from cluster.trajectories.models import FinalizeResult, NodeIn, Outcome, RecordResult, ResultStatus, TrajectoryHeader

P = ParamSpec("P")
R = TypeVar("R")

INSTRUCTIONS = """\
hindsight remembers what worked. Before a task, call query_experience with your situation and put the
returned prompt_block in your context. While working, record each decision with record_trajectory_node
(the first call also sends task and agent_id). When done, call finalize_trajectory with the outcome and
the template ids you were served; hindsight learns from it in the background."""


@contextmanager
def _tool_errors() -> Iterator[None]:
    try:
        yield
    except HindsightError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from exc
    except ValidationError as exc:
        raise ToolError(f"InvalidInput: {exc}") from exc


# Store work of all tools in this process shares a few threads: every extra thread only adds GIL
# hand-offs. Measured on Postgres with 32 agents: 279 calls/s on anyio's default 40 threads, 409 on 4.
_STORE_THREADS = anyio.CapacityLimiter(4)


async def _call(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run blocking store work off the event loop, mapping errors for the model."""
    with _tool_errors():
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=_STORE_THREADS)


def build_server(services: Services, owners: OwnerResolver) -> MCPServer:
    """An MCP server exposing ``services``; ``owners`` turns each request's credential into an owner."""
    server: MCPServer = MCPServer(name="hindsight", instructions=INSTRUCTIONS)
    metrics = services.metrics
    # A trajectory write on the embedded SQLite is in-process work of ~0.5 ms; a worker thread
    # costs more than that (the GIL changes hands around every SQLite call), so it runs here.
    # A network database keeps the event loop free for other requests instead.
    capture_inline = services.db.dialect == "sqlite"

    async def capture(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run a trajectory write where it is cheapest for this database (see above)."""
        if not capture_inline:
            return await _call(fn, *args, **kwargs)
        with _tool_errors():
            return fn(*args, **kwargs)

    def timed(name: str) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
        def wrap(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
            @functools.wraps(fn)
            async def inner(*args: P.args, **kwargs: P.kwargs) -> R:
                start = time.perf_counter()
                ok = False
                try:
                    result = await fn(*args, **kwargs)
                    ok = True
                    return result
                finally:
                    metrics.observe_tool(name, time.perf_counter() - start, ok)

            return inner

        return wrap

    def owner_of(ctx: Context) -> str:
        with _tool_errors():
            return owners.owner_for(ctx.request_context.request)

    @server.tool()
    @timed("record_trajectory_node")
    async def record_trajectory_node(
        trajectory_id: Annotated[uuid.UUID, Field(description="Your id for this task's trajectory (a UUID).")],
        node: NodeIn,
        ctx: Context,
        task: Annotated[str | None, Field(description="The task in words; required with the first node.")] = None,
        agent_id: Annotated[str | None, Field(description="Who you are; required with the first node.")] = None,
        role: Annotated[str, Field(description="planner, executor, verifier, ...")] = "agent",
        task_type: Annotated[str | None, Field(description="A short label such as 'import' or 'form'.")] = None,
    ) -> RecordResult:
        """Record one decision point: what you saw, the actions you could take, the one you chose and
        what happened. Send the parent's node_id as parent_id (none for the first node). Re-sending the
        same node is harmless. The first call for a trajectory must include task and agent_id."""
        return await record_trajectory_nodes(trajectory_id, [node], ctx, task, agent_id, role, task_type)

    @server.tool()
    @timed("record_trajectory_nodes")
    async def record_trajectory_nodes(
        trajectory_id: uuid.UUID,
        nodes: Annotated[list[NodeIn], Field(min_length=1, max_length=500)],
        ctx: Context,
        task: str | None = None,
        agent_id: str | None = None,
        role: str = "agent",
        task_type: str | None = None,
    ) -> RecordResult:
        """Record several nodes at once (parents before children); all are stored or none."""
        owner = owner_of(ctx)
        header = None
        if task is not None or agent_id is not None:
            if task is None or agent_id is None:
                raise ToolError("InvalidInput: send both task and agent_id to start a trajectory")
            with _tool_errors():
                header = TrajectoryHeader(
                    trajectory_id=trajectory_id, agent_id=agent_id, role=role, task=task, task_type=task_type
                )
        result = await capture(services.capture.record, owner, trajectory_id, nodes, header)
        metrics.nodes_written.inc(len(nodes))
        return result

    @server.tool()
    @timed("finalize_trajectory")
    async def finalize_trajectory(
        trajectory_id: uuid.UUID,
        outcome: Annotated[ResultStatus, Field(description="How the whole task ended.")],
        ctx: Context,
        summary: Annotated[str | None, Field(max_length=2000)] = None,
        served_template_ids: Annotated[
            list[uuid.UUID], Field(description="template_id of every experience you were served for this task.")
        ] = [],  # noqa: B006  (the SDK reads defaults from the signature; never mutated)
    ) -> FinalizeResult:
        """Close the trajectory with its outcome. Returns at once; hindsight analyses it in the
        background and reports the outcome to the experiences you were served."""
        owner = owner_of(ctx)
        with _tool_errors():
            result = Outcome(status=outcome, summary=summary, served_template_ids=served_template_ids)
        trajectory = await capture(services.capture.finalize, owner, trajectory_id, result)
        return FinalizeResult(
            trajectory_id=trajectory_id, status=trajectory.status, outcome=outcome, queued_for_analysis=True
        )

    @server.tool()
    @timed("query_experience")
    async def query_experience(
        context: Annotated[str, Field(description="Your situation: task, goal, what you see, tools in view.")],
        ctx: Context,
        role: Annotated[str, Field(description="Your role; only its experiences are served.")] = "agent",
        task_type: Annotated[str | None, Field(description="Restrict to this task type.")] = None,
        top_k: Annotated[int | None, Field(ge=1, le=8, description="How many (default 5, at most 8).")] = None,
        min_confidence: Annotated[float | None, Field(ge=0, le=1, description="Default 0.7.")] = None,
        include_other_roles: Annotated[bool, Field(description="Also serve other roles' experiences.")] = False,
    ) -> ExperienceQueryResult:
        """Experiences learned from earlier tasks that match your situation, best first, each with its
        condition, the action to prefer and the one to avoid. Put prompt_block into your system prompt
        before the tool descriptions, and pass the template ids to finalize_trajectory."""
        owner = owner_of(ctx)
        start = time.perf_counter()
        result = await _call(
            services.experience.query_experience,
            owner,
            context,
            role,
            task_type,
            top_k,
            min_confidence,
            include_other_roles,
        )
        metrics.retrieval_latency.labels("experience").observe(time.perf_counter() - start)
        metrics.experience_queries.labels("hit" if result.templates else "miss").inc()
        return result

    @server.tool()
    @timed("report_experience_outcome")
    async def report_experience_outcome(
        template_ids: Annotated[list[uuid.UUID], Field(min_length=1, max_length=8)],
        succeeded: Annotated[bool, Field(description="Did the task succeed after applying them?")],
        ctx: Context,
        trajectory_id: Annotated[
            uuid.UUID | None, Field(description="The task's trajectory: a repeated report then counts once.")
        ] = None,
    ) -> OutcomeReport:
        """Tell hindsight whether experiences you were served helped: confidence rises on success and
        falls on failure. finalize_trajectory with served_template_ids does this for you."""
        owner = owner_of(ctx)
        return await _call(services.experience.report_outcome, owner, template_ids, succeeded, trajectory_id)

    @server.tool()
    @timed("memory_write")
    async def memory_write(
        key: Annotated[str, Field(description="Stable name of the fact, e.g. 'preferred_timezone'.")],
        value: Annotated[str | dict[str, JsonValue], Field(description="Text, or a JSON object for state.")],
        ctx: Context,
        scope: Annotated[MemoryScope | None, Field(description="user (default), session or task.")] = None,
        ttl: Annotated[Ttl | None, Field(description="permanent (default), session or a time window.")] = None,
        metadata: dict[str, JsonValue] | None = None,
        entity: Annotated[str | None, Field(description="What it is about: a person, project, tool.")] = None,
        source_ids: Annotated[list[str] | None, Field(description="Ids it was derived from.")] = None,
    ) -> MemoryWriteResult:
        """Remember something across sessions. Writing an existing key makes a new version and hides
        the old one from queries."""
        owner = owner_of(ctx)
        with _tool_errors():
            request = MemoryWrite(
                key=key,
                value=value,
                scope=scope or MemoryScope(),
                ttl=ttl or Ttl(),
                metadata=metadata or {},
                entity=entity,
                source_ids=tuple(source_ids or ()),
            )
        result = await _call(services.memory.apply_write, owner, request)
        metrics.memory_writes.inc()
        return result

    @server.tool()
    @timed("memory_query")
    async def memory_query(
        query: Annotated[str, Field(description="What you want to recall, in words.")],
        ctx: Context,
        entity: Annotated[str | None, Field(description="Only memories about this entity.")] = None,
        scope: Annotated[MemoryScope | None, Field(description="Only this scope; default all.")] = None,
        top_k: Annotated[int, Field(ge=1, le=100)] = 5,
        include_history: Annotated[bool, Field(description="Also superseded versions.")] = False,
        as_of: Annotated[datetime | None, Field(description="As the memory stood at this time.")] = None,
    ) -> MemoryQueryResult:
        """Recall long-term memories: filtered by entity and validity, ranked by meaning and words.
        Each hit says why it matched."""
        owner = owner_of(ctx)
        with _tool_errors():
            request = MemoryQuery(
                query=query, entity=entity, scope=scope, top_k=top_k, include_history=include_history, as_of=as_of
            )
        start = time.perf_counter()
        result = await _call(services.memory.run_query, owner, request)
        metrics.retrieval_latency.labels("memory").observe(time.perf_counter() - start)
        return result

    @server.tool()
    @timed("memory_update")
    async def memory_update(
        memory_id: uuid.UUID,
        value: str | dict[str, JsonValue],
        ctx: Context,
        metadata: Annotated[dict[str, JsonValue] | None, Field(description="Replaces it; default keep.")] = None,
    ) -> MemoryWriteResult:
        """Change a memory's value: makes a new version with the same key, scope and lifetime."""
        owner = owner_of(ctx)
        with _tool_errors():
            request = MemoryUpdate(memory_id=memory_id, value=value, metadata=metadata)
        result = await _call(services.memory.apply_update, owner, request)
        metrics.memory_writes.inc()
        return result

    @server.tool()
    @timed("memory_forget")
    async def memory_forget(memory_id: uuid.UUID, ctx: Context) -> MemoryForgetResult:
        """Delete a memory and all its versions, everywhere."""
        owner = owner_of(ctx)
        return await _call(services.memory.apply_forget, owner, MemoryForget(memory_id=memory_id))

    _ = (
        record_trajectory_node,
        finalize_trajectory,
        query_experience,
        report_experience_outcome,
        memory_write,
        memory_query,
        memory_update,
        memory_forget,
    )
    return server
