from __future__ import annotations

import uuid

from pydantic import JsonValue

from actors.engine import contradicted, merge_into_library
from actors.engine.model.templates import (
    ActionPattern,
    Condition,
    EvidenceKind,
    ExperienceTemplate,
    Predicate,
    Provenance,
    Support,
)
from actors.engine.retire import ActionOutcome, repaired, retire, successor_id, tighten
from tests.unit.engine.builders import T0


def _multipart(*predicates: Predicate, avoid: str = "put_object") -> ExperienceTemplate:
    return ExperienceTemplate(
        role="agent",
        task_type="upload",
        signature="upload-sig",
        condition=Condition(predicates=predicates),
        recommended=ActionPattern(tool="multipart_upload", params={"key": "<path>", "part_mb": 16}),
        avoid=ActionPattern(tool=avoid, params={"key": "<path>"}),
        support=Support(successes=3, failures=3, trajectories=3),
        confidence=0.8,
        created_at=T0,
        updated_at=T0,
    )


def _band(low: float, high: float) -> tuple[Predicate, Predicate]:
    return (Predicate(feature="size_mb", op=">", value=low), Predicate(feature="size_mb", op="<=", value=high))


def _run(size: JsonValue, ok: bool, action: str = "multipart_upload", **params: JsonValue) -> ActionOutcome:
    return ActionOutcome(
        signature="upload-sig",
        action=action,
        params=params or {"key": "backups/a.zip", "part_mb": 16},
        context={"size_mb": size, "archives": ["backups/a.zip"]},
        succeeded=ok,
    )


RUNS = [_run(20.0, True), _run(300.0, True), _run(500.0, True)]


def test_a_failure_beyond_the_last_success_tightens_the_bound_to_the_midpoint() -> None:
    found = tighten(_multipart(*_band(8.5, 1373.45)), [*RUNS, _run(616.0, False)])
    assert found is not None
    predicates, why = found
    assert Predicate(feature="size_mb", op="<=", value=558.0) in predicates
    assert Predicate(feature="size_mb", op=">", value=8.5) in predicates
    assert "above 500" in why


def test_an_open_ended_threshold_gets_the_missing_bound() -> None:
    found = tighten(_multipart(Predicate(feature="size_mb", op=">", value=8.5)), [*RUNS, _run(2000.0, False)])
    assert found is not None
    assert found[0] == (
        Predicate(feature="size_mb", op=">", value=8.5),
        Predicate(feature="size_mb", op="<=", value=1250.0),
    )


def test_failures_among_the_successes_are_noise_and_contradict_nothing() -> None:
    runs = [*RUNS, _run(250.0, False), _run(40.0, False)]
    assert tighten(_multipart(*_band(8.5, 1373.45)), runs) is None


def test_outcomes_outside_the_condition_or_of_other_calls_are_not_evidence() -> None:
    runs = [
        *RUNS,
        _run(2000.0, False),  # outside the band
        _run(700.0, False, action="resumable_upload", key="backups/a.zip", chunk_mb=64),
        _run(700.0, False, key="backups/a.zip", part_mb=64),  # another part size than the template's
        _run(700.0, False).model_copy(update={"signature": "another-decision"}),
    ]
    assert tighten(_multipart(*_band(8.5, 1373.45)), runs) is None


def test_a_feature_the_condition_does_not_test_is_never_used() -> None:
    runs = [
        *(r.model_copy(update={"context": {**r.context, "retries": 1}}) for r in RUNS),
        ActionOutcome(
            signature="upload-sig",
            action="multipart_upload",
            params={"key": "k", "part_mb": 16},
            context={"size_mb": 200.0, "retries": 9},
            succeeded=False,
        ),
    ]
    assert tighten(_multipart(*_band(8.5, 1373.45)), runs) is None


# "render rather than rasterize for these MIME types"
RENDER = ExperienceTemplate(
    signature="s",
    condition=Condition(predicates=(Predicate(feature="mime", op="in", value=["a", "b", "c"]),)),
    recommended=ActionPattern(tool="render"),
    avoid=ActionPattern(tool="rasterize"),
)


def _mime(action: str, mime: str, ok: bool) -> ActionOutcome:
    return ActionOutcome(signature="s", action=action, context={"mime": mime}, succeeded=ok)


def test_a_set_value_that_never_worked_leaves_the_set() -> None:
    def run(mime: str, ok: bool) -> ActionOutcome:
        return _mime("render", mime, ok)

    found = tighten(RENDER, [run("a", True), run("b", True), run("c", False), run("b", False)])
    assert found is not None
    assert found[0] == (Predicate(feature="mime", op="in", value=["a", "b"]),)


def test_a_contradicted_template_is_retired_with_its_reason_and_a_repaired_successor() -> None:
    old = _multipart(*_band(8.5, 1373.45))
    retirement = retire(old, [*RUNS, _run(616.0, False)])
    assert retirement is not None
    assert retirement.retired.template_id == old.template_id
    assert retirement.retired.retired_reason is not None
    assert "multipart_upload failed in 1 run(s) with size_mb above 500" in retirement.retired.retired_reason
    assert retirement.successor is not None
    assert retirement.successor.template_id == successor_id(old.template_id)
    assert retirement.successor.retired_reason is None
    assert retirement.successor.condition.render() == "8.5 < size_mb <= 558.0"
    assert retirement.successor.support == old.support
    assert retire(retirement.retired, [*RUNS, _run(616.0, False)]) is None  # retired once


