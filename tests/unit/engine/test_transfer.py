"""Conditions a person would write, end to end: one feature, several values, several actions."""

from __future__ import annotations

from actors.engine import attribute_batch, evaluate_condition, merge_into_library
from actors.engine.model.templates import ExperienceTemplate, Predicate
from actors.engine.model.trajectories import Trajectory
from tests.unit.engine.builders import Builder

CARRIERS = ["ship_ground", "ship_air", "ship_sea"]
RIGHT = {
    "de": "ship_ground",
    "fr": "ship_ground",
    "nl": "ship_ground",
    "us": "ship_air",
    "jp": "ship_air",
    "au": "ship_sea",
}


def _ship(region: str, action: str, run: int) -> Trajectory:
    ok = RIGHT[region] == action
    b = Builder(task_type="shipping")
    root = b.add("quote", context={"goal": "ship the order"})
    # count is noise: it must never end up in a condition
    ctx = {"goal": "ship the order", "region": region, "count": (run * 7) % 13, "order": {"weight_kg": 2}}
    status = "success" if ok else "failure"
    summary = None if ok else f"{action} does not serve {region}"
    b.add(action, CARRIERS, parent=root, status=status, context=ctx, summary=summary)
    return b.build(status)


def _all_runs(regions: list[str]) -> list[Trajectory]:
    return [_ship(r, a, i) for i, (r, a) in enumerate((r, a) for r in regions for a in CARRIERS)]


def _by_pair(templates: list[ExperienceTemplate]) -> dict[tuple[str, str], ExperienceTemplate]:
    return {(t.recommended.tool, t.avoid.tool if t.avoid else ""): t for t in templates}


def test_one_feature_maps_several_values_onto_several_actions() -> None:
    runs = _all_runs(list(RIGHT))
    templates = _by_pair([t for r in attribute_batch(runs) for t in r.templates])
    ground = templates[("ship_ground", "ship_air")]
    assert ground.condition.predicates == (Predicate(feature="region", op="in", value=["de", "fr", "nl"]),)
    air = templates[("ship_air", "ship_ground")]
    assert air.condition.predicates == (Predicate(feature="region", op="in", value=["jp", "us"]),)
    sea = templates[("ship_sea", "ship_air")]
    assert sea.condition.predicates == (Predicate(feature="region", op="==", value="au"),)
    for template in templates.values():
        assert all(p.feature == "region" for p in template.condition.predicates), template.render()
    assert ground.render().startswith("When region in {'de', 'fr', 'nl'}, prefer ship_ground()")


def test_served_by_situation_the_set_holds_on_an_unseen_run_of_a_listed_value() -> None:
    (ground,) = [
        t
        for r in attribute_batch(_all_runs(list(RIGHT)))
        for t in r.templates
        if (t.recommended.tool, t.avoid and t.avoid.tool) == ("ship_ground", "ship_air")
    ]
    assert evaluate_condition(ground.condition, {"region": "fr", "count": 99}) is True
    assert evaluate_condition(ground.condition, {"region": "us"}) is False
    assert evaluate_condition(ground.condition, {"count": 3}) is None


def test_batches_that_each_saw_one_value_merge_into_the_union() -> None:
    library: tuple[ExperienceTemplate, ...] = ()
    for region in ("de", "fr", "nl"):
        runs = _all_runs([region, "us"])
        library = merge_into_library(library, [t for r in attribute_batch(runs) for t in r.templates]).library
    ground = [t for t in library if (t.recommended.tool, t.avoid and t.avoid.tool) == ("ship_ground", "ship_air")]
    (merged,) = ground
    assert merged.condition.predicates == (Predicate(feature="region", op="in", value=["de", "fr", "nl"]),)
