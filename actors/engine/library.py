"""Merging new templates into a library: near-duplicates add support, edge cases become children.

Two templates belong to the same *family* when role, task type, decision signature and
recommended tool are equal. Within a family, a new template is a *near-duplicate* of an existing
one when, in addition,

* the avoided tool and the parameter shape (nested key structure) of both patterns are equal,
* the conditions are compatible: the same features with the same operators, equal categorical
  values, and numeric thresholds within 50% of each other (the merged threshold is the
  support-weighted mean), and
* the new one brings no caveat the old one lacks.

A near-duplicate merges: the recommended and avoided parameter patterns are generalized to
cover both (:func:`~actors.engine.generalize.merge_params`; never an empty string), provenance
is united, and support grows by the *new* evidence only (provenance entries not already
present), so merging the same batch twice changes nothing — a retried Ray task is harmless.
Confidence rises once per fresh trajectory, as for a served success.

A template of an existing family that is not a near-duplicate (narrower or different condition,
another caveat, another avoided tool or parameter shape) is *supplementary*: it keeps its own
identity and links to the family's root template through ``parent_id``. Anything else is new.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from pydantic import JsonValue

from actors.engine.confidence import update_confidence
from actors.engine.generalize import merge_params
from cluster.core.experience import ActionPattern, EvidenceKind, ExperienceTemplate, Predicate, Provenance, Support
from cluster.core.trajectory import Frozen

THRESHOLD_TOLERANCE = 0.5


class MergeResult(Frozen):
    """What :func:`merge_into_library` decided.

    Attributes:
        new: Templates to insert (no related template existed).
        updated: Existing templates after merging near-duplicates into them (same ids).
        supplementary: Templates to insert as edge cases of an existing one (``parent_id`` set).
        library: The whole library after the merge: existing (updated in place), then new and
            supplementary templates in input order.
    """

    new: tuple[ExperienceTemplate, ...] = ()
    updated: tuple[ExperienceTemplate, ...] = ()
    supplementary: tuple[ExperienceTemplate, ...] = ()
    library: tuple[ExperienceTemplate, ...] = ()


def family_key(t: ExperienceTemplate) -> tuple[str, str | None, str, str]:
    return (t.role, t.task_type, t.signature, t.recommended.tool)


def shape(value: JsonValue) -> JsonValue:
    """Nested key structure of a parameter value; leaves collapse to None."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    return None


def _pattern_shape(pattern: ActionPattern | None) -> tuple[str, JsonValue] | None:
    return None if pattern is None else (pattern.tool, shape(dict(pattern.params)))


def _compatible_value(a: JsonValue, b: JsonValue) -> bool:
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        scale = max(abs(a), abs(b))
        return scale == 0 or abs(a - b) <= THRESHOLD_TOLERANCE * scale
    return a == b


def conditions_compatible(a: Sequence[Predicate], b: Sequence[Predicate]) -> bool:
    """Same features and operators, close thresholds, equal categories (order-insensitive)."""
    sa = sorted(a, key=lambda p: (p.feature, p.op))
    sb = sorted(b, key=lambda p: (p.feature, p.op))
    return len(sa) == len(sb) and all(
        pa.feature == pb.feature and pa.op == pb.op and _compatible_value(pa.value, pb.value)
        for pa, pb in zip(sa, sb, strict=True)
    )


def is_near_duplicate(old: ExperienceTemplate, new: ExperienceTemplate) -> bool:
    return (
        family_key(old) == family_key(new)
        and _pattern_shape(old.recommended) == _pattern_shape(new.recommended)
        and _pattern_shape(old.avoid) == _pattern_shape(new.avoid)
        and conditions_compatible(old.condition.predicates, new.condition.predicates)
        and set(new.caveats) <= set(old.caveats)
    )


def _prov_key(p: Provenance) -> tuple[uuid.UUID, tuple[uuid.UUID, ...], EvidenceKind | None]:
    return (p.trajectory_id, p.node_ids, p.kind)


def _merge_thresholds(
    old: ExperienceTemplate, new: ExperienceTemplate, w_old: int, w_new: int
) -> tuple[Predicate, ...]:
    by_key = {(p.feature, p.op): p for p in new.condition.predicates}
    out = []
    for p in old.condition.predicates:
        q = by_key[(p.feature, p.op)]
        if isinstance(p.value, int | float) and isinstance(q.value, int | float) and not isinstance(p.value, bool):
            mean = (p.value * w_old + q.value * w_new) / max(1, w_old + w_new)
            value: JsonValue = (
                round(mean) if isinstance(p.value, int) and isinstance(q.value, int) else float(f"{mean:.6g}")
            )
            out.append(p.model_copy(update={"value": value}))
        else:
            out.append(p)
    return tuple(out)


