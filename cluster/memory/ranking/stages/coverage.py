"""Coverage: a top-k that spans the sessions bearing on the query, not ten turns of one.

An answer may be spread over several conversations ("how many weddings did I go to this year"):
each is told in its own session, and one long session about one wedding would otherwise fill the
top-k. Walking the candidates best first, a memory whose session (or, without one, day) already has
``n`` better candidates has its score multiplied by ``coverage_decay ** n``: the second turn of a
session yields to a slightly weaker first turn of another, while a session far ahead keeps several.
"""

from __future__ import annotations

from cluster.memory.policy.ranking import RankingPolicy
from cluster.memory.ranking.plan import QueryPlan
from cluster.memory.ranking.stage import Board, Note, Stage


class Coverage(Stage):
    name = "coverage"

    @classmethod
    def needs_facts(cls, plan: QueryPlan, policy: RankingPolicy) -> bool:
        return policy.coverage_decay < 1

    def score(self, board: Board) -> None:
        self.lowered: dict[int, int] = {}
        decay = board.policy.coverage_decay
        if decay >= 1:
            return
        scores, facts = board.scores, board.facts
        seen: dict[str, int] = {}
        for seq in sorted(scores, key=lambda s: (-scores[s], s)):
            fact = facts.get(seq)
            if fact is None:
                continue
            before = seen.get(fact.group, 0)
            seen[fact.group] = before + 1
            if before:
                self.lowered[seq] = before
                scores[seq] *= decay**before

    def explain(self, seq: int) -> Note:
        return Note({})
