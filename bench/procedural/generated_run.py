"""Run generated task families through the four conditions, in this process, and report over families.

Each condition gets one service of its own (SQLite + Milvus Lite), shared by every family as a
fleet would share it, reached through an in-process MCP client; between rounds hindsight's
attribution queue is drained here, which is what the background workers do in a deployment (the
other conditions record to their services too, at the same cost, but nothing reads what those
would learn, so their queues are left alone). Rounds run as in
:mod:`cluster.demo.harness` (evaluate on unseen instances, then train, then learn), with the
service's defaults. Family seeds 0-99 are for tuning the generator and the agents; report on 100
and up (the default).

Size: 200 families at 3 training + 3 evaluation episodes per family, condition and round took 17
minutes on two shared cores (12 CPU minutes); at 4 + 4 it took 36 (20 CPU minutes: the library
and the learning grow faster than the episodes), over the half hour a run should take.

Usage: ``python -m bench.procedural.generated_run [--families 200] [--seed-start 100] [--train 3]
[--eval 3] [--rounds 3] [--conditions none replay naive hindsight] [--out generated.json]``
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

from bench.procedural.families import make_episode
from bench.procedural.generated import GeneratedEpisode, family_name, generated_class
from bench.procedural.generated.report import (
    FamilyCell,
    GeneratedResults,
    RunConfig,
    print_results,
    summarize,
    write_json,
)
from bench.procedural.run_local import local_services, run_in_data_dir
from cluster.core.ports import Embedder
from cluster.demo.agents import EpisodeResult, Policy, ReplayPolicy, run_episode
from cluster.demo.harness import (
    CONDITIONS,
    BenchConfig,
    ClientFactory,
    Condition,
    Phase,
    WaitForAnalysis,
    default_embedder,
    make_policy,
    seed_for,
)
from cluster.demo.naive import NaivePolicy
from cluster.demo.recording import ToolClient


def family_names(config: RunConfig) -> tuple[str, ...]:
    """The registered names of the run's families."""
    return tuple(family_name(config.seed_start + i) for i in range(config.families))


def bench_config(config: RunConfig) -> BenchConfig:
    """The harness configuration with the same families, conditions, sizes and instance seeds."""
    return BenchConfig(
        families=family_names(config),
        conditions=config.conditions,
        rounds=config.rounds,
        train_episodes=config.train_episodes,
        eval_episodes=config.eval_episodes,
        seed=config.seed,
    )


def first_tries(episode: GeneratedEpisode) -> tuple[int, int]:
    """Decisions reached and decisions whose first call worked, from the episode's history."""
    decisions = hits = 0
    fresh = True
    for key, _, result in episode.history:
        worked = result.status == "success"
        if fresh and episode.is_decision(key):
            decisions += 1
            hits += worked
        fresh = worked
    return decisions, hits


class _Tally:
    """Sums of one family × condition × round's unseen episodes."""

    def __init__(self) -> None:
        self.episodes = self.successes = self.steps = self.decisions = self.first_try = 0
        self.oracle = 0.0

    def add(self, episode: GeneratedEpisode, result: EpisodeResult) -> None:
        decisions, hits = first_tries(episode)
        self.episodes += 1
        self.successes += result.succeeded
        self.steps += result.steps
        self.oracle += result.oracle_steps
        self.decisions += decisions
        self.first_try += hits

    def cell(self, family: str, condition: Condition, round_: int) -> FamilyCell:
        return FamilyCell(
            family=family,
            condition=condition,
            round=round_,
            episodes=self.episodes,
            successes=self.successes,
            mean_steps=self.steps / self.episodes,
            oracle_steps=self.oracle / self.episodes,
            decisions=self.decisions,
            first_try=self.first_try,
        )


async def _play(
    client: ToolClient,
    policy: Policy,
    condition: Condition,
    bench: BenchConfig,
    round_: int,
    phase: Phase,
    tallies: dict[str, _Tally],
) -> None:
    """One phase of one condition: every family's episodes, interleaved as the harness does them."""
    count = bench.eval_episodes if phase == "eval" else bench.train_episodes
    for index in range(count):
        for family in bench.families:
            episode = make_episode(family, seed_for(bench, round_, phase, index))
            if not isinstance(episode, GeneratedEpisode):
                raise TypeError(f"{family} is not a generated family")
            result = await run_episode(client, episode, policy, agent_id=f"bench-{condition}")
            if phase == "eval":
                tallies[family].add(episode, result)


