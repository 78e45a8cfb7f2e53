"""Conditions with alternatives: "A or B" where no single conjunction separates the evidence.

``export_csv`` works where the page is UTF-8 *or* the data is plain ASCII. A conjunction
(:func:`~actors.engine.conditions.learn_condition`) can say only one half of that; the other
half's successes stay uncovered and the library keeps advising the costlier detour there.
:func:`learn_disjunction` learns the alternatives by *sequential covering*:

1. Learn the best conjunction on all the evidence (exactly :func:`learn_condition`).
2. Set aside the positive runs it covers; learn the next conjunction on the positives left
   against *all* the negatives.
3. Stop when fewer than ``MIN_ALTERNATIVE_RUNS`` positives are left, after ``MAX_ALTERNATIVES``
   alternatives, or when the next conjunction does not earn its place.
4. If positives are still uncovered and one conjunction covers every negative run and no
   positive one, its negation is a disjunction: each negated predicate that covers a positive
   no alternative covers yet, and no negative, is one more alternative (:func:`_complement`).
   The agent may have tried the action only once or twice where the failure rule does not
   hold, but the rule stands on the failures, so the few successes need no support of their own.

An alternative after the first earns its place (minimum description still decides) when

* it covers no negative run at all: an alternative that contradicts its own evidence would
  recommend the action where it was seen to fail, and the first alternative already spent the
  noise allowance;
* it covers at least ``MIN_ALTERNATIVE_RUNS`` of the positives left, more than the noise
  allowance (one run in ``NOISE_RUNS``) and at least twice its own length (a set of four
  values must explain eight runs: a description longer than what it explains is memorising);
* it covers at least half of the positives left: a real second case explains the bulk of
  what the first left over, while a lucky value of a harmless feature picks off a few of the
  scattered runs that noise left uncovered.

Each alternative is a plain conjunction, so everything downstream (storage, the exchange
format, serving's three-valued evaluation, library merging) reads it as today: the template
distiller makes one template per alternative, all recommending the same action.
"""

from __future__ import annotations

from collections.abc import Sequence

from actors.engine.conditions import NOISE_RUNS, LearnedCondition, as_population, learn_condition
from actors.engine.evaluation import holds_all
from actors.engine.features import Features
from actors.engine.model.templates import Condition, Predicate

MAX_ALTERNATIVES = 3
"""More alternatives than this read as a list of cases, not as a rule."""
MIN_ALTERNATIVE_RUNS = 3
"""Fewer positive runs than this do not support an alternative of their own."""


class Disjunction(LearnedCondition):
    """Alternatives that together separate positive from negative runs.

    The counts are those of the whole disjunction (a run is covered when any alternative holds),
    so :attr:`strength` and :attr:`precision` judge the rule as a whole; ``alternatives[0]`` is
    the conjunction :func:`learn_condition` would have learned alone, and ``predicates`` is it.
    """

    alternatives: tuple[tuple[Predicate, ...], ...]


