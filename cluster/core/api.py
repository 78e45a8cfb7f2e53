"""Results the service returns to agents (over MCP or the Python API)."""

from __future__ import annotations

import uuid

from pydantic import Field

from cluster.core.trajectory import Frozen, ResultStatus, TrajectoryStatus


class RecordResult(Frozen):
    trajectory_id: uuid.UUID
    node_ids: list[uuid.UUID] = Field(description="Ids of the recorded nodes, in the order sent.")
    node_count: int = Field(description="Nodes the trajectory holds now.")


class FinalizeResult(Frozen):
    trajectory_id: uuid.UUID
    status: TrajectoryStatus
    outcome: ResultStatus
    queued_for_analysis: bool = Field(description="True: experiences will be distilled from it shortly.")
