"""Condition learning: which context feature says where a choice is right.

Context snapshots are flattened into dotted feature paths (``{"table": {"rows": 5}}`` →
``table.rows``; a list becomes its length, ``len(items)``; nesting stops at depth 6). The
learner separates *positive* runs (the recommended choice was right) from *negative* ones with
the shortest condition a person would write. Its building blocks are *tests*, each on one feature:

* a threshold, ``rows > 60`` or ``rows <= 60``, placed midway between the two neighbouring
  observed values (``60`` when 20 and 100 are the closest values on either side);
* a band, ``20 < rows <= 100`` (two predicates, one test), with both ends at class boundaries;
* an equality, ``uniform == True``, or a set, ``region in {'eu', 'uk', 'us'}``: exactly the
  values that are a larger share of the positive runs than of the negative ones (so a feature
  whose five values call for two actions gives each action its own set; and a rare outcome,
  three failures among twenty successes, still finds its values, though each is seen more often
  among the successes). Only strings of at most 64 characters and
  booleans are categories; a feature with more than two values where fewer than half the runs
  of the decision point share their value with another run (ids, free text) is never used: it
  separates anything and means nothing. A run is a situation: calls retried in one situation
  count once. Nor is a feature whose values are mostly ids, dates,
  times, URLs, paths or free text (:data:`POINT_KINDS`): they name one thing or moment, so a
  set of them only memorises the runs it was learned on. A feature whose path cannot name a
  predicate (over 200 characters, a NUL byte) is never tested.

A condition is a conjunction of at most ``max_tests`` tests (default 2) on distinct features.
Its *errors* are the negatives it covers plus the positives it leaves out. The rule, exactly:

1. Candidates: every single test, and every test paired with one of the ``SEEDS`` best single
   tests or with the best single test of any other feature (the second test learned on the runs
   the first one covers). A candidate must cover a
   positive, leave out a negative, and cover a larger share of positives than of negatives.
2. Admissible: errors at most ``E_min + slack``, where ``E_min`` is the fewest errors of any
   candidate and ``slack = n // 20`` (one error in twenty runs is noise, not a reason for one
   more predicate; with fewer than twenty runs the separation must be the best there is).
3. Among the admissible, minimum description length wins: fewest tests, then fewest values (a
   threshold or equality is 1, a band 2, a set its size), then fewest errors, then fewest
   covered negatives (a wrong recommendation costs more than a missing one), then categorical
   before numeric tests (a threshold picked among many cut points separates small samples by
   luck more easily than an equality does), then more covered positives, then feature names.

So no predicate is ever added that separates nothing: a condition without it would have the
same errors and fewer tests. :func:`evaluate_condition` checks a learned (or hand-written)
condition against a live context snapshot with three-valued logic: a feature missing from the
snapshot is *unknown* (None), never false. ``docs/learner.md`` has worked examples.
Evaluation lives in :mod:`actors.engine.evaluation`. Where one
conjunction cannot say it ("A or B"), :mod:`actors.engine.disjunction` learns alternatives.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from pydantic import Field, JsonValue

from actors.engine.evaluation import (
    _MISSING,
    _plain_number,
    holds,
    holds_all,
    is_number,
    is_string_set,
    set_of,
    set_predicate,
)
from actors.engine.features import Features, Scalar
from actors.engine.generalize import string_kind
from actors.engine.model.templates import Operator, Predicate, render_predicate
from cluster.core.types import Frozen, is_name

MAX_CATEGORY_CHARS = 64
SEEDS = 12
"""Single tests tried as the first half of a conjunction (the best ones by the rule above)."""
MAX_BAND_CUTS = 40
"""Above this many class boundaries on one feature only the best band is tried (keeps it O(n²) at most)."""
NOISE_RUNS = 20
"""One error per this many runs is tolerated before a longer condition is preferred."""
POINT_KINDS = frozenset({"id", "datetime", "date", "time", "url", "email", "path", "token", "text"})
"""String kinds (:func:`~actors.engine.generalize.string_kind`) that are never categories."""


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

    @property
    def errors(self) -> int:
        """Negatives covered plus positives left out."""
        return self.covered_negative + self.total_positive - self.covered_positive


# --- learning ---------------------------------------------------------------------------------


_Term = tuple[str, Operator, JsonValue]
"""A predicate's parts: thousands of candidate tests are made per trajectory and few are kept, so
a test's predicates are built only once it wins (:func:`_predicates`)."""


