"""How a memory's activity decays and grows, and when a memory is archived."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from pydantic import Field

from cluster.core.types import Frozen, as_utc


class ActivityPolicy(Frozen):
    """Activity score: decays with a half-life, grows with each access, archives below a threshold.

    ``score(t) = score(t0) * 0.5 ** ((t - t0) / half_life)``; an access adds ``access_boost``
    (capped at ``max_score``). With the defaults an untouched memory falls below the threshold
    after about 100 days; one access buys about another 30.
    """

    initial: float = Field(default=1.0, gt=0)
    half_life_days: float = Field(default=30.0, gt=0)
    access_boost: float = Field(default=1.0, ge=0)
    max_score: float = Field(default=10.0, gt=0)
    archive_threshold: float = Field(default=0.1, ge=0)

    def decayed(self, score: float, since: datetime, now: datetime) -> float:
        days = max((now - as_utc(since)).total_seconds(), 0.0) / 86_400.0
        return score * math.pow(0.5, days / self.half_life_days)

    def reinforced(self, score: float, since: datetime, now: datetime) -> float:
        return min(self.decayed(score, since, now) + self.access_boost, self.max_score)

    def should_archive(self, score: float, since: datetime, now: datetime) -> bool:
        return self.decayed(score, since, now) < self.archive_threshold

    def archive_candidates_before(self, now: datetime) -> datetime:
        """Only memories whose activity was last set before this moment can be under the threshold.

        A stored score is never below ``floor`` (a write or restore sets ``initial``, an access
        adds ``access_boost``), and falling from ``floor`` to the threshold takes
        ``half_life * log2(floor / threshold)`` days. A cheap SQL pre-filter for the archive job.
        """
        floor = min(self.initial, self.access_boost) if self.access_boost > 0 else self.initial
        if self.archive_threshold <= 0:
            return datetime.min.replace(tzinfo=UTC)
        days = self.half_life_days * math.log2(max(floor / self.archive_threshold, 1.0))
        return now - timedelta(days=days)
