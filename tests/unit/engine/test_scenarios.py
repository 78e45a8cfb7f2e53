"""The seed article's examples, end to end through attribute_batch."""

from __future__ import annotations

import re
from typing import Any

from actors.engine import ContrastKind, attribute_batch
from actors.engine.model.templates import ExperienceTemplate, render_prompt_block
from actors.engine.model.trajectories import Trajectory
from tests.unit.engine.builders import Builder, bulk_vs_single_runs, insert_run


def _templates(results: list) -> list[ExperienceTemplate]:  # type: ignore[type-arg]
    return [t for r in results for t in r.templates]


def assert_useful(template: ExperienceTemplate) -> None:
    """Neither too vague (must name a tool and a condition or contrast) nor too specific."""
    text = template.render()
    assert template.recommended.tool in text
    assert template.condition.predicates or template.avoid is not None
    assert "careful" not in text.lower()
    assert not re.search(r"/tmp/|run-\d|SKU-\d|#[a-z]|https?://|[0-9a-f]{8}-[0-9a-f]{4}", text), text


def test_bulk_insert_threshold_is_learned_between_the_small_and_large_runs() -> None:
    results = attribute_batch(bulk_vs_single_runs())
    (template,) = _templates(results)
    assert template.recommended.tool == "bulk_import"
    assert template.avoid is not None
    assert template.avoid.tool == "add_item"
    (pred,) = template.condition.predicates
    assert pred.feature == "row_count"
    assert pred.op == ">"
    assert isinstance(pred.value, int)
    assert 20 <= pred.value < 100
    assert template.recommended.params == {"file": "<csv_path>", "encoding": "utf-8"}
    assert template.support.successes == 2
    assert template.support.failures == 2
    assert template.task_type == "product_import"
    assert template.role == "executor"
    assert "timeout" in template.rationale
    assert_useful(template)


def test_template_provenance_points_at_the_real_decision_nodes() -> None:
    runs = bulk_vs_single_runs()
    (template,) = _templates(attribute_batch(runs))
    nodes = {(t.trajectory_id, n.node_id) for t in runs for n in t.nodes if n.is_decision}
    assert template.provenance
    assert all((p.trajectory_id, nid) in nodes for p in template.provenance for nid in p.node_ids)


def test_each_template_is_reported_once_per_batch() -> None:
    results = attribute_batch(bulk_vs_single_runs())
    assert [len(r.templates) for r in results] == [0, 0, 1, 0, 0, 0]  # first run with avoid/recommend evidence
    assert sum(1 for r in results if r.contrasts) == 4  # every run with a side in a contrast


def test_history_counts_as_evidence_for_the_batch() -> None:
    runs = bulk_vs_single_runs()
    # The new run alone shows nothing; stored runs show that bulk import works for big files.
    (result,) = attribute_batch([runs[2]], history=runs)
    (template,) = result.templates
    assert template.recommended.tool == "bulk_import"
    assert all(c.kind is ContrastKind.CROSS for c in result.contrasts)
    assert {c.bad.trajectory_id for c in result.contrasts} == {runs[2].trajectory_id}


def test_history_alone_produces_nothing_new() -> None:
    runs = bulk_vs_single_runs()
    (result,) = attribute_batch([runs[0]], history=runs[1:])
    assert result.templates == ()  # the small successful run contributes no evidence to the bulk rule


def _form_page(element_id: str, with_attributes: bool = True) -> dict[str, object]:
    element: dict[str, object] = {"id": element_id, "tag": "button"}
    if with_attributes:
        element["type"] = "submit"
    return {"url": f"https://shop.example.com/checkout/{element_id}-8812", "elements": [element]}


def test_css_id_selector_generalizes_to_an_attribute_selector_from_sibling_branches() -> None:
    b = Builder(role="executor", task_type="web_form")
    root = b.add("open_page", params={"url": "https://shop.example.com/checkout/8812"})
    ctx = {"goal": "Submit the checkout form", "page": _form_page("submit-btn")}
    b.add("press_enter", ["click", "press_enter"], parent=root, status="failure", context=ctx, summary="form not sent")
    b.add("click", ["click", "press_enter"], parent=root, params={"selector": "#submit-btn"}, context=ctx)
    trajectory = b.build("success")
    (result,) = attribute_batch([trajectory])
    (template,) = result.templates
    assert template.recommended.render() == 'click(selector="[type=submit]")'
    assert template.avoid is not None
    assert template.avoid.tool == "press_enter"
    assert template.condition.predicates == ()  # sibling branches, same context: unconditional preference
    (contrast,) = result.contrasts
    assert contrast.kind is ContrastKind.SIBLING
    assert (contrast.good.action, contrast.bad.action) == ("click", "press_enter")
    assert_useful(template)
    assert template.confidence < 0.7  # one contrast is not enough to be served by default


