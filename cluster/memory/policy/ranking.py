"""How a query's candidates are ranked: the constants of the ranking stages."""

from __future__ import annotations

from pydantic import Field

from cluster.core.types import Frozen


class RankingPolicy(Frozen):
    """How a query's candidates are ranked (the stages are in :mod:`cluster.memory.ranking`).

    Fusion is weighted reciprocal rank (``w / (k + rank)``) over each ranking's candidates; it
    needs no score calibration between cosine similarity and BM25. Lexical matching (stemmed,
    stopwords dropped) carries the larger weight: in conversational memories places and objects
    named in the question are the strongest evidence, and the small embedding model mostly adds
    paraphrases. A ``k`` smaller than the customary 60 keeps the top lexical ranks apart. After
    fusion come the entity stage (people and things the query names, recognised from the owner's
    stored entities and speakers), the temporal stage and session evidence. A third, weaker
    ranking joins the fusion: the candidates holding the owner's words nearest in meaning to the
    query's (:mod:`cluster.memory.expansion`); its similarity threshold is in the embedder's
    cosine scale (chosen with the offline MiniLM).
    The defaults were chosen by cross-validation on the LoCoMo development split (constants picked
    on three conversations, scored on the other two, all ten splits; ``bench/locomo/cv.py`` and
    docs/benchmarks.md); those of the stages after session evidence (role, recency, coverage, the
    relative times' slack) on LongMemEval-S development questions (``bench/longmemeval/cv.py``): the
    role stage was chosen there, the others never were and stay off.
    """

    rrf_k: float = Field(default=20.0, gt=0)
    dense_weight: float = Field(default=0.6, ge=0)
    lexical_weight: float = Field(default=1.0, ge=0)
    candidates: int = Field(default=100, ge=1, le=5000, description="Candidates each ranking contributes.")
    common_term_docs: int = Field(
        default=2000,
        ge=1,
        description="A query word in more of the owner's memories than this is too common to rank by lexically.",
    )
    entity_boost: float = Field(
        default=0.5, ge=0, le=10, description="Score factor (1 + x) for memories of an entity the query names."
    )
    entity_terms_lexical: bool = Field(
        default=False, description="Keep the named entities' words in the lexical query (else the entity stage alone)."
    )
    time_boost: float = Field(
        default=1.5, ge=0, le=10, description="Score factor (1 + x) for memories in a time the query names."
    )
    time_slack: float = Field(
        default=0.0,
        ge=0,
        le=2,
        description="A relative time ('10 days ago') is widened by this share of its distance (0: read exactly).",
    )
    when_boost: float = Field(
        default=1.0, ge=0, le=10, description='Score factor (1 + x) for memories stating a time, for "when" questions.'
    )
    session_weight: float = Field(
        default=0.5, ge=0, le=10, description="Share of its session's best scores a memory gains."
    )
    session_top: int = Field(default=3, ge=1, le=50, description="How many of a session's best candidates count.")
    role_boost: float = Field(
        default=0.5,
        ge=0,
        le=10,
        description="Score factor (1 + x) for chat turns of the side the query asks about (0: off).",
    )
    recency_boost: float = Field(
        default=0.0,
        ge=0,
        le=10,
        description="Score factor up to (1 + x) for the latest of the candidates, by day (0: off).",
    )
    coverage_decay: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="Score factor x**n for a memory whose session has n better candidates (1: off).",
    )
    expansion_weight: float = Field(
        default=0.4, ge=0, description="Fusion weight of the expansion words' ranking (0: no expansion)."
    )
    expansion_per_word: int = Field(
        default=3, ge=1, le=20, description="At most this many of the owner's words stand in for each query word."
    )
    expansion_similarity: float = Field(
        default=0.6, ge=-1, le=1, description="Cosine similarity a word needs to stand in for a query word."
    )


def rrf(rank: int | None, k: float, weight: float) -> float:
    """Reciprocal-rank contribution of a 1-based rank; nothing for a memory the ranking did not return."""
    return 0.0 if rank is None else weight / (k + rank)
