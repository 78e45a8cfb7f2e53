"""Time expressions become day intervals, relative ones read against the text's own date."""

from datetime import UTC, date, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.memory.timeparse import (
    Interval,
    find_duration,
    find_times,
    memory_date,
    number_date,
    parse_date,
    scan,
)

# A Tuesday.
ANCHOR = date(2023, 5, 9)


def one(text: str, anchor: date | None = ANCHOR) -> Interval:
    found = find_times(text, anchor)
    assert len(found) == 1, found
    return found[0].interval


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("I went to a support group yesterday", date(2023, 5, 8), date(2023, 5, 8)),
        ("we met last night", date(2023, 5, 8), date(2023, 5, 8)),
        ("see you tomorrow", date(2023, 5, 10), date(2023, 5, 10)),
        ("two days ago I ran a race", date(2023, 5, 7), date(2023, 5, 7)),
        ("a few days ago", date(2023, 5, 6), date(2023, 5, 6)),
        ("3 weeks ago", date(2023, 4, 17), date(2023, 4, 23)),
        ("last week I gave a talk", date(2023, 5, 1), date(2023, 5, 7)),
        ("next month", date(2023, 6, 1), date(2023, 6, 30)),
        ("last year", date(2022, 1, 1), date(2022, 12, 31)),
        ("last weekend", date(2023, 5, 6), date(2023, 5, 7)),
        ("last Friday", date(2023, 5, 5), date(2023, 5, 5)),
        ("next Friday", date(2023, 5, 12), date(2023, 5, 12)),
        ("in March we moved", date(2023, 3, 1), date(2023, 3, 31)),
        ("in June", date(2022, 6, 1), date(2022, 6, 30)),
        ("last summer", date(2022, 6, 1), date(2022, 8, 31)),
        ("two months before", date(2023, 3, 1), date(2023, 3, 31)),
        ("my car broke down last Fri on my way", date(2023, 5, 5), date(2023, 5, 5)),
        ("I joined a new group last Tues.", date(2023, 5, 2), date(2023, 5, 2)),
        ("we went camping two Fridays ago", date(2023, 4, 28), date(2023, 4, 28)),
        ("in early June", date(2022, 6, 1), date(2022, 6, 10)),
        ("by the end of March", date(2023, 3, 21), date(2023, 3, 31)),
        ("mid-February", date(2023, 2, 11), date(2023, 2, 20)),
        ("a parade during the summer", date(2022, 6, 1), date(2022, 8, 31)),
        ("in spring", date(2023, 3, 1), date(2023, 5, 31)),
        # A day without its year is the one nearest the text's date, before or after it.
        ("a party on July 4th", date(2023, 7, 4), date(2023, 7, 4)),
        ("on the 10th of December", date(2022, 12, 10), date(2022, 12, 10)),
        ("on Feb 29", date(2024, 2, 29), date(2024, 2, 29)),
        ("the Sunday before", date(2023, 5, 7), date(2023, 5, 7)),
        ("the week before", date(2023, 5, 1), date(2023, 5, 7)),
    ],
)
def test_relative_times_are_read_against_the_texts_own_date(text: str, start: date, end: date) -> None:
    assert one(text) == Interval(start=start, end=end)


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("on 8 May, 2023", date(2023, 5, 8), date(2023, 5, 8)),
        ("May 8th, 2023", date(2023, 5, 8), date(2023, 5, 8)),
        ("2023-05-08", date(2023, 5, 8), date(2023, 5, 8)),
        ("What did she do in May 2023?", date(2023, 5, 1), date(2023, 5, 31)),
        ("in the summer of 2022", date(2022, 6, 1), date(2022, 8, 31)),
        ("in 2021", date(2021, 1, 1), date(2021, 12, 31)),
        ("in late August 2022", date(2022, 8, 21), date(2022, 8, 31)),
        ("the forest picture shared on December 1,2023", date(2023, 12, 1), date(2023, 12, 1)),
        ("at the beginning of May, 2023", date(2023, 5, 1), date(2023, 5, 10)),
        ("in the second week of November 2022", date(2022, 11, 8), date(2022, 11, 14)),
        ("the last week of February 2023", date(2023, 2, 22), date(2023, 2, 28)),
        ("the first half of September 2022", date(2022, 9, 1), date(2022, 9, 15)),
        ("we met in early 2023", date(2023, 1, 1), date(2023, 4, 30)),
        ("by mid-2022", date(2022, 5, 1), date(2022, 8, 31)),
        ("until the end of 2021", date(2021, 9, 1), date(2021, 12, 31)),
        ("the second half of 2024", date(2024, 7, 1), date(2024, 12, 31)),
    ],
)
def test_absolute_dates_need_no_anchor(text: str, start: date, end: date) -> None:
    assert one(text, None) == Interval(start=start, end=end)


