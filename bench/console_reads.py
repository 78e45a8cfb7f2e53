"""How long the console's reads take on the demo's data, against loading one trajectory (the baseline).

The trajectory view attributes the trajectory when asked (credit is not stored), against the owner's
latest runs of the same kind: that is its cost over the bare load, measured here in the same run.
Reads the store `hindsight demo` leaves in ``<data_dir>/demo`` (run ``make demo`` first).

Usage: ``python -m bench.console_reads [--owner demo-hindsight] [--repeat 5]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from cluster.console import reads
from cluster.services import build_services
from cluster.settings import load_settings
from cluster.trajectories.repository import SqlTrajectoryStore


def median_ms(read: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        read()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--owner", default="demo-hindsight", help="whose data (the demo has one owner per condition)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    demo = load_settings().data_dir / "demo"
    if not (demo / "hindsight.db").exists():
        parser.error(f"no demo data in {demo}: run `make demo` first")
    services = build_services(load_settings().model_copy(update={"data_dir": demo}), migrate=False)
    owner = args.owner
    try:
        listed = reads.trajectories(services, owner)["trajectories"]
        if not listed:
            parser.error(f"{owner} has no trajectories in {demo}")
        biggest = max(listed, key=lambda t: t["nodes"])["trajectory_id"]
        library = reads.library(services, owner, None)

        def load() -> None:
            with services.db.read() as session:
                SqlTrajectoryStore(session).load(owner, biggest)

        rows: list[tuple[str, Callable[[], Any]]] = [
            ("load one trajectory (baseline)", load),
            ("trajectories list", lambda: reads.trajectories(services, owner)),
            ("trajectory view (credit, contrasts)", lambda: reads.trajectory(services, owner, biggest)),
            ("library (active version)", lambda: reads.library(services, owner, None)),
        ]
        if library["templates"]:
            first = library["templates"][0]["template_id"]
            rows.append(("template (history, provenance)", lambda: reads.template(services, owner, first)))
        measured = [(name, median_ms(read, args.repeat)) for name, read in rows]
    finally:
        services.close()
    baseline = measured[0][1]
    print(f"{owner}: {len(listed)} trajectories listed, {library['total']} templates; median of {args.repeat}")
    print(f"{'read':40} {'ms':>8} {'x baseline':>11}")
    for name, ms in measured:
        print(f"{name:40} {ms:8.1f} {ms / baseline:11.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
