"""What twc's bar asks of placement: an agent told each thing's place, right with probability p.

The bar for twc (80% of dev games won within 1.5× the gold path) depends on two things: where
each thing goes, and getting there (open the place, move to the other room). This isolates the
first. An idealized agent is told, for every thing of the game, a place: the gold path's with
probability ``p``, otherwise another place the game offers. It then plays with
twc's own verbs, in this order: the told ``put`` when it can be made and has not failed; a
``take`` of a thing not yet put away; ``open`` the told place of a held thing; ``open`` what it
has not opened in this room; else ``move``. A told place that fails is then told right, so a
wrong tell costs one wrong put and its take-back, and no more: optimistic on purpose. Not the
benchmark's agent (that one knows no verb): a bound on what an agent reaches with placement that
good, read off the game engine directly.

Usage: ``python -m bench.textworld.bound [--dev 50] [--accuracy 1,0.9,0.8,0.64] [--repeats 2]``
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from dataclasses import dataclass

from bench.textworld.game import GameEpisode, missing, parse_action
from bench.textworld.run import GAMES
from cluster.demo.env_base import Call, StepView

Act = tuple[str, str, str]
"""A call as verb, object and target ("" where it has none)."""


@dataclass(frozen=True, slots=True)
class Played:
    won: bool
    steps: int
    gold: int

    @property
    def within(self) -> bool:
        """Won within 1.5× the gold path (twc's bar, docs/benchmarks.md)."""
        return self.won and self.steps <= 1.5 * self.gold


def act_of(call: Call) -> Act:
    return (call.action, str(call.params.get("object", "")), str(call.params.get("target", "")))


def gold_places(episode: GameEpisode) -> dict[str, str]:
    """Each thing's place on the game's gold path."""
    acts = [act_of(parse_action(a)) for a in episode.gold]
    return {thing: place for verb, thing, place in acts if verb == "put"}


def offered_places(episode: GameEpisode) -> list[str]:
    """Every place a ``put`` can aim at along the game's gold path (the game's own places).

    Replays the gold path on the game's engine: call it before the game is played.
    """
    places: set[str] = set()
    for action in episode.gold:
        view = episode.view()
        assert view is not None
        places.update(p for verb, _, p in map(act_of, view.options) if verb == "put")
        episode.act(parse_action(action))
    return sorted(places)


def told(places: dict[str, str], accuracy: float, offered: Sequence[str], rng: random.Random) -> dict[str, str]:
    """The places the agent is told: each right with probability ``accuracy``, else another of the game's."""
    return {
        thing: place if rng.random() < accuracy else rng.choice([p for p in offered if p != place])
        for thing, place in places.items()
    }


def choose(
    view: StepView, advice: dict[str, str], placed: set[str], failed: set[Act], opened: set[tuple[str, str]]
) -> Act | None:
    """The idealized agent's next call (module docstring); None: move. ``opened``: (room, thing) pairs."""
    room = str(view.context["room"])
    acts = [act_of(c) for c in view.options]
    inventory = view.context["inventory"]
    carried = set(inventory) if isinstance(inventory, list) else set()
    held = {t for t in advice if t in carried and t not in placed}
    steps = (
        [a for a in acts if a[0] == "put" and advice.get(a[1]) == a[2]],
        [a for a in acts if a[0] == "take" and a[1] in advice and a[1] not in placed],
        [a for a in acts if a[0] == "open" and a[1] in {advice[t] for t in held}],
        [a for a in acts if a[0] == "open" and (room, a[1]) not in opened],
    )
    return next((a for step in steps for a in step if a not in failed), None)


def play(seed: int, advice: dict[str, str], rng: random.Random, budget: int) -> Played:
    """One dev game played by the idealized agent; a told place that fails is then told right."""
    episode = GameEpisode("twc", GAMES["twc"], "dev", seed, budget)
    right = gold_places(episode)
    advice = dict(advice)
    placed: set[str] = set()
    failed: set[Act] = set()
    opened: set[tuple[str, str]] = set()
    while (view := episode.view()) is not None:
        act = choose(view, advice, placed, failed, opened)
        if act is None:
            act = act_of(rng.choice([c for c in view.options if c.action == "move"]))
        if act[0] == "open":
            opened.add((str(view.context["room"]), act[1]))
        result = episode.act(next(c for c in view.options if act_of(c) == act))
        if result.status == "success" and act[0] == "put":
            placed.add(act[1])
        elif result.status == "failure":
            failed.add(act)
            if act[0] == "put":
                advice[act[1]] = right[act[1]]
    return Played(episode.succeeded, episode.steps, len(episode.gold))


def measure(accuracy: float, seeds: Sequence[int], repeat: int, budget: int) -> list[Played]:
    """Every dev game of ``seeds`` played with places right at ``accuracy`` (draws seeded by ``repeat``)."""
    rng = random.Random(repeat)
    played = []
    for seed in seeds:
        episode = GameEpisode("twc", GAMES["twc"], "dev", seed, budget)
        advice = told(gold_places(episode), accuracy, offered_places(episode), rng)
        played.append(play(seed, advice, rng, budget))
    return played


def shares(text: str) -> list[float]:
    """``--accuracy``: comma-separated numbers from 0 to 1."""
    try:
        out = [float(a) for a in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated numbers: {text!r}") from None
    if not all(0.0 <= a <= 1.0 for a in out):
        raise argparse.ArgumentTypeError(f"every share must be from 0 to 1: {text!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dev", type=int, default=50, help="dev games (seeds 0 … n-1)")
    parser.add_argument(
        "--accuracy", type=shares, default=[1.0, 0.9, 0.8, 0.64], help="comma-separated shares of places told right"
    )
    parser.add_argument("--repeats", type=int, default=2, help="draws of the wrong places per accuracy")
    parser.add_argument("--budget", type=int, default=50)
    args = parser.parse_args(argv)
    if missing():
        return 2
    print(f"{'right':>6}{'draw':>6}{'won':>8}{'within 1.5x':>13}{'steps/gold':>12}")
    for accuracy in args.accuracy:
        for repeat in range(args.repeats):
            played = measure(accuracy, range(args.dev), repeat, args.budget)
            ratio = sum(p.steps for p in played) / sum(p.gold for p in played)
            won, within = sum(p.won for p in played), sum(p.within for p in played)
            print(f"{accuracy:>6.2f}{repeat:>6}{won:>5}/{len(played):<2}{within:>10}/{len(played):<2}{ratio:>12.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
