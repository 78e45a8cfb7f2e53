"""What every MCP tool shares: the owner from the credential, error mapping, timing, store threads.

A tool body parses its input, makes one service call and returns a model. :meth:`Toolbox.tool`
registers it with the timing and error mapping every tool gets, so a tool body holds no
plumbing. Errors raise: a hindsight error becomes a ``ToolError`` whose message the model reads
(``is_error``); anything else is a crash the SDK reports without leaking internals.

Every tool takes only the arguments it declares: the SDK's argument models drop unknown ones
without a word, so a client sending ``owner`` or a misspelt ``topk`` would never learn that its call
did not do what it meant. :func:`known_arguments_only` refuses them, and the published schema says
``additionalProperties: false``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, cast

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, ValidationError, create_model, model_validator
from pydantic_core import PydanticCustomError

from cluster.auth import OwnerResolver
from cluster.core.errors import HindsightError
from cluster.services import Services

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def tool_errors() -> Iterator[None]:
    """Map what the caller got wrong to a ``ToolError`` that names it."""
    try:
        yield
    except HindsightError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from exc
    except ValidationError as exc:
        raise ToolError(f"InvalidInput: {exc}") from exc


# Store work of all tools in this process shares a few threads: every extra thread only adds GIL
# hand-offs. Measured on Postgres with 32 agents: 279 calls/s on anyio's default 40 threads, 409 on 4.
_STORE_THREADS = anyio.CapacityLimiter(4)
# A SQLite capture write finding the lock taken retries on the loop for up to ~20 ms, then waits in a
# thread. Measured with two replicas and 32 agents: a thread for every busy lock cost a quarter of
# the single-node call rate.
_INLINE_TRIES = 60
_INLINE_YIELDS = 40
_INLINE_RETRY_S = 0.001


class _KnownArgumentsOnly(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def refuse_unknown_arguments(cls, data: Any) -> Any:
        # Before field validation, so the caller reads one message that names every unknown argument
        # and lists the accepted ones, instead of one "extra inputs" line per argument.
        if isinstance(data, dict):
            accepted = sorted(field.alias or name for name, field in cls.model_fields.items())
            unknown = sorted(set(data) - set(accepted))
            if unknown:
                plural = "s" if len(unknown) > 1 else ""
                raise PydanticCustomError(
                    "unknown_argument",
                    f"unknown argument{plural} {{unknown}} (accepted: {{accepted}})",
                    {"unknown": ", ".join(unknown), "accepted": ", ".join(accepted)},
                )
        return data


def known_arguments_only(tool: Tool) -> None:
    """Make ``tool`` refuse arguments it does not declare, naming them and the accepted ones.

    The SDK validates a call with ``tool.fn_metadata.arg_model`` and publishes ``tool.parameters``;
    both are replaced by a subclass of its model that forbids extra keys, so every field, alias and
    default stays the SDK's own.
    """
    base = tool.fn_metadata.arg_model
    strict = cast(type[ArgModelBase], create_model(base.__name__, __base__=(base, _KnownArgumentsOnly)))
    tool.fn_metadata.arg_model = strict
    tool.parameters = strict.model_json_schema(by_alias=True)


def answer(result: BaseModel, text: str) -> CallToolResult:
    """A tool result whose text content is ``text`` (what a model reads) and whose structured
    content is ``result``: the JSON is not repeated as text."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=result.model_dump(mode="json")
    )


@dataclass
class Toolbox:
    """The services behind the tools and the helpers every tool uses."""

    server: MCPServer
    services: Services
    owners: OwnerResolver

    def __post_init__(self) -> None:
        # A trajectory write on the embedded SQLite is in-process work of ~0.5 ms; a worker thread
        # costs more than that (the GIL changes hands around every SQLite call), so it runs on the
        # event loop. A network database keeps the event loop free for other requests instead.
        self._capture_inline = self.services.db.dialect == "sqlite"
        self._capture_queue = anyio.Lock()

    def owner(self, ctx: Context) -> str:
        """The owner the request's credential maps to (never a tool argument)."""
        with tool_errors():
            return self.owners.owner_for(ctx.request_context.request)

    async def call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run blocking store work off the event loop, mapping errors for the model."""
        with tool_errors():
            return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=_STORE_THREADS)

    async def capture(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run a trajectory write where it is cheapest for this database (see ``__post_init__``).

        On SQLite it runs inline only while no other writer holds the lock: the event loop never
        waits for a writer (a worker's learn transaction, the other replica); then a thread waits.
        """
        if self._capture_inline:
            # Writers of this process queue on the loop (no CPU while they wait); the one at the
            # front takes the file lock if it is free, else lets the loop run and tries again: another
            # process's write holds it for about a millisecond. A long wait goes to a thread.
            async with self._capture_queue:
                for attempt in range(_INLINE_TRIES):
                    with self.services.db.writes_if_free() as free:
                        if free:
                            with tool_errors():
                                return fn(*args, **kwargs)
                    await anyio.sleep(0 if attempt < _INLINE_YIELDS else _INLINE_RETRY_S)
        return await self.call(fn, *args, **kwargs)

    def tool(self, description: str | None = None) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
        """Register an async tool (named after the function), timed and counted once per call."""

        def register(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
            timed = self.services.metrics.timed(fn.__name__)(fn)
            self.server.tool(description=description)(timed)
            # The SDK keeps no public handle on a registered tool; tests/reliability/test_tool_arguments.py
            # fails if this stops reaching every tool.
            tool = self.server._tool_manager.get_tool(fn.__name__)
            assert tool is not None, fn.__name__
            known_arguments_only(tool)
            return timed

        return register
