"""What every MCP tool body shares: its toolbox (the services), the caller's owner, error mapping,
store threads and the batched writes.

A tool parses its input, makes one service call and returns a model. It reads what it needs from
its context: :func:`toolbox` is what the server's lifespan yielded (one :class:`Toolbox` per server,
shared by every session and request), and :meth:`Toolbox.owner` the owner the request's credential
maps to. Errors raise: a hindsight error becomes a ``ToolError`` whose message the model reads
(``is_error``); anything else is a crash the SDK reports without leaking internals.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, ParamSpec, TypeVar

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, ValidationError

from actors.engine.model.trajectories import RecordResult
from cluster.auth import OwnerResolver
from cluster.core.errors import HindsightError
from cluster.memory.models import MemoryWrite, MemoryWriteResult
from cluster.services import Services
from cluster.tools.batching import Batcher
from cluster.tools.errors import explained
from cluster.trajectories.capture import RecordCall

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
        raise ToolError(f"InvalidInput: {explained(exc)}") from exc


# Store work of all tools in this process shares a few threads: every extra thread only adds GIL
# hand-offs. Measured on Postgres with 32 agents: 279 calls/s on anyio's default 40 threads, 409 on 4.
_STORE_THREADS = anyio.CapacityLimiter(4)
# A SQLite capture write finding the lock taken retries on the loop for up to ~20 ms, then waits in a
# thread. Measured with two replicas and 32 agents: a thread for every busy lock cost a quarter of
# the single-node call rate.
_INLINE_TRIES = 60
_INLINE_YIELDS = 40
_INLINE_RETRY_S = 0.001


def answer(result: BaseModel, text: str) -> CallToolResult:
    """A tool result whose text content is ``text`` (what a model reads) and whose structured
    content is ``result``: the JSON is not repeated as text."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=result.model_dump(mode="json")
    )


class Toolbox:
    """The services behind one server's tools and the helpers every tool uses.

    The server's lifespan yields it (:meth:`lifespan`), so every session and request of the server
    shares one toolbox, and with it the batches of concurrent writes.
    """

    def __init__(self, services: Services, owners: OwnerResolver) -> None:
        self.services = services
        self.owners = owners
        # A trajectory write on the embedded SQLite is in-process work of ~0.5 ms; a worker thread
        # costs more than that (the GIL changes hands around every SQLite call), so it runs on the
        # event loop. A network database keeps the event loop free for other requests instead.
        self._capture_inline = services.db.dialect == "sqlite"
        self._capture_queue = anyio.Lock()
        # Concurrent record calls of this process share one transaction: one write lock and one commit
        # for all of them (on SQLite the lock hand-off between replicas is most of a single write's cost).
        self.records: Batcher[RecordCall, RecordResult] = Batcher(self._record_batch)
        # Concurrent memory writes share one transaction, one embedder call and one Milvus insert per owner.
        self.memory_writes: Batcher[tuple[str, MemoryWrite], MemoryWriteResult] = Batcher(self._memory_write_batch)

    @asynccontextmanager
    async def lifespan(self, _: MCPServer[Toolbox]) -> AsyncIterator[Toolbox]:
        """The server's lifespan: whoever enters it (a session, the HTTP app) gets this toolbox."""
        yield self

    def owner(self, ctx: ToolContext) -> str:
        """The owner the request's credential maps to (never a tool argument)."""
        with tool_errors():
            return self.owners.owner_for(ctx.request_context.request)

    async def call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run blocking store work off the event loop, mapping errors for the model."""
        with tool_errors():
            return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=_STORE_THREADS)

    async def capture(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run a trajectory write where it is cheapest for this database (see ``__init__``).

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

    async def _record_batch(self, calls: Sequence[RecordCall]) -> list[RecordResult | Exception]:
        return await self.capture(self.services.capture.record_batch, calls)

    async def _memory_write_batch(
        self, items: Sequence[tuple[str, MemoryWrite]]
    ) -> list[MemoryWriteResult | HindsightError]:
        return await self.call(self.services.memory.apply_write_batch, items)


ToolContext = Context[Toolbox, Any]
"""The context a tool declares: the SDK fills it in, and its lifespan context is the server's toolbox."""


def toolbox(ctx: ToolContext) -> Toolbox:
    """The toolbox of the server answering this request (what the server's lifespan yielded)."""
    return ctx.request_context.lifespan_context
