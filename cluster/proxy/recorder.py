"""Sends the proxy's records to hindsight in the background, in order, through hindsight's own MCP tools.

A tool call only puts its record on an unbounded in-memory queue (:meth:`Recorder.submit` never
waits), so a slow or absent hindsight never delays or changes what the agent gets. One task drains
the queue: consecutive nodes of a trajectory go as one ``record_trajectory_nodes`` call, the header
rides with a trajectory's first delivered nodes, and a delivery that fails on the way (hindsight
down, a dropped connection) is retried until it lands or the proxy stops. What hindsight refuses (a
node over a limit) is logged and counted, and the nodes after it are re-parented onto the refused
node's parent so that one bad record does not orphan the rest.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
from mcp import Client
from mcp_types import CallToolResult, TextContent

logger = logging.getLogger(__name__)

_BATCH = 100
"""Records taken off the queue per round."""
_LINGER_S = 0.25
"""After the first record of a round, wait this long for more: an agent calling tools back to back
then pays for one delivery per round instead of one per call (on the proxy's CPU, which its
forwarding shares)."""
_RETRY_S = (0.2, 1.0, 5.0)
"""Pauses between failed deliveries in a row, then the last one again."""
_TRANSIENT = ("StoreUnavailable",)
"""Refusals that say "not now" rather than "never": delivered again later."""


@dataclass(frozen=True)
class Header:
    task: str
    agent_id: str
    role: str
    task_type: str | None = None


@dataclass(frozen=True)
class NodeRecord:
    trajectory_id: uuid.UUID
    header: Header
    node: dict[str, Any]
    """A node as ``record_trajectory_node`` takes it (JSON)."""


@dataclass(frozen=True)
class FinalizeRecord:
    trajectory_id: uuid.UUID
    outcome: str
    summary: str | None = None
    served_template_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReportRecord:
    """Whether served experiences the agent followed were right (``report_experience_outcome``)."""

    trajectory_id: uuid.UUID
    template_ids: tuple[str, ...]
    """At most :data:`REPORT_CHUNK`."""
    succeeded: bool


Record = NodeRecord | FinalizeRecord | ReportRecord
REPORT_CHUNK = 8
"""Template ids ``report_experience_outcome`` takes per call."""


class Refused(Exception):
    """hindsight answered the record with an error that sending it again will not change."""


@dataclass
class Counts:
    submitted: int = 0
    delivered: int = 0
    refused: int = 0
    dropped_at_stop: int = 0


@dataclass
class _Delivery:
    """What the draining task knows about trajectories it has sent."""

    opened: set[uuid.UUID] = field(default_factory=set)
    replaced: dict[uuid.UUID, uuid.UUID | None] = field(default_factory=dict)
    """A refused node's id -> its parent: its children hang there instead."""


