"""Milvus Lite 2.5 (C++) vs 3.x (pure Python): insert rate and filtered search latency.

Runs with whichever milvus-lite the interpreter has installed, so the same script measures both:

    .venv/bin/python bench/milvus_lite_lines.py --rows 100000
    /tmp/ml3venv/bin/python bench/milvus_lite_lines.py --rows 100000   # a throwaway venv with 3.2.2

The data mimic the experience index: 384-d unit vectors, 8 owners x 3 roles, a confidence in [0, 1],
and every search carries the owner + role + confidence filter the service always sends.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np
from pymilvus import DataType, MilvusClient

DIM = 384
OWNERS = [f"owner-{i}" for i in range(8)]
ROLES = ["planner", "executor", "verifier"]


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM), dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def make_collection(client: MilvusClient, name: str, index_type: str) -> None:
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("template_id", DataType.VARCHAR, is_primary=True, max_length=36)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("owner", DataType.VARCHAR, max_length=200)
    schema.add_field("role", DataType.VARCHAR, max_length=200)
    schema.add_field("confidence", DataType.FLOAT)
    params = client.prepare_index_params()
    extra = (
        {"nlist": 256} if index_type == "IVF_FLAT" else {"M": 16, "efConstruction": 200} if index_type == "HNSW" else {}
    )
    params.add_index(field_name="vector", index_type=index_type, metric_type="IP", params=extra)
    client.create_collection(name, schema=schema, index_params=params)


def run(rows: int, index_type: str, queries: int, filter_kind: str) -> dict[str, float]:
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        client = MilvusClient(str(Path(tmp) / "bench.db"))
        make_collection(client, "t", index_type)
        vectors = unit_rows(rng, rows)
        owners = rng.integers(0, len(OWNERS), rows)
        roles = rng.integers(0, len(ROLES), rows)
        conf = rng.random(rows)
        start = time.perf_counter()
        for lo in range(0, rows, 2000):
            hi = min(rows, lo + 2000)
            client.insert(
                "t",
                [
                    {
                        "template_id": f"{i:036d}",
                        "vector": vectors[i].tolist(),
                        "owner": OWNERS[owners[i]],
                        "role": ROLES[roles[i]],
                        "confidence": float(conf[i]),
                    }
                    for i in range(lo, hi)
                ],
            )
        client.load_collection("t")
        insert_s = time.perf_counter() - start
        q = unit_rows(rng, queries)
        search_params = {"nprobe": 32} if index_type == "IVF_FLAT" else {"ef": 64} if index_type == "HNSW" else {}
        lat = []
        for i in range(queries):
            flt = {
                "full": f'owner == "{OWNERS[i % 8]}" and role == "{ROLES[i % 3]}" and confidence >= 0.7',
                "owner": f'owner == "{OWNERS[i % 8]}"',
                "none": "",
            }[filter_kind]
            t = time.perf_counter()
            client.search(
                "t",
                data=[q[i].tolist()],
                filter=flt,
                limit=8,
                search_params=search_params,
                output_fields=["confidence"],
                anns_field="vector",
            )
            lat.append((time.perf_counter() - t) * 1000)
        client.close()
    a = np.array(lat[5:])  # the first searches warm caches
    return {
        "rows_per_s": rows / insert_s,
        "p50": float(np.percentile(a, 50)),
        "p95": float(np.percentile(a, 95)),
        "p99": float(np.percentile(a, 99)),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--index", nargs="*", default=None)
    parser.add_argument("--filter", choices=["full", "owner", "none"], default="full")
    args = parser.parse_args()
    lite = version("milvus-lite")
    indexes = args.index or (["FLAT", "IVF_FLAT", "AUTOINDEX"] if lite.startswith("2.") else ["FLAT", "HNSW"])
    print(f"milvus-lite {lite}, {args.rows} rows x {DIM}-d, filter {args.filter}, top 8")
    print(f"{'index':<10} {'insert rows/s':>14} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for index_type in indexes:
        r = run(args.rows, index_type, args.queries, args.filter)
        print(f"{index_type:<10} {r['rows_per_s']:>14.0f} {r['p50']:>8.2f} {r['p95']:>8.2f} {r['p99']:>8.2f}")


if __name__ == "__main__":
    main()