def merge_pair(old: ExperienceTemplate, new: ExperienceTemplate) -> ExperienceTemplate:
    """Merge near-duplicate ``new`` into ``old``; ``old`` keeps its id, text and parent link."""
    seen = {_prov_key(p) for p in old.provenance}
    fresh = [p for p in new.provenance if _prov_key(p) not in seen]
    if new.provenance and not fresh:
        return old  # every piece of this evidence is already counted
    if any(p.kind is not None for p in new.provenance):
        add_s = sum(1 for p in fresh if p.kind is EvidenceKind.RECOMMENDED_SUCCEEDED)
        add_f = sum(1 for p in fresh if p.kind is EvidenceKind.AVOIDED_FAILED)
    else:
        # Hand-written or imported evidence without kinds: trust its counts as they are.
        add_s, add_f = new.support.successes, new.support.failures
    old_trajs = {p.trajectory_id for p in old.provenance}
    fresh_trajs = {p.trajectory_id for p in fresh} - old_trajs
    add_t = len(fresh_trajs) if new.provenance else new.support.trajectories
    w_old = old.support.successes + old.support.failures
    confidence = old.confidence
    for _ in range(add_t):
        confidence = update_confidence(confidence, succeeded=True)
    return old.model_copy(
        update={
            "recommended": _merge_pattern(old.recommended, new.recommended) or old.recommended,
            "avoid": _merge_pattern(old.avoid, new.avoid),
            "provenance": old.provenance + tuple(fresh),
            "support": Support(
                successes=old.support.successes + add_s,
                failures=old.support.failures + add_f,
                trajectories=old.support.trajectories + add_t,
            ),
            "condition": old.condition.model_copy(
                update={"predicates": _merge_thresholds(old, new, w_old, add_s + add_f)}
            ),
            "caveats": old.caveats + tuple(c for c in new.caveats if c not in old.caveats),
            "confidence": max(confidence, new.confidence),
            "updated_at": max(old.updated_at, new.updated_at),
        }
    )


def _merge_pattern(old: ActionPattern | None, new: ActionPattern | None) -> ActionPattern | None:
    """The old pattern, its params generalized to cover the new evidence too (same tool only)."""
    if old is None or new is None or old.tool != new.tool:
        return old
    return old.model_copy(update={"params": merge_params(old.params, new.params)})


def merge_into_library(existing: Sequence[ExperienceTemplate], new: Sequence[ExperienceTemplate]) -> MergeResult:
    """Decide for each new template: merge into a near-duplicate, add as supplementary, or add as new.

    Pure: nothing is stored; the caller writes ``new``, ``updated`` and ``supplementary``. New
    templates are taken in order, and each sees the ones before it, so duplicates within
    ``new`` merge too.

    Args:
        existing: The current library (usually the templates sharing the new ones' signatures).
        new: Freshly distilled templates, e.g. from ``AttributionResult.templates``.

    Returns:
        The partition of changes and the resulting library.
    """
    library: list[ExperienceTemplate] = list(existing)
    origin: list[str] = ["existing"] * len(library)  # existing | new | supplementary
    changed: set[int] = set()
    for template in new:
        index = next(
            (
                i
                for i, t in enumerate(library)
                if t.template_id == template.template_id or is_near_duplicate(t, template)
            ),
            None,
        )
        if index is not None:
            merged = merge_pair(library[index], template)
            if merged is not library[index]:
                library[index] = merged
                changed.add(index)
            continue
        parent = _family_root(library, template)
        if parent is None:
            library.append(template)
            origin.append("new")
        else:
            library.append(template.model_copy(update={"parent_id": parent.template_id}))
            origin.append("supplementary")
    return MergeResult(
        new=tuple(t for t, o in zip(library, origin, strict=True) if o == "new"),
        updated=tuple(library[i] for i in sorted(changed) if origin[i] == "existing"),
        supplementary=tuple(t for t, o in zip(library, origin, strict=True) if o == "supplementary"),
        library=tuple(library),
    )


def _family_root(library: Sequence[ExperienceTemplate], template: ExperienceTemplate) -> ExperienceTemplate | None:
    """The root (parentless) template of the family with the most support; ties: earliest."""
    family = [t for t in library if t.parent_id is None and family_key(t) == family_key(template)]
    if not family:
        return None
    return max(family, key=lambda t: (t.support.successes + t.support.failures, -library.index(t)))
