"""Hand-built trajectories for engine tests: small, explicit, with a known right answer."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from cluster.trajectories.models import (
    ExecutionResult,
    Node,
    Outcome,
    ResultStatus,
    Trajectory,
    TrajectoryHeader,
    TrajectoryStatus,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Builder:
    """Add nodes one by one (arrival order = seq), then build a finalized trajectory."""

    def __init__(
        self, *, role: str = "executor", task_type: str | None = "product_import", task: str = "Import products"
    ):
        self.header = TrajectoryHeader(agent_id="agent-1", role=role, task=task, task_type=task_type)
        self.nodes: list[Node] = []

    def add(
        self,
        action: str,
        actions: Sequence[str] | None = None,
        *,
        parent: uuid.UUID | None = None,
        status: str = "success",
        params: dict[str, Any] | None = None,
        context: dict[str, Any] | None = None,
        summary: str | None = None,
        data: dict[str, Any] | None = None,
        timestamp: int | None = None,
    ) -> uuid.UUID:
        node = Node(
            parent_id=parent,
            timestamp=1_700_000_000_000 + len(self.nodes) if timestamp is None else timestamp,
            context_snapshot=context or {},
            available_actions=list(actions or [action]),
            chosen_action=action,
            action_params=params or {},
            execution_result=ExecutionResult(status=ResultStatus(status), summary=summary, data=data or {}),
            seq=len(self.nodes),
        )
        self.nodes.append(node)
        return node.node_id

    def build(self, outcome: str | None = "success") -> Trajectory:
        return Trajectory(
            header=self.header,
            owner="tester",
            status=TrajectoryStatus.FINALIZED,
            outcome=Outcome(status=ResultStatus(outcome)) if outcome else None,
            created_at=T0,
            finalized_at=T0,
            nodes=tuple(self.nodes),
        )


INSERT_ACTIONS = ("add_item", "bulk_import")


def insert_run(rows: int, action: str, ok: bool, *, encoding: str = "utf-8", run: int = 0) -> Trajectory:
    """The seed's import task: open the file (execution), choose how to insert (decision), verify."""
    b = Builder()
    path = f"/tmp/run-{run}-{rows}/products_{rows}.csv"
    root = b.add("open_file", params={"path": path}, context={"goal": "Import products from a CSV file"})
    context = {
        "goal": "Import products from a CSV file",
        "row_count": rows,
        "file": {"path": path, "encoding": encoding},
    }
    if action == "bulk_import":
        params: dict[str, Any] = {"file": path, "encoding": "utf-8"}
    else:
        params = {"sku": f"SKU-{run}-{rows}", "price": rows * 3 + run}
    summary = None if ok else ("timeout after 30s at row 41" if action == "add_item" else f"decode error in {path}")
    decision = b.add(
        action,
        INSERT_ACTIONS,
        parent=root,
        status="success" if ok else "failure",
        params=params,
        context=context,
        summary=summary,
    )
    b.add("verify", parent=decision, status="success" if ok else "failure")
    return b.build("success" if ok else "failure")


def bulk_vs_single_runs() -> list[Trajectory]:
    """Small files succeed one by one; large ones time out one by one and succeed in bulk."""
    return [
        insert_run(10, "add_item", True, run=1),
        insert_run(20, "add_item", True, run=2),
        insert_run(150, "add_item", False, run=3),
        insert_run(200, "add_item", False, run=4),
        insert_run(100, "bulk_import", True, run=5),
        insert_run(500, "bulk_import", True, run=6),
    ]
