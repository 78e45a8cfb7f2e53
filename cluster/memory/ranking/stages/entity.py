"""Entity stage: memories that carry an entity the query names (their speaker, author, entity field)
get ``entity_boost``; a question about one person then ranks the other person's turns below that
person's own."""

from __future__ import annotations

from cluster.memory.policy.ranking import RankingPolicy
from cluster.memory.ranking.plan import QueryPlan
from cluster.memory.ranking.stage import Board, Note, Stage


class Entity(Stage):
    name = "entity"

    @classmethod
    def needs_facts(cls, plan: QueryPlan, policy: RankingPolicy) -> bool:
        return bool(plan.entities and policy.entity_boost > 0)

    def score(self, board: Board) -> None:
        self.named: dict[int, tuple[str, ...]] = {}
        wanted = {e.lower() for e in board.plan.entities}
        if not wanted:
            return
        factor = 1.0 + board.policy.entity_boost
        scores, facts = board.scores, board.facts
        for seq in scores:
            fact = facts.get(seq)
            if fact is None:
                continue
            named = tuple(sorted(e for e in fact.entities if e.lower() in wanted))
            if named:
                self.named[seq] = named
                scores[seq] *= factor

    def explain(self, seq: int) -> Note:
        named = self.named.get(seq, ())
        return Note({"entities": named}, bool(named))
