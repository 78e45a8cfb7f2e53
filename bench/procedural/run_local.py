"""Run the whole comparison in this process and print it.

Each condition gets a service of its own (SQLite + Milvus Lite under ``--data-dir``), reached
through an in-process MCP client; between rounds the attribution queue of every service is
drained here, which is what the background workers do in a deployment.

Usage: ``python -m bench.procedural.run_local --out procedural.json [--train 10 --eval 10]``
"""

from __future__ import annotations

import argparse
import tempfile
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio

from bench.procedural.harness import (
    CONDITIONS,
    BenchConfig,
    BenchResults,
    Condition,
    in_process_clients,
    run_bench,
)
from bench.procedural.recording import ToolClient
from bench.procedural.report import print_report, write_json
from cluster.analysis import analysis_for
from cluster.services import Services, build_services
from cluster.settings import Settings


async def run_local(config: BenchConfig, data_dir: Path) -> BenchResults:
    """Run ``config`` against fresh in-process services, one per condition, under ``data_dir``."""
    services: dict[Condition, Services] = {
        c: build_services(Settings(data_dir=data_dir / c)) for c in config.conditions
    }
    analyses = [analysis_for(s) for s in services.values()]

    def clients(condition: Condition) -> AbstractAsyncContextManager[ToolClient]:
        return in_process_clients(services[condition])(condition)

    async def drain() -> None:
        for analysis in analyses:
            while analysis.run_once().trajectories:
                pass

    try:
        return await run_bench(clients, drain, config)
    finally:
        for svc in services.values():
            svc.close()


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
        return await run_local(config, data_dir)

    if args.data_dir is not None:
        results = anyio.run(go, args.data_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="hindsight-bench-") as tmp:
            results = anyio.run(go, Path(tmp))
    print_report(results)
    write_json(results, args.out)
    print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
