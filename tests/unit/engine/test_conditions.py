from __future__ import annotations

from actors.engine import flatten_context, learn_condition
from actors.engine.conditions import holds
from cluster.experience.templates import Predicate


def test_nested_context_flattens_to_dotted_paths_and_list_lengths() -> None:
    ctx = {"table": {"rows": 5, "schema": {"uniform": True}}, "tools": ["a", "b"], "goal": "x", "none": None}
    assert flatten_context(ctx) == {
        "table.rows": 5,
        "table.schema.uniform": True,
        "len(tools)": 2,
        "goal": "x",
        "none": None,
    }


def test_numeric_threshold_sits_between_the_closest_values_of_each_side() -> None:
    learned = learn_condition([{"n": 100}, {"n": 150}, {"n": 500}], [{"n": 10}, {"n": 20}])
    assert learned is not None
    assert learned.predicates == (Predicate(feature="n", op=">", value=60),)
    assert (learned.covered_positive, learned.covered_negative) == (3, 0)
    assert learned.precision == 1.0
    assert learned.strength == 1.0


def test_threshold_can_point_down() -> None:
    learned = learn_condition([{"n": 1.5}, {"n": 2.0}], [{"n": 9.0}])
    assert learned is not None
    assert learned.predicates[0].op == "<="
    assert 2.0 <= learned.predicates[0].value < 9.0  # type: ignore[operator]


def test_categorical_feature_separates_by_equality() -> None:
    learned = learn_condition(
        [{"enc": "utf-8"}, {"enc": "utf-8"}, {"enc": "utf-8"}], [{"enc": "latin-1"}, {"enc": "cp1252"}]
    )
    assert learned is not None
    assert learned.predicates == (Predicate(feature="enc", op="==", value="utf-8"),)


def test_boolean_features_are_categories() -> None:
    learned = learn_condition([{"uniform": True}, {"uniform": True}], [{"uniform": False}, {"uniform": False}])
    assert learned is not None
    assert learned.predicates == (Predicate(feature="uniform", op="==", value=True),)
    assert holds(learned.predicates[0], {"uniform": True})
    assert not holds(learned.predicates[0], {"uniform": "True"})


def test_id_like_features_are_not_used() -> None:
    assert learn_condition([{"run": "a1"}, {"run": "b2"}, {"run": "c3"}], [{"run": "d4"}, {"run": "e5"}]) is None


def test_nothing_separates_identical_contexts() -> None:
    assert learn_condition([{"n": 5}], [{"n": 5}]) is None


def test_a_refining_predicate_excludes_remaining_negatives() -> None:
    pos = [{"n": 100, "enc": "utf-8"}, {"n": 500, "enc": "utf-8"}, {"n": 400, "enc": "utf-8"}]
    neg = [{"n": 10, "enc": "utf-8"}, {"n": 20, "enc": "utf-8"}, {"n": 300, "enc": "latin-1"}]
    learned = learn_condition(pos, neg)
    assert learned is not None
    assert [p.feature for p in learned.predicates] == ["n", "enc"]
    assert learned.covered_negative == 0


def test_missing_features_never_hold() -> None:
    assert not holds(Predicate(feature="n", op=">", value=1), {})
    assert not holds(Predicate(feature="n", op=">", value=1), {"n": "many"})
