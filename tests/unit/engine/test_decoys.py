"""Decoys (alternatives that never work at a decision point) give one template, not one each."""

from __future__ import annotations

import uuid

from actors.engine import attribute_batch, merge_into_library
from actors.engine.model.templates import ExperienceTemplate, Predicate
from actors.engine.model.trajectories import Trajectory
from actors.engine.templates import ALSO_AVOID, caveat_key
from tests.unit.engine.builders import Builder

SUBMIT_ACTIONS = ["click", "press_enter", "request_submit_api", "press_ctrl_enter"]
DECOY_ERRORS = {
    "request_submit_api": "no public API for this form",
    "press_ctrl_enter": "Ctrl+Enter is not bound on this page",
    "press_enter": "Enter moved focus to the next field",
}


def _form_run(tried: str, *, fields: int = 3, run: int = 0) -> Trajectory:
    """``tried`` (failed unless it is Enter on a one-field form) next to a click on the submit button."""
    b = Builder(role="executor", task_type="form")
    root = b.add("open_page", context={"goal": "open the form"})
    button = f"btn-{run:04x}a{run}"
    ctx = {"goal": "submit the form", "fields": fields, "elements": [{"id": button, "type": "submit"}]}
    ok = tried == "press_enter" and fields == 1
    b.add(
        tried,
        SUBMIT_ACTIONS,
        parent=root,
        status="success" if ok else "failure",
        context=ctx,
        summary=None if ok else DECOY_ERRORS[tried],
    )
    if not ok:
        b.add("click", SUBMIT_ACTIONS, parent=root, params={"selector": f"#{button}"}, context=ctx)
    return b.build("success")


def _templates(runs: list[Trajectory], history: list[Trajectory] | None = None) -> list[ExperienceTemplate]:
    return [t for r in attribute_batch(runs, history) for t in r.templates]


def test_several_decoys_against_one_recommended_action_give_one_template() -> None:
    runs = [
        _form_run("request_submit_api", run=1),
        _form_run("press_ctrl_enter", run=2),
        _form_run("request_submit_api", run=3),
    ]
    (template,) = _templates(runs)
    assert template.recommended.render() == 'click(selector="[type=submit]")'
    assert template.avoid is not None
    assert template.avoid.tool == "request_submit_api"  # failed most often
    assert template.condition.predicates == ()
    (caveat,) = template.caveats
    assert caveat.startswith(f"{ALSO_AVOID}press_ctrl_enter")
    assert "Ctrl+Enter is not bound" in caveat
    assert template.support.successes == 3
    assert template.support.failures == 3
    assert "request_submit_api failed" in template.rationale
    # Issue 48: the text said "failed in 2 run(s)" beside a support of 3 and 3; counts are in support only.
    assert "run(s)" not in template.rationale


def test_an_alternative_that_works_somewhere_keeps_a_template_of_its_own() -> None:
    runs = [
        _form_run("request_submit_api", run=1),
        _form_run("press_ctrl_enter", run=2),
        _form_run("press_enter", fields=4, run=3),
        _form_run("press_enter", fields=5, run=4),
        _form_run("press_enter", fields=1, run=5),
    ]
    templates = _templates(runs)
    avoided = sorted(t.avoid.tool for t in templates if t.avoid is not None and t.recommended.tool == "click")
    assert avoided == ["press_ctrl_enter", "press_enter"]  # decoys tie at one failure: alphabetical
    enter = next(t for t in templates if t.avoid is not None and t.avoid.tool == "press_enter")
    assert enter.condition.predicates == (Predicate(feature="fields", op=">", value=2),)


def test_a_later_batch_with_another_decoy_merges_into_the_same_template() -> None:
    first = [_form_run("request_submit_api", run=1), _form_run("request_submit_api", run=2)]
    library = merge_into_library([], _templates(first)).library
    later = [_form_run("press_ctrl_enter", run=3), _form_run("request_submit_api", run=4)]
    result = merge_into_library(library, _templates(later))
    assert result.new == ()
    assert result.supplementary == ()
    (merged,) = result.library
    assert merged.avoid is not None
    assert merged.avoid.tool == "request_submit_api"
    assert any(c.startswith(f"{ALSO_AVOID}press_ctrl_enter") for c in merged.caveats)
    assert merged.support.failures == 4


def test_decoy_templates_are_deterministic() -> None:
    runs = [_form_run("press_ctrl_enter", run=2), _form_run("request_submit_api", run=1)]
    assert _templates(runs) == _templates(runs)


def test_another_avoided_decoy_is_not_an_edge_case_but_a_narrower_condition_is() -> None:
    runs = [_form_run("request_submit_api", run=1), _form_run("request_submit_api", run=2)]
    (base,) = _templates(runs)
    assert base.avoid is not None
    other_decoy = base.model_copy(
        update={
            "template_id": uuid.UUID(int=base.template_id.int ^ 1),
            "avoid": base.avoid.model_copy(update={"tool": "submit_form_js"}),
        }
    )
    narrower = base.model_copy(
        update={
            "template_id": uuid.UUID(int=base.template_id.int ^ 2),
            "condition": base.condition.model_copy(
                update={"predicates": (Predicate(feature="fields", op=">", value=1),)}
            ),
        }
    )
    result = merge_into_library([base], [other_decoy, narrower])
    assert [t.avoid.tool for t in result.new if t.avoid] == ["submit_form_js"]
    (child,) = result.supplementary
    assert child.parent_id == base.template_id
    assert child.condition.predicates == (Predicate(feature="fields", op=">", value=1),)


def test_decoy_templates_from_batches_that_met_other_decoys_most_merge() -> None:
    first = [_form_run("request_submit_api", run=1), _form_run("press_ctrl_enter", run=2)]
    first += [_form_run("request_submit_api", run=3)]
    later = [_form_run("press_ctrl_enter", run=4), _form_run("press_ctrl_enter", run=5)]
    later += [_form_run("request_submit_api", run=6)]
    (a,) = _templates(first)
    (b,) = _templates(later)
    # Same id here (the decoy identity ignores which decoy came first); a near-duplicate anyway.
    b = b.model_copy(update={"template_id": uuid.UUID(int=b.template_id.int ^ 1)})
    assert (a.avoid and a.avoid.tool, b.avoid and b.avoid.tool) == ("request_submit_api", "press_ctrl_enter")
    result = merge_into_library([a], [b])
    (merged,) = result.library
    assert merged.avoid is not None
    assert merged.avoid.tool == "request_submit_api"
    assert [c.split(":")[0] for c in merged.caveats] == [f"{ALSO_AVOID}press_ctrl_enter"]
    assert merged.support.failures == 6


def test_caveats_that_list_other_run_values_are_not_a_new_edge_case() -> None:
    base = _templates([_form_run("request_submit_api", run=1), _form_run("request_submit_api", run=2)])[0]
    one = base.model_copy(update={"caveats": ("click failed when fields was 1; requires fields > 1",)})
    two = one.model_copy(
        update={
            "template_id": uuid.UUID(int=base.template_id.int ^ 1),
            "caveats": ("click failed when fields was 1 or 0; requires fields > 1",),
        }
    )
    result = merge_into_library([one], [two])
    assert result.supplementary == ()
    assert result.new == ()
    assert result.library[0].caveats == one.caveats
    assert caveat_key(one.caveats[0]) == caveat_key(two.caveats[0]) == "click failed when fields"
    assert caveat_key(f"{ALSO_AVOID}x: it failed here too (boom)") == "avoid x"
