from __future__ import annotations

import uuid
from types import SimpleNamespace

from actors.engine import attribute_batch, merge_into_library
from actors.engine.library import narrows
from actors.engine.model.templates import (
    ActionPattern,
    Condition,
    EvidenceKind,
    ExperienceTemplate,
    Predicate,
    Provenance,
    Support,
)
from actors.engine.retire import ActionOutcome
from actors.engine.templates import tested_ranges as ranges_of
from tests.unit.engine.builders import T0, bulk_vs_single_runs, insert_run


def _template(
    *,
    threshold: int = 60,
    caveats: tuple[str, ...] = (),
    role: str = "executor",
    tool: str = "bulk_import",
    evidence: int = 2,
    extra: tuple[Predicate, ...] = (),
) -> ExperienceTemplate:
    trajs = [uuid.uuid4() for _ in range(evidence)]
    return ExperienceTemplate(
        role=role,
        task_type="product_import",
        signature="sig",
        condition=Condition(predicates=(Predicate(feature="row_count", op=">", value=threshold), *extra)),
        recommended=ActionPattern(tool=tool, params={"file": "<csv_path>"}),
        avoid=ActionPattern(tool="add_item", params={"sku": "<str>"}),
        caveats=caveats,
        provenance=tuple(
            Provenance(trajectory_id=t, node_ids=(uuid.uuid4(),), kind=EvidenceKind.RECOMMENDED_SUCCEEDED)
            for t in trajs
        ),
        support=Support(successes=evidence, failures=0, trajectories=evidence),
        confidence=0.6,
        created_at=T0,
        updated_at=T0,
    )


def test_a_template_with_no_relative_is_new() -> None:
    t = _template()
    result = merge_into_library([], [t])
    assert result.new == (t,)
    assert result.updated == ()
    assert result.supplementary == ()
    assert result.library == (t,)


def test_near_duplicates_merge_and_add_support_instead_of_piling_up() -> None:
    old, new = _template(threshold=60), _template(threshold=80, evidence=3)
    result = merge_into_library([old], [new])
    assert result.new == ()
    assert result.supplementary == ()
    (merged,) = result.updated
    assert merged.template_id == old.template_id
    assert merged.support.successes == 5
    assert merged.support.trajectories == 5
    assert len(merged.provenance) == 5
    assert 60 < merged.condition.predicates[0].value < 80  # type: ignore[operator]
    assert merged.confidence > old.confidence
    assert len(result.library) == 1


def test_merging_the_same_evidence_twice_changes_nothing() -> None:
    old = _template()
    result = merge_into_library([old], [old.model_copy(update={"template_id": uuid.uuid4()})])
    assert result.updated == ()
    assert result.new == ()
    assert result.library == (old,)


def test_an_extra_caveat_becomes_a_supplementary_template_linked_to_its_parent() -> None:
    parent = _template()
    edge = _template(caveats=("escape single quotes before a bulk insert",))
    result = merge_into_library([parent], [edge])
    (child,) = result.supplementary
    assert child.parent_id == parent.template_id
    assert child.template_id == edge.template_id
    assert result.new == ()
    assert result.updated == ()


def test_a_narrower_condition_is_supplementary_and_a_far_threshold_too() -> None:
    parent = _template()
    narrower = _template(extra=(Predicate(feature="file.encoding", op="==", value="latin-1"),))
    far = _template(threshold=5000)
    result = merge_into_library([parent], [narrower, far])
    assert [t.parent_id for t in result.supplementary] == [parent.template_id, parent.template_id]


def test_other_roles_and_other_tools_never_merge() -> None:
    base = _template()
    result = merge_into_library([base], [_template(role="planner"), _template(tool="copy_from")])
    assert len(result.new) == 2
    assert result.updated == ()
    assert result.supplementary == ()


def test_duplicates_within_the_new_batch_merge_into_each_other() -> None:
    a, b = _template(), _template(threshold=70)
    result = merge_into_library([], [a, b])
    (only,) = result.new
    assert only.template_id == a.template_id
    assert only.support.successes == 4


def test_attribution_output_merges_idempotently_across_batches() -> None:
    runs = bulk_vs_single_runs()
    first = [t for r in attribute_batch(runs) for t in r.templates]
    library = merge_into_library([], first).library
    again = merge_into_library(library, [t for r in attribute_batch(runs) for t in r.templates])
    assert again.library == library

    more = [insert_run(700, "bulk_import", True, run=11), insert_run(900, "add_item", False, run=12)]
    later = [t for r in attribute_batch(more, history=runs) for t in r.templates]
    result = merge_into_library(library, later)
    (updated,) = result.updated
    assert updated.support.successes == 3
    assert updated.support.failures == 3
    assert updated.support.trajectories == 6


