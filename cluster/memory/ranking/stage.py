"""What every ranking stage is: one small interface, and the board the stages of one query share.

A stage is a class with a ``name`` (as ``why.stages`` names it); a query makes an instance of each
registered stage (:mod:`cluster.memory.ranking.registry`), in order, and calls its :meth:`Stage.score`
once with the query's :class:`Board`, then :meth:`Stage.explain` for each memory it returns. The
instance keeps between the two what its explanation reads. Stages before fusion add a ranking to
fuse (``board.sources``); fusion sums them into ``board.scores``; stages after it change those scores.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from cluster.memory.policy.ranking import RankingPolicy
from cluster.memory.ranking.facts import CandidateFacts
from cluster.memory.ranking.plan import QueryPlan


@dataclass(frozen=True, slots=True)
class Source:
    """A ranking fusion sums: its candidates, best first, and its weight (none at 0 or below)."""

    seqs: Sequence[int]
    weight: float


@dataclass(frozen=True, slots=True)
class Note:
    """What a stage says of one memory: the ``MatchExplanation`` fields it fills, and whether it
    found the memory or raised its score (``why.stages`` then names it)."""

    fields: Mapping[str, Any]
    raised: bool = False


@dataclass(slots=True)
class Board:
    """One query's candidates as the stages pass them along.

    ``found`` holds what the query's searches found, by search (``dense``, ``lexical``): each
    candidate's score there, best first. ``facts`` holds the candidates' facts when a stage needs
    them (:meth:`Stage.needs_facts`); a candidate without facts skips every stage that reads them.
    """

    plan: QueryPlan
    policy: RankingPolicy
    found: Mapping[str, Mapping[int, float]]
    facts: Mapping[int, CandidateFacts]
    sources: dict[str, Source] = field(default_factory=dict)
    """The rankings fusion sums, by the stage that added them, in stage order."""
    scores: dict[int, float] = field(default_factory=dict)
    """Every candidate's score so far: fusion sets it, the stages after it change it."""


class Stage(ABC):
    """One step of a memory query's ranking (see the module docstring)."""

    name: ClassVar[str]

    @classmethod
    def needs_facts(cls, plan: QueryPlan, policy: RankingPolicy) -> bool:
        """Whether it reads the candidates' facts for this query: when no stage does, the query
        does not read them at all."""
        return False

    @classmethod
    def read_ahead(cls, facts: Collection[CandidateFacts], plan: QueryPlan) -> None:
        """Work it may do early on some candidates' facts, while the others are still being found."""
        return None

    @abstractmethod
    def score(self, board: Board) -> None:
        """Its part of the ranking: a ranking to fuse (``board.sources``), or new ``board.scores``."""

    @abstractmethod
    def explain(self, seq: int) -> Note:
        """What it did to the memory ``seq`` (one of the candidates ``score`` saw)."""
