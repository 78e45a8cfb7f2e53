"""Trajectory capture models: a trajectory is a tree of decision points an agent went through.

These models are the ingestion boundary, so they reject what the stores cannot hold (NUL bytes,
non-JSON values) at parse time rather than deep inside a database driver.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import AfterValidator, ConfigDict, Field, StrictInt, model_validator

from cluster.core.errors import InvalidInput, LimitExceeded
from cluster.core.types import Frozen, JsonObject, Name, Text, canonical_json, no_nul

MAX_TIMESTAMP_MS = 253_402_300_799_999
"""The last millisecond of year 9999: later values are no time a database can store."""


MAX_SERVED_IDS = 1000
"""Experience ids one finalize may report served: a query serves at most 8, a trajectory has at most
a few hundred decisions."""


def now_ms() -> int:
    return int(time.time() * 1000)


class ResultStatus(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    PARTIAL = "partial"


class ExecutionResult(Frozen):
    """What happened when the chosen action ran.

    Agents send more than ``status`` and ``summary``: ``message``, ``error``, ``output``, costs
    (``steps``, ``latency_ms``, ``tokens``, or a ``cost`` object holding them), ... Any key beyond
    the three fields is accepted and moved into ``data``, so a stored result always has one
    shape and nothing the agent said is dropped. A key sent both at the top level and inside
    ``data`` must carry the same value: silently keeping one of two would lose the other.
    """

    # Extra keys never reach the model (the validator below moves them into data); the schema
    # says they are welcome, so MCP clients that check arguments against it do not drop them.
    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra={"additionalProperties": True})

    status: ResultStatus = Field(description="How the action went.")
    summary: Text | None = Field(default=None, max_length=2000, description="One-line outcome, e.g. an error.")
    data: JsonObject = Field(
        default_factory=dict, description="Any further result; other keys (error, steps, ...) land here."
    )

    @model_validator(mode="before")
    @classmethod
    def _extra_keys_into_data(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        extra = {k: v for k, v in value.items() if k not in _RESULT_FIELDS}
        if not extra:
            return value
        data = value.get("data")
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            return value  # let field validation report the bad ``data`` rather than guess
        merged = dict(data)
        for key, item in extra.items():
            if key in merged and merged[key] != item:
                raise ValueError(f"key {key!r} is sent twice, at the top level and in data, with different values")
            merged[key] = item
        return {**{k: v for k, v in value.items() if k in _RESULT_FIELDS}, "data": merged}


_RESULT_FIELDS = frozenset({"status", "summary", "data"})


class NodeIn(Frozen):
    """One decision point or execution step as an agent reports it."""

    node_id: uuid.UUID = Field(
        default_factory=uuid.uuid4, description="A UUID you choose, to name it as a parent; default a new one."
    )
    parent_id: uuid.UUID | None = Field(default=None, description="The node_id this one follows; none for the first.")
    timestamp: StrictInt = Field(
        default_factory=now_ms, ge=0, le=MAX_TIMESTAMP_MS, description="Epoch milliseconds (UTC); default now."
    )
    context_snapshot: JsonObject = Field(
        default_factory=dict, description="What you saw: goal, last result, tools in view."
    )
    available_actions: list[Name] = Field(min_length=1, max_length=200, description="The actions you could take.")
    chosen_action: Name = Field(description="The one you took.")
    action_params: JsonObject = Field(default_factory=dict, description="Its parameters; default none.")
    execution_result: ExecutionResult = Field(description="What happened.")
    llm_reasoning: Text | None = Field(default=None, max_length=20_000, description="Why you chose it.")

    @model_validator(mode="after")
    def _chosen_is_available(self) -> Self:
        if self.chosen_action not in self.available_actions:
            raise ValueError(
                f"chosen_action {self.chosen_action!r} is not in available_actions {self.available_actions!r}"
            )
        if self.parent_id == self.node_id:
            raise ValueError("a node cannot be its own parent")
        return self

    @property
    def is_decision(self) -> bool:
        """Only a choice among several actions is a decision; a single-action step is execution."""
        return len(set(self.available_actions)) > 1

    def context_bytes(self) -> int:
        return json_bytes(self.context_snapshot)

    def payload_hash(self) -> str:
        """Identity of a node's content for idempotent retries.

        The timestamp is left out: a client retrying a node may stamp it again, and it is the
        same report all the same.
        """
        body = self.model_dump(mode="json", exclude={"timestamp"})
        return hashlib.sha256(canonical_json(body).encode()).hexdigest()


class Node(NodeIn):
    """A stored node, with the order it arrived in."""

    seq: int = Field(ge=0, description="Arrival order within the trajectory.")


class TrajectoryStatus(StrEnum):
    OPEN = "open"
    FINALIZED = "finalized"


class AnalysisStatus(StrEnum):
    NONE = "none"
    PENDING = "pending"
    CLAIMED = "claimed"
    DONE = "done"


class TrajectoryHeader(Frozen):
    """Who ran which task; sent once, when a trajectory starts."""

    trajectory_id: uuid.UUID = Field(default_factory=uuid.uuid4)
    agent_id: Name
    role: Name = Field(default="agent", description="e.g. planner, executor, verifier.")
    task: Annotated[str, Field(min_length=1, max_length=4000), AfterValidator(no_nul)]
    task_type: Name | None = None
    run_id: Name | None = Field(
        default=None,
        description="One multi-agent task run (planner → executor → verifier); its trajectories share it.",
    )


class Outcome(Frozen):
    """How the whole task ended."""

    status: ResultStatus
    summary: Text | None = Field(default=None, max_length=2000)
    served_template_ids: list[uuid.UUID] = Field(
        default_factory=list,
        max_length=MAX_SERVED_IDS,
        description="Experience templates the agent was served for this task.",
    )


class Trajectory(Frozen):
    """A whole trajectory as stored, nodes in arrival order."""

    header: TrajectoryHeader
    owner: Name
    status: TrajectoryStatus
    outcome: Outcome | None = None
    created_at: datetime
    finalized_at: datetime | None = None
    nodes: tuple[Node, ...] = ()

    @property
    def trajectory_id(self) -> uuid.UUID:
        return self.header.trajectory_id

    def root(self) -> Node | None:
        return next((n for n in self.nodes if n.parent_id is None), None)

    def children(self) -> dict[uuid.UUID | None, list[Node]]:
        """Children by parent id (None keys the root), each list in arrival order."""
        out: dict[uuid.UUID | None, list[Node]] = {}
        for node in self.nodes:
            out.setdefault(node.parent_id, []).append(node)
        return out

    def leaves(self) -> list[Node]:
        parents = {n.parent_id for n in self.nodes}
        return [n for n in self.nodes if n.node_id not in parents]

    def paths(self) -> Iterator[list[Node]]:
        """Every root-to-leaf path."""
        by_id = {n.node_id: n for n in self.nodes}
        for leaf in self.leaves():
            path = [leaf]
            while path[-1].parent_id is not None:
                path.append(by_id[path[-1].parent_id])
            yield path[::-1]


@dataclass(frozen=True)
class TrajectoryLimits:
    """How much a trajectory, its nodes' free-form fields and an experience query may hold.

    Sizes are UTF-8 bytes of compact JSON. A node is one decision point, not a log: the snapshot is
    a summary (goal, last result, tools in view), the parameters and result those of one call. A
    1 MB ``action_params`` was stored, and ``query_experience`` took a 1.6 MB context, before.
    Names (roles, task types, actions, ids) are at most 200 characters and task texts 4,000
    everywhere: their columns hold no more. Settings: ``max_trajectory_nodes``,
    ``max_context_bytes``, ``max_node_field_bytes``, ``max_query_bytes`` (docs/service.md).
    """

    max_trajectory_nodes: int = 500
    max_context_bytes: int = 2048
    max_node_field_bytes: int = 8192
    max_query_bytes: int = 8192

    def check_nodes(self, nodes: Sequence[NodeIn], existing_count: int) -> None:
        """Limits a batch of new nodes must meet before anything is written (``LimitExceeded``)."""
        for node in nodes:
            _within(
                f"node {node.node_id}: context_snapshot",
                node.context_bytes(),
                self.max_context_bytes,
                "max_context_bytes",
                "summarise it (goal, last result, tools in view)",
            )
            for name, value in (
                ("action_params", node.action_params),
                ("execution_result", node.execution_result.model_dump(mode="json")),
            ):
                _within(
                    f"node {node.node_id}: {name}",
                    json_bytes(value),
                    self.max_node_field_bytes,
                    "max_node_field_bytes",
                    "keep what the next decision needs",
                )
        if existing_count + len(nodes) > self.max_trajectory_nodes:
            raise LimitExceeded(
                f"trajectory would have {existing_count + len(nodes)} nodes, over the limit of "
                f"{self.max_trajectory_nodes} (setting max_trajectory_nodes)"
            )
        seen: set[uuid.UUID] = set()
        for node in nodes:
            if node.node_id in seen:
                raise InvalidInput(f"node {node.node_id} appears twice in one batch")
            seen.add(node.node_id)

    def check_query(self, context: str, context_snapshot: Mapping[str, Any] | None) -> None:
        """Limits of an experience query: its text, and its snapshot as a recorded one's (``LimitExceeded``)."""
        _within(
            "context", len(context.encode()), self.max_query_bytes, "max_query_bytes", "describe the situation briefly"
        )
        if context_snapshot:
            _within(
                "context_snapshot",
                json_bytes(context_snapshot),
                self.max_context_bytes,
                "max_context_bytes",
                "summarise it (goal, last result, tools in view)",
            )


def json_bytes(value: Any) -> int:
    """Size of a JSON value as stored: UTF-8 bytes of its compact form."""
    return len(canonical_json(value).encode())


def _within(what: str, size: int, limit: int, setting: str, advice: str) -> None:
    if size > limit:
        raise LimitExceeded(
            f"{what} is {size} bytes, over the limit of {limit} (setting {setting}, "
            f"HINDSIGHT_{setting.upper()}); {advice}"
        )


class RecordResult(Frozen):
    trajectory_id: uuid.UUID
    node_ids: list[uuid.UUID] = Field(description="Ids of the recorded nodes, in the order sent.")
    node_count: int = Field(description="Nodes the trajectory holds now.")


class FinalizeResult(Frozen):
    trajectory_id: uuid.UUID
    status: TrajectoryStatus
    outcome: ResultStatus
    queued_for_analysis: bool = Field(description="True: experiences will be distilled from it shortly.")
