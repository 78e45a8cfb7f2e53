"""Re-upserting a filled Milvus Lite collection: deletes by a filter expression against deletes by key.

    PYTHONPATH=. .venv/bin/python -m bench.milvus_deletes                  # 100,000 rows, all three modes
    PYTHONPATH=. .venv/bin/python -m bench.milvus_deletes --rows 20000 --modes key

What a rebuild does to the experience index, without SQL or a model: N rows of four owners
(random unit vectors, the experience index's shape) are written owner after owner into a fresh
Lite file, then every row is upserted again, owners interleaved in pages of 2,000, batches of 256,
each batch a delete of its keys and an insert:

* ``filter``: the delete is ``client.delete(filter='owner == … and template_id in […]')``, as the
  collection adapter did before;
* ``query``: a strong-consistency query with that filter chooses the keys, deleted by primary key;
* ``key``: ``MilvusCollection.upsert`` as it is now (every key of the batch deleted by primary key).

After the run each owner must hold exactly its keys once, read three ways: ``count(*)``, the keys
a query iterator lists, and a query by key for every key (``twice``: keys it returns two rows
for); each at once, on the same engine, and again after the engine restarted on the file. The
table prints each reading per mode, and the wall time of the re-upsert.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from cluster.experience.index import experience_spec
from cluster.storage.milvus import MilvusLiteServer, open_milvus
from cluster.storage.milvus_collection import MilvusCollection

OWNERS = [f"owner-{i}" for i in range(4)]
PAGE, BATCH = 2000, 256
MODES = ["filter", "query", "key"]


def make_rows(count: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    rows: dict[str, list[dict[str, Any]]] = {o: [] for o in OWNERS}
    for i in range(count):
        owner = OWNERS[i % len(OWNERS)]
        rows[owner].append(
            {
                "template_id": str(uuid.UUID(int=int(rng.integers(1 << 62)) << 64 | i)),
                "vector": vectors[i].tolist(),
                "owner": owner,
                "version": 1,
                "role": "executor",
                "task_type": f"task-{i % 7}",
                "confidence": 0.5,
                "created_at": i,
                "updated_at": i,
            }
        )
    return rows


def owner_filtered_upsert(collection: MilvusCollection, batch: list[dict[str, Any]], mode: str) -> None:
    """Upserts that delete through an owner filter: by the filter itself, or by the keys it reads."""
    for owner in dict.fromkeys(r["owner"] for r in batch):
        where = collection._where(owner, keys=[r["template_id"] for r in batch if r["owner"] == owner])
        if mode == "filter":
            collection.client.delete(collection.name, filter=where)
            continue
        held = collection.client.query(
            collection.name, filter=where, output_fields=["template_id"], consistency_level="Strong"
        )
        if held:
            collection.client.delete(collection.name, ids=[r["template_id"] for r in held])
    collection.client.insert(collection.name, batch)


def readings(collection: MilvusCollection, rows: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, int]]:
    """Per owner: count(*), the keys a query iterator lists, and the keys a query by key finds."""
    out = {}
    for owner in OWNERS:
        keys = [r["template_id"] for r in rows[owner]]
        found: collections.Counter[str] = collections.Counter()
        for j in range(0, len(keys), 1000):
            found.update(r["template_id"] for r in collection.query(owner, keys[j : j + 1000], ["template_id"]))
        out[owner] = {
            "count": collection.count(owner),
            "listed": len(collection.ids(owner)),
            "by_key": len(found),
            "held_twice": sum(1 for n in found.values() if n > 1),
        }
    return out


def run(mode: str, rows: dict[str, list[dict[str, Any]]], directory: Path) -> dict[str, Any]:
    """Fill, re-upsert in ``mode``, read at once; then restart the engine on the file and read again."""
    path = directory / f"{mode}.db"
    spec = experience_spec(dimension=384)
    with MilvusLiteServer(path) as server:
        client = open_milvus(server.uri, None, dedicated=True)
        collection = MilvusCollection(client, spec, timeout=60.0)
        collection.ensure()
        for owner in OWNERS:
            collection.upsert(rows[owner], 512)
        pages = [[rows[o][i : i + PAGE] for i in range(0, len(rows[o]), PAGE)] for o in OWNERS]
        stream = [r for group in itertools.zip_longest(*pages) for page in group if page for r in page]
        start = time.perf_counter()
        for i in range(0, len(stream), BATCH):
            batch = stream[i : i + BATCH]
            if mode in ("filter", "query"):
                owner_filtered_upsert(collection, batch, mode)
            else:
                collection.upsert(batch, BATCH)
        seconds = time.perf_counter() - start
        at_once = readings(collection, rows)
        client.close()
    with MilvusLiteServer(path) as server:
        client = open_milvus(server.uri, None, dedicated=True)
        restarted = readings(MilvusCollection(client, spec, timeout=60.0), rows)
        client.close()
    return {"mode": mode, "seconds": round(seconds, 1), "at once": at_once, "after restart": restarted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=MODES)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rows = make_rows(args.rows, args.seed)
    per_owner = args.rows // len(OWNERS)
    print(f"{args.rows:,} rows of {len(OWNERS)} owners ({per_owner:,} each), re-upserted in batches of {BATCH}")
    header = f"{'mode':<7} | {'read':<13} | {'owner':<8} | {'count(*)':>8} | {'listed':>7} | "
    header += f"{'by key':>7} | {'twice':>6}"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="hs-milvus-deletes-") as directory:
        for mode in args.modes:
            result = run(mode, rows, Path(directory))
            for when in ("at once", "after restart"):
                for owner in OWNERS:
                    r = result[when][owner]
                    exact = r["count"] == r["listed"] == r["by_key"] == len(rows[owner]) and not r["held_twice"]
                    print(
                        f"{mode:<7} | {when:<13} | {owner:<8} | {r['count']:>8,} | {r['listed']:>7,} | "
                        f"{r['by_key']:>7,} | {r['held_twice']:>6,}{'' if exact else '  WRONG'}",
                        flush=True,
                    )
            print(f"{mode:<7} | re-upsert took {result['seconds']:.1f} s", flush=True)


if __name__ == "__main__":
    main()
