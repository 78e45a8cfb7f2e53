"""Conditions with alternatives: learned where the evidence needs "A or B", and only there."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.engine import attribute_batch, evaluate_condition, evaluate_features
from actors.engine.disjunction import learn_disjunction, render_alternatives
from actors.engine.features import Features
from actors.engine.model.templates import Predicate
from actors.engine.model.trajectories import Trajectory
from tests.unit.engine.builders import Builder
from tests.unit.engine.test_learner_properties import evidence


def _export(encoding: str, non_ascii: bool, rows: int) -> dict[str, Any]:
    return {"default_encoding": encoding, "has_non_ascii": non_ascii, "row_count": rows}


def _pages(n: int, seed: int = 0) -> tuple[list[Features], list[Features]]:
    """Exporting works where the page is UTF-8 or the data is plain ASCII."""
    rng = random.Random(seed)
    pos, neg = [], []
    for _ in range(n):
        page = _export(rng.choice(["utf-8", "latin-1"]), rng.random() < 0.5, rng.randint(10, 5000))
        ok = page["default_encoding"] == "utf-8" or not page["has_non_ascii"]
        (pos if ok else neg).append(page)
    return pos, neg


def test_either_of_two_features_becomes_two_alternatives() -> None:
    pos, neg = _pages(60)
    learned = learn_disjunction(pos, neg)
    assert learned is not None
    assert set(learned.alternatives) == {
        (Predicate(feature="default_encoding", op="==", value="utf-8"),),
        (Predicate(feature="has_non_ascii", op="==", value=False),),
    }
    assert learned.errors == 0
    assert learned.predicates == learned.alternatives[0]


def test_one_conjunction_that_separates_needs_no_alternative() -> None:
    pos = [_export("utf-8", True, r) for r in (10, 50, 300, 900)] + [_export("utf-8", False, 20)]
    neg = [_export("latin-1", True, r) for r in (15, 70, 800)] + [_export("latin-1", False, 40)]
    learned = learn_disjunction(pos, neg)
    assert learned is not None
    assert learned.alternatives == ((Predicate(feature="default_encoding", op="==", value="utf-8"),),)


def test_a_few_positives_left_over_by_noise_earn_no_alternative() -> None:
    # region == 'eu' is the rule; two successes elsewhere are noise, however a feature splits them.
    pos = [{"region": "eu", "n": i, "tier": "gold"} for i in range(14)]
    pos += [{"region": "us", "n": 3, "tier": "free"}, {"region": "ap", "n": 4, "tier": "free"}]
    neg = [{"region": r, "n": i, "tier": "gold"} for i, r in enumerate(["us", "ap", "sa"] * 4)]
    learned = learn_disjunction(pos, neg)
    assert learned is not None
    assert learned.alternatives == ((Predicate(feature="region", op="==", value="eu"),),)


def test_an_alternative_never_covers_a_failure() -> None:
    # Left over by the first alternative: three successes and one failure with the same tier;
    # the failure rules that tier out, and nothing else tells the successes apart.
    pos = [{"region": "eu", "tier": "gold"} for _ in range(8)] + [{"region": "us", "tier": "free"} for _ in range(3)]
    neg = [{"region": "us", "tier": "gold"} for _ in range(6)] + [{"region": "ap", "tier": "free"}]
    learned = learn_disjunction(pos, neg)
    assert learned is not None
    assert learned.alternatives[0] == (Predicate(feature="region", op="==", value="eu"),)
    for alternative in learned.alternatives[1:]:
        assert not any(evaluate_features(alternative, f) for f in neg)


def test_an_alternative_is_read_off_a_failure_rule_that_covers_every_failure() -> None:
    # export_csv was tried once on a latin-1 page without accents; it failed only with both.
    pos = [_export("utf-8", i % 2 == 0, 10 + 250 * i % 997) for i in range(20)] + [_export("latin-1", False, 99)]
    neg = [_export("latin-1", True, 40 + 200 * i) for i in range(5)]
    learned = learn_disjunction(pos, neg)
    assert learned is not None
    assert learned.alternatives == (
        (Predicate(feature="default_encoding", op="==", value="utf-8"),),
        (Predicate(feature="has_non_ascii", op="==", value=False),),
    )
    # A success inside the failure rule: its negation would leave that one out, and no rule says so.
    learned = learn_disjunction([*pos, _export("latin-1", True, 31)], neg)
    assert learned is not None
    assert len(learned.alternatives) == 1


def test_alternatives_read_as_one_rule() -> None:
    utf8 = (Predicate(feature="default_encoding", op="==", value="utf-8"),)
    ascii_ = (Predicate(feature="has_non_ascii", op="==", value=False),)
    both = (Predicate(feature="n", op=">", value=3), Predicate(feature="region", op="==", value="eu"))
    assert render_alternatives([utf8, ascii_]) == "default_encoding == 'utf-8' or has_non_ascii == False"
    assert render_alternatives([utf8, both]) == "default_encoding == 'utf-8' or (n > 3 and region == 'eu')"
    assert render_alternatives([both]) == "n > 3 and region == 'eu'"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evidence, evidence, st.integers(1, 2))
def test_alternatives_never_contradict_their_evidence(pos: list[Features], neg: list[Features], k: int) -> None:
    learned = learn_disjunction(pos, neg, max_tests=k)
    if learned is None:
        return
    alternatives = learned.alternatives
    holds = [[evaluate_features(a, f) is True for a in alternatives] for f in pos + neg]
    on_pos, on_neg = holds[: len(pos)], holds[len(pos) :]
    assert sum(any(row) for row in on_pos) == learned.covered_positive
    assert sum(any(row) for row in on_neg) == learned.covered_negative
    for i in range(1, len(alternatives)):
        # A later alternative covers no failure and explains successes no earlier one explains.
        assert not any(row[i] for row in on_neg)
        assert any(row[i] and not any(row[:i]) for row in on_pos)
    assert len(set(alternatives)) == len(alternatives)


STEP = {"steps": 1}  # each call reports its cost: setting the encoding first costs one step more


def _export_run(run: int, encoding: str, non_ascii: bool, action: str) -> Trajectory:
    b = Builder(task_type="export")
    root = b.add("query_customers", context={"goal": "load"})
    path = f"exports/c_{run}.csv"
    ctx = {"goal": "export", **_export(encoding, non_ascii, 10 + run * 7919 % 4990), "files": [path]}
    actions = ["export_csv", "set_encoding", "export_xlsx"]
    if action == "export_csv":
        ok = encoding == "utf-8" or not non_ascii
        status = "success" if ok else "failure"
        b.add("export_csv", actions, parent=root, status=status, params={"path": path}, context=ctx, data=STEP)
        return b.build(status)
    step = b.add("set_encoding", actions, parent=root, params={"encoding": "utf-8"}, context=ctx, data=STEP)
    b.add("export_csv", ["export_csv"], parent=step, params={"path": path}, context={"goal": "write"}, data=STEP)
    return b.build("success")


def test_each_alternative_is_a_template_that_names_the_whole_rule() -> None:
    # Every page kind (UTF-8 or latin-1, accents or none) six times with each first action.
    cases = [
        (("utf-8", "latin-1")[i % 2], i // 2 % 2 == 1, ("export_csv", "set_encoding")[i // 4 % 2]) for i in range(48)
    ]
    runs = [_export_run(i, *case) for i, case in enumerate(cases)]
    results = attribute_batch(runs)
    templates = {t.template_id: t for r in results for t in r.templates}.values()
    direct = [t for t in templates if t.recommended.tool == "export_csv" and t.avoid and t.avoid.tool == "set_encoding"]
    assert {t.condition.render() for t in direct} == {"default_encoding == 'utf-8'", "has_non_ascii == False"}
    for t in direct:
        assert "default_encoding == 'utf-8' or has_non_ascii == False" in t.rationale
    # Every template still holds on each decision it cites.
    contexts = {n.node_id: n.context_snapshot for t in runs for n in t.nodes}
    for t in templates:
        for prov in t.provenance:
            assert all(evaluate_condition(t.condition, contexts[n]) is True for n in prov.node_ids)
