"""The memory agent follows a served template when its condition holds, and only then."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from actors.engine.model.templates import ActionPattern, Condition, ExperienceTemplate, Predicate
from cluster.demo.agents import Explorer, HindsightPolicy, tool_arguments
from cluster.demo.env_base import Call, StepView
from cluster.demo.envs import FormSubmit, ProductImport, make_episode
from cluster.demo.following import fill, parse_condition, parse_served, predicate_holds


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


def test_once_the_advice_failed_here_the_tool_it_avoids_is_explored_like_any_other() -> None:
    # The rule's own call failed here: this is not the situation it was learned in, so what it
    # avoids (add_item failed where bulk_import worked) says nothing here and is not put last.
    episode, view = import_view(rows=180)
    items = parse_served(served(bulk_template()))
    tried = [Call(action="bulk_import", params={"file": episode.file})]
    policy = HindsightPolicy()
    picks = set()
    for seed in range(20):
        policy._explorer = Explorer(f"s{seed}")
        decision = policy.decide(items, episode, view, tried)
        assert decision.source == "explore"
        picks.add(decision.call.action)
    assert "add_item" in picks  # once avoided for ever, it would never come first
    assert len(picks) > 1


def test_once_the_advice_failed_the_tool_it_avoids_is_explored_before_those_that_never_worked() -> None:
    # Every untried option is either the rule's avoided tool or one that never worked at this
    # decision: the rule was wrong here, a tool that only ever failed has been wrong everywhere.
    episode, view = import_view(rows=180)
    items = parse_served(served(bulk_template()))
    tried = [Call(action="bulk_import", params={"file": episode.file})]
    decoys = frozenset(o.action for o in view.options) - {"bulk_import", "add_item"}
    assert decoys
    policy = HindsightPolicy()
    for seed in range(10):
        policy._explorer = Explorer(f"s{seed}")
        decision = policy.decide(items, episode, view, tried, never_worked=decoys)
        assert decision.source == "explore"
        assert decision.call.action == "add_item"


def test_once_every_option_failed_the_one_called_again_is_not_a_decoy() -> None:
    # A working tool can fail once by bad luck; a tool that never worked here fails again.
    episode, view = import_view(rows=180)
    tried = list(view.options)
    decoys = frozenset(o.action for o in view.options) - {"bulk_import"}
    policy = HindsightPolicy()
    for seed in range(10):
        policy._explorer = Explorer(f"s{seed}")
        decision = policy.decide([], episode, view, tried, never_worked=decoys)
        assert decision.call.action == "bulk_import"


def test_once_every_option_failed_they_are_called_again_in_turn() -> None:
    # The right call may have failed by bad luck: calling the first option again and again would
    # never reach it. Each is called again before any is called a third time.
    _, view = import_view(rows=180)
    for seed in range(10):
        explorer = Explorer(f"s{seed}")
        tried: list[Call] = []
        for _ in range(2 * len(view.options)):
            tried.append(explorer.pick(view, tried))
        assert all(tried.count(o) == 2 for o in view.options)


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


def lean(
    *templates: ExperienceTemplate, applicable: bool | None = None, condition: str | None = None
) -> dict[str, Any]:
    """The lean answer query_experience gives by default once it takes the structured situation."""
    return {
        "prompt_block": "[EXPERIENCE]…[/EXPERIENCE]",
        "experiences": [
            {
                "id": str(t.template_id),
                "condition": " and ".join(p.render() for p in t.condition.predicates)
                if condition is None
                else condition,
                "recommended": t.recommended.model_dump(mode="json"),
                "avoid": None if t.avoid is None else t.avoid.model_dump(mode="json"),
                "confidence": t.confidence,
                "applicable": applicable,
                "retry": t.retry,
                "text": t.render(),
            }
            for t in templates
        ],
    }


def test_lean_experiences_parse_with_their_condition_read_back_from_the_text() -> None:
    template = bulk_template()
    (item,) = parse_served(lean(template), role="agent", task_type="import")
    assert item.template.template_id == template.template_id
    assert item.template.condition.predicates == template.condition.predicates
    assert item.template.recommended == template.recommended
    assert item.template.avoid == template.avoid
    assert item.template.confidence == pytest.approx(0.9)
    assert (item.applicable, item.condition_known) == (None, True)
    assert item.rendered() == template.render()


def test_full_templates_win_over_lean_lines_when_both_are_sent() -> None:
    template = bulk_template()
    both = served(template) | lean(bulk_template(confidence=0.1))
    (item,) = parse_served(both)
    assert item.template == template


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        ("row_count > 50", (Predicate(feature="row_count", op=">", value=50),)),
        (
            "mime_type == 'image/png' and size_mb <= 7.45",
            (
                Predicate(feature="mime_type", op="==", value="image/png"),
                Predicate(feature="size_mb", op="<=", value=7.45),
            ),
        ),
        ("aspect_ratio in ['16/9', '4/3']", (Predicate(feature="aspect_ratio", op="in", value=["16/9", "4/3"]),)),
        ("has_postcode == True", (Predicate(feature="has_postcode", op="==", value=True),)),
        (
            "8.5 < size_mb <= 1373.45 and resumable == True",
            (
                Predicate(feature="size_mb", op=">", value=8.5),
                Predicate(feature="size_mb", op="<=", value=1373.45),
                Predicate(feature="resumable", op="==", value=True),
            ),
        ),
        (
            "20 <= rows < 100",
            (Predicate(feature="rows", op=">=", value=20), Predicate(feature="rows", op="<", value=100)),
        ),
        ("region in {'eu', 'us'}", (Predicate(feature="region", op="in", value=["eu", "us"]),)),
        ("large uniform files", None),
    ],
)
def test_rendered_conditions_parse_back_into_predicates(text: str, expected: tuple[Predicate, ...] | None) -> None:
    assert parse_condition(text) == expected


@pytest.mark.parametrize(
    "predicates",
    [
        (Predicate(feature="size_mb", op=">", value=8.5), Predicate(feature="size_mb", op="<=", value=1373.45)),
        (Predicate(feature="region", op="in", value=["eu", "us"]), Predicate(feature="rows", op=">=", value=3)),
        (Predicate(feature="mime_type", op="==", value="image/png"),),
    ],
)
def test_what_the_service_renders_parses_back_to_the_same_predicates(predicates: tuple[Predicate, ...]) -> None:
    text = Condition(predicates=predicates).render()
    assert parse_condition(text) == predicates, text


@pytest.mark.parametrize(
    ("rows", "applicable", "condition", "followed"),
    [
        (12, True, None, True),  # the service checked our snapshot: its verdict wins
        (180, False, None, False),
        (180, None, None, True),  # unknown: checked here
        (12, None, None, False),
        (180, None, "large uniform files", False),  # unreadable and unknown: not followed
        (180, None, "", True),  # always
    ],
)
def test_the_agent_follows_lean_experiences_by_the_services_verdict_or_its_own_check(
    rows: int, applicable: bool | None, condition: str | None, followed: bool
) -> None:
    episode, view = import_view(rows=rows)
    items = parse_served(lean(bulk_template(), applicable=applicable, condition=condition), task_type="import")
    decision = HindsightPolicy().decide(items, episode, view, tried=[])
    assert (decision.source == "template") is followed


def test_lean_entries_without_a_uuid_or_a_tool_are_skipped() -> None:
    bad = {"experiences": [{"id": "not-a-uuid", "recommended": {"tool": "x"}}, {"id": str(uuid.uuid4())}, "x"]}
    assert parse_served(bad) == []


class FakeTool:
    """A tool listing: just the parts ``tool_arguments`` reads."""

    def __init__(self, name: str, properties: list[str]) -> None:
        self.name = name
        self.input_schema = {"properties": {key: {} for key in properties}}


class FakeClient:
    """Records query_experience arguments; optionally lists tools, optionally rejects extra arguments."""

    def __init__(self, properties: list[str] | None, strict: bool = False) -> None:
        self.properties = properties
        self.strict = strict
        self.calls: list[dict[str, Any]] = []
        self.listed = 0

    def __getattr__(self, name: str) -> Any:
        if name == "list_tools" and self.properties is not None:
            return self._list_tools
        raise AttributeError(name)

    async def _list_tools(self) -> Any:
        self.listed += 1
        return SimpleNamespace(
            tools=[FakeTool("record_trajectory_node", []), FakeTool("query_experience", self.properties or [])]
        )

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        args = dict(arguments or {})
        self.calls.append(args)
        if self.strict and "context_snapshot" in args:
            text = SimpleNamespace(text="InvalidInput: context_snapshot: Extra inputs are not permitted")
            return SimpleNamespace(is_error=True, content=[text], structured_content=None)
        return SimpleNamespace(is_error=False, content=[], structured_content={"templates": [], "prompt_block": ""})


async def ask_twice(client: FakeClient) -> None:
    policy = HindsightPolicy()
    for family in ("product_import", "db_insert"):
        episode = make_episode(family, 3)
        episode.act(episode.view().options[0])  # type: ignore[union-attr]
        view = episode.view()
        assert view is not None
        await policy.query(client, episode, view)


@pytest.mark.anyio
async def test_the_structured_situation_is_sent_only_when_the_tool_advertises_it() -> None:
    today = FakeClient(["context", "role", "task_type", "top_k"])
    await ask_twice(today)
    assert today.listed == 1  # once per client
    assert all("context_snapshot" not in c and "available_actions" not in c for c in today.calls)
    tomorrow = FakeClient(["context", "role", "context_snapshot", "available_actions", "decision", "detail"])
    await ask_twice(tomorrow)
    first = tomorrow.calls[0]
    assert first["available_actions"][0] == "bulk_import"
    assert first["context_snapshot"]["row_count"] > 0
    assert first["decision"] == "import"
    partly = FakeClient(["context", "context_snapshot"])
    await ask_twice(partly)
    assert "context_snapshot" in partly.calls[0]
    assert "available_actions" not in partly.calls[0]


@pytest.mark.anyio
async def test_without_a_tool_listing_a_rejected_situation_is_dropped_for_that_client() -> None:
    strict = FakeClient(None, strict=True)
    await ask_twice(strict)
    # First query: with the situation (rejected), then without; second query: without at once.
    assert ["context_snapshot" in c for c in strict.calls] == [True, False, False]
    lenient = FakeClient(None)
    await ask_twice(lenient)
    assert all("context_snapshot" in c for c in lenient.calls)


@pytest.mark.anyio
async def test_the_real_tool_takes_the_query_with_or_without_the_structured_situation(
    client_for: Any,
) -> None:
    async with client_for("situation") as client:
        names = await tool_arguments(client, "query_experience")
        assert names is not None
        assert "context" in names
        episode = make_episode("archive_upload", 1)
        episode.act(episode.view().options[0])  # type: ignore[union-attr]
        view = episode.view()
        assert view is not None
        assert await HindsightPolicy().query(client, episode, view) == []


def test_a_call_worth_a_retry_is_made_again_once_and_only_once() -> None:
    episode, view = import_view(rows=180)
    call = Call(action="bulk_import", params={"file": episode.file})
    flaky = bulk_template(retry=True)
    (item,) = parse_served(lean(flaky, applicable=True), task_type="import")
    assert item.template.retry
    policy = HindsightPolicy()
    again = policy.decide([item], episode, view, tried=[call])
    assert (again.source, again.call) == ("template", call)
    third = policy.decide([item], episode, view, tried=[call, call])
    assert third.source == "explore"
    assert third.call != call
    plain = policy.decide(parse_served(served(bulk_template())), episode, view, tried=[call])
    assert plain.source == "explore"  # no retry advice, and an untried option that is not avoided remains


def test_once_every_option_failed_the_advised_call_is_made_again_first() -> None:
    episode, view = import_view(rows=180)
    call = Call(action="bulk_import", params={"file": episode.file})
    others = [o for o in view.options if o.action != "bulk_import"]
    items = parse_served(served(bulk_template()))
    assert items[0].avoid_reason == "fails"
    decision = HindsightPolicy().decide(items, episode, view, tried=[call, *others])
    assert (decision.source, decision.call) == ("template", call)
    # Once it failed twice, the others are called again in turn.
    assert HindsightPolicy().decide(items, episode, view, tried=[call, call, *others]).source == "explore"


def test_a_tool_avoided_only_for_its_cost_is_the_fallback_when_the_cheap_call_fails() -> None:
    episode, view = import_view(rows=180)
    call = Call(action="bulk_import", params={"file": episode.file})
    others = [o for o in view.options if o.action not in {"bulk_import", "add_item"}]
    entry = lean(bulk_template(), applicable=True)
    entry["experiences"][0]["avoid_reason"] = "costlier"
    items = parse_served(entry, task_type="import")
    assert items[0].avoid_reason == "costlier"
    decision = HindsightPolicy().decide(items, episode, view, tried=[call, *others])
    assert (decision.source, decision.call.action) == ("explore", "add_item")
