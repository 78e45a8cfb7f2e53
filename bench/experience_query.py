"""query_experience latency at 10k and 100k templates, against a numpy brute-force floor.

    .venv/bin/python bench/experience_query.py                 # 10k and 100k, FLAT (the default)
    .venv/bin/python bench/experience_query.py --sizes 10000 --index AUTOINDEX

Embedded default: SQLite file + Milvus Lite 2.5 (in-process) + the ONNX MiniLM embedder on one thread.

Data: 2,000 distinct synthetic template texts (several tools, conditions, rationales) are embedded
for real, in batches; the filler templates reuse those texts with vectors generated as the text's
embedding plus small Gaussian noise (re-normalised), so 100k rows take seconds instead of ~10 min
of embedding. Every query context is a fresh sentence embedded on the query path (the LRU cache
never hits), 10 owners x 3 roles x 5 task types, confidence uniform in [0.3, 1].

Figures:
* end to end: ``query_experience`` as an agent calls it (embed context, Milvus search with
  owner + role + confidence filters, load templates from SQL, render the prompt block);
* without embedding: the same call with the context's vector precomputed;
* embedding only: one context through the ONNX model;
* numpy floor: brute-force inner product over the same vectors with the same filters, in memory;
* recall@k of Milvus vs the numpy floor (same filters).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from sqlalchemy import insert

from actors.engine.model.templates import ActionPattern, Condition, ExperienceTemplate, Support
from cluster.embedding import OnnxMiniLMEmbedder
from cluster.experience.index import MilvusExperienceIndex
from cluster.experience.models import embedding_text
from cluster.experience.ports import IndexRow
from cluster.experience.repository import template_values
from cluster.experience.service import ExperienceService
from cluster.experience.tables import ExperienceTemplateRow
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from cluster.storage.milvus import open_milvus

OWNERS = [f"owner-{i}" for i in range(10)]
ROLES = ["planner", "executor", "verifier"]
TASK_TYPES = ["catalog_import", "web_form", "db_migration", "notifications", "file_transfer"]
TOOLS = [
    ("bulk_import", "a product import has more than {n} rows", "single add_item calls time out"),
    ("click", "a form's submit button id changes between deployments", "select by type, not id"),
    ("backup_database", "a migration touches more than {n} tables in production", "rollback needs a backup"),
    ("send_email_batch", "more than {n} emails go out at once", "the mail API rate-limits single sends"),
    ("upload_chunked", "a file is larger than {n} MB", "single-request uploads time out"),
    ("paginate", "a search returns more than {n} results", "the first page alone misses results"),
    ("retry_with_backoff", "the API answered 429 more than {n} times", "hammering extends the ban"),
    ("lock_row", "more than {n} workers update the same record", "lost updates otherwise"),
]
QUERY_SHAPES = [
    "Import {n} products from the supplier CSV into the catalog",
    "Submit the registration form on page {n} of the onboarding flow",
    "Run migration {n} against the production database",
    "Send the newsletter to {n} subscribers",
    "Upload the {n} MB backup archive to object storage",
    "Collect all {n} search results for the report",
    "Call the partner API again after {n} rate-limit errors",
    "Update stock counts from {n} concurrent workers",
]
TOP_K = 5
THRESHOLD = 0.7


class Precomputed:
    """An embedder that answers from a table: times query_experience without the model."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    @property
    def dimension(self) -> int:
        return 384

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.table[t] for t in texts]


def pct(values: Sequence[float]) -> tuple[float, float, float]:
    a = np.asarray(values)
    return float(np.percentile(a, 50)), float(np.percentile(a, 95)), float(np.percentile(a, 99))


def base_templates(rng: random.Random, count: int) -> list[ExperienceTemplate]:
    out = []
    for i in range(count):
        tool, when, why = TOOLS[i % len(TOOLS)]
        n = rng.choice([5, 20, 50, 100, 500, 1000, 5000])
        out.append(
            ExperienceTemplate(
                role=ROLES[i % len(ROLES)],
                task_type=TASK_TYPES[i % len(TASK_TYPES)],
                signature=f"sig-{i}",
                condition=Condition(description=when.format(n=n)),
                recommended=ActionPattern(tool=tool, params={"variant": f"<v{i % 97}>"}),
                rationale=f"{why} (case {i})",
                support=Support(successes=rng.randint(1, 9), trajectories=rng.randint(1, 9)),
            )
        )
    return out


