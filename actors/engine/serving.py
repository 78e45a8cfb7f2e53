"""Serving by situation: does a template apply to the decision an agent faces now, and how to rank it.

An agent may send its situation with a query: the context snapshot, the actions it can take and
optionally a decision name. Each candidate template is then judged:

* **Another decision.** If the agent sent its available actions and the template's recommended
  tool is not among them, the template is for another decision: not applicable.
* **Condition.** Every predicate of the template's learned condition is evaluated on the
  snapshot (flattened as in :func:`~actors.engine.conditions.flatten_context`). A predicate on a
  feature the snapshot lacks is *unknown*, never false: the agent may simply not have sent it.
  One false predicate makes the template not applicable.
* **Same signature.** A template learned at exactly this decision signature (role, task type or
  goal words, action set, context keys) fits better than one that merely shares the tool.

* **Refined.** If a narrower version of a holding template (same advice, its predicates and more,
  or a stricter threshold) is false here, the broad one is only *unknown* (:func:`overruled`).
* **Advised against.** A template that applies is only *unknown* where another one that applies
  avoids its tool and it does not avoid that one's (it was learned against a third tool) — unless
  the other has no condition and this one's holds here (:func:`overruled`).
* **Retry.** A template's advice to retry its call once stands only where no other template that
  applies avoids that call as one that fails here (:func:`retry_stands`).

Whatever the conditions say, the library of a decision also knows which tools never worked there
(:func:`never_worked`): a decoy is avoided by the templates of each tool that works, under that
tool's condition; where no condition holds (a case not seen yet), the agent must still not try the
decoy first.

The fit becomes a number in [0, 1] (:data:`FIT`), and the ranking score blends it with the
template's confidence (feedback-driven: served-and-succeeded raises it) and the query's text
relevance (cosine, clipped at 0)::

    score = 0.5 * fit + 0.3 * confidence + 0.2 * relevance

Fit weighs most on purpose. A query's answer goes further: every template that provably applies
comes before any that only may (``cluster.experience.query``), since a cheap bet is served below
the confidence threshold and must not lose to the rule it puts in doubt on confidence alone.
Without a situation nothing is known about fit, and callers rank by relevance alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum

from pydantic import JsonValue

from actors.engine.evaluation import evaluate_features, is_number
from actors.engine.features import Features, flatten_context
from actors.engine.library import aim_of, narrows
from actors.engine.model.templates import ExperienceTemplate
from actors.engine.signature import signature_key, situation_signature, situation_words
from actors.engine.templates import also_avoided

WEIGHT_FIT = 0.5
WEIGHT_CONFIDENCE = 0.3
WEIGHT_RELEVANCE = 0.2


class Fit(StrEnum):
    """How well a template fits a situation, best first."""

    HOLDS_SAME_DECISION = "holds_same_decision"
    HOLDS = "holds"
    ALWAYS_SAME_DECISION = "always_same_decision"
    ALWAYS = "always"
    UNKNOWN = "unknown"
    NOT_APPLICABLE = "not_applicable"


FIT: dict[Fit, float] = {
    Fit.HOLDS_SAME_DECISION: 1.0,
    Fit.HOLDS: 0.9,
    Fit.ALWAYS_SAME_DECISION: 0.8,
    Fit.ALWAYS: 0.7,
    Fit.UNKNOWN: 0.5,
    Fit.NOT_APPLICABLE: 0.0,
}


def query_signature(
    role: str,
    task_type: str | None,
    query_text: str,
    context_snapshot: Mapping[str, JsonValue],
    available_actions: Sequence[str],
) -> str | None:
    """The decision-signature key of a situation, comparable with ``ExperienceTemplate.signature``.

    None when no actions were sent (a signature needs the action set).
    """
    if not available_actions:
        return None
    words = situation_words(task_type, context_snapshot, query_text)
    return signature_key(
        situation_signature(
            role, task_type, words, tuple(sorted(set(available_actions))), tuple(sorted(context_snapshot))
        )
    )


def snapshot_features(context_snapshot: Mapping[str, JsonValue]) -> Features:
    """The snapshot flattened once, to judge many templates against it."""
    return flatten_context(context_snapshot)


def fit(
    template: ExperienceTemplate,
    context_snapshot: Mapping[str, JsonValue],
    features: Features,
    available_actions: Sequence[str],
    signature: str | None,
) -> Fit:
    """How ``template`` fits the situation (see the module docstring for the rules).

    ``features`` is :func:`snapshot_features` of ``context_snapshot``.
    """
    if available_actions and template.recommended.tool not in available_actions:
        return Fit.NOT_APPLICABLE
    same = signature is not None and template.signature == signature
    if not template.condition.predicates:
        return Fit.ALWAYS_SAME_DECISION if same else Fit.ALWAYS
    if not context_snapshot:
        return Fit.UNKNOWN
    verdict = evaluate_features(template.condition, features, context_snapshot)
    if verdict is False:
        return Fit.NOT_APPLICABLE
    if verdict is None:
        return Fit.UNKNOWN
    return Fit.HOLDS_SAME_DECISION if same else Fit.HOLDS


APPLIES = (Fit.HOLDS_SAME_DECISION, Fit.HOLDS, Fit.ALWAYS_SAME_DECISION, Fit.ALWAYS)
"""Fits of a template that applies here (its condition holds, or it has none)."""


def overruled(judged: Sequence[tuple[ExperienceTemplate, Fit]], features: Features | None = None) -> list[Fit]:
    """The fits after the narrower rules have spoken.

    A template whose condition holds is in doubt (unknown) when a *refinement* of it — another
    template giving the same advice (same recommended and avoided tools) whose condition is
    narrower: all of its predicates and more, or a threshold or set on the same feature that is
    stricter (:func:`~actors.engine.library.narrows`) — is false in this situation: the narrower
    rule was learned from runs that showed the extra predicate or the tighter bound matters, and
    here it does not hold. (``size_mb <= 207`` learned early, before put_object failed at 20 MB,
    and ``size_mb <= 9.2`` learned after: at 20 MB the broad one is no longer sure.)

    Then a template that applies (holds, or has no condition) is in doubt when another one that
    still applies *avoids* what it recommends, and it does not answer that one: it prefers its
    tool to some third tool (a decoy, say), while the other was learned where its tool was seen
    to fail or cost more than the other's. ``plan_incremental`` over ``plan_streaming`` for
    ``row_count <= 5864`` says nothing against ``plan_bulk``, and ``plan_bulk``, not
    ``plan_incremental``, for ``row_count > 5489`` says plan_incremental fails here. A rule
    without a condition puts no rule whose condition holds here in doubt (:func:`_blind_to`),
    unless that condition only holds by the learner's guess (:func:`guessing`, on ``features``:
    the situation's snapshot flattened).
    """
    out: list[Fit] = []
    for template, value in judged:
        if value in (Fit.HOLDS, Fit.HOLDS_SAME_DECISION) and any(
            other_fit is Fit.NOT_APPLICABLE and _refines(other, template) for other, other_fit in judged
        ):
            value = Fit.UNKNOWN
        out.append(value)
    applying = [(t, value) for (t, _), value in zip(judged, out, strict=True) if value in APPLIES]
    return [
        Fit.UNKNOWN
        if value in APPLIES
        and any(
            _advises_against(other, t) and not _blind_to(other_fit, value, t, features) for other, other_fit in applying
        )
        else value
        for (t, _), value in zip(judged, out, strict=True)
    ]


def _blind_to(avoider: Fit, recommender: Fit, template: ExperienceTemplate, features: Features | None) -> bool:
    """An unconditional rule says nothing against one whose condition holds here on its evidence.

    Had the rule that avoids a tool everywhere seen it work, it would have learned where (a
    condition); the rule recommending that tool under a condition that holds here is that
    evidence. ``capture_partial`` over ``capture_payment``, learned from one refused capture, is
    no word against ``capture_payment`` when ``auth_result == 'approved'``. Not where the
    condition holds only by the learner's guess: ``plan_incremental`` for ``row_count <= 7363``
    worked up to 2,870 rows, and at 6,111 the rule without a condition may be right.
    """
    return (
        avoider in (Fit.ALWAYS, Fit.ALWAYS_SAME_DECISION)
        and recommender in (Fit.HOLDS, Fit.HOLDS_SAME_DECISION)
        and not (features is not None and guessing(template, features))
    )


def guessing(template: ExperienceTemplate, features: Features) -> bool:
    """Whether a numeric bound of ``template``'s condition holds here only by the learner's guess.

    A threshold sits midway between the last value where the recommended call worked and the
    first where it did not. Between that last value (:attr:`~ExperienceTemplate.tested`) and the
    bound, nothing was seen: ``rows <= 7363`` learned from successes up to 2,870 rows is a guess
    at 6,111. Below the lowest or above the highest tested value *away from* every bound is not.
    """
    for p in template.condition.predicates:
        tested = template.tested.get(p.feature)
        value = features.get(p.feature)
        if tested is None or not is_number(value):
            continue
        if (p.op in ("<", "<=") and value > tested[1]) or (p.op in (">", ">=") and value < tested[0]):
            return True
    return False


def retry_stands(template: ExperienceTemplate, judged: Sequence[tuple[ExperienceTemplate, Fit]]) -> bool:
    """Whether ``template``'s retry advice holds here: no other template that applies here (in
    ``judged``, with :func:`overruled` fits) avoids its tool as one that fails here. Where one
    does, the failure has a cause this situation shows, and calling again would fail again."""
    if not template.retry:
        return False
    return not any(
        value in APPLIES
        and other is not template
        and other.avoid is not None
        and other.avoid.tool == template.recommended.tool
        and other.avoid.tool != other.recommended.tool
        and other.avoid_reason == "fails"
        for other, value in judged
    )


def _advises_against(other: ExperienceTemplate, template: ExperienceTemplate) -> bool:
    """``other`` avoids what ``template`` recommends, and ``template`` does not avoid ``other``'s tool."""
    if other.avoid is None or other.avoid.tool == other.recommended.tool:
        return False  # no avoided tool, or one tool with other params: no word on the tool itself
    if other.avoid.tool != template.recommended.tool:
        return False
    return template.avoid is None or template.avoid.tool != other.recommended.tool


