"""Transient failures: a call that fails now and then where its condition holds is worth one retry."""

from __future__ import annotations

from actors.engine import attribute_batch, merge_into_library
from cluster.experience.templates import RETRY_NOTE, ExperienceTemplate
from cluster.trajectories.models import Trajectory
from tests.unit.engine.builders import flaky_geocode_runs


def _structured(runs: list[Trajectory]) -> ExperienceTemplate:
    found = [t for r in attribute_batch(runs) for t in r.templates if t.recommended.tool == "geocode_structured"]
    assert found, "no template recommends the structured lookup"
    return found[0]


def test_a_call_that_fails_now_and_then_and_recovers_on_retry_is_marked_worth_a_retry() -> None:
    template = _structured(flaky_geocode_runs(recovers=True))
    assert [p.render() for p in template.condition.predicates] == ["has_postcode == True"]
    assert template.retry
    assert RETRY_NOTE in template.brief()  # in the first sentence: a cut line still says it


def test_a_call_that_keeps_failing_when_called_again_is_not() -> None:
    template = _structured(flaky_geocode_runs(recovers=False))
    assert not template.retry
    assert RETRY_NOTE not in template.render()


def test_the_other_rule_whose_call_never_failed_where_it_applies_is_not() -> None:
    freeform = [
        t
        for r in attribute_batch(flaky_geocode_runs(recovers=True))
        for t in r.templates
        if t.recommended.tool != "geocode_structured"
    ]
    assert freeform
    assert not any(t.retry for t in freeform)


def test_merging_keeps_the_retry_advice() -> None:
    template = _structured(flaky_geocode_runs(recovers=True))
    plain = template.model_copy(update={"retry": False, "provenance": ()})
    merged = merge_into_library([plain], [template])
    assert all(t.retry for t in merged.updated)