def load(
    db: Database,
    index: MilvusExperienceIndex,
    bases: list[ExperienceTemplate],
    base_vectors: np.ndarray,
    size: int,
    rng: np.random.Generator,
) -> dict[str, np.ndarray | float]:
    """Bulk-load ``size`` templates into SQL and Milvus; returns the arrays for the numpy floor."""
    which = rng.integers(0, len(bases), size)
    noise = rng.standard_normal((size, base_vectors.shape[1])).astype(np.float32) * 0.02
    vectors = base_vectors[which] + noise
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    owners = rng.integers(0, len(OWNERS), size)
    confidence = rng.uniform(0.3, 1.0, size).astype(np.float32)
    now = datetime.now(UTC)
    ids = [uuid.uuid4() for _ in range(size)]
    sql_s = milvus_s = 0.0
    chunk = 5000
    for lo in range(0, size, chunk):
        hi = min(size, lo + chunk)
        rows, index_rows = [], []
        for i in range(lo, hi):
            t = bases[which[i]].model_copy(
                update={"template_id": ids[i], "confidence": float(confidence[i]), "created_at": now, "updated_at": now}
            )
            rows.append(template_values(OWNERS[owners[i]], t))
            index_rows.append(
                IndexRow(ids[i], OWNERS[owners[i]], t.role, t.task_type, t.confidence, now, now, vectors[i].tolist())
            )
        start = time.perf_counter()
        with db.transaction() as session:
            session.execute(insert(ExperienceTemplateRow), rows)
        sql_s += time.perf_counter() - start
        start = time.perf_counter()
        index.upsert(index_rows)
        milvus_s += time.perf_counter() - start
    roles = np.array([ROLES.index(bases[w].role) for w in which])
    return {
        "ids": np.array([str(i) for i in ids]),
        "vectors": vectors,
        "owners": owners,
        "roles": roles,
        "confidence": confidence,
        "sql_rows_per_s": size / sql_s,
        "milvus_rows_per_s": size / milvus_s,
    }


def numpy_floor(data: dict[str, np.ndarray | float], q: np.ndarray, owner: int, role: int) -> tuple[list[str], float]:
    start = time.perf_counter()
    mask = (data["owners"] == owner) & (data["roles"] == role) & (data["confidence"] >= THRESHOLD)  # type: ignore[operator]
    candidates = np.flatnonzero(mask)
    scores = data["vectors"][candidates] @ q  # type: ignore[index]
    k = min(TOP_K, len(candidates))
    top = candidates[np.argsort(-scores)[:k]] if k else candidates[:0]
    elapsed = (time.perf_counter() - start) * 1000
    return [str(x) for x in data["ids"][top]], elapsed  # type: ignore[index]