@dataclass(frozen=True, slots=True)
class _Test:
    """One test on one feature and the evidence runs it covers (bit i = run i)."""

    feature: str
    terms: tuple[_Term, ...]
    values: int
    numeric: bool
    mask: int


def _predicates(test: _Test) -> tuple[Predicate, ...]:
    # Valid by construction (the feature was checked once in _evidence; the values are numbers or
    # the runs' own scalars), so not validated again.
    return tuple(Predicate.model_construct(feature=f, op=op, value=v) for f, op, v in test.terms)


@dataclass(frozen=True, slots=True)
class _Evidence:
    runs: tuple[Features, ...]
    n_pos: int
    pos_mask: int
    neg_mask: int
    features: tuple[str, ...]
    categorical_ok: frozenset[str]

    def counts(self, mask: int) -> tuple[int, int]:
        return (mask & self.pos_mask).bit_count(), (mask & self.neg_mask).bit_count()


class Population(tuple[Features, ...]):
    """Every run of a decision point, as ``population`` for :func:`learn_condition`.

    Which features are categories depends on these runs alone, so a ``Population`` judges it
    once for every condition learned at the decision point; a plain sequence is scanned again by
    each call (several per pair of actions, each reading every run of the decision point).
    """

    @functools.cached_property
    def categories(self) -> frozenset[str]:
        """The features whose values are categories here (see the module docstring)."""
        return categorical_features(self)


def as_population(runs: Sequence[Features]) -> Population:
    """``runs`` as a :class:`Population` (itself when it is one)."""
    return runs if isinstance(runs, Population) else Population(runs)


def categorical_features(runs: Iterable[Features]) -> frozenset[str]:
    """The features of ``runs`` a set or equality test may use: their values are short strings or
    booleans that recur, and are not mostly ids, dates, paths or free text."""
    # One pass over the runs gathers every feature's category values.
    gathered: dict[str, list[Scalar]] = {}
    for f in runs:
        for feature, value in f.items():
            bucket = gathered.get(feature)
            if bucket is None:
                bucket = gathered[feature] = []
            if _is_category(value):
                bucket.append(value)
    out = set()
    for feature, found in gathered.items():
        values = Counter(found)
        if _names_one_thing(feature, values):
            continue
        # Booleans and strings never compare equal, so distinct values are distinct category keys.
        distinct = len(values)
        # Two values always count as a category; beyond that, values must recur: at least half the
        # runs share their value with another run (ids and free text never do, a field of eight
        # values over a dozen runs mostly does).
        recurring = sum(n for n in values.values() if n > 1)
        if distinct >= 2 and (distinct <= 2 or 2 * recurring >= values.total()):
            out.add(feature)
    return frozenset(out)


def _evidence(
    positive: Sequence[Features], negative: Sequence[Features], population: Sequence[Features] | None
) -> _Evidence:
    runs = (*positive, *negative)
    n_pos = len(positive)
    # A feature whose path cannot name a predicate (too long, a NUL byte) cannot be a test.
    features = tuple(sorted(k for k in {k for f in runs for k in f} if is_name(k)))
    if isinstance(population, Population):
        categories = population.categories
    else:
        categories = categorical_features(runs if population is None else population)
    all_mask = (1 << len(runs)) - 1
    pos_mask = (1 << n_pos) - 1
    return _Evidence(runs, n_pos, pos_mask, all_mask & ~pos_mask, features, categories & frozenset(features))


def _threshold(low: float, high: float) -> float | int:
    """A round number strictly between ``low`` and ``high``, or just ``low`` (with ``>``) for ints."""
    if isinstance(low, int) and isinstance(high, int):
        return (low + high) // 2
    mid = (low + high) / 2
    rounded = float(f"{mid:.6g}")
    if low <= rounded < high:
        return rounded
    # Adjacent floats have no number between them: the midpoint rounds to ``high``.
    return mid if mid < high else low


