"""Role: in a chat between a person and an assistant, a question about the person's own life ("what
size is my new TV?") is answered by what the person said, and a question about what the assistant
said ("can you remind me of the deli you recommended?") by the assistant's turns.

Chat transcripts name their two sides with the usual roles (``user`` / ``human`` and ``assistant``
/ ``ai`` / ``bot``...) under the speaker key. The assistant's turns are long and repeat the person's
words back many times over, so by words and meaning alone they drown the one short turn where the
person told the fact. The query's own words say whose turns it asks about (the plan's ``asks_of``);
those get ``role_boost``. Memories without such a role, as between two named people, are untouched.
"""

from __future__ import annotations

from cluster.memory.policy.ranking import RankingPolicy
from cluster.memory.ranking.plan import QueryPlan
from cluster.memory.ranking.stage import Board, Note, Stage

#: Speaker names that are a chat's roles, by side.
ROLES = {
    "person": frozenset({"user", "human", "me", "customer", "client"}),
    "assistant": frozenset({"assistant", "ai", "bot", "agent", "model", "chatbot"}),
}


class Role(Stage):
    name = "role"

    @classmethod
    def needs_facts(cls, plan: QueryPlan, policy: RankingPolicy) -> bool:
        return plan.asks_of is not None and policy.role_boost > 0

    def score(self, board: Board) -> None:
        self.raised: set[int] = set()
        side = board.plan.asks_of
        if side is None or board.policy.role_boost <= 0:
            return
        roles = ROLES[side]
        factor = 1.0 + board.policy.role_boost
        scores, facts = board.scores, board.facts
        for seq in scores:
            fact = facts.get(seq)
            if fact is not None and any(e.lower() in roles for e in fact.entities):
                self.raised.add(seq)
                scores[seq] *= factor

    def explain(self, seq: int) -> Note:
        return Note({}, seq in self.raised)