def run(
    size: int,
    index_type: str,
    queries: int,
    bases: list[ExperienceTemplate],
    base_vectors: np.ndarray,
    embedder: OnnxMiniLMEmbedder,
) -> dict[str, object]:
    rng = np.random.default_rng(size)
    prng = random.Random(size)
    with tempfile.TemporaryDirectory(prefix="hs-bench-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'hindsight.db'}"
        upgrade(url)
        db = Database(url)
        client = open_milvus(str(Path(tmp) / "milvus.db"))
        index = MilvusExperienceIndex(client, index_type=index_type)  # type: ignore[arg-type]
        service = ExperienceService(db, index, embedder, top_k=TOP_K, confidence_threshold=THRESHOLD)
        data = load(db, index, bases, base_vectors, size, rng)

        contexts = [
            (
                prng.choice(QUERY_SHAPES).format(n=prng.randint(2, 90_000)) + f" (ticket {i})",
                prng.randrange(10),
                prng.randrange(3),
            )
            for i in range(queries + 10)
        ]
        table: dict[str, list[float]] = {}
        embed_ms = []
        for text, _, _ in contexts:
            start = time.perf_counter()
            table[text] = embedder.embed([text])[0]
            embed_ms.append((time.perf_counter() - start) * 1000)
        fast = ExperienceService(db, index, Precomputed(table), top_k=TOP_K, confidence_threshold=THRESHOLD)

        e2e, no_embed, floor, recall = [], [], [], []
        for n, (text, owner, role) in enumerate(contexts):
            # End to end with a context the model has not seen: swap one word so the cache misses.
            fresh = text.replace("ticket", "case")
            start = time.perf_counter()
            service.query_experience(OWNERS[owner], fresh, ROLES[role])
            t_e2e = (time.perf_counter() - start) * 1000
            start = time.perf_counter()
            got = fast.query_experience(OWNERS[owner], text, ROLES[role])
            t_fast = (time.perf_counter() - start) * 1000
            truth, t_floor = numpy_floor(data, np.asarray(table[text], dtype=np.float32), owner, role)
            if n < 10:
                continue  # warm-up
            e2e.append(t_e2e)
            no_embed.append(t_fast)
            floor.append(t_floor)
            found = [str(s.template.template_id) for s in got.templates]
            recall.append(len(set(found) & set(truth)) / max(1, len(truth)))

        # Bulk insert through the service: import_library embeds, writes SQL (with history) and Milvus.
        fresh_bases = base_templates(prng, 1000)
        lines = ['{"format": "hindsight-experience", "version": 1}'] + [
            '{"template": ' + t.model_copy(update={"signature": f"bulk-{i}"}).model_dump_json() + "}"
            for i, t in enumerate(fresh_bases)
        ]
        start = time.perf_counter()
        service.import_library("bulk-owner", lines)
        service_rate = len(fresh_bases) / (time.perf_counter() - start)
        client.close()
        db.dispose()
    return {
        "size": size,
        "e2e": pct(e2e),
        "no_embed": pct(no_embed),
        "embed": pct(embed_ms[10:]),
        "floor": pct(floor),
        "recall": float(np.mean(recall)),
        "sql_rows_per_s": data["sql_rows_per_s"],
        "milvus_rows_per_s": data["milvus_rows_per_s"],
        "service_rows_per_s": service_rate,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--index", default="FLAT", choices=["FLAT", "IVF_FLAT", "AUTOINDEX"])
    parser.add_argument("--bases", type=int, default=2000, help="distinct texts embedded for the filler")
    args = parser.parse_args()

    embedder = OnnxMiniLMEmbedder(threads=1)
    embedder.load()
    bases = base_templates(random.Random(1), args.bases)
    start = time.perf_counter()
    base_vectors = embedder.embed_array([embedding_text(t) for t in bases])
    embed_rate = len(bases) / (time.perf_counter() - start)

    results = [run(size, args.index, args.queries, bases, base_vectors, embedder) for size in args.sizes]

    print(f"index {args.index}, metric IP, top_k {TOP_K}, threshold {THRESHOLD}, {args.queries} queries per size")
    print(f"batch embedding: {embed_rate:,.0f} texts/s (one thread)")
    print()
    header = f"{'templates':>10} | {'path':<38} | {'p50 ms':>7} | {'p95 ms':>7} | {'p99 ms':>7}"
    print(header)
    print("-" * len(header))
    for r in results:
        for key, label in [
            ("e2e", "query_experience, end to end"),
            ("no_embed", "query_experience, embedding excluded"),
            ("embed", "embedding one context"),
            ("floor", "numpy brute force (same filters)"),
        ]:
            p50, p95, p99 = r[key]  # type: ignore[misc]
            print(f"{r['size']:>10,} | {label:<38} | {p50:>7.2f} | {p95:>7.2f} | {p99:>7.2f}")
    print()
    print(
        f"{'templates':>10} | {'recall@5 vs numpy':>17} | {'SQL bulk rows/s':>15} | {'Milvus rows/s':>13} | "
        f"{'import_library rows/s':>21}"
    )
    for r in results:
        print(
            f"{r['size']:>10,} | {r['recall']:>17.3f} | {r['sql_rows_per_s']:>15,.0f} | "
            f"{r['milvus_rows_per_s']:>13,.0f} | {r['service_rows_per_s']:>21,.0f}"
        )


if __name__ == "__main__":
    main()