def test_relative_times_without_an_anchor_are_not_guessed() -> None:
    assert find_times("I went there yesterday and last week", None) == []


def test_the_longest_expression_claims_its_words() -> None:
    found = find_times("on 8 May, 2023 and then yesterday", ANCHOR)
    assert [m.phrase for m in found] == ["8 May, 2023", "yesterday"]
    assert found[0].interval == Interval.day(date(2023, 5, 8))


def test_an_impossible_day_leaves_only_its_month() -> None:
    found = find_times("31 February 2023", None)
    assert [m.interval for m in found] == [Interval(start=date(2023, 2, 1), end=date(2023, 2, 28))]


def test_text_without_times_has_none() -> None:
    assert find_times("I love painting sunsets with my kids", ANCHOR) == []


def test_words_that_only_look_like_times_are_none() -> None:
    # Short weekday names count only as written ("last Fri"); in lower case they are other words.
    assert find_times("we sat in the sun on wed and on sun", ANCHOR) == []
    # Beside a number or a part of a month, lower-case "may" is the verb.
    assert find_times("it may 2x your reach, and too late may be never", ANCHOR) == []
    assert find_times("the 31st of June", ANCHOR) == []
    # A decade is no part of a year.
    assert find_times("music of the late 1990s", ANCHOR) == []


def test_parse_date_reads_a_conversation_timestamp() -> None:
    assert parse_date("1:56 pm on 8 May, 2023") == date(2023, 5, 8)
    assert parse_date("no date here") is None


def test_a_memorys_date_comes_from_date_like_metadata_before_its_validity() -> None:
    written = datetime(2026, 1, 1, tzinfo=UTC)
    assert memory_date({"session_date_time": "1:56 pm on 8 May, 2023", "session": 1}, written) == date(2023, 5, 8)
    assert memory_date({"date": "2022-12-24"}, written) == date(2022, 12, 24)
    assert memory_date({"note": "8 May 2023"}, written) == date(2026, 1, 1)
    assert memory_date({"date": "soon"}, written) == date(2026, 1, 1)
    # Any key style: camel case, capitals, spaces.
    assert memory_date({"sessionDateTime": "1:56 pm on 8 May, 2023"}, written) == date(2023, 5, 8)
    assert memory_date({"Created At": "2022-12-24"}, written) == date(2022, 12, 24)
    # A timestamp's day.
    assert memory_date({"timestamp": "2023-05-08T13:56:00Z"}, written) == date(2023, 5, 8)
    assert memory_date({"timestamp": "2023-05-081"}, written) == date(2026, 1, 1)


@pytest.mark.parametrize(
    "value",
    [
        1683554160,
        1683554160.5,
        1683554160000,
        "1683554160",
        "1683554160.000200",
        " 1683554160000 ",
        20230508,
        "20230508",
    ],
)
def test_a_number_under_a_date_key_is_a_unix_time_or_a_compact_day(value: object) -> None:
    assert number_date(value) == date(2023, 5, 8)
    assert memory_date({"createdAt": value}, datetime(2026, 1, 1, tzinfo=UTC)) == date(2023, 5, 8)


