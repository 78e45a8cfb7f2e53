"""What a query asks for beyond its words: the entities and times it names, a "when" or a "how long"."""

from __future__ import annotations

import re
from datetime import date

from cluster.core.types import Frozen
from cluster.memory.entities import Vocabulary
from cluster.memory.timeparse import Interval, find_times

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
