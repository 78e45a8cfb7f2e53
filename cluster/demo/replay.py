"""The baseline the articles argue against: plain vector memory of raw successful trajectories.

Each successful episode's call sequence (concrete params and all) is stored under an embedding of
its task text. A new task retrieves the nearest stored episode and replays its calls verbatim.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from cluster.core.ports import Embedder
from cluster.core.types import Frozen
from cluster.demo.env_base import Call


class RecordedStep(Frozen):
    """One successful call of a stored episode and the role that made it."""

    role: str
    call: Call


class RawTrajectory(Frozen):
    """A stored successful episode: its task text and the calls on its successful path."""

    task: str
    steps: tuple[RecordedStep, ...]


class ReplayMemory:
    """Raw successful trajectories keyed by task-text embeddings (cosine nearest neighbour).

    New trajectories are held back until :meth:`commit`, so this memory learns at the same round
    boundaries as hindsight's background analysis.

    Args:
        embedder: Unit-length text embedder (e.g. ``cluster.embedding.build_embedder``).
    """

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self._pending: list[RawTrajectory] = []
        self._stored: list[RawTrajectory] = []
        self._vectors: npt.NDArray[np.float32] = np.zeros((0, embedder.dimension), dtype=np.float32)

    def __len__(self) -> int:
        return len(self._stored)

    def add(self, trajectory: RawTrajectory) -> None:
        """Queue a successful trajectory for the next :meth:`commit`."""
        if trajectory.steps:
            self._pending.append(trajectory)

    def commit(self) -> int:
        """Embed and store the queued trajectories; returns how many were added."""
        if not self._pending:
            return 0
        vectors = np.asarray(self._embedder.embed([t.task for t in self._pending]), dtype=np.float32)
        self._vectors = np.vstack([self._vectors, vectors])
        self._stored.extend(self._pending)
        added = len(self._pending)
        self._pending = []
        return added

    def nearest(self, task: str) -> RawTrajectory | None:
        """The stored trajectory whose task text is most similar to ``task``."""
        if not self._stored:
            return None
        query = np.asarray(self._embedder.embed([task])[0], dtype=np.float32)
        return self._stored[int(np.argmax(self._vectors @ query))]


class ReplayCursor:
    """Walks one role's stored calls in order, the way a verbatim replay would.

    Args:
        steps: The stored trajectory's steps (all roles).
        role: The role whose calls to replay.
    """

    def __init__(self, steps: Sequence[RecordedStep], role: str) -> None:
        self._calls = [s.call for s in steps if s.role == role]
        self._position = 0

    def next_for(self, available: Sequence[str], tried: Sequence[Call]) -> Call | None:
        """The next stored call whose action is available here and not yet tried, or None.

        Calls whose action is not available are skipped; the cursor moves past the call returned.
        """
        for index in range(self._position, len(self._calls)):
            call = self._calls[index]
            if call.action in available and call not in tried:
                self._position = index + 1
                return call
        return None
