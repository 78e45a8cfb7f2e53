"""The ranking stages of a memory query, pure: fusion (with expansion), entity, temporal, session evidence.

The service gathers the candidates (dense and lexical rankings, already filtered by owner, entity,
scope, validity and version) and the facts of each candidate (its entity names, day, session and
text); :func:`rank` orders them and records, per memory, what every stage did to it:

1. fusion: weighted reciprocal rank of the dense and lexical rankings, and of a third one over the
   same candidates: those whose text holds the query's expansion words (the owner's words nearest
   in meaning to the query's, :mod:`cluster.memory.expansion`), by the words' summed similarity;
2. entity stage: memories that carry an entity the query names (their speaker, author, entity
   field) get ``entity_boost``; a question about one person then ranks the other person's turns
   below that person's own;
3. temporal stage: memories whose day, or a time expression in their text read against that day,
   falls in an interval the query names get ``time_boost``; for a "when" question, memories that
   state a time ("yesterday", "last May") get ``when_boost``, and for a "how long" question those
   that state a length of time ("for 3 years", "since I was 17"): that is where the answer is written;
4. session evidence: a memory gains ``session_weight`` times the mean score of the best
   ``session_top`` candidates of its session, so facts told together support each other.
"""

from __future__ import annotations

import hashlib
import heapq
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import lru_cache
from typing import Any

from cluster.core.types import Frozen
from cluster.memory.entities import Vocabulary, entity_values
from cluster.memory.expansion import content_words
from cluster.memory.policy.ranking import RankingPolicy, rrf
from cluster.memory.policy.words import key_forms, keyed
from cluster.memory.timeparse import Interval, TimeMention, find_duration, find_times, memory_date

_WHEN = re.compile(
    r"^\s*when\b|\b(?:what|which)\s+(?:date|day|year|month|week|time)\b|\bhow\s+long\s+ago\b|\bsince\s+when\b",
    re.I,
)
_HOW_LONG = re.compile(r"\bhow\s+long\b(?!\s+ago\b)", re.I)


class QueryPlan(Frozen):
    """What the query asks for beyond its words: named entities, time intervals, a "when"."""

    entities: tuple[str, ...] = ()
    intervals: tuple[Interval, ...] = ()
    yearless: tuple[Interval, ...] = ()
    """Times named without a year ("in May", "on Aug 15th"), as read today: the question does not
    say which year, so the ranking reads them in each year its candidates span."""
    asks_when: bool = False
    asks_duration: bool = False
    """A "how long" question: memories that state a length of time hold its answer."""
    expansions: tuple[tuple[str, float], ...] = ()
    """The owner's words that stand in for the query's, each with its similarity (see expansion.py)."""


@dataclass(frozen=True, slots=True)
class CandidateFacts:
    """What the entity, temporal and session stages read of one candidate.

    A plain dataclass, not a model: one is made per candidate per query, from stored rows.
    ``session`` is the session the memory was told in, if known.
    """

    seq: int
    day: date
    entities: frozenset[str] = frozenset()
    text: str = ""
    session: str | None = None
    group: str = field(init=False, repr=False, compare=False)
    """What the session stage groups by: the session, else the memory's day (made once, read per query)."""
    _words: frozenset[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "group", self.session if self.session is not None else self.day.isoformat())

    def holds(self, words: Sequence[str]) -> tuple[str, ...]:
        """Those of ``words`` (lower-case content words) that are words of the text.

        The text's words are read only when one of them is in it at all: most candidates of a
        query hold none of its expansion words, and reading a text's words costs ~10 µs.
        """
        known = self._words
        if known is None:
            lowered = self.text.lower()
            words = [w for w in words if w in lowered]
            if not words:
                return ()
            # Made once per fact; two threads making it at once make the same set.
            known = frozenset(content_words(self.text))
            object.__setattr__(self, "_words", known)
        return tuple(w for w in words if w in known)