def test_merging_generalizes_params_and_never_keeps_an_empty_string() -> None:
    old = _template()
    old = old.model_copy(
        update={"recommended": ActionPattern(tool="bulk_import", params={"file": "", "table": "staging_88ac38"})}
    )
    new = _template(threshold=70).model_copy(
        update={"recommended": ActionPattern(tool="bulk_import", params={"file": "<csv_path>", "table": "<table>"})}
    )
    (merged,) = merge_into_library([old], [new]).updated
    assert merged.recommended.params == {"file": "<csv_path>", "table": "<table>"}
    assert merged.avoid == old.avoid


def test_an_unrelated_condition_or_another_avoided_tool_is_a_new_root_not_an_edge_case() -> None:
    parent = _template()
    other_feature = _template().model_copy(
        update={"condition": Condition(predicates=(Predicate(feature="schema_uniform", op="==", value=True),))}
    )
    broader = _template(threshold=20)  # 20 vs 60: too far apart to merge, and it widens
    other_avoid = _template().model_copy(update={"avoid": ActionPattern(tool="import_via_sftp")})
    result = merge_into_library([parent], [other_feature, broader, other_avoid])
    assert result.supplementary == ()
    assert len(result.new) == 3
    assert all(t.parent_id is None for t in result.library)


def test_narrows() -> None:
    gt = Predicate(feature="row_count", op=">", value=60)
    assert narrows((gt,), (gt, Predicate(feature="utf8", op="==", value=True)))
    assert narrows((gt,), (Predicate(feature="row_count", op=">", value=500),))
    assert narrows((), (gt,))
    assert not narrows((gt,), (gt,))
    assert not narrows((gt,), (Predicate(feature="row_count", op=">", value=10),))
    assert not narrows((gt,), (Predicate(feature="utf8", op="==", value=True),))


def _regional(region: str | list[str], *, tool: str = "bulk_import", avoid: str = "add_item") -> ExperienceTemplate:
    op = "in" if isinstance(region, list) else "=="
    t = _template().model_copy(
        update={
            "template_id": uuid.uuid4(),
            "condition": Condition(predicates=(Predicate(feature="region", op=op, value=region),)),
        }
    )
    return t.model_copy(
        update={"recommended": ActionPattern(tool=tool, params={}), "avoid": ActionPattern(tool=avoid, params={})}
    )


def test_per_value_templates_recommending_one_action_merge_into_one_set() -> None:
    result = merge_into_library([], [_regional("eu"), _regional("us"), _regional(["uk", "eu"])])
    (merged,) = result.library
    assert merged.condition.predicates == (Predicate(feature="region", op="in", value=["eu", "uk", "us"]),)
    assert merged.condition.render() == "region in {'eu', 'uk', 'us'}"
    assert merged.support.successes == 6


def test_a_value_the_opposite_template_claims_is_not_united_in() -> None:
    opposite = _regional("ap", tool="add_item", avoid="bulk_import")
    result = merge_into_library([_regional("eu"), opposite], [_regional("ap")])
    assert len(result.new) == 1
    assert result.library[0].condition.predicates == (Predicate(feature="region", op="==", value="eu"),)


def test_booleans_and_other_features_do_not_unite() -> None:
    yes = _template(extra=(Predicate(feature="utf8", op="==", value=True),))
    no = _template(extra=(Predicate(feature="utf8", op="==", value=False),))
    assert len(merge_into_library([], [yes, no]).library) == 2
    assert len(merge_into_library([], [_regional("eu"), _template()]).library) == 2


def test_a_smaller_set_narrows_a_larger_one() -> None:
    wide = Predicate(feature="region", op="in", value=["eu", "uk"])
    assert narrows((wide,), (Predicate(feature="region", op="==", value="eu"),))
    assert not narrows((wide,), (Predicate(feature="region", op="in", value=["uk", "eu"]),))


POOL = uuid.uuid4()


def _seen(template: ExperienceTemplate, *more: ExperienceTemplate) -> list[ActionOutcome]:
    """Outcomes naming the runs behind ``template`` (and ``more``): what the batch's pool held."""
    return [
        ActionOutcome(signature="sig", action="bulk_import", succeeded=True, trajectory_id=p.trajectory_id, pool=POOL)
        for t in (template, *more)
        for p in t.provenance
    ]


def test_a_threshold_learned_on_a_pool_holding_the_old_evidence_replaces_the_old_one() -> None:
    # The new template saw every run the old one was learned on, and more: its bound is where a
    # learner puts it on all the evidence, and an early, looser bound must not drag it outward.
    old, new = _template(threshold=60, evidence=5), _template(threshold=80, evidence=3)
    merged = merge_into_library([old], [new], _seen(old, new)).updated[0]
    assert merged.condition.predicates[0].value == 80
    assert merged.support.successes == 8


def test_old_evidence_outside_the_pool_still_weighs_against_the_new_threshold() -> None:
    old, new = _template(threshold=60, evidence=3), _template(threshold=80, evidence=3)
    # The pool held one of the old runs: two of its three count, against the new template's three.
    partly = _seen(new) + _seen(old)[:1]
    merged = merge_into_library([old], [new], partly).updated[0]
    assert merged.condition.predicates[0].value == 72  # (60 * 2 + 80 * 3) / 5
    # Without outcomes (a hand-made merge) the old support weighs against the fresh evidence.
    assert merge_into_library([old], [new]).updated[0].condition.predicates[0].value == 70


