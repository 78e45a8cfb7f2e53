"""Confidence of a template: a number in [0, 1] from evidence, moved by outcome feedback.

* Initial value: the Wilson score lower bound (one-sided 80%, z = 1.2816) of the share of
  agreeing evidence, scaled by contrast strength. One agreeing run gives 0.38, two 0.55, four
  0.71, ten 0.86 — a single lucky run never reaches the default serving threshold of 0.7.
* Feedback: "served and succeeded" closes 10% of the gap to 1; "served and failed" removes 20%
  of the value. Failures weigh more because a wrong experience costs more than a missing one.
  Both stay in [0, 1] for any input in [0, 1].
"""

from __future__ import annotations

import math
import uuid
from datetime import datetime

from cluster.core.types import utcnow
from cluster.experience.templates import ExperienceTemplate
from cluster.trajectories.models import ResultStatus, Trajectory

Z_80 = 1.2816
SUCCESS_GAIN = 0.1
FAILURE_LOSS = 0.2


def wilson_lower_bound(successes: float, total: float, z: float = Z_80) -> float:
    """Lower bound of the Wilson score interval for ``successes`` out of ``total`` (0 when total is 0)."""
    if total <= 0:
        return 0.0
    p = min(1.0, max(0.0, successes / total))
    z2 = z * z
    centre = p + z2 / (2 * total)
    margin = z * math.sqrt(p * (1 - p) / total + z2 / (4 * total * total))
    return max(0.0, min(1.0, (centre - margin) / (1 + z2 / total)))


def initial_confidence(agreeing: int, conflicting: int = 0, strength: float = 1.0) -> float:
    """Confidence of a freshly distilled template.

    Args:
        agreeing: Evidence runs that support it (recommended choice succeeded, avoided one failed).
        conflicting: Runs inside its condition that contradict it.
        strength: Contrast strength in [0, 1] (how cleanly success and failure separate); a weak
            contrast halves the confidence at worst.

    Returns:
        A value in [0, 1].
    """
    bound = wilson_lower_bound(agreeing, agreeing + conflicting)
    strength = min(1.0, max(0.0, strength)) if math.isfinite(strength) else 0.0
    return round(bound * (0.5 + 0.5 * strength), 6)


def update_confidence(confidence: float, succeeded: bool) -> float:
    """Confidence after a served template was applied and the task succeeded or failed."""
    confidence = min(1.0, max(0.0, confidence)) if math.isfinite(confidence) else 0.0
    if succeeded:
        return round(confidence + SUCCESS_GAIN * (1.0 - confidence), 6)
    return round(confidence * (1.0 - FAILURE_LOSS), 6)


def apply_outcome(template: ExperienceTemplate, succeeded: bool, now: datetime | None = None) -> ExperienceTemplate:
    """The template with its confidence updated for one served outcome (support is evidence, not feedback)."""
    return template.model_copy(
        update={"confidence": update_confidence(template.confidence, succeeded), "updated_at": now or utcnow()}
    )


def served_feedback(trajectory: Trajectory) -> dict[uuid.UUID, bool]:
    """Which served templates to credit (True) or debit (False) from a finalized trajectory.

    A partial outcome, or no outcome yet, says nothing either way and yields no entries.
    """
    outcome = trajectory.outcome
    if outcome is None or outcome.status is ResultStatus.PARTIAL:
        return {}
    succeeded = outcome.status is ResultStatus.SUCCESS
    return dict.fromkeys(outcome.served_template_ids, succeeded)
