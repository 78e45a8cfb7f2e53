"""Merging new templates into a library: near-duplicates add support, edge cases become children.

Two templates belong to the same *family* when role, task type, decision signature and
recommended tool are equal. Within a family, a new template is a *near-duplicate* of an existing
one when, in addition,

* the avoided tool and the parameter shape (nested key structure) of both patterns are equal,
  or both avoid decoys and share one (one lists ``also avoid …`` caveats; another batch met
  another decoy most often),
* the conditions are compatible: the same features with the same operators, equal booleans,
  numeric thresholds within 50% of each other (see below for where the merged one goes), and
  string sets on the same feature whatever their values (``region == 'eu'`` and
  ``region in {'uk', 'us'}`` merge into ``region in {'eu', 'uk', 'us'}``: templates learned
  one value at a time become one), unless the union would take in a value where the library
  holds the opposite template (recommending what this one avoids), and
* the new one brings no edge-case caveat the old one lacks: caveats compare by what they are
  about (:func:`~actors.engine.templates.caveat_key`), not by the run values they list, and
  ``also avoid …`` caveats, which list further decoys, do not count; they are united on merge.

A near-duplicate merges: the recommended and avoided parameter patterns are generalized to
cover both (:func:`~actors.engine.generalize.merge_params`; never an empty string), provenance
is united, and support grows by the *new* evidence only (provenance entries not already
present), so merging the same batch twice changes nothing — a retried Ray task is harmless.
The belief behind the confidence adds the new template's evidence in the share that is fresh,
and keeps the outcomes agents reported about either (:mod:`actors.engine.confidence`).

A merged threshold is a mean of the two, each weighted by the evidence behind it that the other
did not see. The new template was learned on the batch *and* the stored history attribution
pooled with it (the batch's outcomes name those runs), so a stored template's evidence counts
only where it came from runs outside that pool: when the pool held all of them, the new
threshold, placed by the learner on every run there is, replaces the old one. (Two templates
new in one call, from one pool or from disjoint groups of a rebuild, weigh by their support.) A bound learned
early from few runs (``size_mb <= 1373`` before any archive between 512 and 1373 MB was tried)
would otherwise drag a well-placed one outward for ever, into the gap where another rule of the
same decision says the call fails. Without outcomes (hand-made merges), the old template's
whole support weighs against the new evidence.

A template of an existing family that is not a near-duplicate is *supplementary* only when it
really is an edge case of a root template of the family that avoids the same tool: its
condition is narrower (the root's predicates plus more, or a stricter threshold), or it is as
broad and adds an edge-case caveat. The root with the most support wins; ties: earliest. Any
other template (a different avoided decoy, a broader or unrelated condition) is new: marking
it supplementary would say it refines a rule it does not refine.

With the batch's outcomes (:class:`~actors.engine.retire.ActionOutcome`), the library is checked
against the pooled evidence (:mod:`actors.engine.retire`): before merging, a stored template the
evidence contradicts is retired and its repaired successor joins the library; a retired template
takes no merges and roots no edge cases. After merging, new templates are repaired in place, and
a stored one that a merge moved into contradiction (a threshold dragged to the weighted mean) is
retired the same way. A new template with a retired one's id is its successor's.

A stored template is also *superseded* when the same choice (decision, recommended and avoided
tool, and why it is avoided) was learned again in this call from a pool that held every run
it rests on, and it took no merge: the learner saw all of its evidence and more and gave
another condition, so the stored one is what an earlier, smaller sample happened to show (a
threshold on a distractor that split the first runs by luck, still true of them). It is
retired, and the new template is what the library now holds for that choice.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from pydantic import JsonValue

from actors.engine.confidence import confidence_of, implied_belief
from actors.engine.evaluation import is_string_set, set_of, set_predicate
from actors.engine.generalize import merge_params
from actors.engine.model.templates import (
    ActionPattern,
    Belief,
    EvidenceKind,
    ExperienceTemplate,
    Predicate,
    Provenance,
    Support,
)
from actors.engine.retire import ActionOutcome, repaired, retire, successor_id, tighten
from actors.engine.templates import ALSO_AVOID, also_avoid, caveat_key, failure_reason
from cluster.core.types import Frozen

THRESHOLD_TOLERANCE = 0.5
_COUNTED = (EvidenceKind.RECOMMENDED_SUCCEEDED, EvidenceKind.AVOIDED_FAILED)
"""Provenance kinds that count in support (a costlier alternative's success does not)."""


class MergeResult(Frozen):
    """What :func:`merge_into_library` decided.

    Attributes:
        new: Templates to insert (no related template existed).
        updated: Existing templates after merging near-duplicates into them (same ids).
        supplementary: Templates to insert as edge cases of an existing one (``parent_id`` set).
        retired: Existing templates the evidence contradicts, ``retired_reason`` set (same ids);
            their successors, if any, are among ``new``.
        library: The whole library after the merge: existing (updated in place, retired ones
            included), then new and supplementary templates in input order.
    """

    new: tuple[ExperienceTemplate, ...] = ()
    updated: tuple[ExperienceTemplate, ...] = ()
    supplementary: tuple[ExperienceTemplate, ...] = ()
    retired: tuple[ExperienceTemplate, ...] = ()
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


def _op_key(p: Predicate) -> tuple[str, str]:
    return (p.feature, "in" if is_string_set(p) else p.op)


def conditions_compatible(a: Sequence[Predicate], b: Sequence[Predicate]) -> bool:
    """Same features and operators, close thresholds, equal booleans (order-insensitive).

    String sets (``==`` one value or ``in`` several) on the same feature are compatible
    whatever their values: templates learned one value at a time merge into one whose set is
    the union.
    """
    sa = sorted(a, key=_op_key)
    sb = sorted(b, key=_op_key)
    return len(sa) == len(sb) and all(
        _op_key(pa) == _op_key(pb) and (is_string_set(pa) or _compatible_value(pa.value, pb.value))
        for pa, pb in zip(sa, sb, strict=True)
    )


def is_near_duplicate(old: ExperienceTemplate, new: ExperienceTemplate) -> bool:
    return (
        family_key(old) == family_key(new)
        and _pattern_shape(old.recommended) == _pattern_shape(new.recommended)
        and aim_of(old) == aim_of(new)
        and _avoid_compatible(old, new)
        and conditions_compatible(old.condition.predicates, new.condition.predicates)
        and edge_caveats(new) <= edge_caveats(old)
    )


def aim_of(t: ExperienceTemplate) -> JsonValue:
    """What a template that avoids its own tool aims it at: its params (the aim is the advice)."""
    avoided = t.avoid
    return dict(t.recommended.params) if avoided is not None and avoided.tool == t.recommended.tool else None


def _avoid_compatible(old: ExperienceTemplate, new: ExperienceTemplate) -> bool:
    """Same avoided pattern, or two decoy templates (one lists ``also avoid``) sharing a decoy."""
    if _pattern_shape(old.avoid) == _pattern_shape(new.avoid):
        return True
    listed = [c for t in (old, new) for c in t.caveats if c.startswith(ALSO_AVOID)]
    return bool(listed) and bool(_decoys(old) & _decoys(new))


def _decoys(t: ExperienceTemplate) -> set[str]:
    named = {d for c in t.caveats if (d := _decoy(c)) is not None}
    return named | ({t.avoid.tool} if t.avoid is not None else set())


def edge_caveats(t: ExperienceTemplate) -> set[str]:
    """What the edge-case caveats are about (:func:`caveat_key`); ``also avoid …`` ones excluded."""
    return {caveat_key(c) for c in t.caveats if not c.startswith(ALSO_AVOID)}


def _avoided_tool(t: ExperienceTemplate) -> str | None:
    return None if t.avoid is None else t.avoid.tool


def narrows(parent: Sequence[Predicate], child: Sequence[Predicate]) -> bool:
    """``child`` holds in a strict subset of where ``parent`` holds (as far as the predicates show).

    Every parent predicate has a child predicate on the same feature and operator that is at
    least as strict (equal value, or a higher ``>``/``>=`` / lower ``<``/``<=`` threshold), and
    the child adds a predicate or tightens a threshold.
    """
    stricter = False
    for p in parent:
        same = [q for q in child if _op_key(q) == _op_key(p)]
        if any(q.value == p.value or (is_string_set(p) and set_of(q) == set_of(p)) for q in same):
            continue
        tighter = [q for q in same if _tighter(p, q)]
        if not tighter:
            return False
        stricter = True
    return stricter or len(child) > len(parent)


def _tighter(p: Predicate, q: Predicate) -> bool:
    if is_string_set(p) and is_string_set(q):
        return set_of(q) < set_of(p)
    a, b = p.value, q.value
    if not isinstance(a, int | float) or not isinstance(b, int | float) or isinstance(a, bool) or isinstance(b, bool):
        return False
    return (p.op in (">", ">=") and b > a) or (p.op in ("<", "<=") and b < a)


def is_edge_case(parent: ExperienceTemplate, child: ExperienceTemplate) -> bool:
    """``child`` refines ``parent``: same family and avoided tool, narrower condition or an extra edge caveat."""
    if family_key(parent) != family_key(child) or _avoided_tool(parent) != _avoided_tool(child):
        return False
    p, c = parent.condition.predicates, child.condition.predicates
    if narrows(p, c):
        return True
    return conditions_compatible(p, c) and not edge_caveats(child) <= edge_caveats(parent)


def _prov_key(p: Provenance) -> tuple[uuid.UUID, tuple[uuid.UUID, ...], EvidenceKind | None]:
    return (p.trajectory_id, p.node_ids, p.kind)


def _merge_conditions(
    old: ExperienceTemplate, new: ExperienceTemplate, w_old: int, w_new: int
) -> tuple[Predicate, ...]:
    """Old predicates with thresholds moved to the mean weighted by ``w_old``/``w_new`` and string sets united."""
    by_key = {_op_key(p): p for p in new.condition.predicates}
    out = []
    for p in old.condition.predicates:
        q = by_key.get(_op_key(p))
        if q is None:
            # Only a retired template's successor takes merges of another shape (the stale rule
            # learned again): the bound the evidence added stays.
            out.append(p)
        elif is_string_set(p):
            out.append(set_predicate(p.feature, set_of(p) | set_of(q)))
        elif isinstance(p.value, int | float) and isinstance(q.value, int | float) and not isinstance(p.value, bool):
            mean = (p.value * w_old + q.value * w_new) / max(1, w_old + w_new)
            value: JsonValue = (
                round(mean) if isinstance(p.value, int) and isinstance(q.value, int) else float(f"{mean:.6g}")
            )
            out.append(p.model_copy(update={"value": value}))
        else:
            out.append(p)
    return tuple(out)


def _contradicted(library: Sequence[ExperienceTemplate], old: ExperienceTemplate, new: ExperienceTemplate) -> bool:
    """Uniting ``new``'s sets into ``old`` would claim a value where the library recommends the opposite.

    The opposite is a template of the same decision that recommends what ``old`` avoids and
    avoids what it recommends; a value in its set for the same feature is evidence against ours.
    """
    if old.avoid is None:
        return False
    added: dict[str, set[str]] = {}
    new_sets = {p.feature: set_of(p) for p in new.condition.predicates if is_string_set(p)}
    for p in old.condition.predicates:
        if is_string_set(p) and p.feature in new_sets:
            added[p.feature] = new_sets[p.feature] - set_of(p)
    if not any(added.values()):
        return False
    for t in library:
        opposite = (
            (t.role, t.task_type, t.signature) == (old.role, old.task_type, old.signature)
            and t.recommended.tool == old.avoid.tool
            and t.avoid is not None
            and t.avoid.tool == old.recommended.tool
        )
        if opposite and any(
            is_string_set(p) and set_of(p) & added.get(p.feature, set()) for p in t.condition.predicates
        ):
            return True
    return False


def merge_pair(
    old: ExperienceTemplate, new: ExperienceTemplate, pooled: frozenset[uuid.UUID] = frozenset()
) -> ExperienceTemplate:
    """Merge near-duplicate ``new`` into ``old``; ``old`` keeps its id, text and parent link.

    ``pooled``: the trajectories ``new`` was learned on (the batch and its history at this
    decision); empty when unknown. Old evidence from them weighs nothing against the new threshold.
    """
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
    w_old, w_new = old.support.successes + old.support.failures, add_s + add_f
    if pooled and any(p.kind is not None for p in new.provenance):
        w_old = sum(1 for p in old.provenance if p.kind in _COUNTED and p.trajectory_id not in pooled)
        w_new = new.support.successes + new.support.failures
    belief = _merged_belief(old, new, fresh)
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
            "condition": old.condition.model_copy(update={"predicates": _merge_conditions(old, new, w_old, w_new)}),
            "caveats": _merge_caveats(old, new),
            "retry": old.retry or new.retry,
            "tested": _merge_tested(old.tested, new.tested),
            "cost_ratio": new.cost_ratio or old.cost_ratio,
            "belief": belief,
            "confidence": confidence_of(belief),
            "updated_at": max(old.updated_at, new.updated_at),
        }
    )


