"""The proxy's MCP server: the upstreams' tools, resources and prompts as they are, each tool call
recorded, plus hindsight_begin / hindsight_finalize / hindsight_advice."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp import Client, MCPError
from mcp.server import Server, ServerRequestContext
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    GetPromptRequestParams,
    GetPromptResult,
    ListPromptsResult,
    ListResourcesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    TextContent,
    Tool,
)

from actors.engine.model.trajectories import ResultStatus
from cluster.proxy.config import ProxyConfig
from cluster.proxy.recorder import Recorder
from cluster.proxy.trajectories import META_SESSION, Trajectories
from cluster.proxy.upstream import Upstream, error_result

logger = logging.getLogger(__name__)

BEGIN, FINALIZE, ADVICE = "hindsight_begin", "hindsight_finalize", "hindsight_advice"
_SWEEP_S = 5.0
_OWN_META = ("hindsight/", "io.modelcontextprotocol/")
"""``_meta`` keys not passed upstream: the proxy's own, and the protocol envelope of the agent's
connection (the proxy's client stamps its own)."""
_PROGRESS = ("progressToken", "progress_token")
_EXPERIENCE = "\n\nLearned from earlier tasks: "
"""Between a tool's own description and the experience appended to it (advice "descriptions")."""
"""The progress token as sent and as the SDK's model names it."""

_BEGIN_TOOL = Tool(
    name=BEGIN,
    description="Start a new task: calls from now on are recorded as one trajectory under this task "
    "(the previous one closes with its last call's outcome). Optional: without it a session is one task.",
    input_schema={
        "type": "object",
        "properties": {
            "task": {"type": "string", "minLength": 1, "maxLength": 4000, "description": "The task in words."},
            "task_type": {"type": "string", "maxLength": 200, "description": "A short label, e.g. 'import'."},
        },
        "required": ["task"],
    },
)
_FINALIZE_TOOL = Tool(
    name=FINALIZE,
    description="Say how the current task ended; hindsight learns from it in the background. Without it "
    "the task ends with its last call's outcome when the session ends.",
    input_schema={
        "type": "object",
        "properties": {
            "outcome": {"type": "string", "enum": ["success", "failure", "partial"]},
            "summary": {"type": "string", "maxLength": 2000},
        },
        "required": ["outcome"],
    },
)
_ADVICE_TOOL = Tool(
    name=ADVICE,
    description="Lessons learned from earlier tasks for your next step (which tool, which to avoid). "
    "Cheap; call it before a decision you are unsure of.",
    input_schema={
        "type": "object",
        "properties": {"situation": {"type": "string", "description": "Optional: what you face, in words."}},
    },
)


@dataclass
class Proxy:
    """What every request of the proxy's server shares (its lifespan state)."""

    config: ProxyConfig
    upstreams: dict[str, Upstream]
    recorder: Recorder
    trajectories: Trajectories
    routes: dict[str, tuple[Upstream, str]] = field(default_factory=dict)
    """Tool name as listed by the proxy -> its upstream and its name there."""

    def own_tools(self) -> list[Tool]:
        tools = [_BEGIN_TOOL, _FINALIZE_TOOL]
        if self.config.hindsight.advice == "tool":
            tools.append(_ADVICE_TOOL)
        return tools

    def route(self) -> list[Tool]:
        """The upstreams' tools under the names the agent sees: unchanged, unless two upstreams
        list the same name (the later one's is then ``<server>__<tool>``)."""
        own = {t.name for t in self.own_tools()}
        routes: dict[str, tuple[Upstream, str]] = {}
        listed: list[Tool] = []
        for upstream in self.upstreams.values():
            for tool in upstream.tools:
                name = tool.name
                if name in routes or name in own:
                    name = f"{upstream.name}__{tool.name}"
                routes[name] = (upstream, tool.name)
                listed.append(tool if name == tool.name else tool.model_copy(update={"name": name}))
        self.routes = routes
        return listed

    def record(
        self,
        key: str,
        name: str,
        arguments: Mapping[str, Any] | None,
        result: CallToolResult | Mapping[str, Any],
        start: float,
        meta: Mapping[str, Any],
    ) -> None:
        """Queue the node for a call of ``name`` (as the agent named it) that began at ``start``
        (``time.perf_counter``)."""
        latency_ms = (time.perf_counter() - start) * 1000
        self.trajectories.record(key, list(self.routes), name, arguments, result, latency_ms, meta)


def build_proxy_server(
    config: ProxyConfig, connect: Callable[[], Client], attach: Callable[[Proxy | None], None] | None = None
) -> Server[Proxy]:
    """The proxy as an MCP server; ``connect`` makes a client to the hindsight that records.
    ``attach`` is told the running proxy once its upstreams are up, and None before it stops
    (a relay serving calls beside the SDK, :mod:`cluster.proxy.relay`)."""

    @asynccontextmanager
    async def lifespan(_: Server[Proxy]) -> AsyncIterator[Proxy]:
        timeout = config.hindsight.call_timeout_s
        upstreams = {name: Upstream(name, spec, timeout) for name, spec in config.servers.items()}
        recorder = Recorder(connect)
        proxy = Proxy(config, upstreams, recorder, Trajectories(config.hindsight, recorder))
        async with anyio.create_task_group() as tg:
            await tg.start(recorder.run)
            async with anyio.create_task_group() as starting:
                for upstream in upstreams.values():
                    starting.start_soon(tg.start, upstream.run)
            proxy.route()
            tg.start_soon(_sweep, proxy)
            if attach is not None:
                attach(proxy)
            try:
                yield proxy
            finally:
                if attach is not None:
                    attach(None)
                with anyio.CancelScope(shield=True):
                    proxy.trajectories.finalize_all()
                    await recorder.stop(config.hindsight.drain_s)
                tg.cancel_scope.cancel()

    return Server[Proxy](
        "hindsight-proxy",
        instructions="Your tools, recorded by hindsight so it learns from your tasks.",
        lifespan=lifespan,
        on_list_tools=_list_tools,
        on_call_tool=_call_tool,
        on_list_resources=_list_resources,
        on_read_resource=_read_resource,
        on_list_prompts=_list_prompts,
        on_get_prompt=_get_prompt,
    )


async def _sweep(proxy: Proxy) -> None:
    """Close trajectories of sessions gone quiet (an HTTP client that never said goodbye)."""
    while True:
        await anyio.sleep(min(_SWEEP_S, proxy.config.hindsight.idle_finalize_s))
        proxy.trajectories.finalize_idle()


async def _list_tools(ctx: ServerRequestContext[Proxy], params: PaginatedRequestParams | None) -> ListToolsResult:
    proxy = ctx.lifespan_context
    async with anyio.create_task_group() as tg:
        for upstream in proxy.upstreams.values():
            tg.start_soon(upstream.refresh_tools)
    tools = [*proxy.route(), *proxy.own_tools()]
    if proxy.config.hindsight.advice == "descriptions":
        meta: Mapping[str, Any] = ctx.meta or {}
        tools = await _with_experience(proxy, _session_key(ctx, meta), meta, tools)
    return ListToolsResult(tools=tools)


async def _call_tool(ctx: ServerRequestContext[Proxy], params: CallToolRequestParams) -> CallToolResult:
    proxy = ctx.lifespan_context
    meta: Mapping[str, Any] = ctx.meta or {}
    key = _session_key(ctx, meta)
    arguments = params.arguments or {}
    if params.name == BEGIN:
        return _begin(proxy, key, arguments)
    if params.name == FINALIZE:
        return _finalize(proxy, key, arguments)
    if params.name == ADVICE and proxy.config.hindsight.advice == "tool":
        return await _advice(proxy, key, meta, arguments)
    route = proxy.routes.get(params.name)
    if route is None:
        return error_result(f"Unknown tool: {params.name}; tools/list names the tools there are")
    upstream, name = route
    start = time.perf_counter()
    try:
        result = await upstream.call_tool(name, params.arguments, forwarded_meta(meta))
    except MCPError as exc:
        # The upstream refused the call (bad arguments, say): the agent gets its error as it came,
        # and the choice is recorded as the failure it was.
        proxy.record(key, params.name, params.arguments, refused(exc), start, meta)
        raise
    proxy.record(key, params.name, params.arguments, result, start, meta)
    return result


def refused(exc: MCPError) -> CallToolResult:
    """What a call the upstream answered with a JSON-RPC error is recorded as: a failure."""
    return error_result(f"MCP error {exc.code}: {exc.message}")


def forwarded_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The call's ``_meta`` as the upstream gets it: without the proxy's keys, the agent's protocol
    envelope (the proxy's client stamps its own) and its progress token (progress is not relayed)."""
    return {k: v for k, v in meta.items() if not k.startswith(_OWN_META) and k not in _PROGRESS}


def session_key(meta: Mapping[str, Any], http_session: str | None = None) -> str:
    """The trajectory a call belongs to: the agent's ``hindsight/session``, else its MCP session
    (the HTTP session id; on stdio the proxy serves one session), else one shared default."""
    named = meta.get(META_SESSION)
    if isinstance(named, str) and named:
        return f"meta:{named}"
    return f"http:{http_session}" if http_session else "default"


def _session_key(ctx: ServerRequestContext[Proxy], meta: Mapping[str, Any]) -> str:
    headers = getattr(ctx.request, "headers", None)
    return session_key(meta, headers.get("mcp-session-id") if headers is not None else None)


def _begin(proxy: Proxy, key: str, arguments: Mapping[str, Any]) -> CallToolResult:
    task = arguments.get("task")
    task_type = arguments.get("task_type")
    if not isinstance(task, str) or not task.strip() or len(task) > 4000:
        return error_result("InvalidInput: task: send the task in words, 1-4000 characters")
    if task_type is not None and (not isinstance(task_type, str) or not 0 < len(task_type) <= 200):
        return error_result("InvalidInput: task_type: a short label, 1-200 characters")
    trajectory = proxy.trajectories.begin(key, task, task_type)
    return _text(f"Recording task {task[:80]!r} as trajectory {trajectory.trajectory_id}.")


def _finalize(proxy: Proxy, key: str, arguments: Mapping[str, Any]) -> CallToolResult:
    outcome = arguments.get("outcome")
    summary = arguments.get("summary")
    if outcome not in {s.value for s in ResultStatus}:
        return error_result("InvalidInput: outcome: one of success, failure, partial")
    if summary is not None and (not isinstance(summary, str) or len(summary) > 2000):
        return error_result("InvalidInput: summary: text of at most 2000 characters")
    closed = proxy.trajectories.finalize(key, ResultStatus(outcome), summary)
    if closed is None:
        return _text("No call was recorded for this task yet; nothing to close.")
    return _text(
        f"Task closed as {outcome}; hindsight learns from trajectory {closed.trajectory_id} in the background."
    )


async def _advice(proxy: Proxy, key: str, meta: Mapping[str, Any], arguments: Mapping[str, Any]) -> CallToolResult:
    situation = arguments.get("situation")
    try:
        result = await _experience(proxy, key, meta, situation if isinstance(situation, str) else None, decision=True)
    except Exception as exc:  # advice is optional: say so, and the agent goes on without it
        return error_result(f"AdviceUnavailable: hindsight did not answer ({type(exc).__name__}: {exc})")
    # The structured answer too (ids, conditions, recommended calls): an agent written against
    # query_experience reads the same fields here.
    return CallToolResult(
        content=result.content, structured_content=result.structured_content, is_error=result.is_error
    )


async def _experience(
    proxy: Proxy, key: str, meta: Mapping[str, Any], situation: str | None, *, decision: bool
) -> CallToolResult:
    """hindsight's ``query_experience`` for the session's next decision (the situation in words, else
    its task; its context snapshot; the tools listed); what it serves counts as served to the session's
    trajectory (``decision``: as advice for the decision at hand, :meth:`Trajectories.advised`)."""
    spec = proxy.config.hindsight
    trajectory = proxy.trajectories.current(key)
    query: dict[str, Any] = {
        "context": situation or trajectory.header.task,
        "context_snapshot": proxy.trajectories.snapshot(key, meta),
        "available_actions": list(proxy.routes)[:200],
        "role": spec.role,
    }
    if trajectory.header.task_type is not None:
        query["task_type"] = trajectory.header.task_type
    result = await proxy.recorder.query("query_experience", query, spec.call_timeout_s)
    if not result.is_error:
        proxy.trajectories.advised(key, _served(result), decision=decision)
    return result


def _served(result: CallToolResult) -> list[dict[str, Any]]:
    """The experiences of a ``query_experience`` answer (its structured ``experiences``)."""
    served = (result.structured_content or {}).get("experiences", [])
    return (
        [e for e in served if isinstance(e, dict) and isinstance(e.get("id"), str)] if isinstance(served, list) else []
    )


async def _with_experience(proxy: Proxy, key: str, meta: Mapping[str, Any], tools: list[Tool]) -> list[Tool]:
    """``tools`` with each served experience's line appended to the description of the tool it
    recommends. Listing never fails for advice: without an answer the tools are listed as they are."""
    try:
        result = await _experience(proxy, key, meta, None, decision=False)
    except Exception as exc:  # advice is optional: the listing goes on without it
        logger.warning("advice in descriptions: hindsight did not answer (%s: %s)", type(exc).__name__, exc)
        return tools
    lines: dict[str, list[str]] = {}
    for experience in [] if result.is_error else _served(result):
        recommended = experience.get("recommended")
        tool = recommended.get("tool") if isinstance(recommended, dict) else None
        if isinstance(tool, str) and isinstance(experience.get("text"), str):
            lines.setdefault(tool, []).append(experience["text"])
    return [
        tool.model_copy(update={"description": f"{tool.description or ''}{_EXPERIENCE}{' '.join(lines[tool.name])}"})
        if tool.name in lines
        else tool
        for tool in tools
    ]


def _text(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)])


