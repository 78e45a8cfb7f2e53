"""Concurrent tool calls of one process served together: one unit of work for many callers.

A call that finds no batch running starts one at once (no added latency when idle); calls arriving
while it runs wait and form the next batch. Under load the batch grows with the arrival rate, so
a store's fixed cost per unit of work (a transaction, a Milvus round trip, a forward pass of the
embedder) is shared by every caller waiting at that moment.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class Batcher(Generic[Item, Result]):
    """Runs ``run`` over the items callers submit, ``limit`` at most at a time.

    ``run`` returns one outcome per item, in order: a result, or the exception that item raises
    in its caller. An exception from ``run`` itself is raised in every caller of that batch.
    """

    def __init__(
        self, run: Callable[[list[Item]], Awaitable[Sequence[Result | BaseException]]], *, limit: int = 64
    ) -> None:
        if limit < 1:
            raise ValueError("limit must be positive")
        self._run = run
        self._limit = limit
        self._waiting: list[tuple[Item, asyncio.Future[Result]]] = []
        self._drain: asyncio.Task[None] | None = None

    async def submit(self, item: Item) -> Result:
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if self._drain is None:
            self._drain = asyncio.create_task(self._drain_waiting())
        # A cancelled caller's item may still be done (as with any call cut off mid-way); the
        # batch itself must not be cancelled with it.
        return await asyncio.shield(future)

    async def _drain_waiting(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting[: self._limit], self._waiting[self._limit :]
                try:
                    outcomes = await self._run([item for item, _ in batch])
                    if len(outcomes) != len(batch):
                        raise RuntimeError(f"a batch of {len(batch)} returned {len(outcomes)} outcomes")
                except Exception as exc:  # every caller of the batch gets its failure
                    outcomes = [exc] * len(batch)
                for (_, future), outcome in zip(batch, outcomes, strict=True):
                    if future.done():
                        continue
                    if isinstance(outcome, BaseException):
                        future.set_exception(outcome)
                    else:
                        future.set_result(outcome)
        finally:
            self._drain = None