def test_batches_learned_with_their_history_end_on_the_bound_of_all_runs_together() -> None:
    runs = bulk_vs_single_runs()
    more = [insert_run(60, "add_item", True, run=7), insert_run(300, "bulk_import", True, run=8)]

    def bounds(templates: tuple[ExperienceTemplate, ...] | list[ExperienceTemplate]) -> set[tuple[str, object]]:
        return {(t.recommended.tool, p.value) for t in templates for p in t.condition.predicates}

    first = attribute_batch(runs)
    library = merge_into_library([], [t for r in first for t in r.templates], first[0].outcomes).library
    later = attribute_batch(more, history=runs)
    merged = merge_into_library(library, [t for r in later for t in r.templates], later[0].outcomes).library
    together = [t for r in attribute_batch(runs + more) for t in r.templates]
    assert bounds(together) == {("bulk_import", 105)}  # add_item worked at 60, failed at 150
    assert bounds(merged) == bounds(together)
    assert bounds(library) == {("bulk_import", 85)}  # the first batch alone: between 20 and 150
    # Weighed against the old bound's support, as before outcomes named their pool: neither.
    blind = merge_into_library(library, [t for r in later for t in r.templates]).library
    assert bounds(blind) == {("bulk_import", 89)}


def test_templates_say_where_their_call_was_tested_and_merges_unite_the_ranges() -> None:
    runs = bulk_vs_single_runs()
    (bulk,) = [t for r in attribute_batch(runs) for t in r.templates]
    assert bulk.condition.predicates == (Predicate(feature="row_count", op=">", value=85),)
    assert bulk.tested == {"row_count": (100.0, 500.0)}  # bulk_import worked at 100 and 500 rows
    later = attribute_batch(
        [insert_run(90, "bulk_import", True, run=9), insert_run(2000, "bulk_import", True, run=10)], history=runs
    )
    new = [t for r in later for t in r.templates]
    merged = merge_into_library([bulk], new, later[0].outcomes).library
    assert [t.tested for t in merged] == [{"row_count": (90.0, 2000.0)}]


def test_a_non_finite_value_never_enters_a_tested_range() -> None:
    # The learner reads only finite numbers as numeric values (evaluation.is_number); so does the range.
    worked = [SimpleNamespace(features={"row_count": v}) for v in (100, float("inf"), 500, float("nan"), True)]
    bound = (Predicate(feature="row_count", op=">", value=85),)
    assert ranges_of(bound, worked) == {"row_count": (100.0, 500.0)}  # type: ignore[arg-type]


def _when(template: ExperienceTemplate, *predicates: Predicate) -> ExperienceTemplate:
    return template.model_copy(update={"condition": Condition(predicates=predicates)})


def test_a_rule_learned_again_from_a_pool_holding_all_its_runs_supersedes_the_stored_one() -> None:
    # A threshold on a distractor split the first runs by luck; a learner that saw those runs and
    # more chose the region instead. Both still hold on the evidence, and only one is the lesson.
    lucky = _when(_template(evidence=3), Predicate(feature="weight", op=">", value=164))
    relearned = _when(_template(evidence=5), Predicate(feature="region", op="in", value=["eu", "uk"]))
    result = merge_into_library([lucky], [relearned], _seen(lucky, relearned))
    (retired,) = result.retired
    assert retired.template_id == lucky.template_id
    assert (
        retired.retired_reason
        == "superseded: learned again on all of its evidence and more, now region in {'eu', 'uk'}"
    )
    assert [t.template_id for t in result.new] == [relearned.template_id]
    assert [t.template_id for t in result.library if t.retired_reason is None] == [relearned.template_id]


def test_a_stored_rule_is_kept_when_the_pool_missed_some_of_its_runs_or_the_choice_differs() -> None:
    lucky = _when(_template(evidence=3), Predicate(feature="weight", op=">", value=164))
    relearned = _when(_template(evidence=5), Predicate(feature="region", op="in", value=["eu", "uk"]))
    # One of its runs was not in the pool: the new rule did not see all it rests on.
    assert merge_into_library([lucky], [relearned], _seen(relearned) + _seen(lucky)[1:]).retired == ()
    # Another recommended tool, or the same one against another tool, is another choice.
    other_tool = relearned.model_copy(update={"recommended": ActionPattern(tool="upsert", params={})})
    assert merge_into_library([lucky], [other_tool], _seen(lucky, other_tool)).retired == ()
    other_avoid = relearned.model_copy(update={"avoid": ActionPattern(tool="patch_item", params={})})
    assert merge_into_library([lucky], [other_avoid], _seen(lucky, other_avoid)).retired == ()
    # A merge into it is the same rule learned again, not a new one.
    again = _when(_template(evidence=2), Predicate(feature="weight", op=">", value=170))
    result = merge_into_library([lucky], [again], _seen(lucky, again))
    assert result.retired == ()
    assert len(result.updated) == 1
