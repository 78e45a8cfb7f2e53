"""Accesses recorded by queries, held in memory and written later in one short transaction.

A query is a read: it must not queue behind SQLite's single writer to bump activity scores. So a
query only notes which memories it returned (:meth:`AccessLog.add`); the notes are written in one
write transaction when there are enough of them or they are old enough (:meth:`AccessLog.due`),
and by every maintenance pass (the archive decision must see them). Until then the process that
made them folds them into the activity it reports (:meth:`AccessLog.activity`). Notes that are
never written (the process died) cost some activity, never a memory: activity only decides what
gets archived, and archived memories can be restored.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime, timedelta

from cluster.memory.policy import ActivityPolicy

# owner -> seq -> times it was returned
Pending = dict[str, dict[int, list[datetime]]]


class AccessLog:
    """Thread-safe buffer of (owner, seq, time) accesses.

    Args:
        max_pending: write once this many accesses are waiting.
        max_age: write once the oldest waiting access is this old.
    """

    def __init__(self, max_pending: int = 1000, max_age: timedelta = timedelta(seconds=10)) -> None:
        self.max_pending = max_pending
        self.max_age = max_age
        self._pending: Pending = {}
        self._count = 0
        self._oldest: datetime | None = None
        self._lock = threading.Lock()

    def add(self, owner: str, seqs: Iterable[int], at: datetime) -> None:
        with self._lock:
            mine = self._pending.setdefault(owner, {})
            for seq in seqs:
                mine.setdefault(seq, []).append(at)
                self._count += 1
            if self._count and (self._oldest is None or at < self._oldest):
                self._oldest = at

    def due(self, now: datetime) -> bool:
        """Enough accesses, or old enough ones, to be worth a write."""
        with self._lock:
            if not self._count or self._oldest is None:
                return False
            return self._count >= self.max_pending or now - self._oldest >= self.max_age

    def take(self) -> Pending:
        """Everything waiting, removed from the log (give it back with :meth:`restore` if the write fails)."""
        with self._lock:
            taken, self._pending, self._count, self._oldest = self._pending, {}, 0, None
            return taken

    def restore(self, taken: Pending) -> None:
        for owner, seqs in taken.items():
            for seq, times in seqs.items():
                for at in times:
                    self.add(owner, [seq], at)

    def activity(
        self, policy: ActivityPolicy, owner: str, seq: int, stored: float, since: datetime, now: datetime
    ) -> float:
        """The activity at ``now``: the stored score with this process's waiting accesses applied."""
        with self._lock:
            times = sorted(self._pending.get(owner, {}).get(seq, ()))
        score, since = apply_accesses(policy, stored, since, times)
        return policy.decayed(score, since, now)


def apply_accesses(
    policy: ActivityPolicy, score: float, since: datetime, times: Iterable[datetime]
) -> tuple[float, datetime]:
    """Reinforce ``score`` (set at ``since``) by each access in time order; returns the score and when it was set."""
    for at in sorted(times):
        score = policy.reinforced(score, since, at)
        since = max(since, at)
    return score, since
