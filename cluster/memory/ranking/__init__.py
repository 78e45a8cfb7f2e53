"""The ranking of a memory query, pure: an ordered list of stages, each one module of :mod:`.stages`,
found through one registry (:data:`~cluster.memory.ranking.registry.STAGES`).

The query pipeline (:mod:`cluster.memory.query`) gathers the candidates (dense and lexical rankings,
already filtered by owner, entity, scope, validity and version) and the facts of each candidate (its
entity names, day, session and text); :func:`~cluster.memory.ranking.pipeline.rank` runs the stages
in order, and each explains what it did to a memory:

1. ``dense``, ``lexical`` (:mod:`.stages.sources`): the searches' rankings;
2. ``expansion`` (:mod:`.stages.expansion`): a third ranking over the same candidates, those whose text holds
   the query's expansion words;
3. fusion (:mod:`.stages.fusion`): weighted reciprocal rank of those rankings;
4. ``entity`` (:mod:`.stages.entity`): memories of an entity the query names;
5. ``time`` (:mod:`.stages.temporal`): memories in a time the query names, or stating a time for "when";
6. ``session`` (:mod:`.stages.session`): support from the best candidates of the memory's session.

Every stage has the interface of :class:`~cluster.memory.ranking.stage.Stage`: which facts it needs,
how it scores, how it explains itself. Its constants are in :class:`~cluster.memory.policy.RankingPolicy`.
"""

from cluster.memory.ranking.facts import CONVERSATION_CHARS, CandidateFacts, conversation_of, facts_of
from cluster.memory.ranking.pipeline import Candidates, Ranked, Ranking, needs_facts, rank, read_ahead
from cluster.memory.ranking.plan import QueryPlan, plan_query

__all__ = [
    "CONVERSATION_CHARS",
    "CandidateFacts",
    "Candidates",
    "QueryPlan",
    "Ranked",
    "Ranking",
    "conversation_of",
    "facts_of",
    "needs_facts",
    "plan_query",
    "rank",
    "read_ahead",
]
