"""Does Milvus search in parallel? Exact (FLAT) searches of one owner's rows, alone and concurrent.

The memory query's vector stage is one exact search over all of an owner's vectors, and at 100k
rows it is most of the query's time (docs/benchmarks.md, "Query latency at 100k memories"). Two
searches over halves of the rows, sent at once, would halve it if the engine ran them side by side.
Each row below is timed query by query over the same query vectors:

* one search over all ``--rows`` rows (what the service sends);
* one search over half of them (a second collection of ``--rows / 2``): the cost of a half alone;
* two half searches sent at once from two threads: on one connection, and on two connections.

If the last rows cost about one half, the engine searches in parallel; if they cost two halves,
it runs one search at a time, whichever connection, collection or thread asks.

``--milvus server`` runs the same on a Milvus standalone server started for the run
(bench/milvus_server.py) and adds, for the whole collection, the same search at ``Bounded``
consistency: the service reads at ``Strong`` (every acknowledged write of every process), which on
a server waits for the next time tick (``--time-tick-ms``, ``proxy.timeTickInterval``); the
difference between the two rows is that wait.

    .venv/bin/python bench/milvus_concurrency.py [--rows 100000] [--queries 150] [--milvus lite|server]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from pymilvus import DataType, MilvusClient

from bench.milvus_server import milvus_server
from cluster.storage.milvus import open_milvus

DIM = 384
OWNER = "bench-owner"


def make(client: MilvusClient, name: str, vectors: np.ndarray) -> None:
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("owner", DataType.VARCHAR, max_length=200)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
    params = client.prepare_index_params()
    params.add_index(field_name="vector", index_type="FLAT", metric_type="IP")
    client.create_collection(name, schema=schema, index_params=params)
    # Batches of 2,000: one insert of 5,000 such rows took ~20 s on Lite 2.5.1 where 2,000 take ~0.3 s.
    for lo in range(0, len(vectors), 2000):
        rows = [{"id": i, "owner": OWNER, "vector": vectors[i]} for i in range(lo, min(len(vectors), lo + 2000))]
        client.insert(name, rows)
    client.flush(name)
    client.load_collection(name)


def search(client: MilvusClient, name: str, vector: np.ndarray, consistency: str = "Strong") -> list[int]:
    found = client.search(
        name,
        data=[vector.tolist()],
        limit=100,
        anns_field="vector",
        filter=f'owner == "{OWNER}"',
        search_params={"metric_type": "IP"},
        consistency_level=consistency,
    )
    return list(found[0].ids)


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=150)
    parser.add_argument("--milvus", default="lite", choices=["lite", "server"])
    parser.add_argument("--time-tick-ms", type=int, default=50, help="the server's proxy.timeTickInterval")
    args = parser.parse_args()

    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((args.rows, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((args.queries, DIM), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    half = args.rows // 2

    with tempfile.TemporaryDirectory(prefix="milvus-concurrency-") as tmp, contextlib.ExitStack() as stack:
        if args.milvus == "server":
            target = stack.enter_context(milvus_server(time_tick_ms=args.time_tick_ms))
            client = open_milvus(target, dedicated=True)
        else:
            target = str(Path(tmp) / "bench.db")
            client = open_milvus(target)
        other = open_milvus(target, dedicated=True)  # a second connection to the same engine
        make(client, "whole", vectors)
        make(client, "first", vectors[:half])
        make(client, "second", vectors[half:])
        pool = ThreadPoolExecutor(max_workers=2)

        def both(second_client: MilvusClient) -> Callable[[np.ndarray], object]:
            def run(q: np.ndarray) -> object:
                a = pool.submit(search, client, "first", q)
                b = pool.submit(search, second_client, "second", q)
                return a.result(), b.result()

            return run

        ways: dict[str, Callable[[np.ndarray], object]] = {
            f"one search, {args.rows} rows": lambda q: search(client, "whole", q),
            f"one search, {half} rows": lambda q: search(client, "first", q),
            f"two searches of {half} rows at once, one connection": both(client),
            f"two searches of {half} rows at once, two connections": both(other),
        }
        if args.milvus == "server":
            ways[f"one search, {args.rows} rows, Bounded consistency (no wait for a time tick)"] = lambda q: search(
                client, "whole", q, "Bounded"
            )
        # Exactness check: the two halves' best 100, merged, are the whole's best 100.
        q = queries[0]
        merged = search(client, "first", q) + [half + i for i in search(client, "second", q)]
        scores = vectors @ q
        best = set(np.argsort(-scores)[:100].tolist())
        assert best <= set(merged), "the halves' hits do not hold the exact best 100"

        samples: dict[str, list[float]] = {name: [] for name in ways}
        for q in queries[:10]:  # warm-up
            for fn in ways.values():
                fn(q)
        for q in queries:  # interleaved, so a drift of the machine hits every way alike
            for name, fn in ways.items():
                started = time.perf_counter()
                fn(q)
                samples[name].append((time.perf_counter() - started) * 1000)
        pool.shutdown()
        other.close()
        client.close()

    engine = "Milvus Lite" if args.milvus == "lite" else f"Milvus server (time tick {args.time_tick_ms} ms)"
    print(f"\n{engine} FLAT, {args.rows} rows of one owner, {args.queries} queries, top 100:")
    print("| search | p50 ms | p95 ms |")
    print("|---|---|---|")
    for name, times in samples.items():
        p50, p95 = percentiles(times)
        print(f"| {name} | {p50:.1f} | {p95:.1f} |")


if __name__ == "__main__":
    main()