def _tests(ev: _Evidence, region: int, skip: str | None = None) -> list[_Test]:
    """Every candidate test on the runs in ``region`` (a bit mask), one feature at a time."""
    out: list[_Test] = []
    runs = ev.runs
    indices = _indices(region)
    for feature in ev.features:
        if feature == skip:
            continue
        present = [(i, f[feature]) for i in indices if feature in (f := runs[i])]
        if not present:
            continue
        if all(type(v) is int or is_number(v) for _, v in present):
            out.extend(_numeric_tests(ev, feature, cast(list[tuple[int, float]], present)))
        elif feature in ev.categorical_ok and all(_is_category(v) for _, v in present):
            out.extend(_categorical_tests(ev, feature, present))
    return out


def _indices(mask: int) -> list[int]:
    """The set bits of ``mask``, lowest first (shifting a mask of n runs n times is quadratic)."""
    return [i for i, bit in enumerate(reversed(bin(mask)[2:])) if bit == "1"] if mask > 0 else []


def _numeric_tests(ev: _Evidence, feature: str, present: list[tuple[int, float]]) -> Iterable[_Test]:
    by_value: dict[float, int] = {}
    for i, v in present:
        by_value[v] = by_value.get(v, 0) | (1 << i)
    values = sorted(by_value)
    if len(values) < 2:
        return
    # above[k]: runs with a value > values[k]; cuts sit between values[k] and values[k + 1].
    above = [0] * len(values)
    acc = 0
    for k in range(len(values) - 1, 0, -1):
        acc |= by_value[values[k]]
        above[k - 1] = acc
    everything = acc | by_value[values[0]]
    cuts = [_threshold(low, high) for low, high in itertools.pairwise(values)]
    for k, t in enumerate(cuts):
        yield _Test(feature, ((feature, ">", t),), 1, True, above[k])
        yield _Test(feature, ((feature, "<=", t),), 1, True, everything & ~above[k])
    # Bands end at class boundaries: moving an end past a run of one class only adds errors.
    kinds = [_class_of(ev, by_value[v]) for v in values]
    boundaries = [k for k in range(len(cuts)) if not (kinds[k] == kinds[k + 1] != "mixed")]
    pairs: Iterable[tuple[int, int]]
    if len(boundaries) <= MAX_BAND_CUTS:
        pairs = itertools.combinations(boundaries, 2)
    else:
        pairs = _best_band(ev, values, by_value, cuts)
    for lo, hi in pairs:
        mask = above[lo] & ~above[hi]
        yield _Test(feature, ((feature, ">", cuts[lo]), (feature, "<=", cuts[hi])), 2, True, mask)


def _class_of(ev: _Evidence, mask: int) -> str:
    pos, neg = ev.counts(mask)
    return "pos" if not neg else "neg" if not pos else "mixed"


def _best_band(
    ev: _Evidence, values: list[float], by_value: dict[float, int], cuts: list[float | int]
) -> list[tuple[int, int]]:
    """The band of most (positives − negatives), by Kadane's scan; as a pair of cut indices."""
    best, best_pair = 0, None
    run, start = 0, 0
    for k in range(1, len(values) - 1):  # a band needs a cut on both sides
        pos, neg = ev.counts(by_value[values[k]])
        if run <= 0:
            run, start = 0, k
        run += pos - neg
        if run > best:
            best, best_pair = run, (start - 1, k)
    return [best_pair] if best_pair is not None and best_pair[1] < len(cuts) else []


def _categorical_tests(ev: _Evidence, feature: str, present: list[tuple[int, Scalar]]) -> Iterable[_Test]:
    by_key: dict[str, int] = {}
    for i, v in present:
        key = _category_key(v)
        by_key[key] = by_key.get(key, 0) | (1 << i)
    region = 0
    for mask in by_key.values():
        region |= mask
    n_pos, n_neg = ev.counts(region)
    chosen = sorted(k for k, mask in by_key.items() if _more_pos(ev, mask, n_pos, n_neg))
    if not chosen or len(chosen) == len(by_key):
        return  # nothing to tell apart among the values present
    mask = 0
    for key in chosen:
        mask |= by_key[key]
    values = [_from_category_key(k) for k in chosen]
    term: _Term = (feature, "==", values[0]) if len(values) == 1 else (feature, "in", list(values))
    yield _Test(feature, (term,), len(values), False, mask)


