"""Accesses folded into activity: the composed map gives what applying them one by one gives."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from cluster.memory.access import AccessLog, apply_accesses
from cluster.memory.policy import ActivityPolicy

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def one_by_one(policy: ActivityPolicy, score: float, since: datetime, times: list[datetime]) -> tuple[float, datetime]:
    """The definition: each access, in time order, decays the score since the last change and adds the boost."""
    for at in sorted(times):
        score = policy.reinforced(score, since, at)
        since = max(since, at)
    return score, since


def test_folded_accesses_match_applying_them_one_by_one() -> None:
    rng = random.Random(7)
    for _ in range(500):
        policy = ActivityPolicy(
            half_life_days=rng.choice([0.01, 1.0, 30.0]),
            access_boost=rng.choice([0.0, 0.5, 1.0, 3.0]),
            max_score=rng.choice([2.0, 10.0]),
        )
        times = [T0 + timedelta(hours=rng.uniform(0, 2000)) for _ in range(rng.randint(0, 30))]
        # The stored score may have been set before, among or after the waiting accesses.
        since = T0 + timedelta(hours=rng.uniform(-100, 2100))
        stored = rng.uniform(0, 10)
        score, at = apply_accesses(policy, stored, since, times)
        want_score, want_at = one_by_one(policy, stored, since, times)
        assert at == want_at
        assert score == pytest.approx(want_score, rel=1e-12, abs=1e-12)


def test_activity_follows_accesses_as_they_arrive_in_any_order() -> None:
    policy = ActivityPolicy(half_life_days=1.0)
    log = AccessLog(max_pending=10**6)
    rng = random.Random(3)
    now = T0 + timedelta(days=30)
    since = T0 + timedelta(days=3)
    seen: list[datetime] = []
    for _ in range(200):
        # Mostly in time order, as queries record them; sometimes a racing thread's earlier time.
        at = T0 + timedelta(hours=len(seen) * 2 - (rng.uniform(0, 30) if rng.random() < 0.2 else 0))
        log.add("alice", [7], at)
        seen.append(at)
        score, set_at = one_by_one(policy, 1.0, since, seen)
        want = policy.decayed(score, set_at, now)
        assert log.activity(policy, "alice", 7, 1.0, since, now) == pytest.approx(want, rel=1e-12)
    # Another process's flush moves the stored score's time past some of them: still exact.
    later = T0 + timedelta(days=10)
    score, set_at = one_by_one(policy, 4.0, later, seen)
    assert log.activity(policy, "alice", 7, 4.0, later, now) == pytest.approx(policy.decayed(score, set_at, now))


def test_taken_accesses_leave_the_stored_score_alone() -> None:
    policy = ActivityPolicy()
    log = AccessLog()
    log.add("alice", [1], T0 + timedelta(days=1))
    assert log.activity(policy, "alice", 1, 1.0, T0, T0 + timedelta(days=2)) > policy.decayed(
        1.0, T0, T0 + timedelta(days=2)
    )
    assert log.take() == {"alice": {1: [T0 + timedelta(days=1)]}}
    assert log.activity(policy, "alice", 1, 1.0, T0, T0 + timedelta(days=2)) == policy.decayed(
        1.0, T0, T0 + timedelta(days=2)
    )
