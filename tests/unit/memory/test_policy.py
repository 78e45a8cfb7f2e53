"""The memory policy without any store: scopes, lifetimes, versions, activity, ranking, promotion."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from cluster.core.errors import InvalidInput
from cluster.memory.models import MemoryQuery, MemoryWrite, value_text
from cluster.memory.policy import (
    ActivityPolicy,
    LoggedTurn,
    MemoryScope,
    PromotionPolicy,
    PromotionReason,
    ScopeKind,
    Ttl,
    TtlKind,
    described,
    find_promotions,
    is_valid_at,
    next_version,
    promotion_target,
    rrf,
    terms,
    validity_for,
    was_current_at,
    write_trigger,
)

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def test_long_term_facts_key_on_the_user_session_state_on_the_session_task_state_on_the_task() -> None:
    assert MemoryScope.user().key == "user"
    assert MemoryScope.session("s1").key == "session:s1"
    assert MemoryScope.task("t1").key == "task:t1"
    assert MemoryScope.task("t1", session_id="s1").key == "task:t1"


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "user", "session_id": "s1"},
        {"kind": "session"},
        {"kind": "session", "session_id": "s1", "task_id": "t1"},
        {"kind": "task"},
        {"kind": "task", "task_id": "t\x00"},
    ],
)
def test_a_scope_without_its_key_is_rejected(fields: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        MemoryScope.model_validate(fields)


def test_scopes_are_frozen_and_forbid_unknown_fields() -> None:
    scope = MemoryScope.session("s1")
    with pytest.raises(ValidationError):
        scope.kind = ScopeKind.USER  # type: ignore[misc]
    with pytest.raises(ValidationError):
        MemoryScope.model_validate({"kind": "user", "owner": "mallory"})


def test_permanent_memories_never_expire() -> None:
    validity = validity_for(Ttl.permanent(), MemoryScope.user(), T0)
    assert validity.expires_at is None
    assert is_valid_at(validity.valid_from, validity.expires_at, T0 + timedelta(days=10_000))


def test_a_window_is_valid_from_its_start_until_its_end() -> None:
    validity = validity_for(Ttl.window(3600), MemoryScope.user(), T0)
    assert validity.expires_at == T0 + timedelta(hours=1)
    assert is_valid_at(validity.valid_from, validity.expires_at, T0 + timedelta(minutes=59))
    assert not is_valid_at(validity.valid_from, validity.expires_at, T0 + timedelta(hours=1))

    later = validity_for(Ttl.window(60, valid_from=T0 + timedelta(days=1)), MemoryScope.user(), T0)
    assert not is_valid_at(later.valid_from, later.expires_at, T0)
    assert is_valid_at(later.valid_from, later.expires_at, T0 + timedelta(days=1, seconds=30))


def test_a_window_needs_exactly_one_end_and_must_not_be_over() -> None:
    with pytest.raises(ValidationError):
        Ttl(kind=TtlKind.WINDOW)
    with pytest.raises(ValidationError):
        Ttl(kind=TtlKind.WINDOW, seconds=10, valid_until=T0)
    with pytest.raises(ValidationError):
        Ttl(kind=TtlKind.PERMANENT, seconds=10)
    with pytest.raises(InvalidInput):
        validity_for(Ttl(kind=TtlKind.WINDOW, valid_until=T0 - timedelta(seconds=1)), MemoryScope.user(), T0)


def test_a_session_lifetime_needs_a_session() -> None:
    assert validity_for(Ttl.session(), MemoryScope.session("s1"), T0).session_bound
    assert validity_for(Ttl.session(), MemoryScope.task("t1", session_id="s1"), T0).session_bound
    with pytest.raises(InvalidInput):
        validity_for(Ttl.session(), MemoryScope.user(), T0)


def test_versions_count_up_and_as_of_sees_the_version_current_then() -> None:
    assert next_version(None) == 1
    assert next_version(3) == 4
    replaced = T0 + timedelta(days=2)
    assert was_current_at(T0, replaced, T0 + timedelta(days=1))
    assert not was_current_at(T0, replaced, replaced)
    assert not was_current_at(T0, None, T0 - timedelta(seconds=1))


def test_activity_halves_every_half_life_and_grows_with_access() -> None:
    policy = ActivityPolicy(initial=1.0, half_life_days=30, access_boost=1.0, max_score=3.0, archive_threshold=0.1)
    assert policy.decayed(1.0, T0, T0 + timedelta(days=30)) == pytest.approx(0.5)
    assert policy.decayed(1.0, T0, T0 + timedelta(days=60)) == pytest.approx(0.25)
    assert policy.reinforced(1.0, T0, T0 + timedelta(days=30)) == pytest.approx(1.5)
    assert policy.reinforced(2.9, T0, T0) == pytest.approx(3.0)
    assert not policy.should_archive(1.0, T0, T0 + timedelta(days=99))
    assert policy.should_archive(1.0, T0, T0 + timedelta(days=100))


def test_the_archive_prefilter_never_skips_a_memory_under_the_threshold() -> None:
    policy = ActivityPolicy()
    now = T0 + timedelta(days=365)
    cutoff = policy.archive_candidates_before(now)
    # A memory touched just after the cutoff at the lowest score a store can hold is still above.
    floor = min(policy.initial, policy.access_boost)
    assert not policy.should_archive(floor, cutoff + timedelta(seconds=1), now)
    assert policy.should_archive(floor, cutoff - timedelta(days=1), now)


def test_terms_drop_stopwords_and_punctuation() -> None:
    assert terms("What did Caroline research, and when?") == ["caroline", "research"]
    assert terms("the of a") == []


def test_reciprocal_rank_fusion_contributions() -> None:
    assert rrf(None, 60, 1.0) == 0.0
    assert rrf(1, 60, 1.0) == pytest.approx(1 / 61)
    assert rrf(1, 60, 0.5) < rrf(1, 60, 1.0)
    assert rrf(1, 60, 1.0) > rrf(2, 60, 1.0)


def test_structured_values_are_searchable_as_text() -> None:
    assert value_text("plain") == "plain"
    value = {"order": {"id": "A-17", "items": ["tea", 2]}, "paid": True}
    assert value_text(value) == "order: id A-17 items tea 2\npaid: True"


def test_write_requests_reject_nul_bytes_and_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        MemoryWrite(key="k", value={"a": "x\x00"})
    with pytest.raises(ValidationError):
        MemoryWrite.model_validate({"key": "k", "value": "v", "owner": "mallory"})
    with pytest.raises(ValidationError):
        MemoryQuery(query="q", top_k=0)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Remember that my flight is on Friday", PromotionReason.EXPLICIT),
        ("From now on answer in Chinese", PromotionReason.EXPLICIT),
        ("记住我喜欢用 UTC 时间", PromotionReason.EXPLICIT),
        ("We switched to the production environment", PromotionReason.STATE_CHANGE),
        ("订单已提交", PromotionReason.STATE_CHANGE),
        ("The weather is nice today", None),
    ],
)
def test_write_triggers_are_rules(text: str, reason: PromotionReason | None) -> None:
    assert write_trigger(text) == reason


def turn(text: str, at: datetime, session: str = "s1") -> LoggedTurn:
    return LoggedTurn(log_id=uuid.uuid4(), session_id=session, speaker="user", text=text, at=at)


def test_a_turn_referenced_in_a_later_session_is_promoted() -> None:
    trip = turn("I'm going to Hangzhou next week for the conference", T0)
    chatter = turn("The weather is nice today", T0 + timedelta(minutes=1))
    question = turn("What's the Hangzhou forecast during the conference?", T0 + timedelta(days=3), session="s2")
    promotions = find_promotions([question, chatter, trip], PromotionPolicy())
    assert [p.log_id for p in promotions] == [trip.log_id]
    assert promotions[0].referenced_by == (question.log_id,)
    assert set(promotions[0].shared_terms) == {"hangzhou", "conference"}


def test_an_immediate_echo_in_the_same_session_is_not_yet_hindsight() -> None:
    first = turn("Deploy the billing service tonight", T0)
    echo = turn("Billing service deploy is queued", T0 + timedelta(minutes=2))
    assert find_promotions([first, echo], PromotionPolicy()) == []
    # The same reference an hour later counts.
    late = turn("Did the billing service deploy succeed?", T0 + timedelta(hours=2))
    assert [p.log_id for p in find_promotions([first, echo, late], PromotionPolicy())] == [first.log_id, echo.log_id]


def test_references_beyond_the_horizon_do_not_count() -> None:
    first = turn("Hangzhou conference plans", T0)
    late = turn("Hangzhou conference recap", T0 + timedelta(days=200), session="s9")
    assert find_promotions([first, late], PromotionPolicy(horizon=timedelta(days=90))) == []


def test_promotions_go_to_the_right_scope() -> None:
    assert promotion_target(PromotionReason.EXPLICIT, "s1") == (MemoryScope.user(), Ttl.permanent())
    assert promotion_target(PromotionReason.REFERENCED_LATER, "s1") == (MemoryScope.user(), Ttl.permanent())
    assert promotion_target(PromotionReason.STATE_CHANGE, "s1") == (MemoryScope.session("s1"), Ttl.session())


def test_a_ttl_window_over_a_century_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        Ttl(kind=TtlKind.WINDOW, seconds=10**18)
    assert caught.value.errors()[0]["loc"] == ("seconds",)


def test_a_json_values_fields_count_as_metadata_the_metadata_winning_on_a_shared_key() -> None:
    turn = {"speaker": "Gina", "text": "I moved", "date": "8 May 2023"}
    assert described({}, turn) == turn
    assert described({"date": "2024-01-01", "session": 3}, turn) == {**turn, "date": "2024-01-01", "session": 3}
    # A text value, or an empty object, adds nothing.
    assert described({"a": 1}, "I moved") == {"a": 1}
    assert described({"a": 1}, {}) == {"a": 1}