def _merged_belief(old: ExperienceTemplate, new: ExperienceTemplate, fresh: Sequence[Provenance]) -> Belief:
    """The old belief plus the share of the new one that rests on evidence not counted yet.

    Outcomes agents reported about either side are kept: a merge never forgets feedback.
    """
    before = old.belief or implied_belief(old.confidence)
    later = new.belief or implied_belief(new.confidence)
    kinds = (*_COUNTED, EvidenceKind.AVOIDED_COSTLIER, EvidenceKind.COUNTER)
    counted = [p for p in new.provenance if p.kind in kinds]
    if counted:
        share = sum(1 for p in fresh if p.kind in kinds) / len(counted)
    else:
        share = 1.0 if fresh or not new.provenance else 0.0
    return Belief(
        agree=round(before.agree + share * later.agree, 6),
        disagree=round(before.disagree + share * later.disagree, 6),
        served_ok=before.served_ok + later.served_ok,
        served_failed=before.served_failed + later.served_failed,
    )


def _merge_tested(
    old: dict[str, tuple[float, float]], new: dict[str, tuple[float, float]]
) -> dict[str, tuple[float, float]]:
    """Both templates' tested ranges, united per feature."""
    out = dict(old)
    for feature, (low, high) in new.items():
        was = out.get(feature)
        out[feature] = (low, high) if was is None else (min(was[0], low), max(was[1], high))
    return out


