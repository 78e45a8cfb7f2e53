"""Query latency of the long-term memory at 100k memories for one owner.

Corpus: the LoCoMo development turns, repeated with a serial number until there are ``--n``
memories, written through ``MemoryService.apply_writes`` (SQL rows + FTS index + Milvus vectors).
To keep the set-up short, corpus vectors are the MiniLM vectors of the original turns plus a little
Gaussian noise (renormalised), so no two memories share a vector; queries are real LoCoMo questions
embedded by the real model inside every timed call (no embedding cache, no query cache).

Reported per query (p50/p95 over ``--queries``): the embedding alone, the brute-force floor (embed,
then exact cosine over all vectors with numpy), the Milvus stage, the lexical stage, and the whole
``MemoryService.run_query`` (embed, Milvus, FTS, SQL filters, fusion, the query expansion, the entity,
temporal and session stages, access bookkeeping) timed in turn with the same query without the
expansion (its cost, measured in the same run), the same with the query cache on (a miss, then a hit: both read the
owner's generation), and single writes.

``--milvus`` picks the vector store: ``lite`` (the embedded default), ``server`` (a Milvus standalone
server started for the run, bench/milvus_server.py) or ``both``, which builds the SQL rows once,
copies the vectors into both (``MemoryService.reindex``) and measures the Milvus-dependent rows on
each in the same run, beside the same numpy floor. ``--time-tick-ms`` is the server's
``proxy.timeTickInterval``: the service reads at strong consistency, which waits for the next tick.

    .venv/bin/python -m bench.memory_latency [--n 100000] [--queries 300] [--database-url URL]
        [--milvus lite|server|both] [--time-tick-ms 50]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

# One BLAS thread, as a service process runs it (cluster/services.py): on a 2-core box a second one
# only fights onnxruntime and Milvus. Set OPENBLAS_NUM_THREADS=2 to see the difference.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from bench.locomo.run import DEFAULT_DATA, load
from bench.milvus_server import milvus_server
from cluster.core.types import utcnow
from cluster.embedding import OnnxMiniLMEmbedder, embedder_identity
from cluster.memory.index import MilvusMemoryIndex
from cluster.memory.models import MemoryQuery, MemoryWrite
from cluster.memory.policy import RankingPolicy
from cluster.memory.repository.search import Search, Visibility
from cluster.memory.service import MemoryService
from cluster.settings import EmbeddingSettings
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from cluster.storage.milvus import open_milvus

OWNER = "bench-owner"


class CorpusVectors:
    """Embedder for the benchmark corpus: known texts get their prepared vector, others the model's."""

    def __init__(self, table: dict[str, list[float]], model: OnnxMiniLMEmbedder) -> None:
        self.table = table
        self.model = model

    @property
    def dimension(self) -> int:
        return self.model.dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        missing = [t for t in texts if t not in self.table]
        computed = dict(zip(missing, self.model.embed(missing), strict=True)) if missing else {}
        return [self.table[t] if t in self.table else computed[t] for t in texts]


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered), p95


def timed(fn: Callable[[str], object], queries: Sequence[str]) -> tuple[float, float]:
    samples = []
    for q in queries:
        started = time.perf_counter()
        fn(q)
        samples.append((time.perf_counter() - started) * 1000)
    return percentiles(samples)


