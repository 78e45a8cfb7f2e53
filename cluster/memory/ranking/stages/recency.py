"""Recency: of the memories that match a query, the later ones rank higher, by ``recency_boost``.

Facts change ("my car is a Honda", months later "I sold the Honda, I drive a Tesla now"): both match
a question about the car, and the latest is the one in effect. A memory's score is raised by up to
``recency_boost`` times, in proportion to where its day falls between the earliest and the latest
day of the query's candidates; the earlier memories keep their place among the others, so "what did
I drive before" still finds them.
"""

from __future__ import annotations

from cluster.memory.policy.ranking import RankingPolicy
from cluster.memory.ranking.plan import QueryPlan
from cluster.memory.ranking.stage import Board, Note, Stage


class Recency(Stage):
    name = "recency"

    @classmethod
    def needs_facts(cls, plan: QueryPlan, policy: RankingPolicy) -> bool:
        return policy.recency_boost > 0

    def score(self, board: Board) -> None:
        self.raised: dict[int, float] = {}
        boost = board.policy.recency_boost
        if boost <= 0:
            return
        scores, facts = board.scores, board.facts
        days = {seq: fact.day.toordinal() for seq in scores if (fact := facts.get(seq)) is not None}
        if not days:
            return
        first, last = min(days.values()), max(days.values())
        if first == last:
            return
        for seq, day in days.items():
            factor = 1.0 + boost * (day - first) / (last - first)
            if factor > 1.0:
                self.raised[seq] = factor
                scores[seq] *= factor

    def explain(self, seq: int) -> Note:
        factor = self.raised.get(seq)
        return Note({}, factor is not None)
