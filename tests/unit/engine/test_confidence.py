from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.engine import (
    apply_outcome,
    carry_feedback,
    confidence_of,
    evidence_belief,
    implied_belief,
    initial_confidence,
    lower_bound,
    served_feedback,
)
from actors.engine.model.templates import ActionPattern, Belief, ExperienceTemplate
from actors.engine.model.trajectories import Outcome, ResultStatus
from tests.unit.engine.builders import T0, Builder

THRESHOLD = 0.7


def test_one_example_is_far_from_certain_and_three_consistent_runs_are_served() -> None:
    values = [initial_confidence(n) for n in (1, 2, 3, 4, 10, 100)]
    assert values[0] == 0.5
    assert values == sorted(values)
    assert values[1] < THRESHOLD <= values[2]
    assert values[-1] < 1.0


def test_the_bound_is_the_posterior_quantile() -> None:
    # Beta(n + 1, 1) has the CDF x ** (n + 1): its 25% quantile is 0.25 ** (1 / (n + 1)).
    for n in (0, 1, 2, 5, 40):
        assert abs(lower_bound(n, 0) - 0.25 ** (1 / (n + 1))) < 1e-5
    # Beta(1, n + 1) mirrors it.
    for n in (0, 3):
        assert abs(lower_bound(0, n) - (1 - 0.75 ** (1 / (n + 1)))) < 1e-5


def test_conflicting_evidence_and_weak_contrast_lower_confidence() -> None:
    assert initial_confidence(6, 2) < initial_confidence(6)
    assert initial_confidence(6, strength=0.2) < initial_confidence(6, strength=1.0)
    assert initial_confidence(0) == lower_bound(0, 0)


def _template(confidence: float = 0.6, belief: Belief | None = None) -> ExperienceTemplate:
    return ExperienceTemplate(
        recommended=ActionPattern(tool="t"), confidence=confidence, belief=belief, created_at=T0, updated_at=T0
    )


def test_feedback_moves_confidence_less_the_more_evidence_stands_behind_it() -> None:
    small, large = evidence_belief(3), evidence_belief(20)
    drop_small = confidence_of(small) - apply_outcome(_template(confidence_of(small), small), False).confidence
    drop_large = confidence_of(large) - apply_outcome(_template(confidence_of(large), large), False).confidence
    assert drop_small > drop_large > 0
    rise = apply_outcome(_template(confidence_of(small), small), True).confidence - confidence_of(small)
    assert 0 < rise < drop_small


def test_feedback_that_alternates_does_not_swing_across_the_threshold() -> None:
    template = _template(initial_confidence(12), evidence_belief(12))
    seen = []
    for i in range(20):
        template = apply_outcome(template, succeeded=i % 5 != 0)  # four in five work
        seen.append(template.confidence >= THRESHOLD)
    assert all(seen)


@settings(max_examples=100, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True), st.booleans())
def test_updates_stay_in_unit_interval(confidence: float, succeeded: bool) -> None:
    template = _template(0.5).model_copy(
        update={"confidence": min(1.0, max(0.0, confidence)) if confidence == confidence else 0.0}
    )
    assert 0.0 <= apply_outcome(template, succeeded).confidence <= 1.0
    assert 0.0 <= confidence_of(implied_belief(confidence)) <= 1.0


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 10_000), st.floats(-5, 5))
def test_initial_confidence_stays_in_unit_interval(agree: int, conflict: int, strength: float) -> None:
    assert 0.0 <= initial_confidence(agree, conflict, strength) <= 1.0


@settings(max_examples=60, deadline=None)
@given(st.floats(0.0, 1.0))
def test_a_hand_set_confidence_is_what_its_implied_belief_gives(confidence: float) -> None:
    assert abs(confidence_of(implied_belief(confidence)) - confidence) < 1e-3


def test_apply_outcome_counts_the_outcome_and_moves_only_belief_confidence_and_timestamp() -> None:
    template = _template(0.6)
    after = apply_outcome(template, succeeded=False, now=T0)
    assert after.confidence < 0.6
    assert after.belief is not None
    assert after.belief.served_failed == 1
    assert after.model_copy(update={"confidence": 0.6, "belief": None}) == template


def test_a_rebuilt_template_keeps_the_feedback_it_had() -> None:
    rebuilt = _template(initial_confidence(2), evidence_belief(2))
    assert rebuilt.confidence < THRESHOLD
    carried = carry_feedback(rebuilt, served_ok=1, served_failed=0)
    assert carried.confidence >= THRESHOLD
    assert carried.belief == Belief(agree=2, served_ok=1)
    assert carry_feedback(rebuilt, 0, 0) is rebuilt


def test_served_feedback_credits_success_debits_failure_and_ignores_partial() -> None:
    served = [uuid.uuid4(), uuid.uuid4()]
    b = Builder()
    b.add("x")
    base = b.build("success")
    for status, expected in (("success", True), ("failure", False)):
        outcome = Outcome(status=ResultStatus(status), served_template_ids=served)
        assert served_feedback(base.model_copy(update={"outcome": outcome})) == dict.fromkeys(served, expected)
    partial = Outcome(status=ResultStatus.PARTIAL, served_template_ids=served)
    assert served_feedback(base.model_copy(update={"outcome": partial})) == {}
    assert served_feedback(base.model_copy(update={"outcome": None})) == {}
