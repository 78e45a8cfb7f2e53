"""Confidence of a template: a calibrated, conservative estimate that following it works.

A template's evidence is a :class:`~actors.engine.model.templates.Belief`: ``agree`` runs that
support it, ``disagree`` runs inside its condition that contradict it, and the outcomes agents
reported after it was served (``served_ok``, ``served_failed``). The chance that the recommended
choice works is Beta-distributed given those counts, from a uniform prior:
``Beta(1 + agree + served_ok, 1 + disagree + served_failed)``. The confidence is the posterior's
``LOWER_QUANTILE`` quantile: a value the chance exceeds with 75% certainty.

* With nothing against it, one agreeing run gives 0.50, two 0.63, three 0.71, five 0.79, ten
  0.88: a lesson backed by three consistent runs is served at the default threshold (0.7), a
  single lucky run never is.
* A contrast that separates its runs only partly (``strength`` < 1) counts its agreeing runs at
  ``0.5 + 0.5 × strength`` each: a weak contrast halves the evidence at worst.
* Feedback is evidence like any other: a served failure after ten agreeing runs moves the
  confidence from 0.88 to 0.79, after three from 0.71 to 0.55. It does not swing: the more
  evidence stands behind a template, the less one report moves it, and a rebuild that carries the
  counts lands where the live library was.

A hand-written or imported template has no belief: its confidence is as given, and the first
reported outcome starts a belief that would give that confidence (:func:`implied_belief`).
"""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import Callable
from datetime import datetime

from actors.engine.model.templates import Belief, ExperienceTemplate
from actors.engine.model.trajectories import ResultStatus, Trajectory
from cluster.core.types import utcnow

LOWER_QUANTILE = 0.25
"""The posterior quantile reported: confidence is exceeded with probability 1 - this."""
_BISECT_STEPS = 48


def lower_bound(agree: float, disagree: float) -> float:
    """The ``LOWER_QUANTILE`` quantile of ``Beta(1 + agree, 1 + disagree)``, rounded to 6 places."""
    agree = _count(agree)
    disagree = _count(disagree)
    return _quantile(round(agree, 4), round(disagree, 4))


def confidence_of(belief: Belief) -> float:
    """The confidence a belief gives (see the module docstring)."""
    return lower_bound(belief.agree + belief.served_ok, belief.disagree + belief.served_failed)


def evidence_belief(agreeing: float, conflicting: float = 0.0, strength: float = 1.0) -> Belief:
    """The belief of a freshly distilled template.

    Args:
        agreeing: Evidence runs that support it (recommended choice succeeded, avoided one failed
            or cost more).
        conflicting: Runs inside its condition that contradict it.
        strength: Contrast strength in [0, 1] (how cleanly the condition separates the runs);
            each agreeing run counts ``0.5 + 0.5 × strength``.
    """
    strength = min(1.0, max(0.0, strength)) if math.isfinite(strength) else 0.0
    return Belief(agree=round(_count(agreeing) * (0.5 + 0.5 * strength), 6), disagree=round(_count(conflicting), 6))


def initial_confidence(agreeing: float, conflicting: float = 0.0, strength: float = 1.0) -> float:
    """Confidence of a freshly distilled template (:func:`evidence_belief`, then :func:`confidence_of`)."""
    return confidence_of(evidence_belief(agreeing, conflicting, strength))


def implied_belief(confidence: float) -> Belief:
    """The belief without feedback whose confidence is ``confidence`` (for hand-set confidences).

    At or above 0.25 (the uniform prior's quantile) it is agreeing evidence only; below, it is
    contradicting evidence only. Both are found by bisection on the monotone :func:`lower_bound`.
    """
    target = min(1.0, max(0.0, confidence)) if math.isfinite(confidence) else 0.0
    if target >= lower_bound(0.0, 0.0):
        return Belief(agree=round(_solve(lambda n: lower_bound(n, 0.0) - target), 6))
    return Belief(disagree=round(_solve(lambda n: target - lower_bound(0.0, n)), 6))


def apply_outcome(template: ExperienceTemplate, succeeded: bool, now: datetime | None = None) -> ExperienceTemplate:
    """The template after one served outcome: its belief counts it and its confidence follows."""
    counted = carry_feedback(template, served_ok=int(succeeded), served_failed=int(not succeeded))
    return counted.model_copy(update={"updated_at": now or utcnow()})


def carry_feedback(template: ExperienceTemplate, served_ok: int, served_failed: int) -> ExperienceTemplate:
    """``template`` with reported outcomes added to its belief (a rebuild keeps what agents reported)."""
    if not served_ok and not served_failed:
        return template
    belief = template.belief or implied_belief(template.confidence)
    belief = belief.model_copy(
        update={"served_ok": belief.served_ok + served_ok, "served_failed": belief.served_failed + served_failed}
    )
    return template.model_copy(update={"belief": belief, "confidence": confidence_of(belief)})


def served_feedback(trajectory: Trajectory) -> dict[uuid.UUID, bool]:
    """Which served templates to credit (True) or debit (False) from a finalized trajectory.

    A partial outcome, or no outcome yet, says nothing either way and yields no entries.
    """
    outcome = trajectory.outcome
    if outcome is None or outcome.status is ResultStatus.PARTIAL:
        return {}
    succeeded = outcome.status is ResultStatus.SUCCESS
    return dict.fromkeys(outcome.served_template_ids, succeeded)


def _count(value: float) -> float:
    return max(0.0, float(value)) if math.isfinite(value) else 0.0


@functools.lru_cache(maxsize=8192)
def _quantile(a: float, b: float) -> float:
    # The CDF of the posterior is increasing in x: bisect for the point where it reaches the level.
    low, high = 0.0, 1.0
    for _ in range(_BISECT_STEPS):
        mid = (low + high) / 2
        if _beta_cdf(mid, 1.0 + a, 1.0 + b) < LOWER_QUANTILE:
            low = mid
        else:
            high = mid
    return round((low + high) / 2, 6)


def _solve(f: Callable[[float], float]) -> float:
    """The root of an increasing function on [0, 10_000] (clamped to the ends)."""
    low, high = 0.0, 10_000.0
    if f(high) <= 0:
        return high
    for _ in range(_BISECT_STEPS + 16):
        mid = (low + high) / 2
        if f(mid) < 0:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _beta_cdf(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b) for a, b >= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = a * math.log(x) + b * math.log1p(-x) - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
    # The continued fraction converges fast on the side of the mean; use the symmetry on the other.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _fraction(1.0 - x, b, a) / b


def _fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of the incomplete beta function, evaluated by the modified Lentz method."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 300):
        # Even step, then odd step, of the fraction's terms.
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        for term in (even, odd):
            d = 1.0 + term * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + term / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-12:
            break
    return result
