"""Transient failures: a call that fails now and then where its condition holds is worth one retry."""

from __future__ import annotations

from typing import Any

from actors.engine import attribute_batch, flatten_context, merge_into_library
from actors.engine.contrast import Observation
from actors.engine.evaluation import holds_all
from actors.engine.model.templates import RETRY_NOTE, ActionPattern, Condition, ExperienceTemplate, Predicate
from actors.engine.model.trajectories import Trajectory
from actors.engine.signature import decision_signature, signature_key
from actors.engine.templates import Finding, unless_explained, worth_retrying
from tests.unit.engine.builders import Builder, flaky_geocode_runs


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


def _observation(
    run: int, context: dict[str, Any], ok: bool, *, seq: int = 1, trajectory: Trajectory | None = None
) -> Observation:
    """One call of export_csv as evidence: its outcome and the flattened situation."""
    b = Builder(task_type="export")
    b.add("export_csv", ["export_csv", "set_encoding"], status="success" if ok else "failure", context=context)
    traj = trajectory or b.build("success" if ok else "failure")
    built = b.nodes[0].model_copy(update={"seq": seq})
    sig = decision_signature(traj, built)
    return Observation(
        trajectory=traj,
        order=run,
        node=built,
        signature=sig,
        key=signature_key(sig),
        score=1.0 if ok else -1.0,
        features=flatten_context(context),
        in_batch=True,
    )


def _page(run: int, *, latin: bool, accents: bool) -> dict[str, Any]:
    return {"encoding": "latin-1" if latin else "utf-8", "has_non_ascii": accents, "rows": 40 + run}


def _finding(recommended: str, avoid: str, condition: tuple[Predicate, ...], failures: list[Observation]) -> Finding:
    template = ExperienceTemplate(
        role="executor",
        task_type="export",
        condition=Condition(predicates=condition),
        recommended=ActionPattern(tool=recommended),
        avoid=ActionPattern(tool=avoid),
        retry=bool(failures),
    )
    return Finding(template=template, evidence=(), contrasts=(), unexplained=tuple(failures))


def test_failures_another_rule_of_the_decision_explains_are_not_worth_a_retry() -> None:
    # A weak rule for export_csv kept two failures inside its condition; both were latin-1 pages
    # with accents, which is what the rule "there, set the encoding; avoid export_csv" was learned from.
    failures = [_observation(r, _page(r, latin=True, accents=True), False) for r in range(2)]
    weak = _finding("export_csv", "export_json", (Predicate(feature="rows", op=">", value=30),), failures)
    latin = (
        Predicate(feature="encoding", op="==", value="latin-1"),
        Predicate(feature="has_non_ascii", op="==", value=True),
    )
    cause = _finding("set_encoding", "export_csv", latin, [])
    assert not unless_explained(weak, [weak, cause]).template.retry
    # A rule that avoids another tool, or whose condition is false at the failures, explains nothing.
    unrelated = _finding("set_encoding", "export_json", latin, [])
    elsewhere = _finding("set_encoding", "export_csv", (Predicate(feature="encoding", op="==", value="utf-16"),), [])
    assert unless_explained(weak, [weak, unrelated, elsewhere]).template.retry


def test_failures_nothing_explains_are_worth_a_retry_unless_repeats_kept_failing() -> None:
    pages = [_page(r, latin=r % 2 == 0, accents=r % 3 == 0) for r in range(15)]
    worked = [_observation(r, pages[r], True) for r in range(12)]
    failed = [_observation(r, pages[r], False) for r in (12, 13)]
    assert worth_retrying(worked, failed)
    assert not worth_retrying(worked[:2], failed)  # it must work in most runs
    assert not worth_retrying(worked, [])
    # Called again in the same trajectory and situation, it failed again and never worked there.
    first = failed[0]
    again = _observation(12, pages[12], False, seq=2, trajectory=first.trajectory)
    assert not worth_retrying(worked, [first, again])
    # ... and where it then worked, the failure was transient.
    recovered = _observation(12, pages[12], True, seq=3, trajectory=first.trajectory)
    assert worth_retrying([*worked, recovered], [first, again])


SHIP_ACTIONS = ["ship_ground", "ship_freight"]


def _shipping_run(run: int, carrier: str, calls: list[tuple[str, bool, str | None]]) -> Trajectory:
    """A label printed, then the shipping calls in order, each a sibling under it."""
    b = Builder(role="agent", task_type="ship", task="Ship an order")
    root = b.add("print_label", context={"goal": "print the label"})
    context = {"goal": "ship the order", "carrier": carrier, "order": f"ord_{run:04d}"}
    for action, ok, summary in calls:
        status = "success" if ok else "failure"
        b.add(action, SHIP_ACTIONS, parent=root, status=status, context=context, summary=summary)
    return b.build("success")


def test_a_failure_the_same_call_recovered_from_is_no_evidence_against_where_its_rule_holds() -> None:
    """Ground works for three carriers, freight for the fourth. The one run with carrier `kiva`
    met a busy server: ground failed, freight failed (the rule), ground worked. The snapshot of
    ground's failure is the one it then worked in, so no condition can explain it: `kiva` belongs
    with the carriers ground works for, and the failure only says a retry pays."""
    wrong = "E410 not a freight carrier"
    runs = [
        _shipping_run(0, "dalo", [("ship_ground", True, None)]),
        _shipping_run(1, "dalo", [("ship_freight", False, wrong), ("ship_ground", True, None)]),
        _shipping_run(2, "mure", [("ship_ground", True, None)]),
        _shipping_run(3, "mure", [("ship_freight", False, wrong), ("ship_ground", True, None)]),
        _shipping_run(
            4,
            "kiva",
            [("ship_ground", False, "503 busy"), ("ship_freight", False, wrong), ("ship_ground", True, None)],
        ),
        _shipping_run(5, "tofa", [("ship_ground", False, "E411 oversize"), ("ship_freight", True, None)]),
        _shipping_run(6, "tofa", [("ship_freight", True, None)]),
    ]
    ground = [
        t
        for r in attribute_batch(runs)
        for t in r.templates
        if t.recommended.tool == "ship_ground" and t.avoid is not None and t.avoid.tool == "ship_freight"
    ]
    assert ground, "no template prefers ground over freight"
    for template in ground:
        assert holds_all(template.condition.predicates, flatten_context({"carrier": "kiva"})), template.render()
        assert not holds_all(template.condition.predicates, flatten_context({"carrier": "tofa"})), template.render()
        assert template.retry