def _names_one_thing(feature: str, values: Counter[Scalar]) -> bool:
    """Mostly ids, dates, times, URLs, paths or free text: values that name one thing or moment.

    A rule on such a value cannot carry over to a new run, however well it splits the old ones.
    ``values`` counts each value once per run; each distinct one is classified once.
    """
    strings = {v: n for v, n in values.items() if isinstance(v, str)}
    total = sum(strings.values())
    return bool(total) and 2 * sum(n for v, n in strings.items() if string_kind(feature, v) in POINT_KINDS) > total


def _more_pos(ev: _Evidence, mask: int, n_pos: int, n_neg: int) -> bool:
    """The value is a larger share of the positive runs than of the negative ones (of those present)."""
    pos, neg = ev.counts(mask)
    return pos * n_neg > neg * n_pos


def _is_category(value: Scalar) -> bool:
    return isinstance(value, bool) or (isinstance(value, str) and 0 < len(value) <= MAX_CATEGORY_CHARS)


def _category_key(value: Scalar) -> str:
    # Booleans and strings share one namespace here; prefixing keeps True apart from "True".
    return f"b:{value}" if isinstance(value, bool) else f"s:{value}"


def _from_category_key(key: str) -> bool | str:
    return key[2:] == "True" if key.startswith("b:") else key[2:]


def _mask_of(ev: _Evidence, predicates: Sequence[Predicate]) -> int:
    return _bits(holds_all(predicates, f) for f in ev.runs)


def _errors(ev: _Evidence, mask: int) -> int:
    pos, neg = ev.counts(mask)
    return neg + ev.n_pos - pos


def _rank(ev: _Evidence, tests: Sequence[_Test], mask: int) -> tuple[object, ...]:
    """The description-length order of the module docstring (smaller is better)."""
    pos, neg = ev.counts(mask)
    errors = neg + ev.n_pos - pos
    return (
        len(tests),
        sum(t.values for t in tests),
        errors,
        neg,
        sum(t.numeric for t in tests),
        -pos,
        tuple(sorted(t.feature for t in tests)),
        tuple(sorted(render_predicate(*term) for t in tests for term in t.terms)),
    )


def _seeds(ev: _Evidence, singles: Sequence[_Test]) -> list[_Test]:
    """First halves of conjunctions: the ``SEEDS`` single tests with fewest errors (then by rank),
    and the best single test of every other feature.

    Narrow bands that cover one positive and no negative have few errors and can fill the whole
    list on a numeric feature with many values; the first half of the conjunction that is the
    rule (``has_non_ascii == True`` and then ``default_encoding == 'latin-1'``) covers every
    positive with many negatives, and the second half removes them. One seed per feature keeps it.
    """
    ordered = sorted(singles, key=lambda t: (_errors(ev, t.mask), _rank(ev, [t], t.mask)))
    seeds = ordered[:SEEDS]
    features = {t.feature for t in seeds}
    for t in ordered[SEEDS:]:
        if t.feature not in features:
            seeds.append(t)
            features.add(t.feature)
    return seeds


