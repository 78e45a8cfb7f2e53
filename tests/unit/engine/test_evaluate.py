"""Serving-side evaluation of conditions: three-valued, on raw snapshots, never raising."""

from __future__ import annotations

import math
from typing import Any

import pytest

from actors.engine import evaluate_condition, evaluate_features, flatten_context
from actors.engine.model.templates import Condition, Predicate

SNAPSHOT: dict[str, Any] = {
    "goal": "import the products",
    "row_count": 180,
    "schema_uniform": True,
    "file": {"encoding": "utf-8", "meta": {"rows": 3}},
    "files": ["a.csv"],
    "tags": ["eu", "bulk"],
    "none": None,
}


def _p(feature: str, op: str, value: Any) -> Predicate:
    return Predicate(feature=feature, op=op, value=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        (_p("row_count", ">", 50), True),
        (_p("row_count", "<=", 50), False),
        (_p("row_count", "==", 180.0), True),
        (_p("schema_uniform", "==", True), True),
        (_p("schema_uniform", "==", 1), False),
        (_p("schema_uniform", "!=", False), True),
        (_p("file.encoding", "in", ["utf-8", "ascii"]), True),
        (_p("file.encoding", "in", ["latin-1"]), False),
        (_p("file.meta.rows", ">=", 3), True),
        (_p("len(files)", "==", 1), True),
        (_p("len(tags)", ">", 1), True),
        (_p("goal", "contains", "import"), True),
        (_p("tags", "contains", "eu"), True),
        (_p("tags", "contains", "us"), False),
        (_p("goal", ">", 3), False),  # a number compared with text is false, not unknown
        (_p("none", "==", None), True),
        (_p("none", ">", 3), False),
        (_p("missing", "==", "x"), None),
        (_p("file.missing", ">", 1), None),
        (_p("len(missing)", ">", 1), None),
        (_p("missing", "contains", "x"), None),
    ],
)
def test_each_operator_on_a_raw_snapshot(predicate: Predicate, expected: bool | None) -> None:
    assert evaluate_condition(Condition(predicates=(predicate,)), SNAPSHOT) is expected


def test_missing_is_unknown_but_a_failing_predicate_decides() -> None:
    known = _p("row_count", ">", 50)
    unknown = _p("region", "==", "eu")
    failing = _p("row_count", "<", 50)
    assert evaluate_condition([known, unknown], SNAPSHOT) is None
    assert evaluate_condition([unknown, failing], SNAPSHOT) is False
    assert evaluate_condition([known], SNAPSHOT) is True
    assert evaluate_condition(Condition(), SNAPSHOT) is True
    assert evaluate_condition(Condition(), None) is True


@pytest.mark.parametrize("snapshot", [None, [], "text", 3, {"row_count": math.nan}, {1: 2}, {"row_count": [1, 2]}])
def test_odd_json_never_raises(snapshot: object) -> None:
    assert evaluate_condition([_p("row_count", ">", 1)], snapshot) in (None, False)


def test_features_are_looked_up_exactly_as_they_were_flattened() -> None:
    deep = {"a": {"b": {"c": {"d": {"e": {"f": 1, "g": {"h": 2}}}}}}}
    flat = flatten_context(deep)
    assert evaluate_condition([_p("a.b.c.d.e.f", "==", 1)], deep) is True
    assert "a.b.c.d.e.g.h" not in flat
    assert evaluate_condition([_p("a.b.c.d.e.g.h", "==", 2)], deep) is None  # past the learner's depth
    dotted = {"table.rows": 5}
    assert evaluate_condition([_p("table.rows", "==", 5)], dotted) is True


def test_one_flattening_serves_many_conditions() -> None:
    features = flatten_context(SNAPSHOT)
    assert evaluate_features([_p("row_count", ">", 50)], features) is True
    assert evaluate_features(Condition(predicates=(_p("x", "==", 1),)), features) is None