@pytest.mark.parametrize("value", [True, 0, 5, 42.0, -1683554160, 20231399, 10**20, float("nan"), float("inf"), "2023"])
def test_a_number_that_is_no_plausible_day_is_no_date(value: object) -> None:
    # A count, a flag or an id under a date key must not move a memory to 1970 or the year 5000.
    assert number_date(value) is None
    assert memory_date({"ts": value}, datetime(2026, 1, 1, tzinfo=UTC)) == date(2026, 1, 1)


def test_an_interval_cannot_end_before_it_starts() -> None:
    with pytest.raises(ValueError, match="ends"):
        Interval(start=date(2023, 5, 2), end=date(2023, 5, 1))


# Phrases every pattern matches and words they are built from, beside plain ones, in any case.
_PHRASES = [
    *"last night|This Morning|two weeks ago|a few days before|3 months later|in May|since june|last Sept".split("|"),
    *"8 May 2023|May 8, 2023|2023-05-08|June of 2022|summer 2021|next Friday|on monday|this weekend".split("|"),
    *"last summer|next fall|in 1999|year 2020|yesterday|today|tonight|tomorrow|this evening|past year".split("|"),
    *"early June|the end of March|mid-October 2022|July 4th|the 4th of July|two Fridays ago|the Sunday before".split(
        "|"
    ),
    *"early 2023|mid-2022|the first half of 2021".split("|"),
]
_WORDS = [
    *"last past previous this next coming in since on of during year ago before earlier after later".split(),
    *"day days week weeks weekend weekends month months years May may. Sept sep Jun summer 31 2023 8th".split(),
    *"I went painting Caroline's kids the with ſummer K weekends_ week's nights Fri Tues early late end".split(),
]
_TOKENS = st.sampled_from(_PHRASES + _WORDS).flatmap(lambda t: st.sampled_from([t, t.upper(), t.lower()]))
_SEPARATORS = st.sampled_from([" ", "  ", ", ", ". ", "\n", "-", "'", "_", ""])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_TOKENS, _SEPARATORS), max_size=12), st.sampled_from([ANCHOR, None]))
def test_skipping_patterns_a_text_cannot_match_changes_nothing(
    parts: list[tuple[str, str]], anchor: date | None
) -> None:
    text = "".join(token + sep for token, sep in parts)
    assert find_times(text, anchor) == scan(text, anchor)


@pytest.mark.parametrize("phrase", _PHRASES)
def test_every_kind_of_phrase_is_still_found_in_any_case(phrase: str) -> None:
    for variant in (phrase, phrase.upper(), phrase.lower()):
        text = f"Well, {variant} we painted."
        assert find_times(text, ANCHOR) == scan(text, ANCHOR) != []


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("I've known these friends for 4 years, since I moved", "4 years"),
        ("Seven years now, and I've finally found my muses", "Seven years"),
        ("I typically hold it for 30-60 seconds", "30-60 seconds"),
        ("I've been playing for about four months now", "four months"),
        ("Since I was 17 or so", "Since I was"),
        ("I have lived here all my life", "all my life"),
        ("I love painting sunsets with my kids", None),
        ("Turtles are my favourite animals", None),
    ],
)
def test_a_length_of_time_is_found_as_written(text: str, phrase: str | None) -> None:
    assert find_duration(text) == phrase


def test_a_month_or_day_named_without_its_year_is_marked_so() -> None:
    found = find_times("in May; on July 4th; in early June; last May; in May 2023; since May; in the fall", ANCHOR)
    assert [(m.phrase, m.yearless) for m in found] == [
        ("in May", True),
        ("July 4th", True),
        ("early June", True),
        ("last May", False),
        ("May 2023", False),
        ("since May", False),
        ("in the fall", True),
    ]


def test_letters_that_match_only_under_unicode_case_folding_never_fail_a_read() -> None:
    # The long s and the Kelvin sign fold to "s" and "k"; a dotted capital I folds to two letters.
    assert [m.phrase for m in find_times("ſummer 2023, two weeKs ago", ANCHOR)] == ["ſummer 2023", "two weeKs ago"]
    assert find_times("thİs week", ANCHOR) == []
    assert parse_date("8 İune 2023") is None
