"""Evaluating a condition against a live situation: three-valued, total on any JSON snapshot.

A predicate is True or False where its feature is present, and None (unknown) where the snapshot
lacks it: missing is never false. A condition (a conjunction) is False if any predicate is False,
else None if any is unknown, else True; an empty one is True. Values compare as JSON: ``1 ==
1.0``, but ``True`` is no ``1`` and ``"1"`` is no ``1``; a comparison of the wrong type is False.
The learner (:mod:`actors.engine.conditions`) uses the same functions on its evidence runs, so a
learned condition means the same when it is served.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TypeGuard

from actors.engine.features import Features, flatten_context
from actors.engine.model.templates import Condition, Predicate


def is_number(value: object) -> TypeGuard[int | float]:
    """A finite int or float, never a bool: what the learner reads as a numeric feature value."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _same(a: object, b: object) -> bool:
    """JSON equality: 1 == 1.0, but True is no 1 and "1" is no 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def evaluate_predicate(predicate: Predicate, features: Features, snapshot: object = None) -> bool | None:
    """Whether ``predicate`` holds on flattened features; None when its feature is missing.

    Args:
        predicate: The test.
        features: A flattened context (:func:`flatten_context`).
        snapshot: The raw snapshot, consulted only by ``contains`` on a list feature (a list
            flattens to its length, so its items are read from the raw value).

    Returns:
        True or False when the feature is present (a value of the wrong type for the operator,
        e.g. ``rows > 5`` on ``"many"``, is False), None when it is absent or not a finite number
        where a number is compared.
    """
    op, target = predicate.op, predicate.value
    if op == "contains":
        raw = _lookup(snapshot, predicate.feature) if predicate.feature not in features else features[predicate.feature]
        if raw is _MISSING:
            return None
        if isinstance(raw, str):
            return isinstance(target, str) and target in raw
        if isinstance(raw, list):
            return any(_same(item, target) for item in raw)
        return False
    # One lookup, not ``in`` then ``[]``: the learner evaluates predicates on every run, many times.
    value = features.get(predicate.feature, _MISSING)
    if value is _MISSING:
        return None
    if op == "==":
        return _same(value, target)
    if op == "!=":
        return not _same(value, target)
    if op == "in":
        return isinstance(target, list) and any(_same(value, t) for t in target)
    # Plain ints and finite floats on both sides (nearly every run) skip the general checks below.
    if not (_plain_number(value) and _plain_number(target)):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if not (is_number(value) and is_number(target)):
            return False
    assert isinstance(value, int | float)
    assert isinstance(target, int | float)
    if op == ">":
        return value > target
    if op == "<=":
        return value <= target
    if op == ">=":
        return value >= target
    if op == "<":
        return value < target
    return False


def _plain_number(value: object) -> bool:
    """An ``int`` or a finite ``float`` (exact types): :func:`is_number` without the isinstance checks."""
    return type(value) is int or (type(value) is float and math.isfinite(value))


def evaluate_features(
    condition: Condition | Sequence[Predicate], features: Features, snapshot: object = None
) -> bool | None:
    """Three-valued AND of the predicates on flattened features: False if any is False, else None
    if any is unknown, else True (an empty condition is True). See :func:`evaluate_condition`."""
    predicates = condition.predicates if isinstance(condition, Condition) else condition
    unknown = False
    for predicate in predicates:
        result = evaluate_predicate(predicate, features, snapshot)
        if result is False:
            return False
        unknown = unknown or result is None
    return None if unknown else True


def evaluate_condition(condition: Condition | Sequence[Predicate], context_snapshot: object) -> bool | None:
    """Does a template's condition hold in this situation? For serving: filter and rank by it.

    The snapshot is flattened exactly as the learner saw it (:func:`flatten_context`: dotted
    paths, ``len(list)``, depth 6), so a condition learned from snapshots means the same here.
    Total: any JSON-like value is accepted (a non-object snapshot has no features) and nothing
    raises. To test many conditions against one snapshot, flatten it once and call
    :func:`evaluate_features`.

    Args:
        condition: A template's ``condition`` (or its predicates).
        context_snapshot: The current context snapshot, as an agent would record it.

    Returns:
        True when every predicate holds, False when one fails, None (unknown) when none fails
        but a feature is missing from the snapshot: missing is unknown, never false.
    """
    predicates = condition.predicates if isinstance(condition, Condition) else condition
    if not predicates:
        return True
    features = flatten_context(context_snapshot) if isinstance(context_snapshot, Mapping) else {}
    return evaluate_features(predicates, features, context_snapshot)


class _Missing:
    pass


_MISSING = _Missing()


def _lookup(snapshot: object, path: str) -> object:
    """The raw value at a dotted path (keys may hold dots themselves), or ``_MISSING``."""
    if not isinstance(snapshot, Mapping) or not path:
        return _MISSING
    if path in snapshot:
        return snapshot[path]
    head, sep, rest = path.partition(".")
    while sep:
        if head in snapshot:
            found = _lookup(snapshot[head], rest)
            if found is not _MISSING:
                return found
        more, sep, rest = rest.partition(".")
        head = f"{head}.{more}"
    return _MISSING


def holds(predicate: Predicate, features: Features) -> bool:
    """Whether ``predicate`` holds for a flattened context; a missing feature does not hold here.

    The learner's view: evidence without the feature is not covered. Serving uses
    :func:`evaluate_condition`, which says *unknown* instead.
    """
    return evaluate_predicate(predicate, features) is True


def holds_all(predicates: Sequence[Predicate], features: Features) -> bool:
    for predicate in predicates:
        if evaluate_predicate(predicate, features) is not True:
            return False
    return True


def is_string_set(p: Predicate) -> bool:
    """``region == 'eu'`` or ``region in {...}`` of strings: a set of values (united on merges,
    intersected when two of one condition test the same feature)."""
    if p.op == "==":
        return isinstance(p.value, str)
    return p.op == "in" and isinstance(p.value, list) and all(isinstance(v, str) for v in p.value)


def set_of(p: Predicate) -> set[str]:
    """The string values a predicate names (one for ``==``)."""
    values = p.value if isinstance(p.value, list) else [p.value]
    return {v for v in values if isinstance(v, str)}


def set_predicate(feature: str, values: set[str]) -> Predicate:
    """``feature == v`` for one value, ``feature in [sorted values]`` for several."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return Predicate(feature=feature, op="==", value=ordered[0])
    return Predicate(feature=feature, op="in", value=list(ordered))
