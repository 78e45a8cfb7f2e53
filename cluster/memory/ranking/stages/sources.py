"""The rankings the query's searches found: by meaning (``dense``: Milvus) and by words (``lexical``: SQL full text)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import ClassVar

from cluster.memory.policy.ranking import RankingPolicy
from cluster.memory.ranking.stage import Board, Note, Source, Stage


class Found(Stage):
    """A search's ranking, fused with its weight; explained by the candidate's score and rank there."""

    score_field: ClassVar[str]
    rank_field: ClassVar[str]

    @staticmethod
    @abstractmethod
    def weight(policy: RankingPolicy) -> float:
        """Its weight in fusion."""

    def score(self, board: Board) -> None:
        self.found: Mapping[int, float] = board.found.get(self.name, {})
        self.ranks: dict[int, int] | None = None
        board.sources[self.name] = Source(list(self.found), self.weight(board.policy))

    def explain(self, seq: int) -> Note:
        if self.ranks is None:
            self.ranks = {s: i for i, s in enumerate(self.found, start=1)}
        return Note({self.score_field: self.found.get(seq), self.rank_field: self.ranks.get(seq)}, seq in self.found)


class Dense(Found):
    name = "dense"
    score_field = "dense_similarity"
    rank_field = "dense_rank"

    @staticmethod
    def weight(policy: RankingPolicy) -> float:
        return policy.dense_weight


class Lexical(Found):
    name = "lexical"
    score_field = "lexical_score"
    rank_field = "lexical_rank"

    @staticmethod
    def weight(policy: RankingPolicy) -> float:
        return policy.lexical_weight
