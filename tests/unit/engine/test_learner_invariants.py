"""Invariants of the learner over generated worlds: a hidden rule maps a categorical feature onto
tools whose calls carry typed constants, agents try tools until one works, and the engine must
learn from what they recorded.

Stated exactly:

* Every call a template was distilled from fits that template's patterns (the recommended
  pattern for the recommended tool's runs, the avoided pattern for the avoided tool's).
* A learned condition holds on all its positive evidence, and on none of the recommended tool's
  failures at its decision point unless the template cites them as counter-evidence.
* A template without a condition never hides a contrast: where the recommended tool failed, or
  the avoided tool worked, at its decision point, the template is conditional. So no two
  unconditional templates of one decision point recommend each other's avoided tool.
* A decision's credit does not fall below neutral because a later, different decision failed.
* Two occurrences of one decision in a task are costed independently.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.engine import attribute_batch, evaluate_condition
from actors.engine.cost import costs_to_finish
from actors.engine.credit import credit_context, score_nodes
from actors.engine.generalize import fits_pattern, generalize_params
from actors.engine.model.templates import EvidenceKind, ExperienceTemplate
from actors.engine.model.trajectories import Node, ResultStatus, Trajectory
from tests.unit.engine.builders import Builder

# Typed constants as tools really carry them: the value every call of a tool sends.
CONSTANTS = [
    "14.03.2026",
    "2026-03-14",
    "03/14/2026",
    "14 Mar 2026",
    "10:30",
    "9:05 pm",
    "2026-03-14T10:00:00Z",
    "PT5M",
    "250ms",
    "v1.2",
    "2.0.0-rc.1",
    "image/png",
    "text/html; charset=utf-8",
    "16/9",
    "42",
    "3.5",
    "utf-8",
    "fast",
    "/srv/data/in.csv",
    "https://api.example.org/v1/items",
    "ops@example.org",
]
TOOLS = ["type_date", "type_text", "pick_option", "fill_field"]


@st.composite
def worlds(draw: st.DrawFn) -> dict[str, Any]:
    """A hidden rule: each value of ``kind`` has one right tool; every tool's calls carry a constant."""
    tools = TOOLS[: draw(st.integers(2, 4))]
    values = [f"k{i}" for i in range(draw(st.integers(2, 6)))]
    right = {v: draw(st.sampled_from(tools)) for v in values}
    if len(set(right.values())) < 2:
        right[values[0]], right[values[1]] = tools[0], tools[1]
    params = {t: {"value": draw(st.sampled_from(CONSTANTS))} for t in tools}
    return {
        "tools": tools,
        "right": right,
        "params": params,
        "runs": draw(st.integers(4, 14)),
        "occurrences": draw(st.integers(1, 3)),
        "seed": draw(st.integers(0, 10_000)),
    }


def play(world: dict[str, Any]) -> list[Trajectory]:
    """Agents that try the tools in a random order at every occurrence until one works."""
    rng = random.Random(world["seed"])
    out = []
    for run in range(world["runs"]):
        b = Builder(role="agent", task_type="fill_form", task="Fill the form")
        parent = b.add("open_form", context={"goal": "open the form"})
        for _ in range(world["occurrences"]):
            kind = rng.choice(sorted(world["right"]))
            context = {"goal": "fill a field", "kind": kind, "noise": rng.randint(0, 99), "run": run}
            for tool in rng.sample(world["tools"], len(world["tools"])):
                ok = world["right"][kind] == tool
                parent = b.add(
                    tool,
                    world["tools"],
                    parent=parent,
                    status="success" if ok else "failure",
                    params=dict(world["params"][tool]),
                    context=context,
                )
                if ok:
                    break
        out.append(b.build("success"))
    return out


def _templates(batch: Sequence[Trajectory]) -> list[ExperienceTemplate]:
    return [t for r in attribute_batch(batch) for t in r.templates]


def _nodes(batch: Sequence[Trajectory]) -> dict[Any, Node]:
    return {n.node_id: n for t in batch for n in t.nodes}


def _cited(template: ExperienceTemplate, kinds: Sequence[EvidenceKind]) -> set[Any]:
    return {nid for p in template.provenance if p.kind in kinds for nid in p.node_ids}


SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(worlds())
def test_every_call_a_template_was_distilled_from_fits_its_patterns(world: dict[str, Any]) -> None:
    batch = play(world)
    nodes = _nodes(batch)
    for template in _templates(batch):
        for nid in _cited(template, [EvidenceKind.RECOMMENDED_SUCCEEDED]):
            node = nodes[nid]
            assert fits_pattern(template.recommended.params, node.action_params, node.context_snapshot)
        assert template.avoid is not None
        avoided = _cited(template, [EvidenceKind.AVOIDED_FAILED, EvidenceKind.AVOIDED_COSTLIER])
        for nid in avoided:
            node = nodes[nid]
            if node.chosen_action == template.avoid.tool:
                assert fits_pattern(template.avoid.params, node.action_params, node.context_snapshot)


