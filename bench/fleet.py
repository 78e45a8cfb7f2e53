"""Fleet learning at scale: reprocess and consolidation on Postgres (1 and 2 actors) against the plain loop.

    PYTHONPATH=. .venv/bin/python -m bench.fleet                                    # 10k trajectories
    PYTHONPATH=. .venv/bin/python -m bench.fleet --trajectories 10000 100000

For each size, a fresh Postgres database receives N finalized trajectories: four owners, runs of
three roles (planner, executor, verifier) sharing a run id, five task types. Each trajectory is
``bench.attribution.make_trajectory`` (chains with backtracking, two thirds decisions, a hidden
rule — one-by-one ``add_item`` fails past 60 rows — plus 10% random failures), so attribution has
contrasting outcomes to work on. Every variant runs in a fresh Python process, so its peak RSS is
its own, and reads the same rows:

* ``loop``: the plain single-process loop, no Ray: the reprocess job's groups (owner, role, task
  type; at most 200 per batch), each loaded with its runs' other roles and attributed with
  ``actors.engine.attribute_batch``, then merged per owner with ``merge_into_library``;
* ``reprocess xN``: ``pipelines.reprocess.reprocess(actors=N)`` on a fresh local Ray
  (``num_cpus=2``); wall time excludes ``ray.init``;
* ``consolidate xN``: one pass of a consolidation job (``pipelines.jobs.run_job``, as
  ``hindsight jobs run``): reprocess into a new library version (SQL rows and Milvus Lite vectors),
  then the judge, which rebuilds the held-out split's library in the driver and serves both
  versions. Each actor count is its own job name, so each pass sees every owner as new.

Every variant's library is compared with the loop's, per owner: the same rules (content hash:
role, task type, signature, condition, actions, rationale, caveats) and the same confidences. A
difference is printed in the table, never passed over.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert, make_url, text

from actors.engine import attribute_batch, merge_into_library
from actors.engine.model.templates import ExperienceTemplate
from actors.engine.model.trajectories import AnalysisStatus, Trajectory
from bench.attribution import TASKS, make_trajectory
from cluster.experience.models import content_hash
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from cluster.trajectories.repository import SqlTrajectoryStore, _node_values
from cluster.trajectories.tables import NodeRow, TrajectoryRow

ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
OWNERS = [f"team-{i}" for i in range(4)]
ROLES = ["planner", "executor", "verifier"]
GROUP_SIZE = 200  # the reprocess job's default batch
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def synthetic(rng: random.Random, i: int, nodes: int) -> Trajectory:
    """Trajectory ``i``: runs of three roles in a row, owners taking turns by run."""
    run = i // len(ROLES)
    task = TASKS[run % len(TASKS)]
    base = make_trajectory(rng, nodes)
    at = T0 + timedelta(seconds=i)
    header = base.header.model_copy(
        update={"role": ROLES[i % len(ROLES)], "task": f"{task} run {run}", "task_type": task, "run_id": f"run-{run}"}
    )
    owner = OWNERS[run % len(OWNERS)]
    return base.model_copy(update={"header": header, "owner": owner, "created_at": at, "finalized_at": at})


def fill(url: str, count: int, nodes: int, seed: int = 7) -> None:
    """Write ``count`` finalized, analysed trajectories straight into the tables, 1000 per transaction."""
    rng = random.Random(seed)
    db = Database(url)
    try:
        for offset in range(0, count, 1000):
            heads: list[dict[str, Any]] = []
            rows: list[dict[str, Any]] = []
            for i in range(offset, min(count, offset + 1000)):
                t = synthetic(rng, i, nodes)
                heads.append(_trajectory_values(t))
                rows.extend(_node_values(t.owner, t.trajectory_id, n, n.seq) for n in t.nodes)
            with db.transaction() as session:
                session.execute(insert(TrajectoryRow), heads)
                session.execute(insert(NodeRow), rows)
    finally:
        db.dispose()


def _trajectory_values(t: Trajectory) -> dict[str, Any]:
    h = t.header
    return {
        "trajectory_id": h.trajectory_id,
        "owner": t.owner,
        "agent_id": h.agent_id,
        "role": h.role,
        "task": h.task,
        "task_type": h.task_type,
        "run_id": h.run_id,
        "status": t.status.value,
        "outcome": None if t.outcome is None else t.outcome.model_dump(mode="json"),
        "node_count": len(t.nodes),
        "created_at": t.created_at,
        "finalized_at": t.finalized_at,
        # As if live learning had analysed them: the jobs re-attribute stored history.
        "analysis_status": AnalysisStatus.DONE.value,
        "analysis_attempts": 1,
        "analysed_at": t.finalized_at,
    }


def fingerprint(templates_by_owner: dict[str, list[ExperienceTemplate]]) -> dict[str, Any]:
    """Per owner: template count, a digest of the rules, and one of the rules with their confidences."""
    out: dict[str, Any] = {}
    for owner, templates in sorted(templates_by_owner.items()):
        rules = sorted(content_hash(t) for t in templates)
        weighted = sorted(f"{content_hash(t)}:{t.confidence:.6f}" for t in templates)
        out[owner] = {
            "templates": len(templates),
            "rules": hashlib.sha256("\n".join(rules).encode()).hexdigest()[:16],
            "confidences": hashlib.sha256("\n".join(weighted).encode()).hexdigest()[:16],
        }
    return out


def plain_loop(settings: Settings) -> dict[str, list[ExperienceTemplate]]:
    """The reprocess job's work in one process: same groups, same loading, same engine call, merged per owner."""
    found: dict[str, list[ExperienceTemplate]] = {}
    db = Database(settings.sql_url())
    try:
        with db.read() as session:
            groups = SqlTrajectoryStore(session).finalized_groups()
        for (owner, _role, _task_type), ids in groups.items():
            for start in range(0, len(ids), GROUP_SIZE):
                chunk = ids[start : start + GROUP_SIZE]
                with db.read() as session:
                    store = SqlTrajectoryStore(session)
                    group = store.load_many(owner, chunk)
                    run_ids = [t.header.run_id for t in group if t.header.run_id is not None]
                    members = store.run_members(owner, run_ids, chunk)
                results = attribute_batch(group, run_members=members)
                found.setdefault(owner, []).extend(t for r in results for t in r.templates)
    finally:
        db.dispose()
    return {owner: list(merge_into_library([], templates).library) for owner, templates in found.items()}