def learn_condition(
    positive: Sequence[Features],
    negative: Sequence[Features],
    *,
    max_tests: int = 2,
    population: Sequence[Features] | None = None,
    exact: bool = False,
) -> LearnedCondition | None:
    """The shortest condition that separates positive from negative runs (see the module docstring).

    Args:
        positive: Flattened contexts of runs where the recommended choice was right.
        negative: Flattened contexts of runs where it was wrong (or the alternative was fine).
        max_tests: At most this many tests, each on its own feature (a band is one test).
        population: Every run of the decision point (default: positive and negative). Whether a
            string feature is a category (its values recur) or an id is judged on these: six
            regions seen once each among the runs compared here still recur across the rest.
        exact: Tolerate no noise: only the candidates with the fewest errors are admissible.

    Returns:
        The condition and its support, or None when no feature separates the sets at all.
    """
    if not positive or not negative:
        return None
    ev = _evidence(positive, negative, population)
    n_neg = len(negative)
    candidates: list[tuple[tuple[_Test, ...], int]] = []

    def useful(mask: int) -> bool:
        pos, neg = ev.counts(mask)
        return pos > 0 and neg < n_neg and pos * n_neg > neg * ev.n_pos

    singles = [t for t in _tests(ev, ev.pos_mask | ev.neg_mask) if useful(t.mask)]
    candidates.extend(((t,), t.mask) for t in singles)
    if max_tests >= 2 and singles:
        for seed in _seeds(ev, singles):
            for second in _tests(ev, seed.mask, skip=seed.feature):
                mask = seed.mask & second.mask
                if mask != seed.mask and useful(mask):
                    candidates.append(((seed, second), mask))
    if not candidates:
        return None
    errors = [_errors(ev, m) for _, m in candidates]
    bound = min(errors) + (0 if exact else len(ev.runs) // NOISE_RUNS)
    tests, mask = min(
        (c for c, e in zip(candidates, errors, strict=True) if e <= bound), key=lambda c: _rank(ev, c[0], c[1])
    )
    pos, neg = ev.counts(mask)
    if len(tests) > 1:
        # The test that separates more on its own comes first and the refinement after, so
        # caveats read the refinement as the edge case. (A second test's mask only spans the
        # runs its seed covered, so judge each test on all runs here.)
        tests = tuple(sorted(tests, key=lambda t: _errors(ev, _mask_of(ev, _predicates(t)))))
    # A band learned on the seed's runs may have an end the seed already implies: drop it.
    return LearnedCondition(
        predicates=simplify([p for t in tests for p in _predicates(t)], ev.runs),
        covered_positive=pos,
        covered_negative=neg,
        total_positive=ev.n_pos,
        total_negative=n_neg,
    )


def simplify(predicates: Sequence[Predicate], runs: Sequence[Features]) -> tuple[Predicate, ...]:
    """Drop, last first, every predicate that separates nothing among ``runs``.

    A predicate separates nothing when the others, without it, cover exactly the same runs. Used
    where two learned conditions are joined (both may test the same feature). Two sets on one
    feature become the one set of values both name: ``region in {eu, uk, us} and region in {uk,
    us, jp}`` says ``region in {uk, us}``.
    """
    kept = _intersected(list(dict.fromkeys(predicates)))
    # Each predicate is evaluated once per run; a conjunction's coverage is then the AND of masks.
    masks = [_coverage(p, runs) for p in kept]
    everything = (1 << len(runs)) - 1

    def covered(chosen: Sequence[int]) -> int:
        mask = everything
        for m in chosen:
            mask &= m
        return mask

    full = covered(masks)
    for i in range(len(kept) - 1, -1, -1):
        without = masks[:i] + masks[i + 1 :]
        if covered(without) == full:
            kept = kept[:i] + kept[i + 1 :]
            masks = without
    return tuple(kept)


def _intersected(predicates: list[Predicate]) -> list[Predicate]:
    """Each feature's string sets as one (where they share a value), in the place of its first."""
    first: dict[str, int] = {}
    out: list[Predicate] = []
    for p in predicates:
        if is_string_set(p):
            at = first.setdefault(p.feature, len(out))
            if at < len(out) and (common := set_of(out[at]) & set_of(p)):
                out[at] = set_predicate(p.feature, common)
                continue
        out.append(p)
    return out


_COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


def _coverage(predicate: Predicate, runs: Sequence[Features]) -> int:
    """The mask of the runs where ``predicate`` holds (:func:`holds`, bit i = run i)."""
    compare = _COMPARE.get(predicate.op)
    target = predicate.value
    if compare is None or not _plain_number(target):
        return _bits(holds(predicate, f) for f in runs)
    assert isinstance(target, int | float)
    feature = predicate.feature
    # A threshold on plain numbers (nearly every run) is compared here; anything else is
    # left to evaluate_predicate, which knows what a missing, non-finite or non-numeric value means.
    return _bits(
        compare(v, target) if _plain_number(v := f.get(feature, _MISSING)) else holds(predicate, f)  # type: ignore[arg-type]
        for f in runs
    )


def _bits(flags: Iterable[bool]) -> int:
    """The mask with bit i set where the i-th flag is true, built in one pass (``|= 1 << i`` is quadratic)."""
    text = "".join(["1" if flag else "0" for flag in flags])
    return int(text[::-1], 2) if text else 0