def _refines(narrow: ExperienceTemplate, broad: ExperienceTemplate) -> bool:
    if narrow.recommended.tool != broad.recommended.tool:
        return False
    if (narrow.avoid.tool if narrow.avoid else None) != (broad.avoid.tool if broad.avoid else None):
        return False
    if aim_of(narrow) != aim_of(broad):
        return False  # the same tool aimed elsewhere is other advice (put it on the bed, not in the drawers)
    return narrows(broad.condition.predicates, narrow.condition.predicates)


def applicable(value: Fit) -> bool | None:
    """The tri-state an agent reads: True (it applies), None (unknown), False (it does not)."""
    if value is Fit.NOT_APPLICABLE:
        return False
    return None if value is Fit.UNKNOWN else True


def rank_score(value: Fit, confidence: float, relevance: float) -> float:
    """The blended ranking score in [0, 1]."""
    return round(WEIGHT_FIT * FIT[value] + WEIGHT_CONFIDENCE * confidence + WEIGHT_RELEVANCE * max(0.0, relevance), 6)


def never_worked(
    templates: Sequence[ExperienceTemplate], signature: str, available_actions: Sequence[str] = ()
) -> tuple[str, ...]:
    """Tools seen failing at the decision ``signature`` and never seen working there, by name.

    A template of the decision avoids a tool that failed (or names it in an ``also avoid``
    caveat) and recommends only a tool that worked; a tool avoided as the costlier way worked too.
    With ``available_actions``, only those among them.
    """
    failed: set[str] = set()
    worked: set[str] = set()
    for template in templates:
        if template.signature != signature:
            continue
        worked.add(template.recommended.tool)
        if template.avoid is not None:
            (worked if template.avoid_reason == "costlier" else failed).add(template.avoid.tool)
        failed.update(d for d in map(also_avoided, template.caveats) if d is not None)
    out = failed - worked
    if available_actions:
        out &= set(available_actions)
    return tuple(sorted(out))