async def _list_resources(
    ctx: ServerRequestContext[Proxy], params: PaginatedRequestParams | None
) -> ListResourcesResult:
    return ListResourcesResult(resources=[r for u in ctx.lifespan_context.upstreams.values() for r in u.resources])


async def _read_resource(ctx: ServerRequestContext[Proxy], params: ReadResourceRequestParams) -> ReadResourceResult:
    upstreams = list(ctx.lifespan_context.upstreams.values())
    uri = str(params.uri)
    owner = next((u for u in upstreams if any(str(r.uri) == uri for r in u.resources)), None)
    owner = owner or next((u for u in upstreams if u.capabilities.resources is not None), None)
    if owner is None:
        raise MCPError(INVALID_PARAMS, f"Unknown resource: {uri}; no upstream server offers resources")
    return await owner.read_resource(uri)


async def _list_prompts(ctx: ServerRequestContext[Proxy], params: PaginatedRequestParams | None) -> ListPromptsResult:
    return ListPromptsResult(prompts=[p for u in ctx.lifespan_context.upstreams.values() for p in u.prompts])


async def _get_prompt(ctx: ServerRequestContext[Proxy], params: GetPromptRequestParams) -> GetPromptResult:
    owner = next(
        (u for u in ctx.lifespan_context.upstreams.values() if any(p.name == params.name for p in u.prompts)), None
    )
    if owner is None:
        raise MCPError(INVALID_PARAMS, f"Unknown prompt: {params.name}; prompts/list names the prompts there are")
    return await owner.get_prompt(params.name, params.arguments)