@dataclass(frozen=True, slots=True)
class Ranked:
    """One candidate's final score and what each stage contributed.

    A plain dataclass, not a model: one is made per candidate per query, inside the service.
    ``time`` is the time expression (or "memory date") that matched the query's time.
    """

    seq: int
    score: float
    fused: float
    entities: tuple[str, ...] = ()
    time: str | None = None
    session_bonus: float = 0.0
    expanded: tuple[str, ...] = ()
    """The expansion words its text holds."""


@dataclass(frozen=True)
class Candidates:
    """A query's candidates before ranking: both rankings (seq -> score, best first), their facts, the plan."""

    dense: dict[int, float]
    lexical: dict[int, float]
    facts: dict[int, CandidateFacts]
    plan: QueryPlan


def needs_facts(plan: QueryPlan, policy: RankingPolicy) -> bool:
    """Will a stage after fusion read the candidates' facts? If not, the SQL read is saved."""
    return bool(
        (plan.entities and policy.entity_boost > 0)
        or ((plan.intervals or plan.yearless) and policy.time_boost > 0)
        or ((plan.asks_when or plan.asks_duration) and policy.when_boost > 0)
        or (plan.expansions and policy.expansion_weight > 0)
        or policy.session_weight > 0
    )


def read_ahead(facts: Iterable[CandidateFacts], plan: QueryPlan) -> None:
    """Parse the time expressions the temporal stage will read of these candidates, now.

    The parse is cached per text and day; the service calls this for the lexical candidates while
    their dense twins are still being searched, so :func:`rank` later finds them parsed.
    """
    if _reads_times(plan):
        for fact in facts:
            _mentions(fact.text, fact.day)


def _reads_times(plan: QueryPlan) -> bool:
    """Does the temporal stage read the candidates' time expressions for this query?"""
    return bool(plan.intervals or plan.yearless) or plan.asks_when


#: A metadata key names the conversation a memory was told in when it is one of these words, alone
#: or with an id-like suffix, in any style (:func:`~cluster.memory.policy.snake_key`): "session",
#: "session_id", "sessionNumber", "Chat-ID", "thread_no". "session_date_time" says something else.
CONVERSATION_WORDS = ("session", "conversation", "thread", "dialog", "dialogue", "chat")
ID_SUFFIXES = ("id", "", "no", "num", "number", "key")
#: Each such key, as ``snake_key`` reads it, and its precedence when a memory has several (earlier wins).
_CONVERSATION_KEYS = key_forms(CONVERSATION_WORDS, ID_SUFFIXES)

#: A conversation id is stored and indexed in this many characters (``memories.thread``).
CONVERSATION_CHARS = 200


def facts_of(
    seq: int, entity: str | None, metadata: Mapping[str, Any], text: str, session_id: str | None, valid_from: datetime
) -> CandidateFacts:
    """A candidate's facts from its stored fields: names, own day (metadata date or validity), session."""
    return CandidateFacts(
        seq=seq,
        entities=frozenset(entity_values(entity, metadata)),
        text=text,
        day=memory_date(metadata, valid_from),
        session=conversation_of(session_id, metadata),
    )


def conversation_of(session_id: str | None, metadata: Mapping[str, Any]) -> str | None:
    """The conversation a memory was told in: its session scope's id, else the text or number its
    metadata holds under a conversation key (see :data:`CONVERSATION_WORDS`).

    Metadata is free-form, so an id there may be longer than :data:`CONVERSATION_CHARS`: it is cut
    to fit, with a digest of the whole id that keeps two long ids apart.
    """
    found = session_id if session_id is not None else keyed(metadata, _CONVERSATION_KEYS, _conversation_id)
    if found is None or len(found) <= CONVERSATION_CHARS:
        return found
    digest = hashlib.sha256(found.encode()).hexdigest()[:16]
    return f"{found[: CONVERSATION_CHARS - len(digest) - 1]}#{digest}"


def _conversation_id(value: object) -> str | None:
    """A conversation id as a metadata value holds it: a non-blank text or a number (not a flag)."""
    if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
        return str(value)
    return None


