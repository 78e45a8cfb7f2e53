"""Properties of the condition learner and of generalization, over random evidence.

Stated exactly:

* A learned condition never contradicts its own evidence: evaluated with
  :func:`evaluate_features` on the runs it was learned from, it is True on exactly
  ``covered_positive`` positive and ``covered_negative`` negative runs; on a run that has all
  its features it is never None, and None only on a run lacking one (a False predicate still
  makes it False there).
* It separates something and nothing is padding: it covers a positive, leaves out a negative,
  covers a larger share of positives than of negatives, and dropping any one predicate changes
  which runs it covers.
* It does not depend on the order of the runs.
* Every template distilled from trajectories holds (True) on the context of every decision it
  cites as evidence.
* Generalization is deterministic: the same samples in any order give the same pattern.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from actors.engine import attribute_batch, evaluate_condition, evaluate_features, generalize_params, learn_condition
from actors.engine.features import Features
from actors.engine.model.templates import Predicate
from actors.engine.model.trajectories import Trajectory
from tests.unit.engine.test_properties import trajectories

REGIONS = st.sampled_from(["eu", "us", "uk", "ap", "sa"])


@st.composite
def runs(draw: st.DrawFn) -> dict[str, Any]:
    run: dict[str, Any] = {"region": draw(REGIONS), "n": draw(st.integers(0, 60))}
    if draw(st.booleans()):
        run["ok"] = draw(st.booleans())
    if draw(st.integers(0, 4)) == 0:
        del run["region"]  # some runs lack a feature
    if draw(st.booleans()):
        run["ratio"] = draw(st.floats(0, 1, allow_nan=False))
    return run


evidence = st.lists(runs(), min_size=1, max_size=24)


def _covered(predicates: Any, group: list[Features]) -> list[bool | None]:
    return [evaluate_features(predicates, f) for f in group]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evidence, evidence, st.integers(1, 2))
# Two adjacent floats: no number lies between them, so the threshold must be the lower one.
@example(pos=[{"n": 0}, {"n": 0, "ratio": 1.0}, {"n": 0, "ratio": 0.9999999999999999}], neg=[{"n": 0}], k=1)
def test_a_learned_condition_never_contradicts_its_evidence(pos: list[Features], neg: list[Features], k: int) -> None:
    learned = learn_condition(pos, neg, max_tests=k)
    if learned is None:
        return
    preds = learned.predicates
    on_pos, on_neg = _covered(preds, pos), _covered(preds, neg)
    assert on_pos.count(True) == learned.covered_positive
    assert on_neg.count(True) == learned.covered_negative
    for f, result in zip(pos + neg, on_pos + on_neg, strict=True):
        assert result is not None or any(p.feature not in f for p in preds)
    assert learned.covered_positive > 0
    assert learned.covered_negative < len(neg)
    assert learned.covered_positive * len(neg) > learned.covered_negative * len(pos)
    everything = pos + neg
    full = _covered(preds, everything)
    for i in range(len(preds)):
        assert _covered(preds[:i] + preds[i + 1 :], everything) != full, f"{preds[i].render()} separates nothing"
    assert len({p.feature for p in preds}) <= k


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evidence, evidence, st.randoms(use_true_random=False))
def test_the_learned_condition_does_not_depend_on_run_order(pos: list[Features], neg: list[Features], rnd: Any) -> None:
    shuffled_pos, shuffled_neg = list(pos), list(neg)
    rnd.shuffle(shuffled_pos)
    rnd.shuffle(shuffled_neg)
    assert learn_condition(pos, neg) == learn_condition(shuffled_pos, shuffled_neg)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(trajectories(), min_size=1, max_size=5))
def test_every_template_holds_on_the_decisions_it_cites(batch: list[Trajectory]) -> None:
    contexts = {n.node_id: n.context_snapshot for t in batch for n in t.nodes}
    for result in attribute_batch(batch):
        for template in result.templates:
            for prov in template.provenance:
                for node_id in prov.node_ids:
                    assert evaluate_condition(template.condition, contexts[node_id]) is True


VALUES = st.sampled_from(
    [
        "14/03/2026",
        "2026-03-15",
        "image/png",
        "text/csv",
        "16/9",
        "4:3",
        "v1.2",
        "1.2.3",
        "/tmp/a.csv",
        "/data/b.json",
        "utf-8",
        "latin-1",
        "#btn-1",
        "[type=submit]",
        "https://x.test/a",
        "42",
        "staging_88ac38",
        "",
    ]
)
PARAM = st.one_of(VALUES, st.integers(0, 5), st.booleans(), st.none(), st.lists(VALUES, max_size=2))


@st.composite
def samples(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    params = draw(st.dictionaries(st.sampled_from(["file", "due", "mime", "n", "sel", "opts"]), PARAM, max_size=4))
    if draw(st.booleans()):
        params["nested"] = {"x": draw(PARAM)}
    context = draw(st.dictionaries(st.sampled_from(["deadline", "tables", "rows"]), PARAM, max_size=2))
    return params, context


@settings(max_examples=200, deadline=None)
@given(st.lists(samples(), min_size=1, max_size=5), st.randoms(use_true_random=False))
def test_generalization_is_deterministic_in_any_order(batch: list[Any], rnd: Any) -> None:
    pattern = generalize_params(batch)
    shuffled = list(batch)
    rnd.shuffle(shuffled)
    assert generalize_params(shuffled) == pattern
    assert generalize_params(batch) == pattern
    assert "" not in _leaves(pattern)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    return [value]


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5))
JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner), max_leaves=15
)
FEATURES = st.sampled_from(["a", "a.b", "len(a)", "b.c.d", "", "x", "len(a.b)"])


@st.composite
def predicates(draw: st.DrawFn) -> Predicate:
    op = draw(st.sampled_from([">", ">=", "<", "<=", "==", "!=", "in", "contains"]))
    feature = draw(FEATURES) or "a"
    finite = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=3)
    )
    value = draw(st.lists(finite, min_size=1, max_size=3)) if op == "in" else draw(finite)
    return Predicate(feature=feature, op=op, value=value)


@settings(max_examples=300, deadline=None)
@given(JSON, st.lists(predicates(), max_size=4))
def test_evaluation_is_total_on_any_json(snapshot: Any, preds: list[Predicate]) -> None:
    result = evaluate_condition(preds, snapshot)
    assert result in (True, False, None)
    if not isinstance(snapshot, dict):
        assert result is (None if preds else True)  # no object, no features: unknown
