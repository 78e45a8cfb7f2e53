"""One confidence update of the experience index, before and after rewriting rows without a gap.

    PYTHONPATH=. .venv/bin/python -m bench.confidence_update                     # Milvus Lite, 20,000 templates
    PYTHONPATH=. .venv/bin/python -m bench.confidence_update --rows 2000 --updates 200
    PYTHONPATH=. .venv/bin/python -m bench.confidence_update --server http://127.0.0.1:19530  # and a server

One update is ``MilvusExperienceIndex.set_confidence`` of one template: a query by key for its row
(vector included), then a rewrite of the row. Two ways, on the same collection in the same run:

* ``before``: the rewrite is a delete of the key, then an insert, and nothing is locked, as
  ``MilvusCollection.upsert`` did before;
* ``after``: ``MilvusCollection.upsert`` as it is now: Milvus' own upsert, on a Lite engine under
  the engine's ``RowLock`` (reads hold it shared).

N templates of four owners (random unit vectors, the experience index's shape) go into a fresh
collection (a served Lite file; with ``--server``, a collection on that server too). Then:

* ``idle``: U updates of a random template of one owner, the two ways alternating; ``rewrite``:
  the rewrite alone (an upsert of the changed row, without the read by key), alternating likewise;
* ``reading``: U updates of one of that owner's 8 "hot" templates (vectors near one query) each
  way, while a thread keeps searching them as a query does (top 8 of the owner's current library
  version above the 0.7 confidence threshold; every update keeps a confidence above it). Each
  answer that lacks a hot template is counted as ``missed``.

The table gives the update's p50 and p95, and for ``reading`` the searches made, how many missed a
template, and the search's p50.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from cluster.experience.index import MilvusExperienceIndex
from cluster.experience.ports import IndexRow
from cluster.storage.milvus import MilvusLiteServer, open_milvus
from cluster.storage.milvus_collection import MilvusCollection

OWNERS = [f"owner-{i}" for i in range(4)]
HOT = 8
THRESHOLD = 0.7
T0 = datetime(2026, 1, 1, tzinfo=UTC)
WAYS = ("before", "after")


class DeleteThenInsert(MilvusCollection):
    """The adapter's replace as it was: the keys deleted, then the rows inserted; reads lock nothing."""

    def upsert(self, rows: Sequence[Mapping[str, Any]], batch_size: int = 2000, *, fresh: bool = False) -> None:
        if not rows:
            return
        self.ensure()
        data = [self._row(r) for r in rows]
        primary = self.spec.primary.name
        for start in range(0, len(data), batch_size):
            batch = data[start : start + batch_size]
            if not fresh:
                self._call("upsert", self.client.delete, self.name, ids=[r[primary] for r in batch])
            self._call("upsert", self.client.insert, self.name, batch)

    def _reading(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def _writing(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


@dataclass
class Result:
    engine: str
    way: str
    phase: str
    updates: list[float] = field(default_factory=list)
    searches: list[float] = field(default_factory=list)
    missed: int = 0


def unit(rng: np.random.Generator, count: int) -> np.ndarray:
    vectors: np.ndarray = rng.standard_normal((count, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def fill(index: MilvusExperienceIndex, rows: int, rng: np.random.Generator) -> tuple[list[IndexRow], np.ndarray]:
    """N templates of four owners; returns the first owner's (the first ``HOT`` near the query) and the query."""
    query = unit(rng, 1)[0]
    vectors = unit(rng, rows)
    hot = query + 0.05 * unit(rng, HOT)
    vectors[:HOT] = hot / np.linalg.norm(hot, axis=1, keepdims=True)
    every = [
        IndexRow(
            template_id=uuid.UUID(int=i + 1),
            owner=OWNERS[0] if i < HOT else OWNERS[i % len(OWNERS)],
            role="executor",
            task_type=f"task-{i % 7}",
            confidence=0.8,
            created_at=T0,
            updated_at=T0,
            vector=vectors[i].tolist(),
        )
        for i in range(rows)
    ]
    for start in range(0, rows, 2000):
        index.upsert(every[start : start + 2000])
    return [r for r in every if r.owner == OWNERS[0]], query


def confidence(n: int) -> float:
    return 0.8 if n % 2 else 0.9  # always above the threshold


def update(index: MilvusExperienceIndex, template_id: uuid.UUID, n: int) -> float:
    """One confidence update; returns its seconds."""
    change = {template_id: (confidence(n), T0 + timedelta(seconds=n))}
    start = time.perf_counter()
    index.set_confidence(OWNERS[0], change)
    return time.perf_counter() - start


def rewrite(index: MilvusExperienceIndex, row: IndexRow, n: int) -> float:
    """The rewrite alone (the update without its read by key); returns its seconds."""
    changed = dataclasses.replace(row, confidence=confidence(n), updated_at=T0 + timedelta(seconds=n))
    start = time.perf_counter()
    index.upsert([changed])
    return time.perf_counter() - start


def views(client: Any, collection: str) -> dict[str, MilvusExperienceIndex]:
    """The same collection through the old replace and through the current one."""
    out = {}
    for way in WAYS:
        index = MilvusExperienceIndex(client, collection=collection, timeout=60.0)
        if way == "before":
            index.rows = DeleteThenInsert(client, index.rows.spec, timeout=60.0)
        index.ensure_collection()
        out[way] = index
    return out


def run_engine(engine: str, uri: str, rows: int, updates: int, seed: int) -> list[Result]:
    rng = np.random.default_rng(seed)
    client, reader_client = open_milvus(uri, dedicated=True), open_milvus(uri, dedicated=True)
    # A collection of its own: a server may hold a deployment's experience library.
    collection = f"bench_confidence_{uuid.uuid4().hex[:12]}"
    try:
        by_way = views(client, collection)
        own, query = fill(by_way["after"], rows, rng)
        hot = [r.template_id for r in own[:HOT]]
        results = []
        idle = {way: Result(engine, way, "idle") for way in WAYS}
        alone = {way: Result(engine, way, "rewrite") for way in WAYS}
        for n in range(updates):
            row = own[int(rng.integers(len(own)))]
            for way in WAYS if n % 2 else WAYS[::-1]:
                idle[way].updates.append(update(by_way[way], row.template_id, n))
                alone[way].updates.append(rewrite(by_way[way], row, n))
        results.extend([*idle.values(), *alone.values()])
        readers = views(reader_client, collection)
        for way in WAYS:
            results.append(race(engine, way, by_way[way], readers[way], hot, query, updates, rng))
        by_way["after"].rows.drop()
        return results
    finally:
        client.close()
        reader_client.close()


def race(
    engine: str,
    way: str,
    writer: MilvusExperienceIndex,
    reader: MilvusExperienceIndex,
    hot: list[uuid.UUID],
    query: np.ndarray,
    updates: int,
    rng: np.random.Generator,
) -> Result:
    """Updates of the hot templates while another thread searches them."""
    result = Result(engine, way, "reading")
    done = threading.Event()
    vector = query.tolist()

    def search() -> None:
        while not done.is_set():
            start = time.perf_counter()
            hits = reader.search(OWNERS[0], vector, limit=HOT, version=1, min_confidence=THRESHOLD)
            result.searches.append(time.perf_counter() - start)
            if {h.template_id for h in hits} != set(hot):
                result.missed += 1

    thread = threading.Thread(target=search, name="searcher")
    thread.start()
    try:
        for n in range(updates):
            result.updates.append(update(writer, hot[int(rng.integers(HOT))], n))
    finally:
        done.set()
        thread.join()
    return result


def ms(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000, help="templates in the collection")
    parser.add_argument("--updates", type=int, default=100, help="updates per way and phase")
    parser.add_argument("--server", default="", help="also measure on the Milvus server at this URI")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="hs-confidence-") as directory:
        with MilvusLiteServer(Path(directory) / "bench.db") as lite:
            results += run_engine("lite", lite.uri, args.rows, args.updates, args.seed)
    if args.server:
        results += run_engine("server", args.server, args.rows, args.updates, args.seed)
    print(f"one confidence update, {args.rows:,} templates, {args.updates} updates per way and phase")
    header = (
        f"{'engine':<7}| {'phase':<8}| {'way':<7}| {'update p50 ms':>13} | {'p95 ms':>7} | "
        f"{'searches':>8} | {'missed':>6} | {'search p50 ms':>13}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        reading = r.phase == "reading"
        print(
            f"{r.engine:<7}| {r.phase:<8}| {r.way:<7}| {ms(r.updates, 0.5):>13} | {ms(r.updates, 0.95):>7} | "
            f"{len(r.searches) if reading else '-':>8} | {r.missed if reading else '-':>6} | "
            f"{ms(r.searches, 0.5) if reading else '-':>13}"
        )
    for engine in dict.fromkeys(r.engine for r in results):
        idle = {r.way: statistics.median(r.updates) for r in results if r.engine == engine and r.phase == "idle"}
        print(f"{engine}: idle update after/before = {idle['after'] / idle['before']:.2f}")


if __name__ == "__main__":
    main()