class ActorPeaks:
    """Samples the peak RSS (``VmHWM``) of this process's Ray Data actors while a job runs.

    The actors exit with their dataset, so their high-water marks are read every half second
    rather than once at the end; the last half second of growth can be missed.
    """

    def __init__(self) -> None:
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ActorPeaks:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            for pid in _descendants(os.getpid()):
                if _is_actor(pid):
                    self.peak_mb = max(self.peak_mb, _hwm_mb(pid))


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                # Field 4 of /proc/PID/stat, after the parenthesised command (which may hold spaces).
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, parent in parents.items() if parent == pid]
        found.extend(children)
        frontier.extend(children)
    return found


def _is_actor(pid: int) -> bool:
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return "MapWorker" in title or "AttributeGroups" in title


def _hwm_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def _library_version(settings: Settings, versions: dict[str, int]) -> dict[str, list[ExperienceTemplate]]:
    from cluster.experience.repository import SqlExperienceStore

    db = Database(settings.sql_url())
    try:
        with db.read() as session:
            store = SqlExperienceStore(session)
            return {o: [t for t, _ in store.iter_owner(o, version=v)] for o, v in versions.items()}
    finally:
        db.dispose()


def variant(kind: str, actors: int, settings: Settings) -> dict[str, Any]:
    """Run one variant in this process (a fresh one, started by :func:`main`)."""
    detail = ""
    actor_peak = 0.0
    if kind == "loop":
        start = time.perf_counter()
        library = plain_loop(settings)
        seconds = time.perf_counter() - start
    else:
        import ray

        _start_ray()
        out = settings.data_dir / f"{kind}-x{actors}"
        with ActorPeaks() as peaks:
            start = time.perf_counter()
            if kind == "reprocess":
                from cluster.experience.exchange import parse_export
                from pipelines.reprocess import reprocess

                summary = reprocess(settings, out, actors=actors)
                seconds = time.perf_counter() - start
                # The job writes what attribution found; create_version would merge it like this.
                library = {
                    p.stem: list(merge_into_library([], parse_export(p.read_text().splitlines())).library)
                    for p in summary.outputs
                }
            else:
                library, detail = _consolidate(settings, actors)
                seconds = time.perf_counter() - start
        actor_peak = peaks.peak_mb
        ray.shutdown()
    return {
        "variant": kind if kind == "loop" else f"{kind} x{actors}",
        "seconds": round(seconds, 2),
        "driver_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "actor_peak_rss_mb": round(actor_peak, 1),
        "library": fingerprint(library),
        "detail": detail,
    }


def _start_ray() -> None:
    import ray

    # On a loaded box the GCS can miss its start deadline; a second try usually gets through.
    for attempt in range(3):
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=os.environ.get("RAY_TMPDIR"))
            return
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise


def _consolidate(settings: Settings, actors: int) -> tuple[dict[str, list[ExperienceTemplate]], str]:
    from cluster.jobs.runs import JobRuns
    from cluster.serve_config import ConsolidateJob, ConsolidateParameters
    from pipelines.jobs import run_job

    job = ConsolidateJob(kind="consolidate", interval_s=3600, parameters=ConsolidateParameters(actors=actors))
    db = Database(settings.sql_url())
    try:
        report = run_job(JobRuns(db, "bench"), settings, f"consolidate-x{actors}", job, force=True)
    finally:
        db.dispose()
    if report is None or report.result is None:
        raise RuntimeError(f"consolidation did not run: {report}")
    owners = report.result["owners"]
    versions = {owner: int(d["new_version"]) for owner, d in owners.items()}
    return _library_version(settings, versions), str(report.result["decision"])


@contextmanager
def postgres_database(admin_url: str, keep: bool = False) -> Iterator[str]:
    """A fresh, migrated database on the server of ``admin_url``, dropped afterwards unless ``keep``."""
    admin = make_url(admin_url)
    name = f"hindsight_bench_fleet_{uuid.uuid4().hex[:8]}"
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = admin.set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        if not keep:
            with engine.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()


def compare(result: dict[str, Any], baseline: dict[str, Any]) -> str:
    """``same`` when every owner has the baseline's rules and confidences; otherwise what differs."""
    mine, theirs = result["library"], baseline["library"]
    if mine.keys() != theirs.keys():
        return f"DIFFERENT owners {sorted(mine)} vs {sorted(theirs)}"
    rules = [o for o in mine if mine[o]["rules"] != theirs[o]["rules"]]
    if rules:
        return "DIFFERENT rules: " + ", ".join(f"{o} {mine[o]['templates']} vs {theirs[o]['templates']}" for o in rules)
    weights = [o for o in mine if mine[o]["confidences"] != theirs[o]["confidences"]]
    return f"same rules, DIFFERENT confidences: {', '.join(weights)}" if weights else "same"


def run_size(args: argparse.Namespace, count: int) -> list[dict[str, Any]]:
    with postgres_database(args.admin_url, keep=args.keep) as url:
        data_dir = Path(tempfile.mkdtemp(prefix="hs-fleet-"))
        start = time.perf_counter()
        fill(url, count, args.nodes)
        print(f"{count:,} trajectories ({args.nodes} nodes each) in Postgres in {time.perf_counter() - start:.1f}s")
        plan = [("loop", 1)] + [(k, n) for k in args.kinds for n in args.actors]
        results: list[dict[str, Any]] = []
        for kind, actors in plan:
            command = [sys.executable, "-m", "bench.fleet", "--variant", kind, "--actors", str(actors)]
            command += ["--database-url", url, "--data-dir", str(data_dir)]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.exit(f"{kind} x{actors} failed:\n{done.stderr[-4000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            result["trajectories"] = count
            result["per_s"] = round(count / result["seconds"], 1)
            result["check"] = "baseline" if not results else compare(result, results[0])
            results.append(result)
            print(f"  {result['variant']}: {result['per_s']} trajectories/s, {result['check']}", flush=True)
        shutil.rmtree(data_dir, ignore_errors=True)
    return results


def print_table(results: list[dict[str, Any]]) -> None:
    header = f"{'variant':<14} | {'trajectories':>12} | {'wall s':>8} | {'traj/s':>7} | {'driver RSS':>10} | "
    header += f"{'actor RSS':>9} | {'templates':>9} | same library as loop?"
    print(header)
    print("-" * len(header))
    for r in results:
        actor = f"{r['actor_peak_rss_mb']:.0f} MiB" if r["actor_peak_rss_mb"] else "–"
        templates = sum(o["templates"] for o in r["library"].values())
        print(
            f"{r['variant']:<14} | {r['trajectories']:>12,} | {r['seconds']:>8.1f} | {r['per_s']:>7.1f} | "
            f"{r['driver_peak_rss_mb']:>6.0f} MiB | {actor:>9} | {templates:>9,} | {r['check']}"
        )
    for r in results:
        if r["detail"]:
            print(f"{r['variant']} at {r['trajectories']:,}: {r['detail']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trajectories", type=int, nargs="+", default=[10_000])
    parser.add_argument("--nodes", type=int, default=12, help="nodes per trajectory")
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--kinds", nargs="+", choices=["reprocess", "consolidate"], default=["reprocess", "consolidate"]
    )
    parser.add_argument("--admin-url", default=ADMIN_URL, help="a Postgres database to create the benchmark's from")
    parser.add_argument("--keep", action="store_true", help="keep the benchmark's databases")
    parser.add_argument("--json", type=Path, default=None, help="Also write the figures here.")
    parser.add_argument("--variant", choices=["loop", "reprocess", "consolidate"], help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.variant:  # a child: one variant, one JSON line
        settings = Settings(data_dir=args.data_dir, database_url=args.database_url)
        print(json.dumps(variant(args.variant, args.actors[0], settings)), flush=True)
        return

    results = [r for count in args.trajectories for r in run_size(args, count)]
    print()
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
