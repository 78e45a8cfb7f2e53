"""Choosing ``value_nearness`` on the train fold alone: how often the nearest known thing's place is right.

Known things are those the gold paths of train games 0 … 99 put away, with their places; the
things of train games 100 … 299 that none of those games has are the unseen ones. For each
threshold the table gives how many unseen things the nearest known thing (cosine, the service's
embedder) stands in for, and how many of those transfers send the thing to a wrong place; at 0
every unseen thing is matched, which bounds what nearness over names can transfer at all. The
threshold chosen is the lowest at which at most a quarter of the transfers are wrong. A second
table places every unseen thing by the vote of its k nearest known things (each vote its cosine):
whether more neighbours than one place better. The dev fold is not read here; the test fold never.

Usage: ``python -m bench.textworld.nearness [--game twc]``
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from bench.textworld.game import engine, missing, parse_action
from bench.textworld.run import GAMES
from cluster.demo.harness import default_embedder

THRESHOLDS = (0.0, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85)
MAX_WRONG = 0.25
VOTERS = (1, 3, 5, 9)


def places(game: str, seeds: Iterable[int]) -> dict[str, set[str]]:
    """Where each thing put away on a train game's gold path went."""
    env = engine()
    out: dict[str, set[str]] = {}
    for seed in seeds:
        env.reset(seed=seed, gameFold="train", gameName=game, gameParams=GAMES[game], generateGoldPath=True)
        for action in env.getGoldActionSequence():
            call = parse_action(action)
            thing, target = call.params.get("object"), call.params.get("target")
            if call.action == "put" and isinstance(thing, str) and isinstance(target, str):
                out.setdefault(thing, set()).add(target)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--game", default="twc")
    args = parser.parse_args(argv)
    if missing():
        return 2
    known = places(args.game, range(100))
    unseen = {t: p for t, p in places(args.game, range(100, 300)).items() if t not in known}
    names, others = sorted(known), sorted(unseen)
    embedder = default_embedder()
    vectors = embedder.embed([*names, *others])
    nearest = []
    votes_right = dict.fromkeys(VOTERS, 0)
    for i, thing in enumerate(others):
        mine = vectors[len(names) + i]
        ranked = sorted(
            ((sum(a * b for a, b in zip(mine, vectors[j], strict=True)), n) for j, n in enumerate(names)), reverse=True
        )
        score, near = ranked[0]
        nearest.append((score, bool(known[near] & unseen[thing])))
        for k in VOTERS:
            votes: dict[str, float] = {}
            for cosine, name in ranked[:k]:
                for place in known[name]:
                    votes[place] = votes.get(place, 0.0) + cosine
            votes_right[k] += max(votes, key=lambda p: votes[p]) in unseen[thing]
    print(f"{len(names)} known things (train 0-99), {len(others)} unseen (train 100-299)")
    print(f"{'threshold':>10}{'matched':>9}{'right':>7}{'wrong':>7}{'wrong %':>9}")
    chosen = None
    for threshold in THRESHOLDS:
        matched = [right for score, right in nearest if score >= threshold]
        wrong = len(matched) - sum(matched)
        share = wrong / len(matched) if matched else 0.0
        if chosen is None and share <= MAX_WRONG:
            chosen = threshold
        print(f"{threshold:>10.2f}{len(matched):>9}{sum(matched):>7}{wrong:>7}{share:>9.0%}")
    print(f"chosen: {chosen} (the lowest with at most {MAX_WRONG:.0%} wrong transfers)")
    print(f"{'voters':>10}{'right':>7}{'right %':>9}")
    for k, right in votes_right.items():
        print(f"{k:>10}{right:>7}{right / len(others):>9.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
