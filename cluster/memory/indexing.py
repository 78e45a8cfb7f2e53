"""Vector work of bulk writes, done on a thread of the process that wrote them, after the answer.

A bulk write (``memory_write`` with ``memories``) commits its rows with their vector work queued in
SQL and answers at once: embedding a few hundred chat turns takes seconds, storing them
milliseconds. The rows are found by their words at once and by meaning once this thread has
embedded them; every query says how many are still waiting (read from the queue in SQL, so any
process says the same). Each process does only the work its own writes queued, so two replicas
never embed the same rows; if the process ends first, the queue keeps the work for the owner's
next write or for maintenance.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable, Sequence

logger = logging.getLogger(__name__)

#: Rows embedded and settled at a time: each settle makes them searchable by meaning, so a query
#: during a long burst sees the indexed part grow.
CHUNK = 64
#: The thread's CPU priority below the process's (Linux ``nice``): a query, on this process or
#: another, gets a busy core first; the indexing takes what is left.
NICER = 10


class BackgroundIndexing:
    """Jobs of ``work(owner, seqs)``, done in order, ``CHUNK`` seqs at a time, on one daemon thread."""

    def __init__(self, work: Callable[[str, Sequence[int]], object]) -> None:
        self._work = work
        self._jobs: queue.Queue[tuple[str, list[int]]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()

    def request(self, owner: str, seqs: Sequence[int]) -> None:
        """Have the vectors of the owner's ``seqs`` made soon; returns at once."""
        if not seqs:
            return
        with self._start:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="memory-indexing", daemon=True)
                self._thread.start()
        for start in range(0, len(seqs), CHUNK):
            self._jobs.put((owner, list(seqs[start : start + CHUNK])))

    def wait(self) -> None:
        """Until every job requested so far is done (benchmarks, tests, a process shutting down)."""
        self._jobs.join()

    def _run(self) -> None:
        try:
            # On Linux a thread is a task of its own: this lowers this thread's priority only.
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + NICER)
        except (AttributeError, OSError):  # no per-thread priority here: it runs at the process's
            pass
        while True:
            owner, seqs = self._jobs.get()
            try:
                self._work(owner, seqs)
            except Exception:
                # The queue in SQL keeps the work: the owner's next write or maintenance does it.
                logger.exception("could not index %d memories of owner %r; they stay queued", len(seqs), owner)
            finally:
                self._jobs.task_done()