def _merge_caveats(old: ExperienceTemplate, new: ExperienceTemplate) -> tuple[str, ...]:
    """Old caveats, then new ones; each decoy is listed once, and never the tool the template avoids."""
    extra = list(new.caveats)
    old_avoid, new_avoid = _avoided_tool(old), _avoided_tool(new)
    if new_avoid is not None and old_avoid is not None and new_avoid != old_avoid:
        # The same rule met another decoy most often this time: it joins the "also avoid" list.
        extra.append(also_avoid(new_avoid, failure_reason(new)))
    merged = list(old.caveats)
    keys = {caveat_key(c) for c in merged} | ({f"avoid {old_avoid}"} if old_avoid else set())
    for caveat in extra:
        if caveat_key(caveat) not in keys:  # same point with other run-specific values: said already
            merged.append(caveat)
            keys.add(caveat_key(caveat))
    return tuple(merged)


def _decoy(caveat: str) -> str | None:
    """The tool an ``also avoid`` caveat names; None for an edge-case caveat."""
    return caveat[len(ALSO_AVOID) :].split(":", 1)[0] if caveat.startswith(ALSO_AVOID) else None


def _merge_pattern(old: ActionPattern | None, new: ActionPattern | None) -> ActionPattern | None:
    """The old pattern, its params generalized to cover the new evidence too (same tool only)."""
    if old is None or new is None or old.tool != new.tool:
        return old
    return old.model_copy(update={"params": merge_params(old.params, new.params)})


