"""Train on TextWorldExpress train games, report on dev games, for the four conditions.

For each game and each checkpoint ``n`` (default 1, 10, 100) every condition that learns starts
from an empty memory (a service of its own per condition, SQLite + Milvus Lite), plays train
games 0 … n-1, learning at fixed boundaries (after games 1, 2, 5 and every 10th: hindsight's
queue drained, replay and naive memories committed), then plays the dev games with what it has.
Dev games are never learned from. No memory learns nothing, so it plays the dev games once.
Every condition plays the same seeds with the same step budget. The test fold is never played.

Usage: ``python -m bench.textworld.run [--games twc,cookingworld] [--train 1,10,100] [--dev 50]
[--budget 50] [--conditions none,replay,naive,hindsight] [--nearness 0.75|off] [--out textworld.json]``

Needs the ``textworld`` extra and Java: without them it says so and exits with status 2. An
unknown game or parameter set is refused before anything runs, with the game's own message.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pydantic import Field

from bench.procedural.run_local import local_services, run_in_data_dir
from bench.textworld.agent import FocusedHindsightPolicy
from bench.textworld.game import GameEpisode, missing
from cluster.core.types import Frozen
from cluster.demo.agents import EpisodeResult, Policy, ReplayPolicy, run_episode
from cluster.demo.harness import CONDITIONS, BenchConfig, Condition, default_embedder, make_policy
from cluster.demo.naive import NaivePolicy
from cluster.demo.recording import ToolClient
from cluster.experience.nearness import NEARNESS_DEFAULT

GAMES: dict[str, str] = {
    "twc": "numLocations=2,numItemsToPutAway=3,includeDoors=0,limitInventorySize=0",
    "cookingworld": "numLocations=3,numIngredients=2,numDistractorItems=0,includeDoors=0,limitInventorySize=0",
}
"""The games measured and their parameters (twc: 2 rooms, 3 objects; cookingworld: 3 rooms, 2 ingredients)."""


def learns_after(game_index: int) -> bool:
    """Whether memories learn after train game ``game_index`` (1-based): 1, 2, 5 and every 10th."""
    return game_index in (1, 2, 5) or game_index % 10 == 0


class Cell(Frozen):
    """One game × condition × checkpoint on the dev games."""

    game: str
    condition: Condition
    trained: int = Field(ge=0, description="Train games played before the dev games.")
    games: int = Field(ge=1)
    success_rate: float
    mean_steps: float = Field(description="A lost game counts every step it took (the budget, or fewer if lost early).")
    gold_ratio: float = Field(description="Mean steps ÷ mean gold-path length.")
    points: float = Field(description="Mean share of the game's points reached at the end (1: won).")
    seconds_per_game: float = Field(description="Wall time per dev game, agent and recording included.")


def check_game(game: str, params: str) -> None:
    """Refuse an unknown game or parameter set with the game's own message.

    Raises:
        ValueError: The game refused ``game`` / ``params``.
    """
    GameEpisode(game, params, "train", 0)


def make_agent(condition: Condition) -> Policy:
    if condition == "hindsight":
        return FocusedHindsightPolicy()
    return make_policy(condition, BenchConfig(), default_embedder)


async def learn(policy: Policy, drain: Callable[[], object]) -> None:
    if isinstance(policy, ReplayPolicy):
        policy.memory.commit()
    elif isinstance(policy, NaivePolicy):
        policy.server.commit()
    else:
        result = drain()
        if hasattr(result, "__await__"):
            await result  # type: ignore[misc]


async def play(
    client: ToolClient,
    policy: Policy,
    game: tuple[str, str],
    fold: str,
    seeds: Sequence[int],
    budget: int,
    condition: str,
) -> list[tuple[EpisodeResult, float]]:
    """Each game's result and the share of its points reached (``game``: its name and parameters)."""
    out = []
    for seed in seeds:
        episode = GameEpisode(*game, fold, seed, budget)
        out.append((await run_episode(client, episode, policy, agent_id=f"bench-{condition}"), episode.points))
    return out


def cell(
    game: str, condition: Condition, trained: int, played: Sequence[tuple[EpisodeResult, float]], seconds: float
) -> Cell:
    n = len(played)
    results = [r for r, _ in played]
    steps = sum(r.steps for r in results) / n
    gold = sum(r.oracle_steps for r in results) / n
    return Cell(
        game=game,
        condition=condition,
        trained=trained,
        games=n,
        success_rate=sum(r.succeeded for r in results) / n,
        mean_steps=steps,
        gold_ratio=steps / gold,
        points=sum(p for _, p in played) / n,
        seconds_per_game=seconds / n,
    )


