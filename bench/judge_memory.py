"""The consolidation judge reading an owner's history a batch at a time, against holding all of it.

    PYTHONPATH=. .venv/bin/python -m bench.judge_memory                         # 10k trajectories
    PYTHONPATH=. .venv/bin/python -m bench.judge_memory --trajectories 100000   # ~10 min here

``bench.fleet``'s generator fills a fresh Postgres database with N finalized trajectories (four
owners, runs of three roles, 12 nodes each). Each variant judges one owner (a quarter of N), the
judge's part of a consolidation pass without the reprocess before it, in a fresh Python process, so
its peak RSS is its own:

* ``in memory`` (baseline, the judge before): ``load_trajectories`` (the owner's whole history),
  ``split_by_time``, ``rebuild`` of the older share, ``evaluate_library`` on the newer share;
* ``streamed`` (what ``pipelines.consolidate.judge`` runs): ``split_stored`` (ids and times
  only), ``rebuild_stored`` (one batch and its runs read at a time), ``evaluate_stored`` (pages).

Both must rebuild the same library (rules and confidences) and give the same scores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from actors.engine.model.templates import ExperienceTemplate
from bench.fleet import ADMIN_URL, OWNERS, fill, postgres_database
from cluster.experience.models import content_hash
from cluster.settings import Settings
from cluster.storage.db import Database
from pipelines.consolidate import evaluate_stored, rebuild, rebuild_stored, split_stored
from pipelines.evaluate import Metrics, evaluate_library, split_by_time
from pipelines.evaluate_job import load_trajectories

HOLDOUT = 0.2  # the consolidate job's default
TOP_K, MIN_CONFIDENCE = 5, 0.7  # the service's defaults


def judged(variant: str, url: str) -> tuple[list[ExperienceTemplate], Metrics]:
    settings = Settings(database_url=url)
    owner = OWNERS[0]
    if variant == "in memory":
        split = split_by_time(load_trajectories(settings, owner)[owner], HOLDOUT)
        library = rebuild(split.train, "default")
        results = evaluate_library(library, split.test, top_k=TOP_K, min_confidence=MIN_CONFIDENCE)
        return library, Metrics.of(results)
    db = Database(url)
    try:
        roles = settings.role_libraries()
        train, test = split_stored(db, owner, roles, HOLDOUT)
        library = rebuild_stored(db, owner, train, roles, "default")
        scored = evaluate_stored(db, owner, test, roles, {"new": library}, top_k=TOP_K, min_confidence=MIN_CONFIDENCE)
        return library, scored["new"]
    finally:
        db.dispose()


def child(variant: str, url: str) -> dict[str, Any]:
    start = time.perf_counter()
    library, metrics = judged(variant, url)
    seconds = time.perf_counter() - start
    rules = hashlib.sha256(json.dumps([(content_hash(t), t.confidence) for t in library]).encode()).hexdigest()
    return {
        "variant": variant,
        "seconds": round(seconds, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "templates": len(library),
        "library": rules[:16],
        "metrics": metrics.model_dump(mode="json"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trajectories", type=int, default=10_000)
    parser.add_argument("--admin-url", default=ADMIN_URL, help="a Postgres database to create the benchmark's from")
    parser.add_argument("--json", type=Path, default=None, help="Also write the figures here.")
    parser.add_argument("--variant", choices=["in memory", "streamed"], help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.variant:  # a child: one variant, one JSON line
        print(json.dumps(child(args.variant, args.database_url)), flush=True)
        return

    results: list[dict[str, Any]] = []
    with postgres_database(args.admin_url) as url:
        start = time.perf_counter()
        fill(url, args.trajectories, nodes=12)
        print(f"{args.trajectories:,} trajectories in Postgres in {time.perf_counter() - start:.1f}s", flush=True)
        for variant in ["in memory", "streamed"]:
            command = [sys.executable, "-m", "bench.judge_memory", "--variant", variant, "--database-url", url]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.exit(f"{variant} failed:\n{done.stderr[-4000:]}")
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    base = results[0]
    owner_share = args.trajectories // len(OWNERS)
    print(f"\none owner's {owner_share:,} trajectories judged (holdout {HOLDOUT}):")
    header = f"{'variant':<10} | {'wall s':>7} | {'peak RSS':>9} | {'templates':>9} | {'hit@1':>6} | same as in memory?"
    print(header)
    print("-" * len(header))
    for r in results:
        same = (
            "baseline"
            if r is base
            else ("same" if (r["library"], r["metrics"]) == (base["library"], base["metrics"]) else "DIFFERENT")
        )
        hit = r["metrics"]["hit_at_1"]
        print(
            f"{r['variant']:<10} | {r['seconds']:>7.1f} | {r['peak_rss_mb']:>5.0f} MiB | {r['templates']:>9} | "
            f"{'-' if hit is None else f'{hit:.3f}':>6} | {same}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
