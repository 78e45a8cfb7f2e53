"""Soak benchmark: ``kill -9`` of the whole service, again and again, under recording load.

Starts ``hindsight serve`` (a real process: SQLite and Milvus Lite in a fresh data directory, Ray,
HAProxy, two replicas, one attribution worker, memory maintenance) and runs ``--cycles`` kill
cycles. In each, ``--agents`` agents record trajectories over HTTP (single nodes and batches),
finalize them with the experiences they were served, and write memories. After ``--load-s``
seconds every process of the service is killed with SIGKILL: in odd cycles while the attribution
worker holds a claimed batch, in even ones between the two writes of a served trajectory's
analysis (its served outcomes, its analysed mark). The service is started again on the same data
directory and port; the agents keep going, sending again every call the kill left unanswered.
``--after-s`` seconds after the restart serves they finish their episodes, and the cycle's audit
compares SQL and Milvus with every call the service acknowledged (tests/reliability/crash.py).
The next cycle runs on the restarted service.

Columns: what was acknowledged and what of it is missing (nodes, memory writes); memory keys with
more than one current version (duplicates); memory writes the kill left unanswered that had
committed, so that their retry made a second version of the key (memory_write takes no
idempotency key; one version stays current); finalized trajectories and how many were analysed
once (marked analysed, each served outcome counted once, evidence counted once); the longest wait
of a trajectory analysed after the restart (from the later of its finalize and the service
serving again); the restart (kill to serving); calls sent again; claims held at the kill; and any
other problem the audit found (vectors, evidence, agents' errors).

    python -m bench.soak [--cycles 3] [--agents 8] [--load-s 40] [--after-s 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cluster.net import HaproxyGuard, free_port
from tests.reliability.crash import (
    HalfAnalysed,
    RecordingLoad,
    audit,
    claimed,
    database,
    queue_state,
    utc_now,
    wait_settled,
)
from tests.reliability.service import ServeProcess, anything_listens_on, deadline_loop, short_tmp

COLUMNS = (
    ("cycle", "cycle"),
    ("kill_at", "killed at"),
    ("nodes_acked", "nodes acked"),
    ("nodes_lost", "nodes lost"),
    ("memory_acked", "memory writes acked"),
    ("memory_lost", "memory lost"),
    ("memory_duplicates", "duplicates"),
    ("memory_retry_versions", "extra versions from retries"),
    ("finalized", "trajectories finalized"),
    ("analysed_once", "analysed once"),
    ("max_to_analysed_s", "max to analysed after restart (s)"),
    ("restart_s", "restart (s)"),
    ("retried_calls", "calls sent again"),
    ("claimed_at_kill", "claimed at kill"),
    ("problems", "other problems"),
)


def cycle(
    serve: ServeProcess, number: int, args: argparse.Namespace, started: list[ServeProcess]
) -> tuple[ServeProcess, dict[str, Any]]:
    """One kill cycle on ``serve``; returns the restarted service (also put in ``started``) and the cycle's row."""
    data_dir = serve.data_dir
    db = database(data_dir)
    load = RecordingLoad(serve.url, args.agents, label=f"cycle-{number}", seed=number).start()
    try:
        time.sleep(args.load_s)
        # Odd cycles: any moment a batch is claimed. Even ones: between the two writes of a served
        # trajectory's analysis (its outcomes, its analysed mark).
        moment = HalfAnalysed(db, load.ledger) if number % 2 == 0 else (lambda: claimed(db) > 0)
        killed, _ = serve.kill_mid_batch(moment, 300)
        killed_at = utc_now()
        at_kill = queue_state(db)
        for _ in deadline_loop(30, f"processes outlived kill -9: {serve.survivors()}"):
            if not serve.survivors():
                break
        # A killed listener's socket may take the kernel a moment to close.
        for _ in deadline_loop(30, f"port {serve.port} still held after kill -9: {anything_listens_on(serve.port)}"):
            if not anything_listens_on(serve.port):
                break
        restarted = start(data_dir, serve.port, serve.ray_tmp, args.lease_s, started)
        serving_again_at = utc_now()
        time.sleep(args.after_s)
        ledger = load.stop()
    finally:
        load.abort()
    try:
        wait_settled(db, set(ledger.finalized), args.settle_s)
    finally:
        db.dispose()
    result = audit(data_dir, ledger, killed_at, serving_again_at)
    logging.info("cycle %d: killed %d processes; %s\n%s", number, len(killed), ledger.summary(), result.describe())
    double = {p.split(",")[0] for p in result.outcome_problems}
    other = {
        k: v for k, v in result.problems().items() if k not in ("nodes_lost", "memories_lost", "memory_duplicates")
    }
    row = {
        "cycle": number,
        "kill_at": "half-analysed" if number % 2 == 0 else "claimed batch",
        "nodes_acked": result.nodes_acked,
        "nodes_lost": len(result.nodes_lost),
        "memory_acked": result.memories_acked,
        "memory_lost": len(result.memories_lost),
        "memory_duplicates": len(result.memory_duplicates),
        "finalized": result.finalized_acked,
        "analysed_once": result.analysed - len(double),
        "max_to_analysed_s": round(max(result.max_lag_after_restart_s, 0.0), 1),
        "restart_s": round((serving_again_at - killed_at).total_seconds(), 1),
        "retried_calls": sum(ledger.retried.values()),
        "claimed_at_kill": at_kill.claimed,
        "problems": sum(len(v) for v in other.values()) + len(ledger.errors),
        "problem_detail": {k: v[:5] for k, v in result.problems().items()} | {"agent_errors": ledger.errors[:5]},
        "memory_retry_versions": result.memory_retry_versions,
        "analysed_after_restart": result.analysed_after_restart,
    }
    return restarted, row


