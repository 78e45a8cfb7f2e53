"""A memory every query returns: query time as its accesses wait to be written.

A query notes the memories it returns; the notes are written in one transaction once 1,000 are
waiting or the oldest is 10 s old (the defaults), and until then every answer's activity includes
them. When a fleet keeps asking about the same few facts, those facts gather hundreds of waiting
accesses between writes. This measures ``MemoryService.run_query`` (top 5 of 200 memories, embedded
SQLite and Milvus Lite, the query cache off) with 0 to 1,000 accesses waiting on each of the five
memories it returns, two ways in the same run:

* ``fold``: the shipped ``AccessLog``, which keeps each memory's waiting accesses folded into one map
  as they arrive;
* ``one by one``: the baseline, replaying every waiting access of every returned memory at each query.

    .venv/bin/python -m bench.hot_memory [--queries 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from cluster.core.types import utcnow
from cluster.embedding import OnnxMiniLMEmbedder
from cluster.memory.access import AccessLog
from cluster.memory.index import MilvusMemoryIndex
from cluster.memory.models import MemoryQuery, MemoryWrite
from cluster.memory.policy import ActivityPolicy
from cluster.memory.service import MemoryService
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from cluster.storage.milvus import open_milvus

OWNER = "bench-owner"
QUERY = "which database does the billing project use?"


class OneByOne(AccessLog):
    """The baseline: every waiting access applied in turn, at every query."""

    def activity(
        self, policy: ActivityPolicy, owner: str, seq: int, stored: float, since: datetime, now: datetime
    ) -> float:
        with self._lock:
            times = sorted(self._pending.get(owner, {}).get(seq, ()))
        score = stored
        for at in times:
            score = policy.reinforced(score, since, at)
            since = max(since, at)
        return policy.decayed(score, since, now)


def query_ms(service: MemoryService, queries: int) -> tuple[float, float]:
    """p50 and p95 of ``queries`` queries, each adding its five accesses to the waiting ones."""
    samples = []
    for _ in range(queries):
        started = time.perf_counter()
        service.run_query(OWNER, MemoryQuery(query=QUERY, top_k=5))
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=200, help="timed queries per row")
    args = parser.parse_args()
    model = OnnxMiniLMEmbedder(threads=1)
    projects = ("billing", "search", "checkout", "ingest", "reports")
    things = ("database", "region", "owner", "release branch", "deploy target")
    writes = [
        MemoryWrite(key=f"{p}/{t}/{i}", value=f"The {t} of {p} is number {i}.", entity=p)
        for i in range(8)
        for p in projects
        for t in things
    ]
    print(f"{len(writes)} memories; query {QUERY!r}, top 5; {args.queries} timed queries a row")
    print("| accesses waiting on each returned memory | fold p50 / p95 ms | one by one p50 / p95 ms |")
    print("|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="hot-memory-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'memory.db'}"
        upgrade(url)
        database = Database(url)
        milvus = open_milvus(str(Path(tmp) / "milvus.db"))
        index = MilvusMemoryIndex(milvus, dimension=model.dimension, collection="hot")
        index.reset()
        # Nothing is written while a row runs: every access stays waiting.
        service = MemoryService(database, model, index, cache_bytes=0, access_flush_entries=10**9)
        service.derived.accesses.max_age = timedelta(days=1)
        # Written two hours ago, so the earlier answers below can be spread over the last hour.
        service.apply_writes(OWNER, writes, now=utcnow() - timedelta(hours=2))
        # Warm-up: the collection loaded, the model run once.
        service.run_query(OWNER, MemoryQuery(query=QUERY, top_k=5))
        for waiting in (0, 100, 300, 1000):
            row = []
            for log in (AccessLog, OneByOne):
                service.derived.accesses = log(10**9, timedelta(days=1))
                # ``waiting`` earlier answers of this query, spread over the last hour.
                now = utcnow()
                for k in range(waiting):
                    service.run_query(
                        OWNER,
                        MemoryQuery(query=QUERY, top_k=5),
                        now=now - timedelta(seconds=3600 * (waiting - k) / waiting),
                    )
                row.append(query_ms(service, args.queries))
            (f50, f95), (o50, o95) = row
            print(f"| {waiting} | {f50:.2f} / {f95:.2f} | {o50:.2f} / {o95:.2f} |")
        milvus.close()
        database.dispose()


if __name__ == "__main__":
    main()
