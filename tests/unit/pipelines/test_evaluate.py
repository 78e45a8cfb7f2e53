"""Offline evaluation: time split, no leakage of a trajectory's own evidence, metrics on a hand-made set."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from actors.engine.model.templates import (
    ActionPattern,
    Condition,
    ExperienceTemplate,
    Predicate,
    Provenance,
    render_prompt_block,
)
from actors.engine.model.trajectories import Trajectory, TrajectoryStatus
from cluster.core.errors import InvalidInput
from pipelines.evaluate import (
    EvalConfig,
    NodeOutcome,
    build_library,
    count_words,
    decision_cases,
    evaluate,
    evaluate_library,
    split_by_time,
    summarize,
)
from tests.unit.engine.builders import INSERT_ACTIONS, T0, Builder

Step = tuple[str, str]  # (action, status) of one attempt at the insert decision


def run(attempts: list[Step], *, rows: int = 300, outcome: str = "success", minute: int = 0) -> Trajectory:
    """Open a file, then try insert actions side by side (a retry is the failed call's sibling);
    a successful attempt is followed by a verify step."""
    b = Builder()
    root = b.add("open_file", context={"goal": "Import products from a CSV file"})
    context = {"goal": "Import products from a CSV file", "row_count": rows}
    for action, status in attempts:
        node = b.add(action, INSERT_ACTIONS, parent=root, status=status, context=context)
        if status == "success":
            b.add("verify", parent=node)
    at = T0 + timedelta(minutes=minute)
    return b.build(outcome).model_copy(update={"finalized_at": at, "created_at": at})


def template(
    recommended: str,
    avoid: str | None = None,
    *,
    confidence: float = 0.9,
    predicates: tuple[Predicate, ...] = (),
    role: str = "executor",
    task_type: str | None = "product_import",
    evidence: Trajectory | None = None,
) -> ExperienceTemplate:
    return ExperienceTemplate(
        role=role,
        task_type=task_type,
        condition=Condition(predicates=predicates),
        recommended=ActionPattern(tool=recommended),
        avoid=ActionPattern(tool=avoid) if avoid else None,
        confidence=confidence,
        provenance=(Provenance(trajectory_id=evidence.trajectory_id),) if evidence else (),
    )


# --- no leakage --------------------------------------------------------------------------------


def test_a_decision_is_never_served_a_template_learned_from_its_own_trajectory() -> None:
    held_out = run([("add_item", "failure"), ("bulk_import", "success")])
    leaky = build_library([held_out])  # the held-out run's own sibling contrast
    assert any(t.recommended.tool == "bulk_import" for t in leaky)

    own = summarize(evaluate_library(leaky, [held_out], min_confidence=0.0))[0]
    # The same decisions in another trajectory: now the template is fair evidence, and it hits.
    twin = held_out.model_copy(update={"header": held_out.header.model_copy(update={"trajectory_id": uuid.uuid4()})})
    other = summarize(evaluate_library(leaky, [twin], min_confidence=0.0))[0]

    assert (own.covered, own.hits_at_1) == (0, 0)
    assert (other.covered, other.hits_at_1) == (2, 2)


def test_a_retired_template_is_never_served() -> None:
    held_out = run([("add_item", "failure"), ("bulk_import", "success")])
    twin = held_out.model_copy(update={"header": held_out.header.model_copy(update={"trajectory_id": uuid.uuid4()})})
    library = build_library([held_out])
    retired = [t.model_copy(update={"retired_reason": "contradicted by later evidence"}) for t in library]

    assert summarize(evaluate_library(library, [twin], min_confidence=0.0))[0].covered == 2
    assert summarize(evaluate_library(retired, [twin], min_confidence=0.0))[0].covered == 0


def test_evaluation_learns_only_from_older_trajectories() -> None:
    # Older runs never met a large file; the newest one learned the lesson by itself.
    older = [run([("add_item", "success")], rows=10 + i, minute=i) for i in range(4)]
    newest = run([("add_item", "failure"), ("bulk_import", "success")], minute=10)
    config = EvalConfig(holdout=0.2, min_confidence=0.0)

    report = evaluate([newest, *older], config, keep_decisions=True)

    assert (report.train_trajectories, report.test_trajectories) == (4, 1)
    assert {d.case.trajectory_id for d in report.decisions} == {newest.trajectory_id}
    assert report.overall.hits_at_1 == 0  # nothing older says "bulk_import"
    # Had the split leaked the newest run into the library, both of its decisions would be hits.
    leaky = build_library([*older, newest])
    twin = newest.model_copy(update={"header": newest.header.model_copy(update={"trajectory_id": uuid.uuid4()})})
    assert summarize(evaluate_library(leaky, [twin], min_confidence=0.0))[0].hits_at_1 == 2


# --- split -------------------------------------------------------------------------------------


def test_the_newest_share_is_held_out_and_open_trajectories_are_ignored() -> None:
    runs = [run([("add_item", "success")], minute=m) for m in (5, 1, 4, 2, 3)]
    open_run = run([("add_item", "success")], minute=9).model_copy(update={"status": TrajectoryStatus.OPEN})
    split = split_by_time([*runs, open_run], 0.4)
    assert [t.finalized_at for t in split.train] == [T0 + timedelta(minutes=m) for m in (1, 2, 3)]
    assert [t.finalized_at for t in split.test] == [T0 + timedelta(minutes=m) for m in (4, 5)]
    # A tiny share still holds one out, and one always stays to learn from.
    assert (len(split_by_time(runs, 0.01).test), len(split_by_time(runs, 0.99).train)) == (1, 1)
    assert split_by_time(runs[:1], 0.5).test == ()
    with pytest.raises(InvalidInput):
        split_by_time(runs, 1.0)


def test_several_owners_are_refused() -> None:
    a = run([("add_item", "success")])
    b = run([("add_item", "success")]).model_copy(update={"owner": "someone-else"})
    with pytest.raises(InvalidInput, match="one owner"):
        evaluate([a, b])


# --- ground truth ------------------------------------------------------------------------------


def test_a_failed_choice_is_judged_against_the_sibling_that_succeeded() -> None:
    cases = decision_cases(run([("add_item", "failure"), ("bulk_import", "success")]))
    assert [(c.chosen_action, c.outcome) for c in cases] == [
        ("add_item", NodeOutcome.FAILED),
        ("bulk_import", NodeOutcome.SUCCEEDED),
    ]
    assert {(c.known_good, c.known_bad) for c in cases} == {(("bulk_import",), ("add_item",))}


def test_a_retry_under_a_failed_root_is_an_alternative_of_it() -> None:
    b = Builder()
    context = {"goal": "Import products", "row_count": 300}
    root = b.add("add_item", INSERT_ACTIONS, status="failure", context=context)
    retry = b.add("bulk_import", INSERT_ACTIONS, parent=root, context=context)
    b.add("verify", parent=retry)
    cases = decision_cases(b.build("success"))
    assert [c.outcome for c in cases] == [NodeOutcome.FAILED, NodeOutcome.SUCCEEDED]
    assert all(c.known_good == ("bulk_import",) and c.known_bad == ("add_item",) for c in cases)


def test_a_success_that_led_only_to_failure_failed() -> None:
    b = Builder()
    root = b.add("open_file")
    choice = b.add("add_item", INSERT_ACTIONS, parent=root, context={"row_count": 3})
    b.add("verify", parent=choice, status="failure")
    (case,) = decision_cases(b.build("failure"))
    assert case.outcome is NodeOutcome.FAILED
    assert (case.known_good, case.known_bad) == ((), ("add_item",))


# --- metrics on a hand-made set ----------------------------------------------------------------


def test_metrics_on_a_hand_made_set() -> None:
    large = (Predicate(feature="row_count", op=">", value=100),)
    small = (Predicate(feature="row_count", op="<=", value=100),)
    bulk = template("bulk_import", "add_item", confidence=0.9, predicates=large)
    single = template("add_item", "bulk_import", confidence=0.8, predicates=small)
    always_single = template("add_item", confidence=0.75)
    library = [
        bulk,
        single,
        always_single,
        template("bulk_import", confidence=0.99, role="planner"),  # another role
        template("bulk_import", confidence=0.5),  # below the threshold
        template("bulk_import", confidence=0.99, task_type="export"),  # another task type
    ]
    recovered = run([("add_item", "failure"), ("bulk_import", "success")], rows=300)  # 2 decisions
    small_ok = run([("add_item", "success")], rows=50)  # 1
    gave_up = run([("add_item", "failure")], rows=300, outcome="failure")  # 1, nothing known to work
    bulk_broke = run([("bulk_import", "failure"), ("add_item", "success")], rows=300)  # 2
    # 1: the library has an export template, but for the executor role only: nothing is served.
    export = Builder(role="verifier", task_type="export", task="Export the orders")
    export.add("set_encoding", ["export_csv", "set_encoding"], context={"rows": 5})
    unserved = export.build("success")

    results = evaluate_library(library, [recovered, small_ok, gave_up, bulk_broke, unserved], top_k=2)
    overall, groups = summarize(results)

    assert [r.recommended for r in results] == [
        ("bulk_import", "add_item"),
        ("bulk_import", "add_item"),
        ("add_item", "add_item"),
        ("bulk_import", "add_item"),
        ("bulk_import", "add_item"),
        ("bulk_import", "add_item"),
        (),
    ]
    assert (overall.decisions, overall.judged, overall.covered) == (7, 6, 6)
    assert (overall.hits_at_1, overall.hits_at_k) == (3, 5)  # bulk_broke misses at 1, hits at 2
    # bulk avoids add_item: right where it failed (recovered x2, gave_up), wrong where it worked
    # (bulk_broke x2); single avoids bulk_import, never tried on small_ok, so not judged.
    assert (overall.avoid_correct, overall.avoid_judged) == (3, 5)
    assert (overall.hit_at_1, overall.hit_at_k, overall.avoid_precision, overall.coverage) == (
        0.5,
        0.8333,
        0.6,
        0.8571,
    )
    expected_tokens = 5 * count_words(render_prompt_block([bulk, always_single])) + count_words(
        render_prompt_block([single, always_single])
    )
    assert overall.tokens == expected_tokens
    assert [(g.role, g.task_type, g.metrics.decisions) for g in groups] == [
        ("executor", "product_import", 6),
        ("verifier", "export", 1),
    ]
    assert groups[1].metrics.hit_at_1 == 0.0
    assert groups[1].metrics.avoid_precision is None
