"""Calls started together on threads of their own, as concurrent callers (or replicas) make them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def at_once(calls: Sequence[Callable[[], T]]) -> list[T | BaseException]:
    """Run every call on its own thread, released together; each one's result or error, in order."""
    barrier = threading.Barrier(len(calls))
    outcomes: list[T | BaseException] = [RuntimeError("not run")] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = calls[i]()
        except BaseException as exc:  # the caller checks it
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes
