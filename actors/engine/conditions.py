"""Condition learning: which context feature separates the runs where a choice was right.

Context snapshots are flattened into dotted feature paths (``{"table": {"rows": 5}}`` →
``table.rows``; a list becomes its length, ``len(items)``). A learner then looks for the
predicate that best separates *positive* runs (the recommended choice was right) from
*negative* ones:

* numeric features: the best threshold, placed midway between two neighbouring observed values
  (``row_count > 60`` when 20 and 100 are the closest values on either side);
* categorical features (strings of at most 64 characters, booleans): equality with a value.
  Features with more than two values, at least two thirds of them distinct (ids, free text),
  are skipped: they separate anything and mean nothing.

The score is Youden's J (share of positives covered minus share of negatives covered); ties go
to higher coverage, then to categorical features (a threshold picked among many cut points
separates small samples by luck more easily than an equality does), then to a fixed order of
feature names, so the result is deterministic. One
refining predicate may follow when the first leaves negatives inside its region (e.g. bulk
import is right for large files *and* only when the encoding is UTF-8).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence

from pydantic import Field, JsonValue

from cluster.core.types import Frozen
from cluster.experience.templates import Predicate

Scalar = str | int | float | bool | None
Features = Mapping[str, Scalar]

MAX_CATEGORY_CHARS = 64
MAX_DEPTH = 6


def flatten_context(value: Mapping[str, JsonValue], prefix: str = "") -> dict[str, Scalar]:
    """Flatten nested JSON into ``{dotted.path: scalar}``; lists become ``len(path)``."""
    out: dict[str, Scalar] = {}
    _flatten(value, prefix, out, 0)
    return out


def _flatten(value: object, path: str, out: dict[str, Scalar], depth: int) -> None:
    if isinstance(value, Mapping):
        if depth >= MAX_DEPTH:
            return
        for key, item in value.items():
            _flatten(item, f"{path}.{key}" if path else str(key), out, depth + 1)
    elif isinstance(value, list):
        if path:
            out[f"len({path})"] = len(value)
    elif path and (value is None or isinstance(value, str | int | float | bool)):
        out[path] = value


class LearnedCondition(Frozen):
    """Predicates that separate positive from negative runs, with the counts behind them."""

    predicates: tuple[Predicate, ...]
    covered_positive: int = Field(ge=0, description="Positive runs where every predicate holds.")
    covered_negative: int = Field(ge=0, description="Negative runs where every predicate holds.")
    total_positive: int = Field(ge=0)
    total_negative: int = Field(ge=0)

    @property
    def precision(self) -> float:
        covered = self.covered_positive + self.covered_negative
        return self.covered_positive / covered if covered else 0.0

    @property
    def strength(self) -> float:
        """Youden's J of the whole condition, in [-1, 1]."""
        pos = self.covered_positive / self.total_positive if self.total_positive else 0.0
        neg = self.covered_negative / self.total_negative if self.total_negative else 0.0
        return pos - neg


def _is_number(value: Scalar) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def holds(predicate: Predicate, features: Features) -> bool:
    """Whether ``predicate`` holds for a flattened context; a missing feature never holds."""
    if predicate.feature not in features:
        return False
    value = features[predicate.feature]
    target = predicate.value
    if predicate.op == "==":
        return value == target and type(value) is type(target)
    if predicate.op == "!=":
        return value != target
    if not (_is_number(value) and isinstance(target, int | float)):
        return False
    assert isinstance(value, int | float)
    match predicate.op:
        case ">":
            return value > target
        case ">=":
            return value >= target
        case "<":
            return value < target
        case "<=":
            return value <= target
    return False


def holds_all(predicates: Sequence[Predicate], features: Features) -> bool:
    return all(holds(p, features) for p in predicates)


def _threshold(low: float, high: float) -> float | int:
    """A round number strictly between ``low`` and ``high``, or just ``low`` (with ``>``) for ints."""
    if isinstance(low, int) and isinstance(high, int):
        return (low + high) // 2
    mid = (low + high) / 2
    rounded = float(f"{mid:.6g}")
    return rounded if low <= rounded < high else mid


def _numeric_candidates(pos: list[float], neg: list[float]) -> list[tuple[str, JsonValue, int, int]]:
    """Every midpoint threshold, both directions, as ``(op, threshold, covered_pos, covered_neg)``."""
    values = sorted(set(pos) | set(neg))
    pos_sorted, neg_sorted = sorted(pos), sorted(neg)
    n_pos, n_neg = len(pos_sorted), len(neg_sorted)
    out: list[tuple[str, JsonValue, int, int]] = []
    for low, high in itertools.pairwise(values):
        t = _threshold(low, high)
        # Count values above t by bisection: O(log n) per threshold keeps large groups cheap.
        pos_above = n_pos - bisect.bisect_right(pos_sorted, t)
        neg_above = n_neg - bisect.bisect_right(neg_sorted, t)
        out.append((">", t, pos_above, neg_above))
        out.append(("<=", t, n_pos - pos_above, n_neg - neg_above))
    return out


def _categorical_candidates(pos: list[Scalar], neg: list[Scalar]) -> list[tuple[str, JsonValue, int, int]]:
    keys_pos = [_category_key(v) for v in pos]
    keys_neg = [_category_key(v) for v in neg]
    distinct = set(keys_pos) | set(keys_neg)
    n = len(pos) + len(neg)
    # Two values always count as a category; beyond that, values must repeat (ids and free text don't).
    if len(distinct) < 2 or (len(distinct) > 2 and 3 * len(distinct) >= 2 * n):
        return []
    return [("==", _from_category_key(key), keys_pos.count(key), keys_neg.count(key)) for key in sorted(set(keys_pos))]


def _best_predicate(positive: Sequence[Features], negative: Sequence[Features]) -> tuple[Predicate, int, int] | None:
    """The single predicate with the highest J over these runs, with its covered counts."""
    n_pos, n_neg = len(positive), len(negative)
    if not n_pos or not n_neg:
        return None
    features = sorted({k for f in positive for k in f} | {k for f in negative for k in f})
    best: tuple[tuple[float, int, bool, str, str, str], str, str, JsonValue, int, int] | None = None
    for feature in features:
        pos_vals = [f[feature] for f in positive if feature in f]
        neg_vals = [f[feature] for f in negative if feature in f]
        if not pos_vals:
            continue
        candidates: list[tuple[str, JsonValue, int, int]] = []
        numeric = all(_is_number(v) for v in pos_vals) and all(_is_number(v) for v in neg_vals)
        if numeric:
            candidates = _numeric_candidates(
                [v for v in pos_vals if isinstance(v, int | float)], [v for v in neg_vals if isinstance(v, int | float)]
            )
        elif all(_is_category(v) for v in pos_vals) and all(_is_category(v) for v in neg_vals):
            candidates = _categorical_candidates(pos_vals, neg_vals)
        for op, value, pc, nc in candidates:
            j = pc / n_pos - nc / n_neg
            rank = (-j, -pc, numeric, feature, op, repr(value))
            if best is None or rank < best[0]:
                best = (rank, feature, op, value, pc, nc)
    if best is None or best[0][0] >= 0:
        return None
    _, feature, op, value, pc, nc = best
    return Predicate(feature=feature, op=op, value=value), pc, nc  # type: ignore[arg-type]


def _is_category(value: Scalar) -> bool:
    return isinstance(value, bool) or (isinstance(value, str) and 0 < len(value) <= MAX_CATEGORY_CHARS)


def _category_key(value: Scalar) -> str:
    # Booleans and strings share one namespace here; prefixing keeps True apart from "True".
    return f"b:{value}" if isinstance(value, bool) else f"s:{value}"


def _from_category_key(key: str) -> bool | str:
    return key[2:] == "True" if key.startswith("b:") else key[2:]


def learn_condition(
    positive: Sequence[Features], negative: Sequence[Features], *, max_predicates: int = 2
) -> LearnedCondition | None:
    """Learn a conjunction of up to ``max_predicates`` predicates separating the two sets.

    Args:
        positive: Flattened contexts of runs where the recommended choice was right.
        negative: Flattened contexts of runs where it was wrong (or the alternative was fine).
        max_predicates: Upper bound on the conjunction length.

    Returns:
        The condition and its support, or None when no feature separates the sets at all.
    """
    first = _best_predicate(positive, negative)
    if first is None:
        return None
    predicates = [first[0]]
    pos_in = [f for f in positive if holds(first[0], f)]
    neg_in = [f for f in negative if holds(first[0], f)]
    while neg_in and len(predicates) < max_predicates:
        nxt = _best_predicate(pos_in, neg_in)
        # A refinement must exclude some negatives while keeping at least half the positives.
        if nxt is None or nxt[2] >= len(neg_in) or 2 * nxt[1] < len(pos_in):
            break
        predicates.append(nxt[0])
        pos_in = [f for f in pos_in if holds(nxt[0], f)]
        neg_in = [f for f in neg_in if holds(nxt[0], f)]
    return LearnedCondition(
        predicates=tuple(predicates),
        covered_positive=len(pos_in),
        covered_negative=len(neg_in),
        total_positive=len(positive),
        total_negative=len(negative),
    )