def plan_query(query: str, vocabulary: Vocabulary, today: date) -> QueryPlan:
    """Recognise the entities, time intervals and "when" of a query.

    Relative times are read against the one calendar day the query names, if it names exactly one
    ("two weeks before August 11, 2023", "last week, as mentioned on 6 November 2023"), else
    against ``today``.
    """
    days = {m.interval.start for m in find_times(query, None) if m.interval.days == 1}
    anchor = days.pop() if len(days) == 1 else today
    mentions = find_times(query, anchor)
    return QueryPlan(
        entities=vocabulary.named_in(query),
        intervals=tuple(m.interval for m in mentions if not m.yearless),
        yearless=tuple(m.interval for m in mentions if m.yearless),
        asks_when=_WHEN.search(query) is not None,
        asks_duration=_HOW_LONG.search(query) is not None,
    )


def fuse(
    dense: Sequence[int], lexical: Sequence[int], policy: RankingPolicy, expanded: Sequence[int] = ()
) -> dict[int, float]:
    """Weighted reciprocal-rank fusion of the rankings (each best first; ``expanded`` ranks the
    candidates that hold expansion words, and adds no candidate)."""
    fused: dict[int, float] = {}
    rankings = ((policy.dense_weight, dense), (policy.lexical_weight, lexical), (policy.expansion_weight, expanded))
    for weight, ranking in rankings:
        if weight <= 0:
            continue
        for rank, seq in enumerate(ranking, start=1):
            fused[seq] = fused.get(seq, 0.0) + rrf(rank, policy.rrf_k, weight)
    return fused


#: A candidate between the stages: seq, score so far, fused score, entities named, time phrase, session group.
_Staged = tuple[int, float, float, tuple[str, ...], str | None, str | None]


def rank(
    dense: Sequence[int],
    lexical: Sequence[int],
    facts: Mapping[int, CandidateFacts],
    plan: QueryPlan,
    policy: RankingPolicy,
    limit: int | None = None,
) -> list[Ranked]:
    """All candidates, or the best ``limit``, best first (ties by ``seq``). Candidates without facts
    skip every stage but fusion."""
    matched = _expansion_matches(dense, lexical, facts, plan) if policy.expansion_weight > 0 else {}
    fused = fuse(dense, lexical, policy, _expansion_ranking(matched, plan))
    if plan.yearless:
        plan = _in_candidate_years(plan, facts.values())
    if plan.intervals and plan.asks_when and not any(_time_match(facts[s], plan) for s in fused if s in facts):
        # A time no candidate falls in says nothing about them ("When did she go camping in June?"
        # asked years after the conversation reads as this June): what answers "when" still does.
        plan = plan.model_copy(update={"intervals": ()})
    # One pass over the candidates, with what each stage needs decided once per query.
    wanted = {e.lower() for e in plan.entities}
    entity_factor = 1.0 + policy.entity_boost
    reads_times = _reads_times(plan) or plan.asks_duration
    time_factor = 1.0 + (policy.time_boost if plan.intervals else policy.when_boost)
    by_session = policy.session_weight > 0
    staged: list[_Staged] = []
    for seq, base in fused.items():
        fact = facts.get(seq)
        if fact is None:
            staged.append((seq, base, base, (), None, None))
            continue
        score = base
        named: tuple[str, ...] = ()
        if wanted:
            named = tuple(sorted(e for e in fact.entities if e.lower() in wanted))
            if named:
                score *= entity_factor
        time = _time_match(fact, plan) if reads_times else None
        if time is not None:
            score *= time_factor
        staged.append((seq, score, base, named, time, fact.group if by_session else None))
    bonus = _session_bonus(staged, policy) if by_session else {}
    final = [
        (-(score + bonus[group] if group is not None else score), seq, i)
        for i, (seq, score, *_, group) in enumerate(staged)
    ]
    # A query returns a few: only those become records (most of a ranking's cost was making them all).
    order = sorted(final) if limit is None else heapq.nsmallest(limit, final)
    ranked = []
    for _, _, i in order:
        seq, score, base, named, time, group = staged[i]
        extra = bonus[group] if group is not None else 0.0
        ranked.append(Ranked(seq, score + extra, base, named, time, extra, matched.get(seq, ())))
    return ranked