def merge_into_library(
    existing: Sequence[ExperienceTemplate],
    new: Sequence[ExperienceTemplate],
    outcomes: Sequence[ActionOutcome] = (),
) -> MergeResult:
    """Decide for each new template: merge into a near-duplicate, add as supplementary, or add as new.

    Pure: nothing is stored; the caller writes ``new``, ``updated`` and ``supplementary``, and
    ``retired``. New templates are taken in order, and each sees the ones before it, so
    duplicates within ``new`` merge too.

    Args:
        existing: The current library (usually the templates sharing the new ones' signatures).
        new: Freshly distilled templates, e.g. from ``AttributionResult.templates``.
        outcomes: The pooled evidence at the batch's signatures (``AttributionResult.outcomes``);
            without it nothing is retired or repaired.

    Returns:
        The partition of changes and the resulting library.
    """
    library: list[ExperienceTemplate] = list(existing)
    origin: list[str] = ["existing"] * len(library)  # existing | new | supplementary | retired
    changed: set[int] = set()
    by_signature = _by_signature(outcomes)
    pools = _pools(outcomes)

    def retire_at(i: int) -> None:
        retirement = retire(library[i], by_signature.get(library[i].signature, ()))
        if retirement is None:
            return
        library[i], origin[i] = retirement.retired, "retired"
        successor = retirement.successor
        if successor is not None and all(t.template_id != successor.template_id for t in library):
            library.append(successor)
            origin.append("new")

    for i in range(len(library)):
        retire_at(i)
    matched: set[int] = set()
    for template in new:
        while any(t.template_id == template.template_id and t.retired_reason is not None for t in library):
            template = template.model_copy(update={"template_id": successor_id(template.template_id)})
        index = next(
            (
                i
                for i, t in enumerate(library)
                if t.retired_reason is None
                and (
                    t.template_id == template.template_id
                    or (is_near_duplicate(t, template) and not _contradicted(library, t, template))
                )
            ),
            None,
        )
        if index is not None:
            matched.add(index)
            # Only a stored template can predate the pool; two of this call's are peers.
            pooled = _pool_of(template, pools) if origin[index] == "existing" else frozenset()
            merged = merge_pair(library[index], template, pooled)
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
    for i, template in enumerate(library):
        if origin[i] == "existing" and i not in matched and template.retired_reason is None:
            newer = _learned_again(template, new, pools)
            if newer is not None:
                reason = f"superseded: learned again on all of its evidence and more, {newer}"
                library[i], origin[i] = template.model_copy(update={"retired_reason": reason[:500]}), "retired"
    for i in range(len(library)):
        if origin[i] in ("new", "supplementary"):
            fixed = repaired(library[i], by_signature.get(library[i].signature, ()))
            if fixed is None:
                origin[i] = "dropped"  # nothing of its condition survives the evidence: never stored
            else:
                library[i] = fixed
        elif origin[i] == "existing" and i in changed:
            retire_at(i)
    kept = [i for i, o in enumerate(origin) if o != "dropped"]
    return MergeResult(
        new=tuple(library[i] for i in kept if origin[i] == "new"),
        updated=tuple(library[i] for i in sorted(changed) if origin[i] == "existing"),
        supplementary=tuple(library[i] for i in kept if origin[i] == "supplementary"),
        retired=tuple(library[i] for i in kept if origin[i] == "retired"),
        library=tuple(library[i] for i in kept),
    )


