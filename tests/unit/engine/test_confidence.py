from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.engine import apply_outcome, initial_confidence, served_feedback, update_confidence, wilson_lower_bound
from cluster.experience.templates import ActionPattern, ExperienceTemplate
from cluster.trajectories.models import Outcome, ResultStatus
from tests.unit.engine.builders import T0, Builder


def test_one_example_is_far_from_certain_and_more_support_raises_confidence() -> None:
    values = [initial_confidence(n) for n in (1, 2, 4, 10, 100)]
    assert values[0] < 0.5
    assert values == sorted(values)
    assert values[2] > 0.7 > values[1]
    assert values[-1] < 1.0


def test_conflicting_evidence_and_weak_contrast_lower_confidence() -> None:
    assert initial_confidence(6, 2) < initial_confidence(6)
    assert initial_confidence(6, strength=0.2) < initial_confidence(6, strength=1.0)
    assert initial_confidence(0) == 0.0


def test_served_success_raises_and_failure_lowers() -> None:
    assert update_confidence(0.7, True) > 0.7
    assert update_confidence(0.7, False) < 0.7
    # A failure costs more than a success earns.
    assert 0.7 - update_confidence(0.7, False) > update_confidence(0.7, True) - 0.7


@settings(max_examples=100, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True), st.booleans())
def test_updates_stay_in_unit_interval(confidence: float, succeeded: bool) -> None:
    assert 0.0 <= update_confidence(confidence, succeeded) <= 1.0


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 10_000), st.floats(-5, 5))
def test_initial_confidence_stays_in_unit_interval(agree: int, conflict: int, strength: float) -> None:
    assert 0.0 <= initial_confidence(agree, conflict, strength) <= 1.0
    assert 0.0 <= wilson_lower_bound(agree, agree + conflict) <= 1.0


def test_apply_outcome_moves_only_confidence_and_timestamp() -> None:
    template = ExperienceTemplate(recommended=ActionPattern(tool="t"), confidence=0.6, created_at=T0, updated_at=T0)
    after = apply_outcome(template, succeeded=False, now=T0)
    assert after.confidence < 0.6
    assert after.model_copy(update={"confidence": 0.6}) == template


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
