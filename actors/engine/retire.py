"""Retiring templates the pooled evidence contradicts.

A template learned early from few runs keeps its condition for ever unless something replaces
it: ``size_mb <= 1373`` for ``multipart_upload``, learned before any archive between 512 and
1373 MB was tried, still holds there after three multipart uploads of such archives failed.
Merging fixes a bound only where a new template of the same shape is learned (its threshold
replaces the old one when the batch's pool held the old evidence, :mod:`actors.engine.library`),
and ranking around it works only where another template happens to outrank it.

So every batch brings its *outcomes*: each decision of the batch and of the stored history
that attribution pooled, at a signature the batch touched, with the action, its parameters, the
context and whether it worked (:class:`ActionOutcome`). A template is *contradicted* when, among
the runs where its condition holds and its recommended call was made (:func:`fits_pattern`),

* on a numeric feature its condition tests, at least :data:`MIN_FAILURES` runs failed beyond
  the farthest success (above the highest or below the lowest value where it worked): a bound
  on that feature, between the last success and the first failure, separates them; or
* a value of a string set it tests was tried at least :data:`MIN_FAILURES` times and never
  worked.

A template that avoids a call because it *fails* (not one that only costs more) makes a claim
about that call too, judged the same way with the outcomes turned round: the avoided call
worked beyond the farthest place it failed on a tested feature, or a value of a tested set
where it was tried and never failed. Its recommended call may work everywhere (the safe, costly
tool), so without this a threshold that once split the avoided call's few runs by luck would
never meet a run that contradicts it.

Only features the condition already names are looked at: finding a new feature that splits the
failures is learning, and on small samples an irrelevant feature splits a few failures by luck.
Scattered failures (noise: the right call failing at random now and then) sit among the
successes and contradict nothing. The evidence needed is the learner's own: a threshold sits
midway between neighbouring observed values, so the repaired bound is where a fresh learner
would put it.

A contradicted template is *repaired*: :func:`tighten` gives its condition with the bound moved
(or added) and the value dropped. A stored one is not edited in place: it is retired (kept, with
``retired_reason``, never served) and its repaired successor takes its place, so the library
shows what was believed and why it changed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence

from pydantic import Field, JsonValue

from actors.engine.evaluation import evaluate_condition, is_string_set, set_of, set_predicate
from actors.engine.features import flatten_context
from actors.engine.generalize import fits_pattern
from actors.engine.model.templates import ActionPattern, ExperienceTemplate, Predicate
from cluster.core.types import Frozen, JsonObject

MIN_FAILURES = 1
SUCCESSOR_NAMESPACE = uuid.UUID("0c9e6a52-1d7b-4f3e-a8c4-5b2f9d7e6a10")


class ActionOutcome(Frozen):
    """One decision as evidence against templates: what was called, where, and whether it worked."""

    signature: str
    action: str
    params: JsonObject = Field(default_factory=dict)
    context: JsonObject = Field(default_factory=dict)
    succeeded: bool
    trajectory_id: uuid.UUID | None = Field(default=None, description="The run it came from; None when unknown.")
    pool: uuid.UUID | None = Field(
        default=None,
        description="The attribution pool (a batch and its history) it was seen in, named after the batch's first "
        "trajectory: the templates learned there saw it. None when unknown.",
    )


def successor_id(template_id: uuid.UUID) -> uuid.UUID:
    """The id of the template that replaces a retired one (stable, so a retried batch finds it)."""
    return uuid.uuid5(SUCCESSOR_NAMESPACE, str(template_id))


def _number(value: JsonValue) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _feature(context: Mapping[str, JsonValue], path: str) -> JsonValue:
    """The feature as the learner saw it (dotted path, a list as its length)."""
    return flatten_context(context).get(path)


def _midpoint(a: float, b: float, integers: bool) -> JsonValue:
    mid = (a + b) / 2
    return round(mid) if integers and round(mid) not in (a, b) else float(f"{mid:.6g}")


def calls_inside(
    template: ExperienceTemplate, call: ActionPattern, outcomes: Iterable[ActionOutcome]
) -> list[ActionOutcome]:
    """The outcomes of ``call`` (the template's recommended or avoided pattern) at its decision where its
    condition holds."""
    return [
        o
        for o in outcomes
        if o.signature == template.signature
        and o.action == call.tool
        and fits_pattern(call.params, o.params, o.context)
        and evaluate_condition(template.condition, o.context) is True
    ]


_SAID = ("worked", "failed")
"""How a reason names a run that agrees with the template, and one that contradicts it."""
_SAID_AVOIDED = ("failed", "worked")


def tighten(
    template: ExperienceTemplate, outcomes: Sequence[ActionOutcome]
) -> tuple[tuple[Predicate, ...], str] | None:
    """The repaired predicates and why, or None when the evidence does not contradict the template.

    The predicates are empty when nothing of the condition survives (every value of its set
    failed): then there is no successor.
    """
    predicates = list(template.condition.predicates)
    reasons: list[str] = []
    sides = [(template.recommended.tool, calls_inside(template, template.recommended, outcomes), _SAID)]
    if template.avoid is not None and template.avoid_reason == "fails":
        # The claim "it fails here", judged as the claim "it works here" with outcomes turned round.
        avoided = calls_inside(template, template.avoid, outcomes)
        sides.append(
            (template.avoid.tool, [o.model_copy(update={"succeeded": not o.succeeded}) for o in avoided], _SAID_AVOIDED)
        )
    for tool, inside, said in sides:
        if not any(not o.succeeded for o in inside):
            continue
        for feature in dict.fromkeys(p.feature for p in template.condition.predicates):
            if any(is_string_set(p) for p in predicates if p.feature == feature):
                predicates, why = _drop_values(predicates, feature, inside, said)
            else:
                predicates, why = _tighten_bounds(predicates, feature, inside, said)
            if why:
                reasons.append(f"{tool} {why}")
            if not predicates:
                return (), "; ".join(reasons)
    if not reasons:
        return None
    return tuple(predicates), "; ".join(reasons)


def _drop_values(
    predicates: list[Predicate], feature: str, inside: Sequence[ActionOutcome], said: tuple[str, str]
) -> tuple[list[Predicate], str]:
    values: dict[str, list[bool]] = {}
    for o in inside:
        value = _feature(o.context, feature)
        if isinstance(value, str):
            values.setdefault(value, []).append(o.succeeded)
    dead = sorted(v for v, runs in values.items() if len(runs) >= MIN_FAILURES and not any(runs))
    if not dead:
        return predicates, ""
    why = f"never {said[0]} where {feature} is {', '.join(map(repr, dead))}"
    out: list[Predicate] = []
    for p in predicates:
        if p.feature != feature or not is_string_set(p):
            out.append(p)
            continue
        kept = set_of(p) - set(dead)
        if not kept:
            return [], why
        out.append(set_predicate(feature, kept))
    return out, why


def _tighten_bounds(
    predicates: list[Predicate], feature: str, inside: Sequence[ActionOutcome], said: tuple[str, str]
) -> tuple[list[Predicate], str]:
    runs = [(x, o.succeeded) for o in inside if (x := _number(_feature(o.context, feature))) is not None]
    worked = [x for x, ok in runs if ok]
    if not worked:
        return predicates, ""  # nothing to keep a bound around: the whole template is in doubt, not one end
    integers = all(isinstance(_feature(o.context, feature), int) for o in inside)
    low, high = min(worked), max(worked)
    above = sorted(x for x, ok in runs if not ok and x > high)
    below = sorted((x for x, ok in runs if not ok and x < low), reverse=True)
    reasons: list[str] = []
    if len(above) >= MIN_FAILURES:
        bound = _midpoint(high, above[0], integers)
        predicates = [p for p in predicates if not (p.feature == feature and p.op in ("<", "<="))]
        predicates.append(Predicate(feature=feature, op="<=", value=bound))
        reasons.append(f"{said[1]} in {len(above)} run(s) with {feature} above {_text(high)}, where it last {said[0]}")
    if len(below) >= MIN_FAILURES:
        bound = _midpoint(low, below[0], integers)
        predicates = [p for p in predicates if not (p.feature == feature and p.op in (">", ">="))]
        predicates.append(Predicate(feature=feature, op=">", value=bound))
        reasons.append(f"{said[1]} in {len(below)} run(s) with {feature} below {_text(low)}, where it first {said[0]}")
    return predicates, " and ".join(reasons)


def _text(x: float) -> str:
    return str(int(x)) if x == int(x) else f"{x:g}"


class Retirement(Frozen):
    """A stored template the evidence contradicts, retired, and the repaired one that replaces it."""

    retired: ExperienceTemplate
    successor: ExperienceTemplate | None = None


def retire(template: ExperienceTemplate, outcomes: Sequence[ActionOutcome]) -> Retirement | None:
    """Retire ``template`` if ``outcomes`` contradict it (see the module docstring); None otherwise.

    The successor keeps everything but the condition (and its id, :func:`successor_id`); its
    condition description is dropped, since it described the old predicates.
    """
    if template.retired_reason is not None:
        return None
    found = tighten(template, outcomes)
    if found is None:
        return None
    predicates, why = found
    successor = None
    if predicates:
        successor = template.model_copy(
            update={
                "template_id": successor_id(template.template_id),
                "condition": template.condition.model_copy(update={"predicates": predicates, "description": ""}),
            }
        )
    reason = f"contradicted by later evidence: {why}"
    if successor is not None:
        reason += f"; replaced by {successor.template_id}"
    return Retirement(retired=template.model_copy(update={"retired_reason": reason[:500]}), successor=successor)


def repaired(template: ExperienceTemplate, outcomes: Sequence[ActionOutcome]) -> ExperienceTemplate | None:
    """A template not stored yet, with its condition repaired in place; None when nothing of it survives."""
    found = tighten(template, outcomes)
    if found is None:
        return template
    predicates, _ = found
    if not predicates:
        return None
    return template.model_copy(
        update={"condition": template.condition.model_copy(update={"predicates": predicates, "description": ""})}
    )
