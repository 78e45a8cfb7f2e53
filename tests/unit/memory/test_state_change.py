"""What a state change is about (its key, so the next change of the same thing supersedes it), and
the ids that make a retried turn the same log entry. Pure rules, no stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from cluster.memory.policy import PromotionReason, state_key, turn_log_id, write_trigger

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("I moved to Berlin", "Moved to Paris."),
        ("Yesterday, we moved to Lisbon", "I have moved to Porto"),
        ("We switched the database to MySQL", "The database is now Postgres"),
        ("The order was cancelled", "I submitted the order again"),
        ("I changed my email to bob@example.com", "My email is now alice@example.com"),
        ("The meeting was moved to Friday", "After lunch we moved the meeting to Monday"),
        ("I think the build is now green", "The build is now red"),
        ("Remember that the API is now v2", "The API is now v3"),
        ("订单已提交", "我已提交订单"),
    ],
)
def test_changes_of_the_same_thing_share_a_key(first: str, second: str) -> None:
    assert write_trigger(first) is not None
    assert write_trigger(second) is not None
    assert state_key(first, "user") is not None
    assert state_key(first, "user") == state_key(second, "user")


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("I moved to Berlin", "I switched to Vim"),
        ("We switched the database to MySQL", "We switched the CI to GitHub Actions"),
        ("The build is now green", "The deploy target for the backend is now staging"),
        ("Alice moved to Berlin", "I moved to Berlin"),
        ("The order was cancelled", "The invoice was cancelled"),
    ],
)
def test_changes_of_different_things_keep_apart(first: str, second: str) -> None:
    assert state_key(first, "user") != state_key(second, "user")


def test_first_person_means_the_speaker() -> None:
    assert state_key("I moved to Berlin", "user") == "state:user:moved"
    assert state_key("I moved to Berlin", "bob") == "state:bob:moved"
    assert state_key("Bob moved to Berlin", "user") == "state:bob:moved"


@pytest.mark.parametrize(
    "text",
    [
        "The weather is nice today",  # no state change at all
        "She is now the team lead",  # who "she" is, the words do not say
        "We are now on the Pro plan",  # what the speaker is now, not a thing that changed
        "I no longer use Slack",  # not an exclusive state: "no longer X" and "no longer Y" both hold
    ],
)
def test_turns_that_name_no_thing_get_no_state_key(text: str) -> None:
    assert state_key(text, "user") is None


def test_a_key_is_a_valid_memory_key_even_for_a_long_speaker() -> None:
    key = state_key("I moved to Berlin", "s" * 200)
    assert key is not None
    assert len(key) == 200


def test_an_explicit_request_that_reports_a_change_keeps_its_reason_and_gets_the_changes_key() -> None:
    text = "Please remember: our office moved to Porto"
    assert write_trigger(text) is PromotionReason.EXPLICIT
    assert state_key(text, "user") == state_key("The office moved to Lisbon", "user")


def test_the_same_turn_gets_the_same_log_id_and_any_difference_a_new_one() -> None:
    same = turn_log_id("alice", "s1", "user", "I moved to Berlin", T0)
    assert turn_log_id("alice", "s1", "user", "I moved to Berlin", T0) == same
    # The same instant in another zone is the same turn.
    assert turn_log_id("alice", "s1", "user", "I moved to Berlin", T0.astimezone(timezone(timedelta(hours=2)))) == same
    others = {
        turn_log_id("bob", "s1", "user", "I moved to Berlin", T0),
        turn_log_id("alice", "s2", "user", "I moved to Berlin", T0),
        turn_log_id("alice", "s1", "assistant", "I moved to Berlin", T0),
        turn_log_id("alice", "s1", "user", "I moved to Paris", T0),
        turn_log_id("alice", "s1", "user", "I moved to Berlin", T0 + timedelta(seconds=1)),
        turn_log_id("alice", "s1", "user", "I moved to Berlin", None),
    }
    assert same not in others
    assert len(others) == 6