def test_the_merge_retires_a_stale_template_and_stores_its_successor() -> None:
    old = _multipart(*_band(8.5, 1373.45))
    result = merge_into_library([old], [], [*RUNS, _run(616.0, False)])
    assert [t.template_id for t in result.retired] == [old.template_id]
    assert [t.template_id for t in result.new] == [successor_id(old.template_id)]
    assert result.updated == ()


def test_a_retired_template_takes_no_merges_and_its_relearned_twin_joins_the_successor() -> None:
    old = _multipart(*_band(8.5, 1373.45))
    first = merge_into_library([old], [], [*RUNS, _run(616.0, False)])
    stored = list(first.library)
    # The same rule learned again (same content, so the same id) merges into the successor.
    again = merge_into_library(stored, [old.model_copy(update={"condition": Condition(predicates=_band(8.5, 540.0))})])
    assert again.retired == ()
    assert [t.template_id for t in again.updated] == [successor_id(old.template_id)]
    assert all(t.retired_reason is None for t in again.updated)


def test_without_outcomes_the_merge_is_unchanged() -> None:
    old = _multipart(*_band(8.5, 1373.45))
    result = merge_into_library([old], [_multipart(*_band(8.5, 1300.0))])
    assert result.retired == ()
    assert len(result.updated) == 1


def test_a_new_template_is_repaired_before_it_is_stored() -> None:
    new = _multipart(Predicate(feature="size_mb", op=">", value=8.5))
    result = merge_into_library([], [new], [*RUNS, _run(2000.0, False)])
    assert result.retired == ()
    assert [t.condition.render() for t in result.new] == ["8.5 < size_mb <= 1250.0"]
    assert repaired(new, RUNS) is new


def test_the_stale_rule_learned_again_adds_its_support_to_the_successor_and_keeps_its_bound() -> None:
    old = _multipart(Predicate(feature="size_mb", op=">", value=8.5))
    first = merge_into_library([old], [], [*RUNS, _run(2000.0, False)])
    relearned = old.model_copy(update={"support": Support(successes=5, failures=3, trajectories=5)})
    again = merge_into_library(list(first.library), [relearned])
    (successor,) = again.updated
    assert successor.template_id == successor_id(old.template_id)
    assert successor.condition.render() == "8.5 < size_mb <= 1250.0"


def test_a_rebuild_keeps_the_previous_templates_its_evidence_contradicts_retired_and_only_those() -> None:
    stale = _multipart(*_band(8.5, 1373.45))
    sound = _multipart(*_band(8.5, 400.0))
    gone = stale.model_copy(update={"template_id": successor_id(stale.template_id), "retired_reason": "earlier"})
    found = contradicted([stale, sound, gone], [*RUNS, _run(616.0, False)])
    assert [t.template_id for t in found] == [stale.template_id]
    assert found[0].retired_reason is not None
    assert "multipart_upload failed in 1 run(s) with size_mb above 500" in found[0].retired_reason
    assert "replaced by" not in found[0].retired_reason  # the rebuild's own templates replace it
    assert found[0].condition == stale.condition
    assert contradicted([stale], []) == []


def _put(size: JsonValue, ok: bool) -> ActionOutcome:
    return _run(size, ok, action="put_object", key="backups/a.zip")


def test_an_avoided_call_that_worked_beyond_where_it_failed_moves_the_bound() -> None:
    # "put_object fails above 8.5 MB", learned from failures at 20-500 MB; it then worked at 2 GB.
    template = _multipart(Predicate(feature="size_mb", op=">", value=8.5))
    runs = [_put(20.0, False), _put(300.0, False), _put(500.0, False), _put(2000.0, True)]
    found = tighten(template, runs)
    assert found is not None
    predicates, why = found
    assert predicates == (
        Predicate(feature="size_mb", op=">", value=8.5),
        Predicate(feature="size_mb", op="<=", value=1250.0),
    )
    assert why == "put_object worked in 1 run(s) with size_mb above 500, where it last failed"
    # Worked among its failures: scattered, like the recommended call's noise, it contradicts nothing.
    assert tighten(template, [_put(20.0, False), _put(300.0, True), _put(500.0, False)]) is None


def test_a_set_value_where_the_avoided_call_never_failed_leaves_the_set() -> None:
    def run(mime: str, ok: bool) -> ActionOutcome:
        return _mime("rasterize", mime, ok)

    found = tighten(RENDER, [run("a", False), run("b", False), run("c", True)])
    assert found is not None
    assert found == (
        (Predicate(feature="mime", op="in", value=["a", "b"]),),
        "rasterize never failed where mime is 'c'",
    )
    assert tighten(RENDER, [run("a", False), run("c", False), run("c", True)]) is None


def test_an_avoided_call_that_only_costs_more_may_work_anywhere() -> None:
    # Avoided as the costlier way: its working is what the template says, not against it.
    costlier = _multipart(Predicate(feature="size_mb", op=">", value=8.5)).model_copy(
        update={"provenance": (Provenance(trajectory_id=uuid.uuid4(), kind=EvidenceKind.AVOIDED_COSTLIER),)}
    )
    assert costlier.avoid_reason == "costlier"
    assert tighten(costlier, [_put(20.0, False), _put(2000.0, True)]) is None
