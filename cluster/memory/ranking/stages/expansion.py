"""Expansion: a third, weaker ranking for fusion, of the candidates whose text holds the query's expansion
words (the owner's words nearest in meaning to the query's, :mod:`cluster.memory.expansion`), by the
words' summed similarity."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cluster.memory.policy.ranking import RankingPolicy
from cluster.memory.ranking.facts import CandidateFacts
from cluster.memory.ranking.plan import QueryPlan
from cluster.memory.ranking.stage import Board, Note, Source, Stage


class Expansion(Stage):
    name = "expansion"

    @classmethod
    def needs_facts(cls, plan: QueryPlan, policy: RankingPolicy) -> bool:
        return bool(plan.expansions and policy.expansion_weight > 0)

    def score(self, board: Board) -> None:
        self.matched: dict[int, tuple[str, ...]] = {}
        if board.policy.expansion_weight > 0:
            candidates = dict.fromkeys(seq for found in board.found.values() for seq in found)
            self.matched = _matches(candidates, board.facts, board.plan)
        board.sources[self.name] = Source(_ranking(self.matched, board.plan), board.policy.expansion_weight)

    def explain(self, seq: int) -> Note:
        held = self.matched.get(seq, ())
        return Note({"expanded": held}, bool(held))


def _matches(
    candidates: Iterable[int], facts: Mapping[int, CandidateFacts], plan: QueryPlan
) -> dict[int, tuple[str, ...]]:
    """Per candidate, the expansion words its text holds (candidates that hold none left out)."""
    if not plan.expansions:
        return {}
    words = [w for w, _ in plan.expansions]
    out: dict[int, tuple[str, ...]] = {}
    for seq in candidates:
        fact = facts.get(seq)
        if fact is not None:
            held = fact.holds(words)
            if held:
                out[seq] = held
    return out


def _ranking(matched: Mapping[int, tuple[str, ...]], plan: QueryPlan) -> list[int]:
    """The candidates holding expansion words, by the summed similarity of the words they hold."""
    similarity = dict(plan.expansions)
    score = {seq: sum(similarity[w] for w in words) for seq, words in matched.items()}
    return sorted(score, key=lambda seq: (-score[seq], seq))
