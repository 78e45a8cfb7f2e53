"""A query's ranking: its candidates through the registered stages, the best first, and why."""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cluster.memory.policy.ranking import RankingPolicy
from cluster.memory.ranking.facts import CandidateFacts
from cluster.memory.ranking.plan import QueryPlan
from cluster.memory.ranking.registry import STAGES
from cluster.memory.ranking.stage import Board, Stage


@dataclass(frozen=True)
class Candidates:
    """A query's candidates before ranking: what each search found (by search: seq -> its score
    there, best first), the facts the stages read of them, and the plan."""

    found: Mapping[str, Mapping[int, float]]
    facts: Mapping[int, CandidateFacts]
    plan: QueryPlan

    def count(self) -> int:
        """How many memories any search found."""
        return len(set().union(*self.found.values()))


@dataclass(frozen=True, slots=True)
class Ranked:
    """One candidate and its final score."""

    seq: int
    score: float


@dataclass(frozen=True)
class Ranking:
    """The best candidates, best first (ties by ``seq``), and the stages that ranked them."""

    top: list[Ranked]
    stages: Sequence[Stage]

    def explain(self, seq: int) -> dict[str, Any]:
        """The ``MatchExplanation`` fields every stage fills for the memory ``seq``, and ``stages``:
        the names of those that found or raised it, in pipeline order."""
        fields: dict[str, Any] = {}
        raised: list[str] = []
        for stage in self.stages:
            note = stage.explain(seq)
            fields.update(note.fields)
            if note.raised:
                raised.append(stage.name)
        fields["stages"] = tuple(raised)
        return fields


def rank(
    candidates: Candidates,
    policy: RankingPolicy,
    limit: int | None = None,
    stages: Sequence[type[Stage]] = STAGES,
) -> Ranking:
    """All candidates, or the best ``limit``, through ``stages`` in order."""
    board = Board(plan=candidates.plan, policy=policy, found=candidates.found, facts=candidates.facts)
    ran = [stage() for stage in stages]
    for stage in ran:
        stage.score(board)
    final = [(-score, seq) for seq, score in board.scores.items()]
    # A query returns a few: only those become records (most of a ranking's cost was making them all).
    order = sorted(final) if limit is None else heapq.nsmallest(limit, final)
    return Ranking(top=[Ranked(seq, -negative) for negative, seq in order], stages=ran)


def needs_facts(plan: QueryPlan, policy: RankingPolicy, stages: Sequence[type[Stage]] = STAGES) -> bool:
    """Will a stage read the candidates' facts? If not, the SQL read is saved."""
    return any(stage.needs_facts(plan, policy) for stage in stages)


def read_ahead(facts: Collection[CandidateFacts], plan: QueryPlan, stages: Sequence[type[Stage]] = STAGES) -> None:
    """What the stages can do early with these candidates' facts (see :meth:`Stage.read_ahead`)."""
    for stage in stages:
        stage.read_ahead(facts, plan)