class Recorder:
    """The queue of records and the task that delivers them; ``connect`` makes a fresh client to
    hindsight (over HTTP, or in process)."""

    def __init__(self, connect: Callable[[], Client]) -> None:
        self._connect = connect
        self._send, self._receive = anyio.create_memory_object_stream[Record](math.inf)
        self._client: Client | None = None
        self._delivery = _Delivery()
        self.counts = Counts()
        self._idle = anyio.Event()
        self._idle.set()

    def submit(self, record: Record) -> None:
        """Queue a record; returns at once and never raises for the record's sake."""
        self.counts.submitted += 1
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        self._send.send_nowait(record)

    @property
    def pending(self) -> int:
        # A round retried after a broken connection may count a record twice: never below zero.
        return max(0, self.counts.submitted - self.counts.delivered - self.counts.refused)

    async def settled(self) -> None:
        """Wait until every record submitted so far is delivered or refused (for tests and benchmarks)."""
        while self.pending:
            await self._idle.wait()

    async def query(self, tool: str, arguments: dict[str, Any], timeout_s: float) -> CallToolResult:
        """One read call to hindsight for the agent (advice); unlike records, the agent waits for it."""
        client = self._client
        if client is None:
            raise Refused("hindsight is not connected")
        with anyio.fail_after(timeout_s):
            return await client.call_tool(tool, arguments)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Deliver until cancelled; cancel it only after :meth:`stop` had its chance to drain."""
        task_status.started()
        failures = 0
        batch: list[Record] = []
        while True:
            try:
                async with self._connect() as client:
                    self._client = client
                    while True:
                        if not batch:
                            batch = await self._take()
                        if not batch:
                            return  # stopped, and everything before the stop delivered
                        await self._deliver(client, batch)
                        batch = []
                        failures = 0
                        if self.pending == 0:
                            self._idle.set()
            except Exception as exc:  # hindsight unreachable or the connection broke: keep the batch, retry
                failures += 1
                logger.warning("recording: delivery failed (%s); %d record(s) waiting", _describe(exc), self.pending)
            finally:
                self._client = None
            await anyio.sleep(_RETRY_S[min(failures, len(_RETRY_S)) - 1])

    async def stop(self, timeout_s: float) -> None:
        """Stop taking records and wait up to ``timeout_s`` for the queue to drain; what is left is
        counted and logged (the proxy is going away, so that is all that can be done with it)."""
        self._send.close()
        with anyio.move_on_after(timeout_s):
            await self.settled()
        if self.pending:
            self.counts.dropped_at_stop = self.pending
            logger.error("recording: %d record(s) could not be delivered before the proxy stopped", self.pending)

    async def _take(self) -> list[Record]:
        """The next round of records; empty once the queue is closed and drained."""
        try:
            batch = [await self._receive.receive()]
        except anyio.EndOfStream:
            return []
        await anyio.sleep(_LINGER_S)
        while len(batch) < _BATCH:
            try:
                batch.append(self._receive.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
        return batch

    async def _deliver(self, client: Client, batch: list[Record]) -> None:
        """Send a batch in order, taking each record off ``batch`` once hindsight acknowledged it, so
        that a delivery failing midway is retried with what is left and nothing is sent twice."""
        while batch:
            first = batch[0]
            group: list[Record] = [first]
            if isinstance(first, FinalizeRecord):
                await self._finalize(client, first)
            elif isinstance(first, ReportRecord):
                await self._report(client, first)
            else:
                for record in batch[1:]:
                    if not isinstance(record, NodeRecord) or record.trajectory_id != first.trajectory_id:
                        break
                    group.append(record)
                await self._nodes(client, [r for r in group if isinstance(r, NodeRecord)])
            del batch[: len(group)]

    async def _nodes(self, client: Client, records: list[NodeRecord]) -> None:
        trajectory_id = records[0].trajectory_id
        nodes = [self._reparented(r.node) for r in records]
        arguments: dict[str, Any] = {"trajectory_id": str(trajectory_id), "nodes": nodes}
        if trajectory_id not in self._delivery.opened:
            header = records[0].header
            arguments |= {"task": header.task, "agent_id": header.agent_id, "role": header.role}
            if header.task_type is not None:
                arguments["task_type"] = header.task_type
        result = await client.call_tool("record_trajectory_nodes", arguments)
        if not result.is_error:
            self._delivery.opened.add(trajectory_id)
            self.counts.delivered += len(records)
            return
        message = _text(result)
        if message.startswith(_TRANSIENT):
            raise RuntimeError(message)
        if len(records) > 1:
            # All or nothing was stored: send them one by one so only the bad one is lost.
            for record in records:
                await self._nodes(client, [record])
            return
        node = nodes[0]
        self._delivery.replaced[uuid.UUID(node["node_id"])] = _uuid(node.get("parent_id"))
        self.counts.refused += 1
        logger.warning("recording: hindsight refused a node of trajectory %s: %s", trajectory_id, message)

    async def _finalize(self, client: Client, record: FinalizeRecord) -> None:
        arguments: dict[str, Any] = {"trajectory_id": str(record.trajectory_id), "outcome": record.outcome}
        if record.summary:
            arguments["summary"] = record.summary
        if record.served_template_ids:
            arguments["served_template_ids"] = list(record.served_template_ids)
        self._settled(await client.call_tool("finalize_trajectory", arguments), f"finalize {record.trajectory_id}")

    async def _report(self, client: Client, record: ReportRecord) -> None:
        arguments = {
            "template_ids": list(record.template_ids),
            "succeeded": record.succeeded,
            "trajectory_id": str(record.trajectory_id),
        }
        result = await client.call_tool("report_experience_outcome", arguments)
        self._settled(result, f"take the outcome of experiences followed in {record.trajectory_id}")

    def _settled(self, result: CallToolResult, what: str) -> None:
        """Count one record delivered, or refused (logged); a "not now" is raised, to be sent again."""
        if result.is_error:
            message = _text(result)
            if message.startswith(_TRANSIENT):
                raise RuntimeError(message)
            self.counts.refused += 1
            logger.warning("recording: hindsight refused to %s: %s", what, message)
            return
        self.counts.delivered += 1

    def _reparented(self, node: dict[str, Any]) -> dict[str, Any]:
        parent = _uuid(node.get("parent_id"))
        moved = False
        while parent is not None and parent in self._delivery.replaced:
            parent = self._delivery.replaced[parent]
            moved = True
        if not moved:
            return node
        return {**node, "parent_id": None if parent is None else str(parent)}


def _uuid(value: Any) -> uuid.UUID | None:
    return None if value is None else uuid.UUID(str(value))


def _text(result: CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"[:300]
