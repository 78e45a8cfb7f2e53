"""Session evidence: a memory gains ``session_weight`` times the mean score of the best ``session_top``
candidates of its session (or, without one, of its day), so facts told together support each other."""

from __future__ import annotations

from collections import defaultdict

from cluster.memory.policy.ranking import RankingPolicy
from cluster.memory.ranking.plan import QueryPlan
from cluster.memory.ranking.stage import Board, Note, Stage


class Session(Stage):
    name = "session"

    @classmethod
    def needs_facts(cls, plan: QueryPlan, policy: RankingPolicy) -> bool:
        return policy.session_weight > 0

    def score(self, board: Board) -> None:
        self.bonus: dict[int, float] = {}
        policy = board.policy
        if policy.session_weight <= 0:
            return
        scores, facts = board.scores, board.facts
        groups = {seq: fact.group for seq in scores if (fact := facts.get(seq)) is not None}
        members: dict[str, list[float]] = defaultdict(list)
        for seq, group in groups.items():
            members[group].append(scores[seq])
        top = policy.session_top
        bonus = {g: policy.session_weight * (sum(sorted(v, reverse=True)[:top]) / top) for g, v in members.items()}
        for seq, group in groups.items():
            self.bonus[seq] = bonus[group]
            scores[seq] += bonus[group]

    def explain(self, seq: int) -> Note:
        bonus = self.bonus.get(seq, 0.0)
        return Note({"session_bonus": bonus}, bonus > 0)