def learn_disjunction(
    positive: Sequence[Features],
    negative: Sequence[Features],
    *,
    max_tests: int = 2,
    population: Sequence[Features] | None = None,
) -> Disjunction | None:
    """The alternatives that separate positive from negative runs (see the module docstring).

    Args:
        positive: Flattened contexts of runs where the recommended choice was right.
        negative: Flattened contexts of runs where it was wrong.
        max_tests: At most this many tests per alternative.
        population: Every run of the decision point, to tell categories from ids (default:
            positive and negative). The same for every alternative, so a value that recurs across
            the decision point still counts when few runs are left.

    Returns:
        None when no feature separates the sets at all; otherwise one alternative or more.
    """
    # Every alternative is learned against the same runs of the decision point: judge once which
    # of their features are categories.
    seen = as_population(population if population is not None else (*positive, *negative))
    first = learn_condition(positive, negative, max_tests=max_tests, population=seen)
    if first is None:
        return None
    slack = (len(positive) + len(negative)) // NOISE_RUNS
    alternatives = [first.predicates]
    covered = [holds_all(first.predicates, f) for f in positive]
    while len(alternatives) < MAX_ALTERNATIVES:
        rest = [f for f, c in zip(positive, covered, strict=True) if not c]
        if len(rest) < MIN_ALTERNATIVE_RUNS:
            break
        nxt = learn_condition(rest, negative, max_tests=max_tests, population=seen)
        if nxt is None or not _earns_its_place(nxt, len(rest), slack):
            break
        alternatives.append(nxt.predicates)
        covered = [c or holds_all(nxt.predicates, f) for f, c in zip(positive, covered, strict=True)]
    if not all(covered):
        for alternative in _complement(positive, negative, seen, max_tests):
            new = sum(not c and holds_all(alternative, f) for f, c in zip(positive, covered, strict=True))
            if len(alternatives) == MAX_ALTERNATIVES or not new:
                continue
            if any(holds_all(alternative, f) for f in negative):
                continue
            alternatives.append(alternative)
            covered = [c or holds_all(alternative, f) for f, c in zip(positive, covered, strict=True)]
    return Disjunction(
        predicates=first.predicates,
        alternatives=tuple(alternatives),
        covered_positive=sum(covered),
        covered_negative=sum(any(holds_all(a, f) for a in alternatives) for f in negative),
        total_positive=len(positive),
        total_negative=len(negative),
    )


def _complement(
    positive: Sequence[Features], negative: Sequence[Features], seen: Sequence[Features], max_tests: int
) -> list[tuple[Predicate, ...]]:
    """Alternatives read off where the action fails, most positives first; empty when it fails anywhere else.

    When one conjunction covers every negative run and no positive one (``export_csv`` failed
    exactly where the page is latin-1 *and* has accents), its negation is a disjunction that
    covers every positive: one alternative per negated predicate (``default_encoding !=
    'latin-1'``, ``has_non_ascii == False``). Such an alternative may cover few positives that
    no earlier one covers (the agent rarely tried the action there), yet it is no guess: the
    failure rule it negates stands on ``MIN_ALTERNATIVE_RUNS`` failures or more, and no failure
    was ever seen outside it.
    """
    if len(negative) < MIN_ALTERNATIVE_RUNS:
        return []
    # Exact: a failure rule that tolerates a success inside it would negate into a gap.
    failure = learn_condition(negative, positive, max_tests=max_tests, population=seen, exact=True)
    if failure is None or failure.covered_positive < len(negative) or failure.covered_negative:
        return []
    negated = [_negation(p) for p in failure.predicates]
    if any(p is None for p in negated):
        return []
    alternatives = [(p,) for p in negated if p is not None]
    return sorted(alternatives, key=lambda a: -sum(holds_all(a, f) for f in positive))


def _negation(predicate: Predicate) -> Predicate | None:
    """The predicate that holds exactly where ``predicate`` is false (None for a set: no operator says it)."""
    op, value = predicate.op, predicate.value
    if op == "==" and isinstance(value, bool):
        return predicate.model_copy(update={"value": not value})
    flipped = {"==": "!=", "!=": "==", ">": "<=", "<=": ">", ">=": "<", "<": ">="}.get(op)
    return None if flipped is None else predicate.model_copy(update={"op": flipped})


def _earns_its_place(learned: LearnedCondition, left: int, slack: int) -> bool:
    """Does an alternative after the first explain enough, and nothing wrongly?"""
    pos = learned.covered_positive
    return (
        learned.covered_negative == 0
        and pos >= MIN_ALTERNATIVE_RUNS
        and pos > slack
        and pos >= 2 * description_length(learned.predicates)
        and 2 * pos >= left
    )


def description_length(predicates: Sequence[Predicate]) -> int:
    """Values a condition names: a threshold or an equality is one, a set its size."""
    return sum(len(p.value) if isinstance(p.value, list) else 1 for p in predicates)


def render_alternatives(alternatives: Sequence[Sequence[Predicate]]) -> str:
    """``default_encoding == 'utf-8' or has_non_ascii == False``; a conjunction in parentheses."""
    parts = []
    for predicates in alternatives:
        text = Condition(predicates=tuple(predicates)).render()
        parts.append(f"({text})" if len(alternatives) > 1 and " and " in text else text)
    return " or ".join(parts)