async def run_condition(
    game: tuple[str, str],
    condition: Condition,
    trained: int,
    dev: int,
    budget: int,
    data_dir: Path,
    progress: Callable[[str], None],
    nearness: float | None = NEARNESS_DEFAULT,
) -> Cell:
    """Fresh memory, ``trained`` train games (learning at the boundaries), then the dev games.

    ``game`` is the game's name and its parameter string.
    """
    with local_services((condition,), data_dir, settings={"value_nearness": nearness}) as (clients, drain):
        async with clients(condition) as client:
            policy = make_agent(condition)
            for index in range(trained):
                await play(client, policy, game, "train", [index], budget, condition)
                if learns_after(index + 1):
                    await learn(policy, drain)
            await learn(policy, drain)
            started = time.monotonic()
            results = await play(client, policy, game, "dev", range(dev), budget, condition)
            out = cell(game[0], condition, trained, results, time.monotonic() - started)
    progress(
        f"{game[0]} {condition} after {trained}: success {out.success_rate:.2f}, "
        f"steps/gold {out.gold_ratio:.2f}, points {out.points:.2f}, {out.seconds_per_game:.2f} s/game"
    )
    return out


async def run(
    games: Mapping[str, str],
    checkpoints: Sequence[int],
    dev: int,
    budget: int,
    conditions: Sequence[Condition],
    data_dir: Path,
    progress: Callable[[str], None] = lambda _: None,
    nearness: float | None = NEARNESS_DEFAULT,
) -> list[Cell]:
    cells = []
    for game in games.items():
        for condition in conditions:
            for trained in checkpoints if condition != "none" else (0,):
                where = data_dir / f"{game[0]}-{condition}-{trained}"
                cells.append(await run_condition(game, condition, trained, dev, budget, where, progress, nearness))
    return cells


def print_table(cells: Sequence[Cell]) -> None:
    print(
        f"{'game':<13}{'condition':<11}{'trained':>8}{'dev':>5}{'success':>9}{'steps':>8}{'÷gold':>7}"
        f"{'points':>8}{'s/game':>8}"
    )
    for c in cells:
        print(
            f"{c.game:<13}{c.condition:<11}{c.trained:>8}{c.games:>5}{c.success_rate:>9.2f}"
            f"{c.mean_steps:>8.1f}{c.gold_ratio:>7.2f}{c.points:>8.2f}{c.seconds_per_game:>8.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", default=",".join(GAMES), help="comma-separated, of: " + ", ".join(GAMES))
    parser.add_argument("--params", default=None, help="a game parameter string instead of the default (one game)")
    parser.add_argument("--train", default="1,10,100", help="checkpoints: train games played before the dev games")
    parser.add_argument("--dev", type=int, default=50, help="dev games per checkpoint (seeds 0 … n-1)")
    parser.add_argument("--budget", type=int, default=50, help="steps per game, every condition")
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument(
        "--nearness",
        default=str(NEARNESS_DEFAULT),
        help="the service's value_nearness (least cosine for a value no condition names), or 'off'",
    )
    parser.add_argument("--out", type=Path, default=Path("textworld.json"))
    parser.add_argument("--data-dir", type=Path, default=None, help="service files (default: a temporary dir)")
    args = parser.parse_args(argv)
    if missing():
        return 2
    games = {g: GAMES.get(g, "") for g in args.games.split(",") if g}
    if args.params is not None:
        if len(games) != 1:
            print("--params needs exactly one game", file=sys.stderr)
            return 2
        games = dict.fromkeys(games, args.params)
    try:
        for game, params in games.items():
            check_game(game, params)
    except ValueError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    conditions: list[Condition] = [c for c in CONDITIONS if c in args.conditions.split(",")]
    checkpoints = [int(n) for n in args.train.split(",")]
    nearness = None if args.nearness == "off" else float(args.nearness)

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    async def go(data_dir: Path) -> list[Cell]:
        return await run(games, checkpoints, args.dev, args.budget, conditions, data_dir, progress, nearness)

    cells = run_in_data_dir(go, args.data_dir, prefix="hindsight-textworld-")
    print_table(cells)
    args.out.write_text(json.dumps([c.model_dump() for c in cells], indent=2) + "\n")
    print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
