"""Run the whole comparison in this process and print it.

Each condition gets a service of its own (SQLite + Milvus Lite under ``--data-dir``), reached
through an in-process MCP client; between rounds the attribution queue of every service is
drained here, which is what the background workers do in a deployment.

Usage: ``python -m bench.procedural.run_local --out procedural.json [--train 10 --eval 10] [--tune]``

``--tune`` first runs the hindsight condition alone on the tuning families for every
``(top_k, min_confidence)`` in ``harness.TUNING_GRID`` (fresh services each), picks the best there
(``harness.pick_choice``) and runs the full comparison with it; the held-out families are never
looked at while choosing.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio

from bench.procedural.families import make_episode
from cluster.demo.harness import (
    CONDITIONS,
    FAMILY_GROUPS,
    TUNING_GRID,
    BenchConfig,
    BenchResults,
    ClientFactory,
    Condition,
    WaitForAnalysis,
    in_process_clients,
    pick_choice,
    run_bench,
)
from cluster.demo.recording import ToolClient
from cluster.demo.report import print_report, write_json
from cluster.services import Services, analysis_for, build_services
from cluster.settings import Settings

T = TypeVar("T")


@contextmanager
def local_services(
    conditions: Sequence[Condition],
    data_dir: Path,
    analysed: Sequence[Condition] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> Iterator[tuple[ClientFactory, WaitForAnalysis]]:
    """One in-process service per condition under ``data_dir``, its client factory, and a drain of
    the attribution queues of ``analysed`` (default: every condition); ``settings``: other settings."""
    services: dict[Condition, Services] = {
        c: build_services(Settings(data_dir=data_dir / c, **(settings or {}))) for c in conditions
    }
    learners = conditions if analysed is None else analysed
    analyses = [analysis_for(s) for c, s in services.items() if c in learners]

    def clients(condition: Condition) -> AbstractAsyncContextManager[ToolClient]:
        return in_process_clients(services[condition])(condition)

    async def drain() -> None:
        for analysis in analyses:
            while analysis.run_once().trajectories:
                pass

    try:
        yield clients, drain
    finally:
        for svc in services.values():
            svc.close()


def run_in_data_dir(go: Callable[[Path], Awaitable[T]], data_dir: Path | None, *, prefix: str) -> T:
    """Run ``go`` on ``data_dir``, or on a temporary directory removed afterwards when there is none."""
    if data_dir is not None:
        return anyio.run(go, data_dir)
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        return anyio.run(go, Path(tmp))


async def run_local(config: BenchConfig, data_dir: Path) -> BenchResults:
    """Run ``config`` against fresh in-process services, one per condition, under ``data_dir``."""
    with local_services(config.conditions, data_dir) as (clients, drain):
        return await run_bench(clients, drain, config, make=make_episode)


async def tuned(config: BenchConfig, data_dir: Path) -> BenchResults:
    """Choose top_k / min_confidence on the tuning group alone, then run ``config`` with the choice."""
    runs = []
    for index, (top_k, min_confidence) in enumerate(TUNING_GRID):
        candidate = config.model_copy(
            update={
                "families": tuple(f for f in config.families if f in FAMILY_GROUPS["tuning"]),
                "conditions": ("hindsight",),
                "top_k": top_k,
                "min_confidence": min_confidence,
            }
        )
        runs.append(await run_local(candidate, data_dir / f"tune-{index}"))
    choice = pick_choice(runs)
    print(f"chosen on the tuning group: top_k {choice.top_k}, min_confidence {choice.min_confidence}")
    final = config.model_copy(
        update={"top_k": choice.top_k, "min_confidence": choice.min_confidence, "choice_note": choice.how[:300]}
    )
    return await run_local(final, data_dir / "final")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("procedural.json"), help="where to write the JSON results")
    parser.add_argument("--data-dir", type=Path, default=None, help="service files (default: a temporary dir)")
    parser.add_argument("--train", type=int, default=10, help="training episodes per family and round")
    parser.add_argument("--eval", type=int, default=10, help="evaluation episodes per family and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--families", default=None, help="comma-separated (default: all eleven)")
    parser.add_argument("--tune", action="store_true", help="choose top_k/min_confidence on the tuning group first")
    parser.add_argument(
        "--conditions", default=",".join(CONDITIONS), help="comma-separated: none,replay,naive,hindsight"
    )
    args = parser.parse_args(argv)
    config = BenchConfig.model_validate(
        {
            "train_episodes": args.train,
            "eval_episodes": args.eval,
            "rounds": args.rounds,
            "seed": args.seed,
            "conditions": tuple(args.conditions.split(",")),
        }
        | ({"families": tuple(args.families.split(","))} if args.families else {})
    )

    async def go(data_dir: Path) -> BenchResults:
        return await (tuned(config, data_dir) if args.tune else run_local(config, data_dir))

    results = run_in_data_dir(go, args.data_dir, prefix="hindsight-bench-")
    print_report(results)
    write_json(results, args.out)
    print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