def test_css_id_without_known_attributes_becomes_a_typed_placeholder() -> None:
    b = Builder(task_type="web_form")
    root = b.add("open_page")
    ctx = {"page": _form_page("btn-7f3a", with_attributes=False)}
    b.add("press_enter", ["click", "press_enter"], parent=root, status="failure", context=ctx)
    b.add("click", ["click", "press_enter"], parent=root, params={"selector": "#btn-7f3a"}, context=ctx)
    (template,) = attribute_batch([b.build("success")])[0].templates
    assert template.recommended.params == {"selector": "<css_selector>"}
    assert_useful(template)


def _two_step(first: str, second: str) -> Builder:
    b = Builder(task_type="report")
    actions = ["fetch_prices", "fetch_stock"]
    root = b.add(first, actions, context={"goal": "build the report"})
    nxt = b.add(second, actions, parent=root, context={"goal": "build the report"})
    b.add("render", parent=nxt)
    return b


def test_swapping_the_order_of_two_steps_that_both_succeed_yields_no_template() -> None:
    a = _two_step("fetch_prices", "fetch_stock").build("success")
    b = _two_step("fetch_stock", "fetch_prices").build("success")
    results = attribute_batch([a, b])
    assert all(r.node_scores for r in results)
    assert _templates(results) == []
    assert all(r.contrasts == () for r in results)


def test_sibling_orders_that_both_succeed_yield_no_template() -> None:
    b = Builder(task_type="report")
    actions = ["fetch_prices", "fetch_stock"]
    root = b.add("start")
    first = b.add("fetch_prices", actions, parent=root)
    b.add("fetch_stock", actions, parent=first)
    second = b.add("fetch_stock", actions, parent=root)
    b.add("fetch_prices", actions, parent=second)
    assert attribute_batch([b.build("success")])[0].templates == ()


def test_execution_nodes_never_appear_in_scores_contrasts_or_provenance() -> None:
    runs = bulk_vs_single_runs()
    execution = {n.node_id for t in runs for n in t.nodes if not n.is_decision}
    results = attribute_batch(runs)
    assert not execution & {s.node_id for r in results for s in r.node_scores}
    assert not execution & {c.good.node_id for r in results for c in r.contrasts}
    assert not execution & {c.bad.node_id for r in results for c in r.contrasts}
    assert not execution & {n for t in _templates(results) for p in t.provenance for n in p.node_ids}


def test_csv_must_be_utf8_becomes_a_condition_a_caveat_and_a_kept_constant() -> None:
    runs = [
        *bulk_vs_single_runs(),
        insert_run(300, "bulk_import", False, encoding="latin-1", run=7),
        insert_run(400, "bulk_import", True, run=8),
    ]
    (template,) = _templates(attribute_batch(runs))
    features = {(p.feature, p.op, p.value) for p in template.condition.predicates}
    assert ("file.encoding", "==", "utf-8") in features
    assert any(f == "row_count" for f, _, _ in features)
    assert template.recommended.params["encoding"] == "utf-8"
    assert any("latin-1" in c and "utf-8" in c for c in template.caveats)
    assert_useful(template)


def test_unchosen_action_that_succeeded_elsewhere_is_evidence() -> None:
    # This run chose one-by-one and failed; bulk import was available but never tried here.
    failed = insert_run(300, "add_item", False, run=9)
    elsewhere = insert_run(300, "bulk_import", True, run=10)
    (result,) = attribute_batch([failed], history=[elsewhere])
    (template,) = result.templates
    assert (template.recommended.tool, template.avoid and template.avoid.tool) == ("bulk_import", "add_item")
    assert {p.trajectory_id for p in template.provenance} == {failed.trajectory_id, elsewhere.trajectory_id}


def test_roles_do_not_pool_evidence() -> None:
    planner = Builder(role="planner")
    root = planner.add("start")
    planner.add("add_item", ["add_item", "bulk_import"], parent=root, status="failure", context={"row_count": 300})
    executor = Builder(role="executor")
    root = executor.add("start")
    executor.add("bulk_import", ["add_item", "bulk_import"], parent=root, context={"row_count": 300})
    assert _templates(attribute_batch([planner.build("failure"), executor.build("success")])) == []


def test_rendering_and_prompt_block_are_deterministic() -> None:
    runs = bulk_vs_single_runs()
    first, second = _templates(attribute_batch(runs)), _templates(attribute_batch(runs))
    assert first == second
    block = render_prompt_block(first)
    assert block.startswith("[EXPERIENCE]\n1. When row_count > ")
    assert block.endswith("[/EXPERIENCE]")
    assert "bulk_import(" in block
    assert "avoid add_item(" in block


def _one_call(
    task_type: str,
    opening: tuple[str, str],
    tools: list[str],
    ok: bool,
    *,
    params: dict[str, Any],
    context: dict[str, Any],
    error: str,
) -> Trajectory:
    """A task: an opening step (action, goal), then the first of ``tools`` called once, failing with
    ``error`` unless ``ok``."""
    b = Builder(task_type=task_type)
    root = b.add(opening[0], context={"goal": opening[1]})
    tool = tools[0]
    status = "success" if ok else "failure"
    b.add(tool, tools, parent=root, status=status, params=params, context=context, summary=None if ok else error)
    return b.build(status)


def _encoding_run(encoding: str, ok: bool, *, sep: str = ",", run: int = 0) -> Trajectory:
    return _one_call(
        "csv_export",
        ("query", "export the table"),
        ["write_csv", "write_json"],
        ok,
        params={"path": f"/out/run-{run}/table.csv", "encoding": encoding, "sep": sep},
        context={"goal": "export the table", "rows": 10 + run},
        error="consumer rejected the file: invalid byte 0xe9",
    )


def test_a_parameter_value_that_decides_the_outcome_becomes_a_same_tool_template() -> None:
    runs = [
        _encoding_run("utf-8", True, run=1),
        _encoding_run("utf-8", True, run=2),
        _encoding_run("latin-1", False, run=3),
    ]
    (template,) = _templates(attribute_batch(runs))
    assert template.recommended.render() == 'write_csv(encoding="utf-8", path=<csv_path>, sep=",")'
    assert template.avoid is not None
    assert template.avoid.render() == 'write_csv(encoding="latin-1", path=<csv_path>, sep=",")'
    assert "'latin-1'" in template.rationale
    assert_useful(template)


def test_no_parameter_template_when_two_parameters_could_explain_the_failure() -> None:
    runs = [_encoding_run("utf-8", True, run=1), _encoding_run("latin-1", False, sep=";", run=2)]
    assert _templates(attribute_batch(runs)) == []


def _css_run(selector: str, ok: bool, run: int) -> Trajectory:
    return _one_call(
        "scrape",
        ("open_page", "open the page"),
        ["find_by_css", "find_by_text"],
        ok,
        params={"selector": selector},
        context={"goal": "locate the price table", "tables": run},
        error="the selector matched nothing",
    )


def test_a_css_selector_is_a_kept_constant_and_can_be_the_deciding_parameter() -> None:
    runs = [_css_run("table.prices", True, 1), _css_run("table.prices", True, 2), _css_run("div.grid", False, 3)]
    (template,) = _templates(attribute_batch(runs))
    assert template.recommended.render() == 'find_by_css(selector="table.prices")'
    assert template.avoid is not None
    assert template.avoid.render() == 'find_by_css(selector="div.grid")'
    assert_useful(template)


def _format_run(mime: str, ok: bool, run: int) -> Trajectory:
    """``export`` passes the situation's own format; it failed once, for a reason the call does not show."""
    return _one_call(
        "export",
        ("open_report", "open the report"),
        ["export", "export_legacy"],
        ok,
        params={"format": mime},
        context={"goal": "export the report", "report_format": mime, "rows": run},
        error="503 busy",
    )


def test_no_parameter_template_when_every_call_passed_the_situations_own_value() -> None:
    # Successes all passed one format and the failure another, but each call passed the format its
    # situation held: as generalized, the calls are the same, and "prefer export(format=<report_format>)
    # over export(format=<report_format>)" would say nothing.
    ok, bad = "application/vnd.loro+json", "application/vnd.lire+json"
    runs = [_format_run(ok, True, 1), _format_run(ok, True, 2), _format_run(bad, False, 3)]
    assert [t for t in _templates(attribute_batch(runs)) if t.avoid is not None and t.avoid.tool == "export"] == []


def _send_run(run: int, flag: bool, size: int) -> Trajectory:
    """One situation, its wrong call first, then the right one: both calls share the context."""
    right = "send_fast" if flag and size > 5 else "send_safe"
    wrong = "send_safe" if right == "send_fast" else "send_fast"
    b = Builder(role="agent", task_type="send", task="Send a parcel")
    root = b.add("load", context={"goal": "load the parcel"})
    # `label` names this parcel alone: a short string, but a new one in every situation.
    context = {"goal": "send it", "express": flag, "size": size, "label": f"text/x-{'abcdefghij'[run]}"}
    for action in (wrong, right):
        b.add(
            action,
            ["send_fast", "send_safe"],
            parent=root,
            status="success" if action == right else "failure",
            context=context,
            summary=None if action == right else "refused",
        )
    return b.build()


def test_a_value_new_in_every_situation_is_no_category_however_often_the_situation_was_retried() -> None:
    # Counted per call, each label appears twice and looks like a recurring category; a set of
    # them then separates the runs with one test and beats the real two-test rule.
    cases = [
        (True, 10),
        (True, 50),
        (True, 200),
        (True, 8),
        (False, 100),
        (False, 20),
        (True, 2),
        (True, 3),
        (False, 1),
    ]
    templates = _templates(attribute_batch([_send_run(i, f, s) for i, (f, s) in enumerate(cases)]))
    fast = [t for t in templates if t.recommended.tool == "send_fast" and t.avoid and t.avoid.tool == "send_safe"]
    assert fast
    for template in templates:
        assert all(p.feature != "label" for p in template.condition.predicates), template.render()
    assert {p.feature for p in fast[0].condition.predicates} == {"express", "size"}
