"""Rebuilding the experience vectors: the Ray Data job (1 and 2 actors) against the serial reindex.

    PYTHONPATH=. .venv/bin/python -m bench.reindex                     # 10k templates
    PYTHONPATH=. .venv/bin/python -m bench.reindex --templates 100000  # ~80 min here (28, 32, 19 per variant)

One SQLite file holds N synthetic templates of four owners, every one with a text of its own (so
every variant embeds N texts for real, with the ONNX MiniLM model on one intra-op thread). This
process owns the Milvus Lite file and serves it; each variant runs in a fresh Python process that
connects by URI, so its peak RSS is its own:

* ``serial``: ``ExperienceService.reindex(owner)`` for each owner, in that process;
* ``ray xN``: ``pipelines.reindex.reindex(actors=N)`` on a fresh local Ray (``num_cpus=2``); the
  job's wall time excludes ``ray.init`` (a cluster is up already where the job runs).

Each variant must leave exactly N vectors in the index. Figures: rows/s, wall seconds, peak RSS
of the driver and of the largest embedding actor.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from actors.engine.model.templates import ActionPattern, Condition, ExperienceTemplate, Support
from cluster.experience.repository import template_values
from cluster.experience.tables import ExperienceTemplateRow
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from cluster.storage.milvus import MilvusLiteServer

OWNERS = [f"owner-{i}" for i in range(4)]
ROLES = ["planner", "executor", "verifier"]
SHAPES = [
    ("bulk_import", "a product import has more than {n} rows", "single add_item calls time out after {m} s"),
    ("upload_chunked", "a file is larger than {n} MB", "single-request uploads fail past {m} MB"),
    ("retry_with_backoff", "the API answered 429 more than {n} times", "hammering extends the ban by {m} min"),
    ("paginate", "a search returns more than {n} results", "the first page alone misses {m} of them"),
    ("set_encoding", "an export holds more than {n} non-ASCII names", "latin-1 mangles {m} of them"),
]
WORDS = "catalog supplier invoice warehouse partner checkout ledger archive region tenant batch nightly".split()


def synthetic(rng: random.Random, i: int) -> ExperienceTemplate:
    tool, when, why = SHAPES[i % len(SHAPES)]
    n, m = rng.randint(5, 5000), rng.randint(2, 90)
    extra = " ".join(rng.sample(WORDS, 3))
    return ExperienceTemplate(
        role=ROLES[i % len(ROLES)],
        task_type=f"task-{i % 7}",
        signature=f"sig-{i % 50}",
        condition=Condition(description=f"{when.format(n=n)} ({extra})"),
        recommended=ActionPattern(tool=tool, params={"size": n}),
        rationale=why.format(m=m),
        confidence=round(rng.uniform(0.3, 1.0), 3),
        support=Support(successes=rng.randint(1, 9), trajectories=rng.randint(1, 9)),
    )


def fill(url: str, count: int) -> None:
    rng = random.Random(7)
    db = Database(url)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for offset in range(0, count, 5000):
        rows = []
        for i in range(offset, min(count, offset + 5000)):
            t = synthetic(rng, i)
            at = start + timedelta(seconds=i)
            t = t.model_copy(update={"template_id": uuid.uuid4(), "created_at": at, "updated_at": at})
            rows.append(template_values(OWNERS[i % len(OWNERS)], t))
        with db.transaction() as session:
            session.execute(insert(ExperienceTemplateRow), rows)
    db.dispose()


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def variant(kind: str, actors: int, settings: Settings) -> dict[str, Any]:
    """Run one variant in this process (a fresh one, started by :func:`main`)."""
    from cluster.services import build_experience_service

    db = Database(settings.sql_url())
    if kind == "serial":
        service = build_experience_service(settings, db)
        start = time.perf_counter()
        rows = sum(service.reindex(owner) for owner in OWNERS)
        seconds = time.perf_counter() - start
        actor_peak = 0.0
        count = sum(service.index.count(o) for o in OWNERS)  # type: ignore[attr-defined]
    else:
        import ray

        from pipelines.reindex import reindex

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=os.environ.get("RAY_TMPDIR"))
        summary = reindex(settings, actors=actors)
        rows, seconds, actor_peak = summary.total, summary.seconds, summary.actor_peak_rss_mb
        service = build_experience_service(settings, db)
        count = sum(service.index.count(o) for o in OWNERS)  # type: ignore[attr-defined]
        ray.shutdown()
    return {
        "variant": kind if kind == "serial" else f"ray x{actors}",
        "rows": rows,
        "indexed": count,
        "seconds": round(seconds, 2),
        "rows_per_s": round(rows / seconds, 1),
        "driver_peak_rss_mb": round(_peak_mb(), 1),
        "actor_peak_rss_mb": round(actor_peak, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--templates", type=int, default=10_000)
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="Also write the figures here.")
    parser.add_argument("--variant", choices=["serial", "ray"], help=argparse.SUPPRESS)
    parser.add_argument("--uri", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.variant:  # a child: one variant, one JSON line
        settings = Settings(data_dir=args.data_dir, milvus_uri=args.uri)
        print(json.dumps(variant(args.variant, args.actors[0], settings)), flush=True)
        return

    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="hs-reindex-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    settings = Settings(data_dir=data_dir)
    upgrade(settings.sql_url())
    start = time.perf_counter()
    fill(settings.sql_url(), args.templates)
    print(f"{args.templates:,} templates of {len(OWNERS)} owners in SQL in {time.perf_counter() - start:.1f}s")
    results = []
    with MilvusLiteServer(settings.milvus_target()) as server:
        plan = [("serial", 1)] + [("ray", n) for n in args.actors]
        for kind, actors in plan:
            command = [sys.executable, "-m", "bench.reindex", "--variant", kind, "--actors", str(actors)]
            command += ["--data-dir", str(data_dir), "--uri", server.uri]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.exit(f"{kind} x{actors} failed:\n{done.stderr[-4000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            assert result["indexed"] == args.templates, result
            results.append(result)
            print(f"  {result['variant']}: {result['rows_per_s']} rows/s", flush=True)
    print()
    header = f"{'variant':<8} | {'rows':>7} | {'seconds':>8} | {'rows/s':>7} | "
    header += f"{'driver peak RSS':>15} | {'actor peak RSS':>14}"
    print(header)
    print("-" * len(header))
    for r in results:
        actor = f"{r['actor_peak_rss_mb']:.0f} MiB" if r["actor_peak_rss_mb"] else "–"
        print(
            f"{r['variant']:<8} | {r['rows']:>7,} | {r['seconds']:>8.1f} | {r['rows_per_s']:>7.1f} | "
            f"{r['driver_peak_rss_mb']:>11.0f} MiB | {actor:>14}"
        )
    if args.json:
        args.json.write_text(json.dumps({"templates": args.templates, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
