"""Fusion: the weighted reciprocal rank of every ranking the stages before it added.

``w / (k + rank)`` summed over the rankings needs no calibration between their scores (cosine
similarity, BM25, the expansion words' similarity). The candidates are those of the rankings of
weight above 0; the expansion's ranking only orders candidates the searches found.
"""

from __future__ import annotations

from collections.abc import Mapping

from cluster.memory.policy.ranking import rrf
from cluster.memory.ranking.stage import Board, Note, Source, Stage


def fuse(sources: Mapping[str, Source], k: float) -> dict[int, float]:
    """Weighted reciprocal-rank fusion of the rankings, in their order (each best first)."""
    fused: dict[int, float] = {}
    for source in sources.values():
        if source.weight <= 0:
            continue
        for rank, seq in enumerate(source.seqs, start=1):
            fused[seq] = fused.get(seq, 0.0) + rrf(rank, k, source.weight)
    return fused


class Fusion(Stage):
    """Sets every candidate's score: the fused score of the rankings added before it."""

    name = "fusion"

    def score(self, board: Board) -> None:
        self.fused = fuse(board.sources, board.policy.rrf_k)
        board.scores = dict(self.fused)

    def explain(self, seq: int) -> Note:
        # Every memory is fused; ``why.stages`` names what found or raised it.
        return Note({"fused": self.fused[seq]})