def contradicted(previous: Sequence[ExperienceTemplate], outcomes: Sequence[ActionOutcome]) -> list[ExperienceTemplate]:
    """The templates of ``previous`` still in force that ``outcomes`` contradict, retired with the reason.

    A library rebuilt from all the evidence does not merge into the one it replaces, so nothing
    there retires what the evidence no longer supports; this is what the rebuilt library keeps
    of those beliefs, for the record (their repaired successors are whatever the rebuild learned).
    """
    by_signature = _by_signature(outcomes)
    out = []
    for template in previous:
        found = None if template.retired_reason else tighten(template, by_signature.get(template.signature, ()))
        if found is not None:
            reason = f"contradicted by the evidence of a rebuild: {found[1]}"
            out.append(template.model_copy(update={"retired_reason": reason[:500]}))
    return out


def _learned_again(
    stored: ExperienceTemplate, learned: Sequence[ExperienceTemplate], pools: dict[uuid.UUID, set[uuid.UUID]]
) -> str | None:
    """How the same choice was learned again, from a pool holding all of ``stored``'s runs; None if it was not."""
    runs = {p.trajectory_id for p in stored.provenance}
    if not runs:
        return None  # hand-made or imported: no runs to say the pool saw them
    for t in learned:
        same_choice = (
            family_key(t) == family_key(stored)
            and _avoided_tool(t) == _avoided_tool(stored)
            and t.avoid_reason == stored.avoid_reason
            and aim_of(t) == aim_of(stored)
        )
        if same_choice and runs <= _pool_of(t, pools):
            return f"now {t.condition.render() or 'always'}"
    return None


def _pools(outcomes: Sequence[ActionOutcome]) -> dict[uuid.UUID, set[uuid.UUID]]:
    """The trajectories of each attribution pool the outcomes name."""
    out: dict[uuid.UUID, set[uuid.UUID]] = {}
    for o in outcomes:
        if o.pool is not None and o.trajectory_id is not None:
            out.setdefault(o.pool, set()).add(o.trajectory_id)
    return out


def _pool_of(template: ExperienceTemplate, pools: dict[uuid.UUID, set[uuid.UUID]]) -> frozenset[uuid.UUID]:
    """The trajectories of the pool ``template`` was learned on: the one holding all its evidence."""
    evidence = {p.trajectory_id for p in template.provenance}
    found = next((runs for runs in pools.values() if evidence and evidence <= runs), set())
    return frozenset(found)


def _by_signature(outcomes: Sequence[ActionOutcome]) -> dict[str, list[ActionOutcome]]:
    out: dict[str, list[ActionOutcome]] = {}
    for o in outcomes:
        out.setdefault(o.signature, []).append(o)
    return out


def _family_root(library: Sequence[ExperienceTemplate], template: ExperienceTemplate) -> ExperienceTemplate | None:
    """The root (parentless) template that ``template`` is an edge case of, most support first; ties: earliest."""
    family = [t for t in library if t.parent_id is None and t.retired_reason is None and is_edge_case(t, template)]
    if not family:
        return None
    return max(family, key=lambda t: (t.support.successes + t.support.failures, -library.index(t)))
