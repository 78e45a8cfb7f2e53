"""Accesses recorded by queries, held in memory and written later in one short transaction.

A query is a read: it must not queue behind SQLite's single writer to bump activity scores. So a
query only notes which memories it returned (:meth:`AccessLog.add`); the notes are written in one
write transaction when there are enough of them or they are old enough (:meth:`AccessLog.due`),
and by every maintenance pass (the archive decision must see them). Until then the process that
made them folds them into the activity it reports (:meth:`AccessLog.activity`). Notes that are
never written (the process died) cost some activity, never a memory: activity only decides what
gets archived, and archived memories can be restored.

Folding a memory's waiting accesses into its activity is done once per access, not once per query:
an access maps a score ``x`` to ``min(d * x + boost, max_score)`` (``d`` the decay since the access
before it), and maps of that shape compose into one of the same shape, ``min(a * x + c, cap)``. Each
memory's composed map is extended as its accesses arrive (:class:`Fold`), so a query reports the
activity of a memory it has returned a thousand times at the cost of one map.
"""

from __future__ import annotations

import threading
from bisect import bisect_right, insort
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cluster.memory.policy.activity import ActivityPolicy

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
        # (owner, seq) -> the fold of that memory's waiting accesses from some index on (see activity)
        self._folds: dict[tuple[str, int], Fold] = {}
        self._lock = threading.Lock()

    def add(self, owner: str, seqs: Iterable[int], at: datetime) -> None:
        with self._lock:
            mine = self._pending.setdefault(owner, {})
            for seq in seqs:
                times = mine.setdefault(seq, [])
                if times and at < times[-1]:
                    # Out of order (threads race): the memory's fold no longer matches its accesses.
                    insort(times, at)
                    self._folds.pop((owner, seq), None)
                else:
                    times.append(at)
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
            self._folds = {}
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
            times = self._pending.get(owner, {}).get(seq)
            if not times:
                return policy.decayed(stored, since, now)
            start = bisect_right(times, since)
            fold = self._folds.get((owner, seq))
            if fold is None or fold.start != start or fold.policy is not policy:
                fold = self._folds[(owner, seq)] = Fold(policy, start)
            fold.extend(times)
            score, since = _reinforced(policy, stored, since, times, fold)
        return policy.decayed(score, since, now)


@dataclass(slots=True)
class Fold:
    """The accesses ``times[start:end]`` of one memory as one map ``x -> min(a * x + c, cap)``.

    ``x`` is the score at the first of them, decayed to that moment; each later access first decays
    the score since the access before it. Extended in place as accesses are appended.
    """

    policy: ActivityPolicy
    start: int
    end: int = field(init=False)
    a: float = 1.0
    c: float = 0.0
    cap: float = 0.0

    def __post_init__(self) -> None:
        self.end = self.start

    def extend(self, times: Sequence[datetime]) -> None:
        boost, top = self.policy.access_boost, self.policy.max_score
        if self.end == self.start < len(times):
            self.a, self.c, self.cap, self.end = 1.0, boost, top, self.start + 1
        for i in range(self.end, len(times)):
            d = self.policy.decayed(1.0, times[i - 1], times[i])
            self.a, self.c, self.cap = d * self.a, d * self.c + boost, min(d * self.cap + boost, top)
        self.end = max(self.end, len(times))

    def __call__(self, x: float) -> float:
        return min(self.a * x + self.c, self.cap)


def apply_accesses(
    policy: ActivityPolicy, score: float, since: datetime, times: Iterable[datetime]
) -> tuple[float, datetime]:
    """Reinforce ``score`` (set at ``since``) by each access in time order; returns the score and when it was set."""
    ordered = sorted(times)
    if not ordered:
        return score, since
    fold = Fold(policy, bisect_right(ordered, since))
    fold.extend(ordered)
    return _reinforced(policy, score, since, ordered, fold)


def _reinforced(
    policy: ActivityPolicy, score: float, since: datetime, times: Sequence[datetime], fold: Fold
) -> tuple[float, datetime]:
    """``score`` (set at ``since``) after the sorted ``times``; ``fold`` holds those after ``since``.

    Accesses at or before ``since`` (another process set the score later) add without decay.
    """
    if fold.start:
        score = min(score + fold.start * policy.access_boost, policy.max_score)
    if fold.start < len(times):
        score = fold(policy.decayed(score, since, times[fold.start]))
        since = times[-1]
    return score, since
