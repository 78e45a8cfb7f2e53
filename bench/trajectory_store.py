"""Trajectory store micro-benchmark: node insert throughput and whole-trajectory load time.

Runs on a fresh SQLite file and a fresh Postgres database. The baseline is the raw driver inserting
the same rows with one executemany per batch (no validation, no checks): the floor the store's
validation, idempotency and parent checks are measured against.

    .venv/bin/python bench/trajectory_store.py [--nodes 4000] [--postgres postgresql+psycopg://postgres@127.0.0.1/postgres]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import create_engine, insert, make_url, text

from actors.engine.model.trajectories import ExecutionResult, NodeIn, ResultStatus, TrajectoryHeader, TrajectoryLimits
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from cluster.trajectories.capture import CaptureService
from cluster.trajectories.repository import _node_values
from cluster.trajectories.tables import NodeRow

OWNER = "bench"


def chain(n: int) -> list[NodeIn]:
    nodes: list[NodeIn] = []
    for i in range(n):
        nodes.append(
            NodeIn(
                parent_id=nodes[-1].node_id if nodes else None,
                context_snapshot={"goal": "import products", "row_count": i, "tools": ["bulk_import", "add_item"]},
                available_actions=["bulk_import", "add_item"],
                chosen_action="bulk_import" if i % 2 else "add_item",
                action_params={"file": f"/data/batch-{i}.csv"},
                execution_result=ExecutionResult(status=ResultStatus.SUCCESS, summary="ok"),
            )
        )
    return nodes


def run_writers(capture: CaptureService, writers: int, per_writer: int, batch: int) -> float:
    """Each writer fills its own trajectories; returns nodes per second over all writers."""
    work = []
    for _ in range(writers):
        trajectories = []
        for start in range(0, per_writer, 500):
            header = TrajectoryHeader(agent_id="bench", task="bench")
            capture.open(OWNER, header)
            trajectories.append((header.trajectory_id, chain(min(500, per_writer - start))))
        work.append(trajectories)

    def write(trajectories: list[tuple[uuid.UUID, list[NodeIn]]]) -> None:
        for tid, nodes in trajectories:
            for i in range(0, len(nodes), batch):
                capture.record(OWNER, tid, nodes[i : i + batch])

    threads = [threading.Thread(target=write, args=(w,)) for w in work]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return writers * per_writer / (time.perf_counter() - start)


def raw_floor(db: Database, total: int, batch: int) -> float:
    """The same rows through one executemany per batch: no validation, no checks."""
    capture = CaptureService(db)
    rows = []
    for start in range(0, total, 500):
        header = TrajectoryHeader(agent_id="bench", task="floor")
        capture.open(OWNER, header)
        rows.extend(
            _node_values(OWNER, header.trajectory_id, node, i) for i, node in enumerate(chain(min(500, total - start)))
        )
    start = time.perf_counter()
    for i in range(0, len(rows), batch):
        with db.transaction() as session:
            session.execute(insert(NodeRow), rows[i : i + batch])
    return total / (time.perf_counter() - start)


def load_ms(capture: CaptureService, repeats: int = 30) -> tuple[float, float]:
    header = TrajectoryHeader(agent_id="bench", task="load")
    capture.record(OWNER, header.trajectory_id, chain(500), header=header)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        loaded = capture.load(OWNER, header.trajectory_id)
        times.append((time.perf_counter() - start) * 1000)
        assert len(loaded.nodes) == 500
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def bench(name: str, url: str, nodes: int, report: Callable[[str, str, float, str], None]) -> None:
    upgrade(url)
    db = Database(url)
    capture = CaptureService(db, TrajectoryLimits(max_trajectory_nodes=500))
    report(name, "raw executemany floor, batch 100", raw_floor(db, nodes, 100), "nodes/s")
    report(name, "1 writer, 1 node per call", run_writers(capture, 1, min(nodes, 1000), 1), "nodes/s")
    report(name, "1 writer, 100 nodes per call", run_writers(capture, 1, nodes, 100), "nodes/s")
    report(name, "8 writers, 1 node per call", run_writers(capture, 8, min(nodes, 1000) // 8, 1), "nodes/s")
    report(name, "8 writers, 100 nodes per call", run_writers(capture, 8, nodes // 8, 100), "nodes/s")
    p50, p95 = load_ms(capture)
    report(name, "load 500-node trajectory p50", p50, "ms")
    report(name, "load 500-node trajectory p95", p95, "ms")
    db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=4000)
    parser.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()

    rows: list[tuple[str, str, float, str]] = []

    def report(backend: str, case: str, value: float, unit: str) -> None:
        rows.append((backend, case, value, unit))
        print(f"{backend:<9} {case:<36} {value:>10.1f} {unit}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        bench("sqlite", f"sqlite:///{Path(tmp) / 'bench.db'}", args.nodes, report)

    admin_url = make_url(args.postgres)
    name = f"hindsight_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        bench("postgres", admin_url.set(database=name).render_as_string(hide_password=False), args.nodes, report)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    print("\n| backend | case | value |\n|---|---|---|")
    for backend, case, value, unit in rows:
        print(f"| {backend} | {case} | {value:,.1f} {unit} |")


if __name__ == "__main__":
    main()
