"""The batcher behind concurrent tool calls: batches form while one runs, outcomes reach their callers."""

from __future__ import annotations

import asyncio

import pytest

from cluster.tools.batching import Batcher

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_calls_arriving_while_a_batch_runs_form_the_next_one() -> None:
    batches: list[list[int]] = []
    release = asyncio.Event()

    async def run(items: list[int]) -> list[int]:
        batches.append(items)
        if len(batches) == 1:
            await release.wait()
        return [i * 10 for i in items]

    batcher: Batcher[int, int] = Batcher(run)
    first = asyncio.create_task(batcher.submit(1))
    await asyncio.sleep(0)  # the first batch starts alone: an idle batcher adds no wait
    others = [asyncio.create_task(batcher.submit(i)) for i in (2, 3, 4)]
    await asyncio.sleep(0)
    release.set()
    assert await first == 10
    assert [await t for t in others] == [20, 30, 40]
    assert batches == [[1], [2, 3, 4]]


async def test_each_caller_gets_its_own_error() -> None:
    async def run(items: list[int]) -> list[int | BaseException]:
        return [ValueError(f"odd {i}") if i % 2 else i for i in items]

    batcher: Batcher[int, int] = Batcher(run)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(4)), return_exceptions=True)
    assert results[0] == 0
    assert results[2] == 2
    assert isinstance(results[1], ValueError)
    assert str(results[1]) == "odd 1"
    assert isinstance(results[3], ValueError)
    assert str(results[3]) == "odd 3"


async def test_a_failed_batch_fails_its_callers_and_the_next_batch_still_runs() -> None:
    calls = 0

    async def run(items: list[int]) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("store down")
        return items

    batcher: Batcher[int, int] = Batcher(run)
    with pytest.raises(RuntimeError, match="store down"):
        await batcher.submit(1)
    assert await batcher.submit(2) == 2


async def test_a_batch_is_at_most_limit_items() -> None:
    sizes: list[int] = []

    async def run(items: list[int]) -> list[int]:
        sizes.append(len(items))
        await asyncio.sleep(0)
        return items

    batcher: Batcher[int, int] = Batcher(run, limit=3)
    assert await asyncio.gather(*(batcher.submit(i) for i in range(8))) == list(range(8))
    assert max(sizes) == 3
    assert sum(sizes) == 8


async def test_a_cancelled_caller_does_not_cancel_the_batch() -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    done: list[int] = []

    async def run(items: list[int]) -> list[int]:
        started.set()
        await release.wait()
        done.extend(items)
        return items

    batcher: Batcher[int, int] = Batcher(run)
    impatient = asyncio.create_task(batcher.submit(1))
    await started.wait()
    impatient.cancel()
    patient = asyncio.create_task(batcher.submit(2))
    release.set()
    assert await patient == 2
    assert done == [1, 2]
    assert impatient.cancelled()
