"""Cost-aware credit: where two actions both work, the cheaper one is recommended."""

from __future__ import annotations

import math
from typing import Any

import pytest

from actors.engine import Cost, attribute_batch, compare_costs, node_costs, read_cost
from actors.engine.model.templates import EvidenceKind, ExperienceTemplate, Predicate
from actors.engine.model.trajectories import ExecutionResult, Trajectory
from actors.engine.templates import caveat_key
from tests.unit.engine.builders import Builder

ACTIONS = ["paste_rows", "bulk_import"]


def test_costs_are_read_from_a_cost_object_then_from_data() -> None:
    result = ExecutionResult.model_validate(
        {"status": "success", "steps": 4, "cost": {"tokens": {"input": 800, "output": 95}, "steps": 3}}
    )
    assert read_cost(result) == Cost(steps=3, tokens=895)
    odd = ExecutionResult.model_validate({"status": "success", "steps": -1, "latency_ms": "fast", "tokens": True})
    assert read_cost(odd) == Cost()


def test_latency_comes_from_timestamps_when_nothing_is_sent() -> None:
    b = Builder()
    root = b.add("a", timestamp=1000)
    child = b.add("b", parent=root, timestamp=4000)
    reported = b.add("c", parent=child, timestamp=9000, data={"latency_ms": 12})
    costs = node_costs(b.build())
    assert costs[root] == Cost()
    assert costs[child] == Cost(latency_ms=3000, latency_derived=True)
    assert costs[reported] == Cost(latency_ms=12)


def test_one_action_is_cheaper_only_by_a_clear_margin_and_on_no_metric_dearer() -> None:
    cheap, costly = [Cost(steps=2), Cost(steps=2)], [Cost(steps=6), Cost(steps=5)]
    gap = compare_costs(cheap, costly)
    assert gap is not None
    assert (gap.metric, gap.cheap, gap.costly) == ("steps", 2, 5.5)
    assert gap.describe("paste_rows", "bulk_import") == "bulk_import costs 2.8× paste_rows (median 5.5 vs 2 steps)"
    assert compare_costs(costly, cheap) is None
    assert compare_costs([Cost(steps=10)], [Cost(steps=11)]) is None  # within noise
    mixed = compare_costs([Cost(steps=2, tokens=900)], [Cost(steps=6, tokens=100)])
    assert mixed is None  # fewer steps but far more tokens: no clear winner
    free = compare_costs([Cost(steps=0)], [Cost(steps=3)])
    assert free is not None
    assert math.isinf(free.ratio)
    assert free.describe("a", "b") == "b costs more than a (median 3 vs 0 steps)"


def test_timestamp_latencies_need_a_second_of_difference() -> None:
    derived = [Cost(latency_ms=2, latency_derived=True)]
    assert compare_costs(derived, [Cost(latency_ms=9, latency_derived=True)]) is None
    assert compare_costs(derived, [Cost(latency_ms=5000, latency_derived=True)]) is not None


def _import_run(rows: int, action: str, *, cost: dict[str, Any], limit: int | None = 50) -> Trajectory:
    """paste_rows works up to ``limit`` rows (always, if None); bulk_import always works."""
    ok = action == "bulk_import" or limit is None or rows <= limit
    b = Builder(task_type="sheet_import")
    root = b.add("open_sheet", context={"goal": "import rows"})
    status = "success" if ok else "failure"
    ctx = {"goal": "import rows", "row_count": rows}
    error = None if ok else "clipboard overflow"
    b.add(action, ACTIONS, parent=root, status=status, context=ctx, data={**cost, "error": error})
    return b.build(status)


def _runs(limit: int | None) -> list[Trajectory]:
    costs = {"paste_rows": {"steps": 2, "tokens": 300}, "bulk_import": {"steps": 6, "tokens": 900}}
    return [_import_run(r, a, cost=costs[a], limit=limit) for r in (5, 20, 40, 80, 200, 500) for a in ACTIONS]


def _templates(runs: list[Trajectory]) -> dict[str, ExperienceTemplate]:
    return {t.recommended.tool: t for r in attribute_batch(runs) for t in r.templates}


def test_where_both_work_the_cheaper_action_is_recommended_and_says_why() -> None:
    templates = _templates(_runs(limit=None))
    assert set(templates) == {"paste_rows"}
    cheap = templates["paste_rows"]
    assert cheap.avoid is not None
    assert cheap.avoid.tool == "bulk_import"
    assert cheap.condition.predicates == ()
    assert "both work" in cheap.rationale.lower()
    assert "bulk_import costs 3× paste_rows" in cheap.rationale
    kinds = {p.kind for p in cheap.provenance}
    assert kinds == {EvidenceKind.RECOMMENDED_SUCCEEDED, EvidenceKind.AVOIDED_COSTLIER}
    assert cheap.support.failures == 0
    assert cheap.support.successes == 6
    assert cheap.avoid_reason == "costlier"  # an agent falls back on it when paste_rows fails
    assert cheap.cost_ratio == 3  # a cheap bet: served from 1/3 (cluster.experience.query.served_from)


def test_the_condition_under_which_the_cheap_action_fails_goes_to_the_costly_one() -> None:
    templates = _templates(_runs(limit=50))
    cheap, costly = templates["paste_rows"], templates["bulk_import"]
    assert cheap.condition.predicates == (Predicate(feature="row_count", op="<=", value=60),)
    assert "bulk_import costs 3× paste_rows" in cheap.rationale
    assert costly.condition.predicates == (Predicate(feature="row_count", op=">", value=60),)
    assert costly.avoid is not None
    assert costly.avoid.tool == "paste_rows"
    assert costly.avoid_reason == "fails"
    assert (cheap.cost_ratio, costly.cost_ratio) == (3, None)
    assert "clipboard overflow" in costly.rationale  # the agent's error, sent in data
    (caveat,) = costly.caveats
    assert caveat.startswith("where paste_rows works it is the cheaper choice: bulk_import costs 3×")
    assert caveat_key(caveat) == "where paste_rows works it is the cheaper choice"


@pytest.mark.parametrize("cost", [{}, {"steps": 4}])
def test_equal_or_unknown_costs_make_no_template_when_both_always_work(cost: dict[str, Any]) -> None:
    runs = [_import_run(r, a, cost=cost, limit=None) for r in (5, 80, 500) for a in ACTIONS]
    assert _templates(runs) == {}


def test_a_faster_tool_is_no_cost_preference_where_the_other_never_worked() -> None:
    """Two band tools answer at different speeds; nowhere did both work, so the rule is where each works."""
    b_runs = []
    for i, size in enumerate([20, 60, 90, 400, 700, 900]):
        right = "quick_put" if size <= 100 else "slow_put"
        for tool in ["quick_put", "slow_put"] if i % 2 else ["slow_put", "quick_put"]:
            b = Builder(role="agent", task_type="upload", task="Upload a file")
            root = b.add("open", context={"goal": "open"})
            b.add(
                tool,
                ["quick_put", "slow_put"],
                parent=root,
                status="success" if tool == right else "failure",
                context={"goal": "upload", "size": size},
                data={"latency_ms": 50 if tool == "quick_put" else 4000},
            )
            b_runs.append(b.build("success" if tool == right else "failure"))
    templates = [t for r in attribute_batch(b_runs) for t in r.templates]
    quick = [t for t in templates if t.recommended.tool == "quick_put"]
    assert quick
    for template in quick:
        assert template.avoid_reason == "fails", template.render()
        assert "Both work" not in template.rationale
        assert all(p.value <= 400 for p in template.condition.predicates if p.op in ("<", "<="))
