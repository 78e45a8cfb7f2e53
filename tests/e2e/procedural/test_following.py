"""The memory agent follows a served template when its condition holds, and only then."""

from __future__ import annotations

from typing import Any

import pytest

from bench.procedural.agents import Explorer, HindsightPolicy
from bench.procedural.env_base import Call, StepView
from bench.procedural.envs import FormSubmit, ProductImport, make_episode
from bench.procedural.following import fill, parse_served, predicate_holds
from cluster.experience.templates import ActionPattern, Condition, ExperienceTemplate, Predicate


def bulk_template(**overrides: Any) -> ExperienceTemplate:
    fields: dict[str, Any] = {
        "role": "agent",
        "task_type": "import",
        "condition": Condition(predicates=(Predicate(feature="row_count", op=">", value=50),)),
        "recommended": ActionPattern(tool="bulk_import", params={"file": "<csv_path>"}),
        "avoid": ActionPattern(tool="add_item", params={"file": "<csv_path>", "rows": "<row_count>"}),
        "confidence": 0.9,
    }
    return ExperienceTemplate(**(fields | overrides))


def import_view(rows: int, uniform: bool = True) -> tuple[ProductImport, StepView]:
    episode = ProductImport(21)
    episode.act(Call(action="open_file", params={"file": episode.file}))
    episode.row_count, episode.schema_uniform = rows, uniform
    view = episode.view()
    assert view is not None
    return episode, view


def served(*templates: ExperienceTemplate, shape: str = "nested") -> dict[str, Any]:
    """Structured content in any of the shapes query_experience may return."""
    entries: list[dict[str, Any]] = []
    for t in templates:
        body = t.model_dump(mode="json")
        if shape == "nested":
            entries.append({"template": body, "relevance": 0.8})
        elif shape == "nested-score":
            entries.append({"template": body, "score": 0.8})
        else:
            entries.append(body | {"relevance": 0.8})
    return {"templates": entries, "prompt_block": "[EXPERIENCE]…[/EXPERIENCE]"}


@pytest.mark.parametrize("shape", ["nested", "nested-score", "flat"])
def test_served_templates_parse_from_either_result_shape(shape: str) -> None:
    template = bulk_template()
    parsed = parse_served(served(template, shape=shape))
    assert [p.template for p in parsed] == [template]
    assert parsed[0].relevance == pytest.approx(0.8)


def test_unparseable_or_missing_results_serve_nothing() -> None:
    assert parse_served(None) == []
    assert parse_served({"templates": [{"recommended": "not a pattern"}, 3]}) == []


def test_the_agent_follows_a_template_whose_condition_holds_and_fills_its_placeholders() -> None:
    episode, view = import_view(rows=180)
    policy = HindsightPolicy()
    template = bulk_template()
    decision = policy.decide(parse_served(served(template)), episode, view, tried=[])
    assert decision.source == "template"
    assert decision.template_id == str(template.template_id)
    assert decision.call == Call(action="bulk_import", params={"file": episode.file})
    assert episode.act(decision.call).status == "success"


def test_the_agent_explores_when_the_condition_does_not_hold() -> None:
    episode, view = import_view(rows=12)
    decision = HindsightPolicy().decide(parse_served(served(bulk_template())), episode, view, tried=[])
    assert decision.source == "explore"


def test_the_agent_skips_templates_of_another_role_task_type_or_missing_tool() -> None:
    episode, view = import_view(rows=180)
    others = [
        bulk_template(role="planner"),
        bulk_template(task_type="export"),
        bulk_template(recommended=ActionPattern(tool="plan_bulk")),
    ]
    decision = HindsightPolicy().decide(parse_served(served(*others)), episode, view, tried=[])
    assert decision.source == "explore"


def test_exploring_avoids_what_an_applicable_template_says_to_avoid() -> None:
    episode, view = import_view(rows=180)
    template = bulk_template()
    policy = HindsightPolicy()
    items = parse_served(served(template))
    tried = [Call(action="bulk_import", params={"file": episode.file})]
    # The recommended call was tried already: explore, but never pick the avoided tool.
    for seed in range(10):
        policy._explorer = Explorer(f"s{seed}")
        decision = policy.decide(items, episode, view, tried)
        assert decision.source == "explore"
        assert decision.call.action != "add_item"


def test_a_more_specific_edge_case_template_wins_over_its_parent() -> None:
    episode = make_episode("db_insert", 2)
    episode.act(episode.view().options[0])  # type: ignore[union-attr]
    episode.row_count, episode.has_quotes = 400, True  # type: ignore[attr-defined]
    view = episode.view()
    assert view is not None
    parent = ExperienceTemplate(
        task_type="db_insert",
        condition=Condition(predicates=(Predicate(feature="row_count", op=">", value=100),)),
        recommended=ActionPattern(tool="batch_insert", params={"table": "<str>", "batch_size": 500}),
        confidence=0.9,
    )
    edge = ExperienceTemplate(
        task_type="db_insert",
        condition=Condition(
            predicates=(
                Predicate(feature="row_count", op=">", value=100),
                Predicate(feature="has_quotes", op="==", value=True),
            )
        ),
        recommended=ActionPattern(tool="escape_quotes"),
        avoid=ActionPattern(tool="batch_insert"),
        parent_id=parent.template_id,
        confidence=0.75,
    )
    decision = HindsightPolicy().decide(parse_served(served(parent, edge)), episode, view, tried=[])
    assert decision.call.action == "escape_quotes"
    assert decision.template_id == str(edge.template_id)


def test_a_generalized_selector_submits_a_page_it_has_never_seen() -> None:
    episode = FormSubmit(33)
    episode.act(Call(action="open_page", params={"url": episode.url}))
    view = episode.view()
    assert view is not None
    template = ExperienceTemplate(
        task_type="form",
        recommended=ActionPattern(tool="click", params={"selector": "[type=submit]"}),
        avoid=ActionPattern(tool="press_enter"),
    )
    decision = HindsightPolicy().decide(parse_served(served(template)), episode, view, tried=[])
    assert decision.call == Call(action="click", params={"selector": "[type=submit]"})
    assert episode.act(decision.call).status == "success"


@pytest.mark.parametrize(
    ("feature", "op", "value", "expected"),
    [
        ("row_count", ">", 50, True),
        ("row_count", "<=", 50, False),
        ("schema_uniform", "==", True, True),
        ("schema_uniform", "==", 1, False),
        ("schema_uniform", "!=", False, True),
        ("goal", "contains", "import", True),
        ("goal", "in", ["import the products", "x"], True),
        ("len(files)", "==", 1, True),
        ("missing.feature", "!=", 3, False),
    ],
)
def test_predicates_evaluate_on_the_context_snapshot(feature: str, op: Any, value: Any, expected: bool) -> None:
    _, view = import_view(rows=180)
    assert predicate_holds(Predicate(feature=feature, op=op, value=value), view.context) is expected


def test_unresolvable_placeholders_fall_back_to_the_naive_call() -> None:
    episode, view = import_view(rows=30)
    params = fill({"file": "<str>", "rows": "<row_count>"}, view, "add_item")
    assert params == {"file": episode.file, "rows": 30}
