"""Credit across roles: a later role's failure is charged to the hand-offs before it, unless that role
shows it could have done better with what it was handed."""

from __future__ import annotations

from datetime import timedelta

from actors.engine import attribute_batch
from actors.engine.handoff import blame, owns_failure, runs
from actors.engine.labels import PathLabel
from tests.unit.engine.roles import executor, planner, sync_run, sync_runs


def test_a_failed_verification_blames_the_executor_and_the_planner_of_its_run() -> None:
    plan, run, check = sync_run("plan_bulk", 1200, True, "r1")
    assert blame([check, run, plan]) == {
        plan.trajectory_id: check.trajectory_id,
        run.trajectory_id: check.trajectory_id,
    }


def test_a_passed_run_blames_nobody() -> None:
    assert blame(sync_run("plan_incremental", 1200, True, "r1")) == {}


def test_an_executors_own_mistake_does_not_blame_the_planner() -> None:
    plan = planner("plan_bulk", 1200, False, "r1")
    run = executor("plan_bulk", "r1", own_mistake=True)
    assert owns_failure(run)
    assert blame([plan, run]) == {}


def test_blame_stops_at_an_earlier_role_that_failed_on_its_own() -> None:
    plan, run, check = sync_run("plan_bulk", 1200, True, "r1")
    failed_run = executor("plan_bulk", "r1", own_mistake=True)
    failed_run = failed_run.model_copy(update={"created_at": run.created_at})
    assert blame([plan, failed_run, check]) == {}


def test_hand_off_order_is_start_order_not_input_order() -> None:
    plan, run, check = sync_run("plan_bulk", 1200, True, "r1")
    # The verifier started first, so it hands off to the others: nothing is downstream of it.
    early = check.model_copy(update={"created_at": plan.created_at - timedelta(minutes=1)})
    assert [t.header.role for t in runs([plan, run, early])[("tester", "r1")]] == ["verifier", "planner", "executor"]
    assert blame([plan, run, early]) == {}


def test_trajectories_without_a_run_or_not_finalized_take_no_part() -> None:
    plan, run, check = sync_run("plan_bulk", 1200, True, None)
    assert blame([plan, run, check]) == {}
    plan, run, check = sync_run("plan_bulk", 1200, True, "r1")
    assert blame([plan, run, check.model_copy(update={"outcome": None})]) == {}


def test_the_blamed_hand_off_path_is_negative_and_its_last_decision_scores_as_failed() -> None:
    trajectories = sync_run("plan_bulk", 1200, True, "r1")
    result = attribute_batch(trajectories)[0]
    (path,) = result.path_labels
    assert path.label is PathLabel.NEGATIVE
    assert path.blamed_by == trajectories[2].trajectory_id
    (decision,) = result.node_scores
    assert decision.chosen_action == "plan_bulk"
    assert decision.score < -0.1


def test_the_planners_library_learns_to_avoid_the_plan_that_failed_verification() -> None:
    results = attribute_batch(sync_runs())
    templates = [t for r in results for t in r.templates]
    planner_templates = [t for t in templates if t.role == "planner"]
    assert planner_templates, "the planner should learn from the verifier's failures"
    (lesson,) = planner_templates
    assert (lesson.recommended.tool, lesson.avoid and lesson.avoid.tool) == ("plan_incremental", "plan_bulk")
    assert [p.render() for p in lesson.condition.predicates] == ["live_writes == True"]
    # Each role's lessons are its own: no template mixes the roles' decisions.
    assert {t.role for t in templates} <= {"planner", "executor", "verifier"}
    assert all(t.signature.startswith(f"{t.role}|") for t in templates)
    assert not [t for t in templates if t.role == "executor"], "the executor's choice did not matter"


def test_without_run_ids_each_role_is_attributed_on_its_own_as_before() -> None:
    templates = [t for r in attribute_batch(sync_runs(with_run_ids=False)) for t in r.templates]
    assert not [t for t in templates if t.role == "planner"]


def test_blame_needs_only_the_run_members_not_their_evidence() -> None:
    trajectories = sync_runs()
    planners = [t for t in trajectories if t.header.role == "planner"]
    others = [t for t in trajectories if t.header.role != "planner"]
    alone = [t for r in attribute_batch(planners) for t in r.templates]
    assert alone == []
    with_runs = attribute_batch(planners, run_members=others)
    assert [t.recommended.tool for r in with_runs for t in r.templates] == ["plan_incremental"]
    # Run members give no results and are no evidence of their own.
    assert len(with_runs) == len(planners)
    assert all(t.role == "planner" for r in with_runs for t in r.templates)
