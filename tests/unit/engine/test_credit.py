from __future__ import annotations

import math
import uuid
from collections.abc import Iterator

import pytest

from actors.engine import (
    CreditContext,
    attribute,
    attribute_batch,
    available_scorers,
    get_scorer,
    register_scorer,
    unregister_scorer,
)
from actors.engine.credit import credit_context, score_nodes
from cluster.core.errors import InvalidInput
from tests.unit.engine.builders import Builder, bulk_vs_single_runs


@pytest.fixture
def scorer_name() -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:8]}"
    yield name
    unregister_scorer(name)


def _mixed() -> Builder:
    """One decision whose subtree has one success and one failure, and a shorter second success."""
    b = Builder()
    root = b.add("plan", ["plan", "skip"])
    left = b.add("a", ["a", "b"], parent=root)
    b.add("ok", ["ok", "retry"], parent=left, status="success")
    b.add("bad", ["ok", "bad"], parent=left, status="failure")
    b.add("b", ["a", "b"], parent=root, status="success")
    return b


def test_builtin_scorers_are_registered() -> None:
    assert {"default", "failure_averse", "shortest_success"} <= set(available_scorers())


def test_default_scores_success_up_failure_down_and_stays_bounded() -> None:
    b = _mixed()
    traj = b.build("success")
    scores = score_nodes(credit_context(traj))
    ids = [n.node_id for n in b.nodes]
    assert scores[ids[2]] == pytest.approx(1.0)  # succeeded, led to a positive leaf
    assert scores[ids[3]] == pytest.approx(-1.0)  # failed itself, negative leaf
    assert -1.0 < scores[ids[1]] < 1.0  # mixed subtree
    assert all(-1.0 <= s <= 1.0 for s in scores.values())


def test_failure_averse_penalises_a_mixed_subtree_more_than_default() -> None:
    b = Builder()
    root = b.add("plan", ["plan", "skip"])
    left = b.add("a", ["a", "b"], parent=root)
    b.add("ok", ["ok", "retry"], parent=left, status="success")
    chosen = b.add("risky", ["ok", "risky"], parent=left, status="success")
    b.add("crash", ["crash"], parent=chosen, status="failure")  # an execution step: risky's consequence
    ctx = credit_context(b.build("success"))
    mixed = ctx.decision_ids[1]
    assert score_nodes(ctx, "failure_averse")[mixed] < score_nodes(ctx, "default")[mixed]


def test_shortest_success_gives_the_shortest_positive_path_a_bonus() -> None:
    b = _mixed()
    ctx = credit_context(b.build("success"))
    default = score_nodes(ctx, "default")
    shortest = score_nodes(ctx, "shortest_success")
    short_branch = b.nodes[4].node_id  # root → b is the shortest successful path
    assert shortest[short_branch] > default[short_branch] or default[short_branch] == 1.0
    assert shortest[b.nodes[0].node_id] > default[b.nodes[0].node_id]
    assert shortest[b.nodes[2].node_id] == default[b.nodes[2].node_id]


def test_execution_nodes_get_no_score() -> None:
    b = Builder()
    root = b.add("open", status="failure")
    decision = b.add("a", ["a", "b"], parent=root)
    b.add("run", parent=decision, status="failure")
    result = attribute(b.build("failure"))
    assert [s.node_id for s in result.node_scores] == [decision]


def test_a_user_function_scorer_plugs_in_by_name(scorer_name: str) -> None:
    @register_scorer(scorer_name)
    def everything_is_great(ctx: CreditContext) -> dict[uuid.UUID, float]:
        return dict.fromkeys(ctx.decision_ids, 7.0)  # out of range on purpose: clipped

    (result,) = attribute_batch([_mixed().build("failure")], scorer=scorer_name)
    assert result.scorer == scorer_name
    assert {s.score for s in result.node_scores} == {1.0}


def test_a_user_class_scorer_plugs_in_by_name(scorer_name: str) -> None:
    @register_scorer(scorer_name)
    class Pessimist:
        def __call__(self, ctx: CreditContext) -> dict[uuid.UUID, float]:
            return dict.fromkeys(ctx.decision_ids, -0.5)

    assert get_scorer(scorer_name) is not Pessimist  # registered as an instance
    (result,) = attribute_batch([_mixed().build("success")], scorer=scorer_name)
    assert {s.score for s in result.node_scores} == {-0.5}


def test_a_scorer_can_change_which_templates_are_found(scorer_name: str) -> None:
    @register_scorer(scorer_name)
    def indifferent(ctx: CreditContext) -> dict[uuid.UUID, float]:
        return {}

    assert any(r.templates for r in attribute_batch(bulk_vs_single_runs()))
    assert not any(r.templates for r in attribute_batch(bulk_vs_single_runs(), scorer=scorer_name))


def test_unknown_scorer_is_an_invalid_input_naming_the_known_ones() -> None:
    with pytest.raises(InvalidInput, match="default"):
        attribute_batch([_mixed().build("success")], scorer="no-such-scorer")


def test_registering_a_taken_name_needs_replace(scorer_name: str) -> None:
    register_scorer(scorer_name)(lambda ctx: {})
    with pytest.raises(InvalidInput, match="already registered"):
        register_scorer(scorer_name)(lambda ctx: {})
    register_scorer(scorer_name, replace=True)(lambda ctx: {})


def test_non_finite_scores_are_rejected(scorer_name: str) -> None:
    register_scorer(scorer_name)(lambda ctx: dict.fromkeys(ctx.decision_ids, math.nan))
    with pytest.raises(InvalidInput, match="finite"):
        attribute_batch([_mixed().build("success")], scorer=scorer_name)


def test_a_scorer_callable_can_be_passed_directly() -> None:
    (result,) = attribute_batch([_mixed().build("success")], scorer=lambda ctx: {})
    assert {s.score for s in result.node_scores} == {0.0}


def test_a_decision_is_not_blamed_for_a_later_different_decision_that_failed() -> None:
    b = Builder()
    root = b.add("open", ["open"])
    first = b.add("type_date", ["type_date", "type_text"], parent=root, status="success")
    later = b.add("pick_a", ["pick_a", "pick_b"], parent=first, status="failure")
    traj = b.build("failure")
    scores = score_nodes(credit_context(traj))
    assert scores[first] >= 0.1  # its own call worked; the task was lost later, by another choice
    assert scores[later] <= -0.1


def test_a_decision_is_blamed_when_nothing_below_it_failed_on_its_own() -> None:
    b = Builder()
    root = b.add("open", ["open"])
    first = b.add("plan_bulk", ["plan_bulk", "plan_incremental"], parent=root, status="success")
    b.add("execute", ["execute"], parent=first, status="success")
    traj = b.build("failure")  # every step worked, the task failed: the plan is the suspect
    assert score_nodes(credit_context(traj))[first] < 0
