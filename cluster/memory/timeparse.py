"""Time expressions in queries and memories, as day intervals. Rules only, English.

A memory's relative expressions ("yesterday", "last week", "two days ago") are read against the
memory's own date (:func:`memory_date`), a query's against the moment it is asked. Every mention
becomes a closed interval of days, so a question about "May 2023" and a memory saying "last week"
on 9 June 2023 can be compared. What the rules do not recognise yields nothing: a wrong interval
would mislead the temporal stage, a missing one only leaves it out.
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Any

from pydantic import model_validator

from cluster.core.types import Frozen
from cluster.memory.policy.words import snake_key

MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
MONTHS["sept"] = 9
WEEKDAYS = {name.lower(): i for i, name in enumerate(calendar.day_name)}
#: Short weekday names, matched only as written here ("last Fri"): in lower case "sat", "sun" and
#: "wed" are other words.
WEEKDAY_ABBR = {"Mon": 0, "Tue": 1, "Tues": 1, "Wed": 2, "Thu": 3, "Thur": 3, "Thurs": 3, "Fri": 4, "Sat": 5, "Sun": 6}
#: Parts of a month, as days: early June is the 1st to the 10th, the second week of June the 8th to the 14th.
MONTH_PARTS = {"early": (1, 10), "start": (1, 10), "beginning": (1, 10), "mid": (11, 20), "middle": (11, 20)}
MONTH_PARTS |= {"late": (21, 31), "end": (21, 31), "first half": (1, 15), "second half": (16, 31)}
MONTH_PARTS |= {"first week": (1, 7), "second week": (8, 14), "third week": (15, 21), "fourth week": (22, 28)}
MONTH_PARTS |= {"last week": (22, 31)}
#: Parts of a year, as months: early 2023 is January to April, the second half of 2023 July to December.
YEAR_PARTS = {"early": (1, 4), "start": (1, 4), "beginning": (1, 4), "mid": (5, 8), "middle": (5, 8)}
YEAR_PARTS |= {"late": (9, 12), "end": (9, 12), "first half": (1, 6), "second half": (7, 12)}
NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a few": 3,
    "several": 3,
}
SEASONS = {"spring": (3, 5), "summer": (6, 8), "autumn": (9, 11), "fall": (9, 11)}
UNITS = ("day", "week", "month", "year", "weekend")
DAY_WORDS = (
    *("yesterday", "today", "tonight", "tomorrow"),
    *("last night", "this morning", "this afternoon", "this evening"),
)
YEAR_LEADS = ("in", "since", "during", "of", "year")

_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_COUNT = r"(?P<count>\d+|" + "|".join(sorted(NUMBERS, key=len, reverse=True)) + r")"
_UNIT = r"(?P<unit>" + "|".join(UNITS) + r")s?"
_SEASON = r"(?P<season>" + "|".join(SEASONS) + r")"
_WEEKDAY = (
    r"(?P<weekday>" + "|".join(WEEKDAYS) + r"|(?-i:" + "|".join(sorted(WEEKDAY_ABBR, key=len, reverse=True)) + r"))"
)


def _parts(table: Mapping[str, tuple[int, int]]) -> str:
    """The parts a table names, as written: "early", "mid", "late" alone, the others as "the … of"
    ("the end of", "the second week of"); :func:`_part_name` reads them back."""
    alone = ("early", "mid", "late")
    named = "|".join(p.replace(" ", r"\s+") for p in sorted(table, key=len, reverse=True) if p not in alone)
    return r"(?P<part>" + "|".join(alone) + r"|the\s+(?:" + named + r")\s+of)"


_PART = _parts(MONTH_PARTS)
_YEAR_PART_WORDS = _parts(YEAR_PARTS)

# Order matters: the longer, more specific patterns claim their words first.
# A timestamp's date too: "2023-05-08T13:56:00Z" has no word boundary between its day and "T".
# The year first, so slashes are as plain: "2023/05/08 (Mon) 13:56", as chat logs write it.
_ISO = re.compile(r"\b(?P<year>(?:19|20)\d\d)(?P<sep>[-/])(?P<month>[01]\d)(?P=sep)(?P<day>[0-3]\d)(?:\b|(?=T\d))")
# "8 May, 2023", "May 8 2023", "December 1,2023": a comma, a space or both before the year.
_TO_YEAR = r"(?:,\s*|\s+)"
_DAY_MONTH_YEAR = re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}{_TO_YEAR}{_YEAR}\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+{_DAY}{_TO_YEAR}{_YEAR}\b", re.I)
_MONTH_YEAR = re.compile(rf"\b{_MONTH}{_TO_YEAR}(?:of\s+)?{_YEAR}\b", re.I)
_SEASON_YEAR = re.compile(rf"\b{_SEASON}\s+(?:of\s+)?{_YEAR}\b", re.I)
_MONTH_PART = re.compile(rf"\b{_PART}[\s-]+{_MONTH}(?:,?\s+{_YEAR})?\b", re.I)
_YEAR_PART = re.compile(rf"\b{_YEAR_PART_WORDS}[\s-]+{_YEAR}\b", re.I)
_MONTH_DAY = re.compile(rf"\b{_MONTH}\s+{_DAY}\b", re.I)
_DAY_MONTH = re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}\b", re.I)
_BEFORE = re.compile(rf"\bthe\s+(?:{_WEEKDAY}|{_UNIT})\s+before\b", re.I)
_WEEKDAYS_AGO = re.compile(rf"\b{_COUNT}\s+{_WEEKDAY}s\s+ago\b", re.I)
_SHIFT = re.compile(rf"\b{_COUNT}\s+{_UNIT}\s+(?P<dir>ago|before|earlier|after|later|from now)\b", re.I)
_REL_UNIT = re.compile(rf"\b(?P<which>last|past|previous|this|next|coming)\s+{_UNIT}\b", re.I)
_REL_WEEKDAY = re.compile(rf"\b(?P<which>last|this|next|on)\s+{_WEEKDAY}\b", re.I)
_REL_MONTH = re.compile(rf"\b(?P<which>in|last|this|next|since)\s+{_MONTH}(?!\s*[\d,])\b", re.I)
_REL_SEASON = re.compile(rf"\b(?P<which>last|this|next)\s+{_SEASON}\b", re.I)
_IN_SEASON = re.compile(rf"\b(?:in|during|over)\s+(?:the\s+)?{_SEASON}\b(?!,?\s+(?:of\s+)?(?:19|20)\d\d)", re.I)
_YEAR_ALONE = re.compile(r"\b(?:" + "|".join(YEAR_LEADS) + r")\s+" + _YEAR + r"\b", re.I)
_DAY_WORD = re.compile(r"\b(?P<word>" + "|".join(DAY_WORDS) + r")\b", re.I)

_PATTERNS = (
    _ISO,
    _DAY_MONTH_YEAR,
    _MONTH_DAY_YEAR,
    _SHIFT,
    _MONTH_PART,
    _YEAR_PART,
    _MONTH_YEAR,
    _SEASON_YEAR,
    _MONTH_DAY,
    _DAY_MONTH,
    _REL_UNIT,
    _BEFORE,
    _WEEKDAYS_AGO,
    _REL_WEEKDAY,
    _REL_MONTH,
    _REL_SEASON,
    _IN_SEASON,
    _YEAR_ALONE,
    _DAY_WORD,
)

# A length of time, as an answer to "how long": "for 3 years", "seven years now", "30-60 seconds",
# "since I was 17", "all my life". Not an interval: it says how long, not when.
_DURATION = re.compile(
    rf"\b{_COUNT}(?:\s*[-–]\s*\d+)?\s+(?:second|minute|hour|day|week|month|year|decade)s?\b"
    r"|\bsince\s+(?:I|we|he|she|they)\s+(?:was|were)\b"
    r"|\b(?:all|most)\s+(?:of\s+)?(?:my|his|her|our|their)\s+life\b",
    re.I,
)

# What each pattern cannot match without: a year ("19xx" or "20xx"), and/or one of a set of whole
# words, taken from the words the pattern is built of. Most memories name no time at all, and a
# query ranks a couple of hundred of them, each read once per process: skipping the patterns a text
# cannot match keeps that first reading cheap.
_YEAR_NEEDED = re.compile(r"(?:19|20)[0-9][0-9]")
_UNIT_WORDS = frozenset(u + s for u in UNITS for s in ("", "s"))
_MONTH_WORDS = frozenset(MONTHS)
_SEASON_WORDS = frozenset(SEASONS)
_NEEDS: dict[re.Pattern[str], tuple[bool, frozenset[str] | None]] = {
    _ISO: (True, None),
    _DAY_MONTH_YEAR: (True, _MONTH_WORDS),
    _MONTH_DAY_YEAR: (True, _MONTH_WORDS),
    _SHIFT: (False, _UNIT_WORDS),
    _MONTH_PART: (False, _MONTH_WORDS),
    _YEAR_PART: (True, None),
    _MONTH_YEAR: (True, _MONTH_WORDS),
    _SEASON_YEAR: (True, _SEASON_WORDS),
    _MONTH_DAY: (False, _MONTH_WORDS),
    _DAY_MONTH: (False, _MONTH_WORDS),
    _REL_UNIT: (False, _UNIT_WORDS),
    _BEFORE: (False, frozenset({"before"})),
    _WEEKDAYS_AGO: (False, frozenset({"ago"})),
    _REL_WEEKDAY: (False, frozenset(WEEKDAYS) | {a.lower() for a in WEEKDAY_ABBR}),
    _REL_MONTH: (False, _MONTH_WORDS),
    _REL_SEASON: (False, _SEASON_WORDS),
    _IN_SEASON: (False, _SEASON_WORDS),
    _YEAR_ALONE: (True, frozenset(YEAR_LEADS)),
    _DAY_WORD: (False, frozenset(w.split()[-1] for w in DAY_WORDS)),  # "last night" needs "night"
}
_ASCII_WORD = re.compile(r"[a-z]+")


class Interval(Frozen):
    """A closed range of days."""

    start: date
    end: date

    @model_validator(mode="after")
    def _ordered(self) -> Interval:
        if self.end < self.start:
            raise ValueError(f"interval ends ({self.end}) before it starts ({self.start})")
        return self

    @classmethod
    def day(cls, day: date) -> Interval:
        return cls(start=day, end=day)

    def overlaps(self, other: Interval) -> bool:
        return self.start <= other.end and other.start <= self.end

    @property
    def days(self) -> int:
        return (self.end - self.start).days + 1


class TimeMention(Frozen):
    """A time expression found in a text, and the days it names."""

    phrase: str
    interval: Interval
    yearless: bool = False
    """Named without a year ("in May", "July 4th"): ``interval`` is the nearest or latest such one."""


def find_times(text: str, anchor: date | None) -> list[TimeMention]:
    """Every time expression of ``text``, in order of appearance.

    Relative expressions need ``anchor`` (the day the text was said or written); without one
    only absolute dates are returned. Each span of text yields at most one mention.
    """
    return scan(text, anchor, _patterns_for(text))


def scan(text: str, anchor: date | None, patterns: Iterable[re.Pattern[str]] = _PATTERNS) -> list[TimeMention]:
    """The mentions ``patterns`` find in ``text`` (all of them by default), in order of appearance."""
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, TimeMention]] = []
    for pattern in patterns:
        for match in pattern.finditer(text):
            start, end = match.span()
            if any(start < e and s < end for s, e in taken):
                continue
            interval = _interval(pattern, match, anchor)
            if interval is None:
                continue
            taken.append((start, end))
            mention = TimeMention(phrase=match.group(0), interval=interval, yearless=_yearless(pattern, match))
            found.append((start, mention))
    return [mention for _, mention in sorted(found, key=lambda item: item[0])]


def _patterns_for(text: str) -> tuple[re.Pattern[str], ...]:
    """The patterns ``text`` could match, in their order; all of them for non-ASCII text, where
    case-insensitive matching folds more letters than ``str.lower`` does."""
    if not text.isascii():
        return _PATTERNS
    words = set(_ASCII_WORD.findall(text.lower()))
    year = _YEAR_NEEDED.search(text) is not None

    def possible(pattern: re.Pattern[str]) -> bool:
        needs_year, needs_word = _NEEDS[pattern]
        return (year or not needs_year) and (needs_word is None or not needs_word.isdisjoint(words))

    return tuple(p for p in _PATTERNS if possible(p))


def find_duration(text: str) -> str | None:
    """The first phrase of ``text`` that states a length of time ("for 3 years", "since I was 17"), if any."""
    match = _DURATION.search(text)
    return match.group(0) if match else None


@lru_cache(maxsize=4096)
def parse_date(text: str) -> date | None:
    """The first absolute calendar day written in ``text`` ("1:56 pm on 8 May, 2023", "2023-05-08").

    Cached: every candidate of a query has its date read, and memories share few distinct dates.
    """
    for pattern in (_ISO, _DAY_MONTH_YEAR, _MONTH_DAY_YEAR):
        match = pattern.search(text)
        if match is not None:
            interval = _interval(pattern, match, None)
            if interval is not None:
                return interval.start
    return None


#: Metadata keys that may hold the date a memory's content was said or happened, most specific first.
DATE_KEYS = ("occurred_at", "date_time", "datetime", "date", "timestamp", "time", "at", "ts")
#: A number under a date key is read as a day only when it falls in these years: a count or an id
#: there is no date.
DAY_NUMBER_YEARS = (1971, 2200)
#: A Unix time at or above this is in milliseconds (in seconds it would be past the year 5000).
_EPOCH_MILLIS = 100_000_000_000
_DIGITS = re.compile(r"\d{8,13}(?:\.\d+)?")


def number_date(value: object) -> date | None:
    """The day a number under a date key stands for: a Unix time in seconds or milliseconds
    (``1683554160``, ``1683554160000``, Slack's ``"1683554160.000200"``) or a compact ``20230508``;
    the number may be sent as a string of digits. Read in UTC."""
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        value = float(value) if "." in value else int(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    found: date | None = None
    if isinstance(value, int) and 10_000_000 <= value <= 99_999_999:
        try:
            found = date(value // 10_000, value // 100 % 100, value % 100)
        except ValueError:
            found = None
    if found is None:
        seconds = value / 1000 if value >= _EPOCH_MILLIS else value
        try:
            found = datetime.fromtimestamp(seconds, UTC).date()
        except (OverflowError, OSError, ValueError):
            return None
    low, high = DAY_NUMBER_YEARS
    return found if low <= found.year <= high else None


def memory_date(metadata: Mapping[str, Any], fallback: datetime) -> date:
    """The day a memory's relative time expressions are read against.

    A metadata value under a date-like key (``date``, ``timestamp``, ``session_date_time``, ...)
    that holds a calendar day, written out or as a number (:func:`number_date`), wins: a memory
    imported today may record a conversation of last year. Otherwise the memory's own start of
    validity (``fallback``).
    """
    for key in _date_keys(metadata):
        value = metadata[key]
        found = number_date(value)
        if found is None and isinstance(value, str):
            found = parse_date(value)
        if found is not None:
            return found
    return fallback.date()


def _date_keys(metadata: Mapping[str, Any]) -> Iterable[str]:
    keys = [(k, snake_key(k)) for k in metadata if isinstance(k, str)]
    for suffix in DATE_KEYS:
        yield from (k for k, snake in keys if snake == suffix or snake.endswith("_" + suffix))


# ------------------------------------------------------------------------------------------ rules


def _interval(pattern: re.Pattern[str], match: re.Match[str], anchor: date | None) -> Interval | None:
    try:
        return _read(pattern, match, anchor)
    except KeyError:
        # Matched only under Unicode case folding ("İn May", "thİs week"): its words spell no name
        # the tables know, so it is no mention.
        return None


def _read(pattern: re.Pattern[str], match: re.Match[str], anchor: date | None) -> Interval | None:
    g = {k: v for k, v in match.groupdict().items() if v is not None}
    try:
        if pattern in (_ISO, _DAY_MONTH_YEAR, _MONTH_DAY_YEAR):
            return Interval.day(date(int(g["year"]), _month(g["month"]), int(g["day"])))
        if pattern is _MONTH_YEAR:
            return _month_interval(int(g["year"]), _month(g["month"]))
        if pattern is _SEASON_YEAR:
            return _season_interval(int(g["year"]), g["season"])
        if pattern is _YEAR_ALONE:
            return Interval(start=date(int(g["year"]), 1, 1), end=date(int(g["year"]), 12, 31))
        if pattern is _YEAR_PART:  # "early 2023", "mid-2022", "the end of 2023", "the first half of 2024"
            months = YEAR_PARTS[_part_name(g["part"])]
            year = int(g["year"])
            return Interval(start=date(year, months[0], 1), end=_month_interval(year, months[1]).end)
    except ValueError:
        return None  # e.g. 31 February: not a day, so not a mention
    if pattern in (_MONTH_PART, _MONTH_DAY, _DAY_MONTH) and g["month"] == "may" and "year" not in g:
        return None  # "it may 2x", "late may be": beside a number or a part, lower-case "may" is the verb
    if pattern is _MONTH_PART:
        return _month_part(anchor, g)
    if anchor is None:
        return None
    if pattern in (_MONTH_DAY, _DAY_MONTH):
        return _nearest_day(anchor, _month(g["month"]), int(g["day"]))
    if pattern is _BEFORE:  # "the Sunday before", "the week before": the last one before the anchor
        if "weekday" in g:
            return _relative_weekday(anchor, "last", _weekday(g["weekday"]))
        return _relative_unit(anchor, "last", g["unit"].casefold())
    if pattern is _WEEKDAYS_AGO:
        count = _count(g["count"])
        last = _relative_weekday(anchor, "last", _weekday(g["weekday"])).start
        return Interval.day(last - timedelta(weeks=count - 1)) if 0 < count <= 520 else None
    if pattern is _SHIFT:
        return _shift(anchor, g)
    if pattern is _REL_UNIT:
        return _relative_unit(anchor, g["which"].casefold(), g["unit"].casefold())
    if pattern is _REL_WEEKDAY:
        return _relative_weekday(anchor, g["which"].casefold(), _weekday(g["weekday"]))
    if pattern is _REL_MONTH:
        return _relative_month(anchor, g["which"].casefold(), _month(g["month"]))
    if pattern is _REL_SEASON:
        shift = {"last": -1, "this": 0, "next": 1}[g["which"].casefold()]
        return _season_interval(anchor.year + shift, g["season"])
    if pattern is _IN_SEASON:  # "in the summer": the latest one that has begun by the anchor
        season = _season_interval(anchor.year, g["season"])
        return season if season.start <= anchor else _season_interval(anchor.year - 1, g["season"])
    if pattern is _DAY_WORD:
        word = g["word"].casefold()
        offset = {"yesterday": -1, "last night": -1, "tomorrow": 1}.get(word, 0)
        return Interval.day(anchor + timedelta(days=offset))
    return None


def _yearless(pattern: re.Pattern[str], match: re.Match[str]) -> bool:
    """Does the match name a month or a day without its year (not "last May": that one is relative)?"""
    if pattern in (_MONTH_DAY, _DAY_MONTH, _IN_SEASON):
        return True
    if pattern is _MONTH_PART:
        return match.group("year") is None
    return pattern is _REL_MONTH and match.group("which").casefold() == "in"


def _month(name: str) -> int:
    return int(name) if name.isdigit() else MONTHS[name.casefold().rstrip(".")]


def _weekday(name: str) -> int:
    return WEEKDAY_ABBR[name] if name in WEEKDAY_ABBR else WEEKDAYS[name.casefold()]


def _count(text: str) -> int:
    return int(text) if text.isdigit() else NUMBERS[text.casefold()]


def _month_part(anchor: date | None, g: dict[str, str]) -> Interval | None:
    """ "early June" (1st-10th), "mid June", "late June", "the end of June" (21st-last), "the second
    week of June" (8th-14th), "the first half of June": of the year given, else of the latest such
    month not after the anchor."""
    month = _month(g["month"])
    if "year" in g:
        year = int(g["year"])
    elif anchor is not None:
        year = _relative_month(anchor, "in", month).start.year
    else:
        return None
    first, last = MONTH_PARTS[_part_name(g["part"])]
    whole = _month_interval(year, month)
    return Interval(start=whole.start.replace(day=first), end=whole.end.replace(day=min(last, whole.end.day)))


def _part_name(phrase: str) -> str:
    """The key of a part of a month or year as written: "late" -> "late", "the end of" -> "end",
    "the second week of" -> "second week"."""
    words = phrase.casefold().split()
    return " ".join(words[1:-1]) if len(words) > 1 else words[0]


def _nearest_day(anchor: date, month: int, day: int) -> Interval | None:
    """A day named without its year ("July 4th", "the 10th of June"): the one nearest the anchor,
    before or after. People name such days within months of when they speak, of plans as of the past;
    a day a year away would be named with its year."""
    candidates = []
    for year in (anchor.year - 1, anchor.year, anchor.year + 1):
        try:
            candidates.append(date(year, month, day))
        except ValueError:
            continue  # 29 February of a common year, or no such day at all
    if not candidates:
        return None
    return Interval.day(min(candidates, key=lambda d: (abs((d - anchor).days), d)))


def _month_interval(year: int, month: int) -> Interval:
    return Interval(start=date(year, month, 1), end=date(year, month, calendar.monthrange(year, month)[1]))


def _season_interval(year: int, season: str) -> Interval:
    first, last = SEASONS[season.casefold()]
    return Interval(start=date(year, first, 1), end=_month_interval(year, last).end)


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    return date(year, month + 1, min(day.day, calendar.monthrange(year, month + 1)[1]))


def _week_of(day: date) -> Interval:
    monday = day - timedelta(days=day.weekday())
    return Interval(start=monday, end=monday + timedelta(days=6))


def _shift(anchor: date, g: dict[str, str]) -> Interval | None:
    count = _count(g["count"])
    if count > 1000:
        return None
    sign = 1 if g["dir"].casefold() in ("after", "later", "from now") else -1
    unit = g["unit"].casefold()
    if unit == "day":
        return Interval.day(anchor + timedelta(days=sign * count))
    if unit in ("week", "weekend"):
        return _week_of(anchor + timedelta(weeks=sign * count))
    if unit == "month":
        return _month_interval(*_year_month(_add_months(anchor, sign * count)))
    year = anchor.year + sign * count
    return Interval(start=date(year, 1, 1), end=date(year, 12, 31))


def _year_month(day: date) -> tuple[int, int]:
    return day.year, day.month


def _relative_unit(anchor: date, which: str, unit: str) -> Interval:
    shift = {"last": -1, "past": -1, "previous": -1, "this": 0, "next": 1, "coming": 1}[which]
    if unit == "day":
        return Interval.day(anchor + timedelta(days=shift))
    if unit == "week":
        return _week_of(anchor + timedelta(weeks=shift))
    if unit == "weekend":
        saturday = _week_of(anchor + timedelta(weeks=shift)).start + timedelta(days=5)
        return Interval(start=saturday, end=saturday + timedelta(days=1))
    if unit == "month":
        return _month_interval(*_year_month(_add_months(anchor, shift)))
    return Interval(start=date(anchor.year + shift, 1, 1), end=date(anchor.year + shift, 12, 31))


def _relative_weekday(anchor: date, which: str, weekday: int) -> Interval:
    """ "last Friday" is the latest Friday before the anchor; "next Friday" the first after it."""
    back = (anchor.weekday() - weekday) % 7 or 7
    ahead = (weekday - anchor.weekday()) % 7 or 7
    if which in ("last", "on"):
        # "on Friday" in a text about the past: the Friday just before.
        return Interval.day(anchor - timedelta(days=back))
    if which == "next":
        return Interval.day(anchor + timedelta(days=ahead))
    return Interval.day(_week_of(anchor).start + timedelta(days=weekday))


def _relative_month(anchor: date, which: str, month: int) -> Interval:
    """A month without a year: the latest such month not after the anchor ("next May": the first after)."""
    year = anchor.year
    if which == "since":
        start = date(year if month <= anchor.month else year - 1, month, 1)
        return Interval(start=start, end=max(anchor, start))
    if which == "next":
        year = anchor.year + 1 if month <= anchor.month else anchor.year
    elif month > anchor.month or (which == "last" and month == anchor.month):
        year = anchor.year - 1
    return _month_interval(year, month)