def start(data_dir: Path, port: int, ray_tmp: Path, lease_s: float, started: list[ServeProcess]) -> ServeProcess:
    serve = ServeProcess.start(data_dir, port, ray_tmp, maintenance=True, lease_s=lease_s)
    started.append(serve)
    serve.wait_serving(300)
    return serve


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {"cycle": "total", "kill_at": ""}
    for key, _ in COLUMNS[2:]:
        values = [row[key] for row in rows]
        total[key] = max(values) if key in ("max_to_analysed_s", "restart_s", "claimed_at_kill") else sum(values)
    return total


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(title for _, title in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(str(row[key]) for key, _ in COLUMNS) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--load-s", type=float, default=40, help="seconds of load before each kill")
    parser.add_argument("--after-s", type=float, default=20, help="seconds of load after each restart serves")
    parser.add_argument("--settle-s", type=float, default=120, help="how long to wait for the analysis queue")
    parser.add_argument(
        "--lease-s",
        type=float,
        default=600,
        help="attribution lease; long, so a claim that waited out its lease instead of being taken "
        "back at the restart would show in the analysed-after-restart column (deploy default 30)",
    )
    parser.add_argument("--json", action="store_true", help="print the rows and totals as JSON")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    rows: list[dict[str, Any]] = []
    ray_tmp = short_tmp()
    with tempfile.TemporaryDirectory(prefix="soak") as tmp:
        data_dir = Path(tmp) / "data"
        started: list[ServeProcess] = []
        try:
            serve = start(data_dir, free_port(), ray_tmp, args.lease_s, started)
            for number in range(1, args.cycles + 1):
                serve, row = cycle(serve, number, args, started)
                rows.append(row)
            serve.stop(signal.SIGTERM)
        finally:
            for process in started:
                process.cleanup()
            shutil.rmtree(HaproxyGuard.for_data_dir(data_dir, "127.0.0.1", base=ray_tmp).run_dir, ignore_errors=True)
            shutil.rmtree(ray_tmp, ignore_errors=True)
    summary = totals(rows)
    if args.json:
        print(json.dumps({"rows": rows, "totals": summary}, indent=2))
    else:
        print(table([*rows, summary]))


if __name__ == "__main__":
    main()