def timed_pair(
    first: Callable[[str], object], second: Callable[[str], object], queries: Sequence[str]
) -> tuple[tuple[float, float], tuple[float, float]]:
    """Two ways of answering, timed query by query in turn, so a drift of the machine hits both alike."""
    samples: tuple[list[float], list[float]] = ([], [])
    for q in queries:
        for fn, out in ((first, samples[0]), (second, samples[1])):
            started = time.perf_counter()
            fn(q)
            out.append((time.perf_counter() - started) * 1000)
    return percentiles(samples[0]), percentiles(samples[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="memories for the one owner")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--database-url", default=None, help="SQL URL (default: a SQLite file in a temp dir)")
    parser.add_argument("--index-type", default="FLAT", choices=["FLAT", "IVF_FLAT"])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--fp32", action="store_true", help="run the embedding model in fp32, not int8")
    parser.add_argument("--milvus", default="lite", choices=["lite", "server", "both"], help="the vector store(s)")
    parser.add_argument("--time-tick-ms", type=int, default=50, help="the Milvus server's proxy.timeTickInterval")
    args = parser.parse_args()
    targets = ["lite", "server"] if args.milvus == "both" else [args.milvus]

    rng = random.Random(args.seed)
    noise = np.random.default_rng(args.seed)
    conversations = load(args.data)
    turns = [t.item_text for c in conversations for t in c.turns]
    # The turns' speaker, session and date, as in the LoCoMo benchmark: every ranking stage then runs.
    metas = [
        {"speaker": t.speaker, "session": t.session, "session_date_time": t.date_time}
        for c in conversations
        for t in c.turns
    ]
    questions = [q.question for c in conversations for q in c.questions]
    queries = rng.sample(questions, min(args.queries, len(questions)))

    model = OnnxMiniLMEmbedder(threads=1, quantized=not args.fp32)
    started = time.perf_counter()
    base = np.asarray(model.embed(turns), dtype=np.float32)
    print(f"embedded {len(turns)} distinct turns in {time.perf_counter() - started:.1f} s")
    texts = [f"{turns[i % len(turns)]} [{i}]" for i in range(args.n)]
    matrix = base[np.arange(args.n) % len(turns)] + noise.normal(0, 0.02, (args.n, base.shape[1])).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    embedder = CorpusVectors({t: matrix[i].tolist() for i, t in enumerate(texts)}, model)

    with tempfile.TemporaryDirectory(prefix="memlat-") as tmp, contextlib.ExitStack() as stack:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'memory.db'}"
        upgrade(url)
        database = Database(url)
        clients = {}
        if "lite" in targets:
            clients["Milvus Lite"] = open_milvus(str(Path(tmp) / "milvus.db"))
        if "server" in targets:
            clients["Milvus server"] = open_milvus(
                stack.enter_context(milvus_server(time_tick_ms=args.time_tick_ms)), dedicated=True
            )
        indexes = {
            label: MilvusMemoryIndex(c, dimension=model.dimension, collection="latency", index_type=args.index_type)
            for label, c in clients.items()
        }
        for index in indexes.values():
            index.reset()
        # Word vectors kept in SQL under the model's identity, as a deployment keeps them.
        name = embedder_identity(EmbeddingSettings(quantized=not args.fp32))
        services = {
            label: MemoryService(database, embedder, index, cache_bytes=0, embedder_name=name)
            for label, index in indexes.items()
        }
        first_label, service = next(iter(services.items()))

        started = time.perf_counter()
        for start in range(0, args.n, 2000):
            batch = [
                MemoryWrite(key=f"m{i}", value=texts[i], metadata=metas[i % len(metas)])
                for i in range(start, min(start + 2000, args.n))
            ]
            service.apply_writes(OWNER, batch)
        ingest = time.perf_counter() - started
        print(f"ingested {args.n} memories in {ingest:.1f} s ({args.n / ingest:.0f}/s) with {first_label}")
        for label, other_service in list(services.items())[1:]:
            started = time.perf_counter()
            copied = other_service.reindex(OWNER)
            print(f"copied {copied} vectors into {label} in {time.perf_counter() - started:.1f} s (reindex from SQL)")
        print(f"index {args.index_type}")
        embedder.table.clear()  # queries below are embedded by the model, every time

        # The first query after the writes: they left the owner's term space (its distinct words, embedded) ready.
        started = time.perf_counter()
        service.run_query(OWNER, MemoryQuery(query=queries[0], top_k=10))
        first = (time.perf_counter() - started) * 1000
        words = len(service.terms.space(OWNER, lambda after: ([], after)))
        print(f"first query after the writes: {first:.0f} ms (a term space of {words} words, made by the writes)")
        assert service.words is not None
        service.words.wait()
        # Another process's first query: the same words, read from SQL instead of embedded.
        other = MemoryService(database, embedder, indexes[first_label], cache_bytes=0, embedder_name=name)
        started = time.perf_counter()
        other.run_query(OWNER, MemoryQuery(query=queries[0], top_k=10))
        print(f"first query in another process: {(time.perf_counter() - started) * 1000:.0f} ms (word vectors read)")
        for each in services.values():
            for q in queries[:20]:  # warm-up: load the collection, fill OS caches
                each.run_query(OWNER, MemoryQuery(query=q, top_k=10))

        def brute(q: str) -> object:
            v = np.asarray(model.embed([q])[0], dtype=np.float32)
            scores = matrix @ v
            top = np.argpartition(-scores, 10)[:10]
            return top[np.argsort(-scores[top])]

        def lexical_stage(q: str) -> object:
            vis = Visibility(valid_at=utcnow())
            with database.read() as session:
                return Search(session, OWNER, database.dialect).lexical(q, vis, service.ranking.candidates)

        arithmetic = "fp32" if args.fp32 else "int8"
        rows = {
            f"embedding only (MiniLM {arithmetic}, 1 thread)": timed(lambda q: model.embed([q]), queries),
            "brute-force floor: embed + numpy exact cosine": timed(brute, queries),
            "lexical stage: FTS query (no embedding)": timed(lexical_stage, queries),
        }
        # Each store's label leads its rows when there are two.
        for label, index in indexes.items():
            tag = f"{label}: " if len(indexes) > 1 else ""
            served = services[label]
            rows[f"{tag}Milvus stage: embed + search (owner filter)"] = timed(
                lambda q, index=index: index.search(OWNER, model.embed([q])[0], service.ranking.candidates), queries
            )
            # The query expansion's cost: the same queries without it, interleaved with the full query.
            plain = MemoryService(database, embedder, index, cache_bytes=0, ranking=RankingPolicy(expansion_weight=0))
            both = timed_pair(
                lambda q, served=served: served.run_query(OWNER, MemoryQuery(query=q, top_k=10)),
                lambda q, plain=plain: plain.run_query(OWNER, MemoryQuery(query=q, top_k=10)),
                queries,
            )
            rows[f"{tag}MemoryService.run_query (everything, top_k=10)"] = both[0]
            rows[f"{tag}MemoryService.run_query without query expansion (interleaved with the row above)"] = both[1]
            cached = MemoryService(database, embedder, index, embedder_name=name)
            rows[f"{tag}MemoryService.run_query, cache on, miss (generation read + query)"] = timed(
                lambda q, cached=cached: cached.run_query(OWNER, MemoryQuery(query=q, top_k=10)), queries
            )
            rows[f"{tag}MemoryService.run_query, hot-query cache hit (generation read)"] = timed(
                lambda q, cached=cached: cached.run_query(OWNER, MemoryQuery(query=q, top_k=10)), queries
            )
        # One memory per call, as an agent writes: embedding, the write transaction, Milvus, the settle write.
        # Last, so that no store answers the queries above with rows only the other one holds.
        for label, served in services.items():
            tag = f"{label}: " if len(services) > 1 else ""
            writes = [f"{q} (note {i}, {label})" for i, q in enumerate(queries)]
            rows[f"{tag}MemoryService.apply_write (one memory)"] = timed(
                lambda t, served=served: served.apply_write(OWNER, MemoryWrite(key=t[:100], value=t)), writes
            )
        for client in clients.values():
            client.close()
        database.dispose()

    print(f"\n{args.n} memories, one owner, {len(queries)} queries ({database.dialect}):")
    print("| stage | p50 ms | p95 ms |")
    print("|---|---|---|")
    for name, (p50, p95) in rows.items():
        print(f"| {name} | {p50:.1f} | {p95:.1f} |")


if __name__ == "__main__":
    main()
