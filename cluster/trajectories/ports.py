"""The trajectory store contract. ``cluster.trajectories.repository`` implements it on SQL."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol

from cluster.trajectories.models import NodeIn, Outcome, RecordResult, Trajectory, TrajectoryHeader


class TrajectoryStore(Protocol):
    """Durable trajectories. Runs inside the caller's unit of work and never commits by itself.

    Every method is constrained by ``owner``: another owner's trajectory is ``NotFound``.
    """

    def open(self, owner: str, header: TrajectoryHeader) -> Trajectory:
        """Create the trajectory, or return it if an identical header exists (``Conflict`` if it differs)."""
        ...

    def append(self, owner: str, trajectory_id: uuid.UUID, nodes: Sequence[NodeIn]) -> RecordResult:
        """Add nodes atomically: all or none.

        Raises ``NotFound`` (trajectory or a parent unknown), ``Conflict`` (same id, other payload; a
        second root), ``TrajectoryClosed`` (finalized and the node is new) or ``LimitExceeded``.
        A node identical to a stored one is a no-op. Returns every id of the batch and the new node count.
        """
        ...

    def finalize(self, owner: str, trajectory_id: uuid.UUID, outcome: Outcome) -> Trajectory:
        """Close the trajectory and queue it for analysis; repeating the same outcome is a no-op."""
        ...

    def load(self, owner: str, trajectory_id: uuid.UUID) -> Trajectory:
        """The trajectory with all its nodes in arrival order, read in one query."""
        ...
