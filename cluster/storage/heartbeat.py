"""A lease heartbeat: a thread that renews a lease while a long call holds it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)


class Heartbeat:
    """Calls ``beat`` every ``interval_s`` on a thread of its own while the ``with`` block runs.

    A thread, not the long call's own code: attribution, learning and jobs are long calls that
    cannot stop to beat, and a holder that hangs in one should keep its lease only while its
    process lives. ``beat`` renews the lease and returns False once it is lost (no more beats);
    a beat that raises is logged and the next one tried, since it may succeed before the lease lapses.
    """

    def __init__(self, beat: Callable[[], bool], interval_s: float, name: str) -> None:
        self._beat_once = beat
        self._interval_s = interval_s
        self._name = name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=name, daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                if not self._beat_once():
                    return
            except Exception:
                # The thread's top level: the next beat may succeed before the lease lapses.
                logger.exception("%s failed", self._name)
