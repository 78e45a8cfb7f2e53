"""Hand-built trajectories for engine tests: small, explicit, with a known right answer."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from actors.engine.model.trajectories import (
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


GEOCODE_ACTIONS = ["geocode_structured", "geocode_freeform"]
RIGHT = {True: "geocode_structured", False: "geocode_freeform"}


def _geocode_run(run: int, postcode: bool, calls: list[tuple[str, bool]]) -> Trajectory:
    """Load an address, then the geocode calls in order, each a sibling under the load (as agents record retries)."""
    b = Builder(role="agent", task_type="geocode", task="Geocode a delivery address")
    root = b.add("load_address", context={"goal": "load the address"})
    context = {"goal": "geocode the address", "has_postcode": postcode, "shipment": f"shp_{run:04d}"}
    for action, ok in calls:
        summary = None if ok else ("503 busy, try again" if action == RIGHT[postcode] else "wrong lookup")
        b.add(
            action,
            GEOCODE_ACTIONS,
            parent=root,
            status="success" if ok else "failure",
            context=context,
            summary=summary,
        )
    return b.build("success" if calls[-1][1] else "failure")


def flaky_geocode_runs(*, recovers: bool) -> list[Trajectory]:
    """Twenty runs per postcode value; the right call failed at first in three runs with a postcode.

    ``recovers``: after that failure the same call, made again, worked (a transient fault); else
    it failed again and the task failed in two of the three (a fault the snapshot does not show).
    """
    runs = []
    for run in range(40):
        postcode = run % 2 == 0
        right, wrong = RIGHT[postcode], RIGHT[not postcode]
        calls = [(wrong, False), (right, True)] if run % 4 < 2 else [(right, True)]
        if postcode and run in (2, 6, 10):
            keeps_failing = not recovers and run != 10
            calls = [(right, False), (right, False)] if keeps_failing else [(right, False), (right, True)]
        runs.append(_geocode_run(run, postcode, calls))
    return runs