def _in_candidate_years(plan: QueryPlan, facts: Iterable[CandidateFacts]) -> QueryPlan:
    """The plan with its yearless times read in every year from the one before the candidates'
    first day to that of their last (a memory may speak of last year's May)."""
    years = {fact.day.year for fact in facts}
    if not years:
        return plan.model_copy(update={"intervals": plan.intervals + plan.yearless, "yearless": ()})
    moved = []
    for interval in plan.yearless:
        for year in range(min(years) - 1, max(years) + 1):
            try:
                moved.append(Interval(start=interval.start.replace(year=year), end=interval.end.replace(year=year)))
            except ValueError:
                continue  # 29 February of a common year
    return plan.model_copy(update={"intervals": plan.intervals + tuple(moved), "yearless": ()})


def _expansion_matches(
    dense: Sequence[int], lexical: Sequence[int], facts: Mapping[int, CandidateFacts], plan: QueryPlan
) -> dict[int, tuple[str, ...]]:
    """Per candidate, the expansion words its text holds (candidates that hold none left out)."""
    if not plan.expansions:
        return {}
    words = [w for w, _ in plan.expansions]
    out: dict[int, tuple[str, ...]] = {}
    for seq in dict.fromkeys([*dense, *lexical]):
        fact = facts.get(seq)
        if fact is not None:
            held = fact.holds(words)
            if held:
                out[seq] = held
    return out


def _expansion_ranking(matched: Mapping[int, tuple[str, ...]], plan: QueryPlan) -> list[int]:
    """The candidates holding expansion words, by the summed similarity of the words they hold."""
    similarity = dict(plan.expansions)
    score = {seq: sum(similarity[w] for w in words) for seq, words in matched.items()}
    return sorted(score, key=lambda seq: (-score[seq], seq))


def _time_match(fact: CandidateFacts, plan: QueryPlan) -> str | None:
    """The phrase that puts the memory in the query's time, or the time it states (for "when"), or
    the length of time it states (for "how long")."""
    if plan.intervals:
        if any(Interval.day(fact.day).overlaps(i) for i in plan.intervals):
            return "memory date"
        mentions = _mentions(fact.text, fact.day)
        return next((m.phrase for m in mentions if any(m.interval.overlaps(i) for i in plan.intervals)), None)
    if plan.asks_when:
        mentions = _mentions(fact.text, fact.day)
        return mentions[0].phrase if mentions else None
    if plan.asks_duration:
        return find_duration(fact.text)
    return None


@lru_cache(maxsize=16_384)
def _mentions(text: str, day: date) -> list[TimeMention]:
    # The same memories come back query after query; their time expressions do not change.
    return find_times(text, day)


def _session_bonus(staged: Sequence[_Staged], policy: RankingPolicy) -> dict[str, float]:
    """Per session: ``session_weight`` times the mean of its best ``session_top`` scores."""
    members: dict[str, list[float]] = defaultdict(list)
    for _, score, _, _, _, group in staged:
        if group is not None:
            members[group].append(score)
    top = policy.session_top
    return {s: policy.session_weight * (sum(sorted(v, reverse=True)[:top]) / top) for s, v in members.items()}


def stages_of(ranked: Ranked, dense: bool, lexical: bool) -> tuple[str, ...]:
    """The stages that found or raised a memory, in pipeline order, for its ``why``."""
    flags = (
        ("dense", dense),
        ("lexical", lexical),
        ("expansion", bool(ranked.expanded)),
        ("entity", bool(ranked.entities)),
        ("time", ranked.time is not None),
        ("session", ranked.session_bonus > 0),
    )
    return tuple(name for name, on in flags if on)