async def run_generated(
    config: RunConfig,
    client_factory: ClientFactory,
    wait_for_analysis: WaitForAnalysis,
    *,
    embedder: Callable[[], Embedder] = default_embedder,
    progress: Callable[[str], None] = lambda _: None,
    wrap: Callable[[Policy], Policy] = lambda policy: policy,
) -> list[FamilyCell]:
    """Run every condition through every round on the same instances; one cell per family, condition, round.

    The rounds are the harness's (:func:`cluster.demo.harness.run_bench`), keeping each
    episode so the first try of every decision can be read from its history. ``wrap`` may put
    each condition's policy inside another that watches it (:mod:`bench.procedural.losses`).

    Raises:
        ToolCallFailed: Recording or finalizing a trajectory failed.
    """
    bench = bench_config(config)
    cells: list[FamilyCell] = []
    async with AsyncExitStack() as stack:
        clients = {c: await stack.enter_async_context(client_factory(c)) for c in config.conditions}
        policies = {c: wrap(make_policy(c, bench, embedder)) for c in config.conditions}
        for round_ in range(1, config.rounds + 1):
            for condition in config.conditions:
                started = time.monotonic()
                tallies = {f: _Tally() for f in bench.families}
                for phase in ("eval", "train"):
                    await _play(clients[condition], policies[condition], condition, bench, round_, phase, tallies)
                cells += [tallies[f].cell(f, condition, round_) for f in bench.families]
                progress(f"round {round_} {condition}: {time.monotonic() - started:.0f} s")
            for policy in policies.values():
                if isinstance(policy, ReplayPolicy):
                    policy.memory.commit()
                elif isinstance(policy, NaivePolicy):
                    policy.server.commit()
            started = time.monotonic()
            await wait_for_analysis()
            progress(f"round {round_} learning: {time.monotonic() - started:.0f} s")
    return cells


async def run_local(
    config: RunConfig, data_dir: Path, progress: Callable[[str], None] = lambda _: None
) -> GeneratedResults:
    """Run ``config`` against fresh in-process services and aggregate it."""
    started = time.monotonic()
    # Only hindsight reads what its service learns; analysing the other conditions' trajectories
    # would cost most of a round's time and change no figure.
    with local_services(config.conditions, data_dir, analysed=("hindsight",)) as (clients, drain):
        cells = await run_generated(config, clients, drain, progress=progress)
    shapes = {name: generated_class(name).spec.shapes for name in family_names(config)}
    return summarize(config, cells, shapes, time.monotonic() - started)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def add_run_arguments(parser: argparse.ArgumentParser, *, families: int, seed_start: int) -> None:
    """The options that say which families run and how long (read back by :func:`run_config`)."""
    parser.add_argument("--families", type=int, default=families, help="how many generated families")
    parser.add_argument("--seed-start", type=int, default=seed_start, help="first family seed (0-99 are for tuning)")
    parser.add_argument("--train", type=int, default=3, help="training episodes per family, condition and round")
    parser.add_argument("--eval", type=int, default=3, help="evaluation episodes per family, condition and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="instance seeds")
    parser.add_argument("--data-dir", type=Path, default=None, help="service files (default: a temporary dir)")


def run_config(args: argparse.Namespace, conditions: tuple[Condition, ...]) -> RunConfig:
    """The run :func:`add_run_arguments`' options describe, for ``conditions``."""
    return RunConfig(
        families=args.families,
        seed_start=args.seed_start,
        train_episodes=args.train,
        eval_episodes=args.eval,
        rounds=args.rounds,
        seed=args.seed,
        conditions=conditions,
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, families=200, seed_start=100)
    parser.add_argument("--out", type=Path, default=Path("generated.json"), help="where to write the JSON results")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument(
        "--conditions",
        nargs="+",
        choices=CONDITIONS,
        default=list(CONDITIONS),
        help="which conditions to run (comparisons need none, naive and hindsight)",
    )
    args = parser.parse_args(argv)
    config = run_config(args, tuple(args.conditions))
    progress = (lambda _: None) if args.quiet else _progress

    async def go(data_dir: Path) -> GeneratedResults:
        return await run_local(config, data_dir, progress)

    results = run_in_data_dir(go, args.data_dir, prefix="hindsight-generated-")
    print_results(results)
    write_json(results, args.out)
    print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
