"""What nearness transfers on the dev fold, right and wrong: the ablation of ``value_nearness``.

The hindsight agent plays train games 0 … n-1 (learning as in :mod:`bench.textworld.run`); then,
along each dev game's gold path, at every ``put`` the experience query is asked for the thing held
(the view the agent asks in) with the lowest threshold shown, and the first applicable ``put``
served is compared with the gold path's place. Per threshold: the puts served a place, right and
wrong, by nearness (a thing never learned on) or exactly; and, at the service default, each
transfer. The gold path is read to score the answers only, never to learn.

Usage: ``python -m bench.textworld.transfer [--game twc] [--train 100] [--dev 20]``
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import anyio

from bench.procedural.run_local import local_services
from bench.textworld.game import GameEpisode, missing, parse_action
from bench.textworld.run import GAMES, learn, learns_after, make_agent
from cluster.demo.agents import describe, run_episode
from cluster.demo.recording import ToolClient, call_checked
from cluster.experience.nearness import NEARNESS_DEFAULT

THRESHOLDS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.9)
LOWEST = THRESHOLDS[0]
Row = tuple[str, str, str | None, float, str]
"""A gold put: the thing, its place, the place served (None: none), the nearness (1: exact) and how it reads."""


async def served_places(client: ToolClient, game: str, seeds: range) -> list[Row]:
    """Per gold ``put`` of the dev games, what was served (:data:`Row`)."""
    rows: list[Row] = []
    for seed in seeds:
        episode = GameEpisode(game, GAMES[game], "dev", seed)
        for action in episode.gold:
            view = episode.view()
            call = parse_action(action)
            if view is not None and call.action == "put":
                thing, place = str(call.params["object"]), str(call.params["target"])
                narrowed = episode.focused(view, thing)
                answer: dict[str, Any] = await call_checked(
                    client,
                    "query_experience",
                    {
                        "context": describe(episode, narrowed),
                        "role": narrowed.role,
                        "task_type": episode.task_type,
                        "context_snapshot": narrowed.context,
                        "available_actions": list(narrowed.available_actions),
                        "decision": narrowed.stage,
                    },
                )
                puts = [
                    e
                    for e in answer.get("experiences", [])
                    if e.get("applicable") and e["recommended"]["tool"] == "put"
                ]
                if not puts:
                    rows.append((thing, place, None, 0.0, ""))
                else:
                    near = puts[0].get("near")
                    similarity = float(near.rsplit(" ", 1)[1]) if near else 1.0
                    served = str(puts[0]["recommended"]["params"].get("target"))
                    rows.append((thing, place, served, similarity, str(near or "")))
            episode.act(call)
    return rows


async def measure(game: str, trained: int, dev: int, data_dir: Path) -> list[Row]:
    with local_services(("hindsight",), data_dir, settings={"value_nearness": LOWEST}) as (clients, drain):
        async with clients("hindsight") as client:
            policy = make_agent("hindsight")
            for index in range(trained):
                episode = GameEpisode(game, GAMES[game], "train", index)
                await run_episode(client, episode, policy, agent_id="bench-hindsight")
                if learns_after(index + 1):
                    await learn(policy, drain)
            await learn(policy, drain)
            return await served_places(client, game, range(dev))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--game", default="twc")
    parser.add_argument("--train", type=int, default=100)
    parser.add_argument("--dev", type=int, default=20)
    args = parser.parse_args(argv)
    if missing():
        return 2

    async def go() -> list[Row]:
        with tempfile.TemporaryDirectory(prefix="hindsight-transfer-") as tmp:
            return await measure(args.game, args.train, args.dev, Path(tmp))

    rows = anyio.run(go)
    exact = [r for r in rows if r[2] is not None and r[3] >= 1.0]
    print(f"{len(rows)} puts on the gold paths of dev games 0-{args.dev - 1}, after {args.train} train games")
    print(f"exact (a thing some condition names): {len(exact)} served, {sum(r[1] == r[2] for r in exact)} right")
    print(f"{'nearness':>9}{'served':>8}{'right':>7}{'wrong':>7}")
    for threshold in THRESHOLDS:
        matched = [r for r in rows if r[2] is not None and threshold <= r[3] < 1.0]
        right = sum(r[1] == r[2] for r in matched)
        print(f"{threshold:>9.2f}{len(matched):>8}{right:>7}{len(matched) - right:>7}")
    print(f"transfers at the default {NEARNESS_DEFAULT}:")
    for _, place, served, similarity, near in rows:
        if served is not None and NEARNESS_DEFAULT <= similarity < 1.0:
            print(f"  {near} → {served}: {'right' if served == place else f'wrong, its place is {place}'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