@SETTINGS
@given(worlds())
def test_a_condition_holds_on_its_positive_evidence_and_on_no_unexplained_negative(world: dict[str, Any]) -> None:
    batch = play(world)
    nodes = _nodes(batch)
    for template in _templates(batch):
        if (
            template.condition.predicates
            and template.avoid is not None
            and template.avoid.tool == template.recommended.tool
        ):
            continue  # a parameter-value template: its condition is on the call, not the situation
        positive = _cited(template, [EvidenceKind.RECOMMENDED_SUCCEEDED, EvidenceKind.AVOIDED_FAILED])
        for nid in positive:
            assert evaluate_condition(template.condition, nodes[nid].context_snapshot) is True
        counter = _cited(template, [EvidenceKind.COUNTER])
        for node in nodes.values():
            failed_here = (
                node.chosen_action == template.recommended.tool
                and node.execution_result.status is ResultStatus.FAILURE
                and node.node_id not in counter
            )
            if failed_here:
                assert evaluate_condition(template.condition, node.context_snapshot) is not True


@SETTINGS
@given(worlds())
def test_an_unconditional_template_hides_no_contrast(world: dict[str, Any]) -> None:
    batch = play(world)
    failed = {n.chosen_action for t in batch for n in t.nodes if n.execution_result.status is ResultStatus.FAILURE}
    worked = {n.chosen_action for t in batch for n in t.nodes[1:] if n.execution_result.status is ResultStatus.SUCCESS}
    templates = _templates(batch)
    for template in templates:
        if template.condition.predicates or template.avoid is None:
            continue
        assert template.recommended.tool not in failed, template.render()
        assert template.avoid.tool not in worked, template.render()
    unconditional = {
        (t.recommended.tool, t.avoid.tool) for t in templates if not t.condition.predicates and t.avoid is not None
    }
    assert not any((b, a) in unconditional for a, b in unconditional)


def test_a_constant_date_kept_verbatim_fits_the_call_that_sends_it() -> None:
    samples = [({"value": "14.03.2026"}, {"kind": k}) for k in ("a", "b", "c")]
    pattern = generalize_params(samples)
    assert pattern == {"value": "14.03.2026"}
    assert fits_pattern(pattern, {"value": "14.03.2026"}, {"kind": "a"})
    assert not fits_pattern(pattern, {"value": "15.03.2026"}, {"kind": "a"})


def test_tools_carrying_a_constant_date_still_learn_the_categorical_rule() -> None:
    world: dict[str, Any] = {
        "tools": ["type_date", "type_text", "pick_option"],
        "right": {"k0": "type_date", "k1": "type_date", "k2": "type_text", "k3": "type_text", "k4": "pick_option"},
        "params": {t: {"value": "14.03.2026"} for t in ["type_date", "type_text", "pick_option"]},
        "runs": 12,
        "occurrences": 3,
        "seed": 3,
    }
    templates = _templates(play(world))
    date_over_text = [
        t for t in templates if t.recommended.tool == "type_date" and t.avoid and t.avoid.tool == "type_text"
    ]
    assert date_over_text
    for template in date_over_text:
        for kind, tool in world["right"].items():
            if evaluate_condition(template.condition, {"kind": kind}) is True:
                assert tool == "type_date", (kind, template.render())


@SETTINGS
@given(st.lists(st.booleans(), min_size=2, max_size=6))
def test_credit_does_not_blame_a_decision_for_a_later_different_decision_that_failed(own: list[bool]) -> None:
    b = Builder(role="agent", task_type="steps", task="Do the steps")
    parent = b.add("start", context={"goal": "start"})
    ids = []
    for i, ok in enumerate(own):
        parent = b.add(f"step_{i}", [f"step_{i}", f"other_{i}"], parent=parent, status="success" if ok else "failure")
        ids.append(parent)
    traj = b.build("success" if own[-1] else "failure")
    scores = score_nodes(credit_context(traj))
    for i, ok in enumerate(own):
        if ok and not all(own[i:]):
            # A later decision on its path failed on its own: the failure is that one's.
            assert scores[ids[i]] >= 0.0


@SETTINGS
@given(st.lists(st.integers(1, 5), min_size=2, max_size=4), st.integers(0, 4), st.integers(1, 9))
def test_two_occurrences_of_one_decision_are_costed_independently(steps: list[int], tail: int, later: int) -> None:
    def chain(last_cost: int) -> tuple[Trajectory, list[Any]]:
        b = Builder(role="agent", task_type="fill_form", task="Fill the form")
        parent = b.add("open_form", context={"goal": "open the form"})
        ids = []
        for cost in steps:
            parent = b.add("type_date", ["type_date", "type_text"], parent=parent, data={"steps": cost})
            ids.append(parent)
            for _ in range(tail):
                parent = b.add("confirm", parent=parent, data={"steps": 1})
        b.add("submit", ["submit", "save"], parent=parent, data={"steps": last_cost})
        return b.build("success"), ids

    first, ids = chain(1)
    second, ids2 = chain(later)
    a, c = costs_to_finish(first), costs_to_finish(second)
    for nid, nid2, cost in zip(ids, ids2, steps, strict=True):
        assert a[nid].steps == cost + tail
        assert c[nid2].steps == a[nid].steps  # what comes after the next decision changes nothing
