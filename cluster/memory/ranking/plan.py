"""What a query asks for beyond its words: the entities and times it names, a "when" or a "how long"."""

from __future__ import annotations

import re
from datetime import date
from typing import Literal

from cluster.core.types import Frozen
from cluster.memory.entities import Vocabulary
from cluster.memory.timeparse import Interval, find_times

_WHEN = re.compile(
    r"^\s*when\b|\b(?:what|which)\s+(?:date|day|year|month|week|time)\b|\bhow\s+long\s+ago\b|\bsince\s+when\b",
    re.I,
)
_HOW_LONG = re.compile(r"\bhow\s+long\b(?!\s+ago\b)", re.I)
# What the other side of a chat said: "you mentioned", "remind me", "our previous conversation".
_OF_ASSISTANT = re.compile(
    r"\byou(?:'ve|\s+have|\s+had)?\s+(?:said|told|mentioned|recommended|suggested|created|gave|provided|listed|"
    r"shared|explained|wrote|described|came\s+up)\b|\bremind\s+me\b|\bour\s+(?:previous|last|earlier)\s+"
    r"(?:conversation|chat|discussion)\b|\byour\s+(?:suggestion|recommendation|advice|answer)",
    re.I,
)
# The asker's own life: "I", "my", "me".
_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'd)\b", re.I)


class QueryPlan(Frozen):
    """What the query asks for beyond its words: named entities, time intervals, a "when"."""

    entities: tuple[str, ...] = ()
    intervals: tuple[Interval, ...] = ()
    yearless: tuple[Interval, ...] = ()
    """Times named without a year ("in May", "on Aug 15th"), as read today: the question does not
    say which year, so the ranking reads them in each year its candidates span."""
    relative: tuple[Interval, ...] = ()
    """Those of ``intervals`` read from a relative phrase ("10 days ago", "last week"), against ``anchor``:
    people say them loosely, so the temporal stage may widen them (``RankingPolicy.time_slack``)."""
    anchor: date | None = None
    asks_of: Literal["person", "assistant"] | None = None
    """In a chat, whose turns the query asks about: the asker's own ("my", "I"), or what the other
    side said ("you mentioned", "remind me"); ``None`` when it says neither."""
    asks_when: bool = False
    asks_duration: bool = False
    """A "how long" question: memories that state a length of time hold its answer."""
    expansions: tuple[tuple[str, float], ...] = ()
    """The owner's words that stand in for the query's, each with its similarity (see expansion.py)."""


def plan_query(query: str, vocabulary: Vocabulary, today: date) -> QueryPlan:
    """Recognise the entities, time intervals and "when" of a query.

    Relative times are read against the one calendar day the query names, if it names exactly one
    ("two weeks before August 11, 2023", "last week, as mentioned on 6 November 2023"), else
    against ``today``.
    """
    days = {m.interval.start for m in find_times(query, None) if m.interval.days == 1}
    anchor = days.pop() if len(days) == 1 else today
    mentions = find_times(query, anchor)
    absolute = {m.phrase for m in find_times(query, None)}
    return QueryPlan(
        entities=vocabulary.named_in(query),
        intervals=tuple(m.interval for m in mentions if not m.yearless),
        relative=tuple(m.interval for m in mentions if not m.yearless and m.phrase not in absolute),
        anchor=anchor,
        yearless=tuple(m.interval for m in mentions if m.yearless),
        asks_of=_asks_of(query),
        asks_when=_WHEN.search(query) is not None,
        asks_duration=_HOW_LONG.search(query) is not None,
    )


def _asks_of(query: str) -> Literal["person", "assistant"] | None:
    if _OF_ASSISTANT.search(query):
        return "assistant"
    return "person" if _FIRST_PERSON.search(query) else None
