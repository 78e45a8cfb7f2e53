"""What the generated families' episodes allow: an ideal learner's steps ÷ oracle, without a service.

A learner only knows what earlier episodes showed it. This measures how far from the oracle even
an ideal one stays on the generated benchmark's own instances (the same families, rounds and
instance seeds as :mod:`bench.procedural.generated_run`), so the benchmark's targets can be read
against what its data make possible. The ideal learner is optimistic on purpose; it knows:

* each decision's rule kind, the features it reads, the generator's priors over its values and
  cuts, which tools are decoys, and which tool (if any) works everywhere and at what cost;
* the right tool of every decision visit of every episode played in an earlier round (evaluation
  and training: what a learner may use in round *r* is what the rounds before it recorded), and
  of the earlier items of the episode it is in. It never needs to find out which feature matters,
  nor pays for a call made to learn.

At a visit it computes the posterior over which tool works (Bayes over the generator's draws:
categorical mappings that give every action a value, cuts uniform in their windows, subsets of
their drawn size, action labels unknown until seen) and calls the likeliest untried tool, or the
tool that works everywhere when that is cheaper in expectation. Noise costs it what it costs the
oracle. Its expected steps over the oracle's are a floor (to the grid's resolution) for any
learner fed these episodes.

``--own-calls`` takes the floor's one gift away: a visit shows which tool works only where the
learner's own calls showed it (not where it called the tool that works everywhere at once). That
learner still knows every shape and never explores on purpose, so it is a plain Bayesian agent,
not a floor: it tells how much of the gap is the price of finding out.

Usage: ``python -m bench.procedural.bound [--families 200] [--seed-start 100] [--train 3]
[--eval 3] [--rounds 3] [--seed 0] [--own-calls] [--against generated.json]`` (seeds 0-99 are
the tuning seeds; no service is started; ``--against`` takes a generated run's families and sizes
from its JSON and compares each condition's last round with the ideal learner's, family by
family).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import Field, JsonValue
from rich.console import Console
from rich.table import Table

from bench.procedural.generated import GeneratedEpisode, generated_class
from bench.procedural.generated.report import TIE, GeneratedResults, RunConfig, Spread, featured, spread
from bench.procedural.generated.spec import Feature, Rule, Stage, Tool
from bench.procedural.generated.values import quantile
from bench.procedural.generated_run import add_run_arguments, bench_config, run_config
from cluster.core.types import Frozen
from cluster.demo.harness import Phase, seed_for

GRID = 400
"""Points a cut's window is split into when its posterior is computed."""
Seen = list[tuple[Mapping[str, JsonValue], str]]
"""A stage's visits so far: the features' values and the tool that worked."""


def windows(rule: Rule) -> list[tuple[float, float]]:
    """Where the generator draws each cut of a number rule, as shares of the feature's draws."""
    if rule.kind == "threshold":
        return [(0.25, 0.75)]
    if rule.kind == "conjunction":
        return [(0.2, 0.4)]
    bands = len(rule.actions)
    return [(i / bands - 0.04, i / bands + 0.04) for i in range(1, bands)]


@functools.lru_cache(maxsize=4096)
def _cut_grid(feature: Feature, low: float, high: float) -> tuple[float, ...]:
    return tuple(quantile(feature, low + (high - low) * (i + 0.5) / GRID) for i in range(GRID))


def below(feature: Feature, window: tuple[float, float], value: float, under: list[float], over: list[float]) -> float:
    """P(cut < value) for a cut drawn in ``window``, given cuts known below ``under`` and at or above ``over``."""
    top, bottom = min(under, default=math.inf), max(over, default=-math.inf)
    grid = [c for c in _cut_grid(feature, *window) if bottom <= c < top]
    if not grid:  # rounding left no grid point between the evidence: it decides alone
        return 1.0 if value >= top else 0.0 if value <= bottom else 0.5
    return sum(c < value for c in grid) / len(grid)


def _slots_by_number(rule: Rule, feature: Feature, seen: list[tuple[float, int]], value: float) -> list[float]:
    """P(slot) for a number rule: slot k is the number of cuts below the value."""
    chances = []
    for i, window in enumerate(windows(rule)):
        under = [x for x, slot in seen if slot > i]  # cut i is below x
        over = [x for x, slot in seen if slot <= i]
        chances.append(below(feature, window, value, under, over))
    slots = [1.0]
    for p in chances:  # the cuts are independent: the count below is a sum of coin flips
        slots = [a * (1 - p) + b * p for a, b in zip([*slots, 0.0], [0.0, *slots], strict=True)]
    return slots


@functools.lru_cache(maxsize=4096)
def _unseen_value(actions: int, counts: tuple[int, ...], unseen: int) -> tuple[float, ...]:
    """P(action) for one unseen value of a categorical rule, given the seen values' action counts.

    A mapping is every action once plus the rest drawn uniformly, shuffled: its chance is
    proportional to the product of how many values each action has.
    """
    weights = [0.0] * actions
    for rest in itertools.product(range(actions), repeat=unseen):
        total = Counter(dict(enumerate(counts)))
        total.update(rest)
        if any(total[a] == 0 for a in range(actions)):
            continue
        weights[rest[0]] += math.prod(total[a] for a in range(actions))
    norm = sum(weights)
    return tuple(w / norm for w in weights)


def posterior(rule: Rule, seen: Seen, values: Mapping[str, JsonValue]) -> dict[str, float]:
    """P(tool works) over the rule's actions, given what was seen at its stage."""
    if rule.kind == "categorical":
        return _categorical(rule, seen, values)
    # Slots are the rule's outcomes in its own order; which tool a slot is is learned when seen.
    slots = _slot_chances(rule, seen, values)
    labels = {_slot(rule, v): tool for v, tool in seen}
    free = [a for a in rule.actions if a not in labels.values()]
    out = dict.fromkeys(rule.actions, 0.0)
    for slot, p in enumerate(slots):
        if slot in labels:
            out[labels[slot]] += p
        else:
            for tool in free:
                out[tool] += p / len(free)
    return out


def _slot(rule: Rule, values: Mapping[str, JsonValue]) -> int:
    return rule.actions.index(rule.target(values))


def _slot_chances(rule: Rule, seen: Seen, values: Mapping[str, JsonValue]) -> list[float]:
    first = rule.features[0]
    if rule.kind in ("threshold", "bands"):
        points = [(float(v[first.name]), _slot(rule, v)) for v, _ in seen]  # type: ignore[arg-type]
        return _slots_by_number(rule, first, points, float(values[first.name]))  # type: ignore[arg-type]
    if rule.kind == "boolean":
        return [1.0, 0.0] if values[first.name] is True else [0.0, 1.0]
    if values[first.name] is not True:
        return [0.0, 1.0]
    second = rule.features[1]
    both = [(v[second.name], _slot(rule, v)) for v, _ in seen if v[first.name] is True]
    value = values[second.name]
    if second.kind == "number":
        # Slot 0 lies above the cut: counted as cuts below the value, slot 0 is 1 and slot 1 is 0.
        points = [(float(x), 1 - slot) for x, slot in both]  # type: ignore[arg-type]
        above = _slots_by_number(rule, second, points, float(value))[1]  # type: ignore[arg-type]
        return [above, 1 - above]
    known = dict(both)
    if value in known:
        return [1.0, 0.0] if known[value] == 0 else [0.0, 1.0]
    size = math.ceil(0.7 * len(second.values))
    inside = sum(slot == 0 for slot in known.values())
    p_in = (size - inside) / (len(second.values) - len(known))
    return [p_in, 1 - p_in]


def _categorical(rule: Rule, seen: Seen, values: Mapping[str, JsonValue]) -> dict[str, float]:
    feature = rule.features[0]
    known = {str(v[feature.name]): tool for v, tool in seen}
    value = str(values[feature.name])
    if value in known:
        return {a: float(a == known[value]) for a in rule.actions}
    # Seen tools in a fixed order, then the unseen ones, which are alike.
    order = sorted(set(known.values())) + [a for a in rule.actions if a not in known.values()]
    counts = tuple(sum(t == a for t in known.values()) for a in order)
    chances = _unseen_value(len(order), counts, len(feature.values) - len(known))
    return dict(zip(order, chances, strict=True))


def tries(stage: Stage, chances: Mapping[str, float]) -> tuple[list[str], int]:
    """The cheap tools likeliest first, and how many to call before the tool that works everywhere.

    The count is the one that makes the expected steps least (all of them when no tool works
    everywhere). Tools equally likely keep the stage's order; :func:`steps_to` averages over theirs.
    """
    fallback = _fallback(stage)
    cheap = sorted((t for t in chances if fallback is None or t != fallback.name), key=lambda t: -chances[t])
    if fallback is None:
        return cheap, len(cheap)
    best, count = math.inf, 0
    missed, spent = 1.0, 0.0
    for tried in range(len(cheap) + 1):
        if spent + missed * fallback.cost < best - 1e-12:
            best, count = spent + missed * fallback.cost, tried
        if tried < len(cheap):
            spent += missed
            missed -= chances[cheap[tried]]
    return cheap, count


def _fallback(stage: Stage) -> Tool | None:
    return next((t for t in stage.tools if t.always_works), None)


def steps_to(
    stage: Stage, chances: Mapping[str, float], plan: tuple[list[str], int], target: str
) -> tuple[float, float]:
    """Steps to the call that works when the rule picks ``target``, and whether the first call works.

    ``plan`` is :func:`tries`' answer for ``chances``. Both figures are averaged over the orders
    of tools the learner finds equally likely: it cannot tell them apart, so it is charged their
    average, not the luckiest order.
    """
    order, count = plan
    fallback = _fallback(stage)
    groups = [list(g) for _, g in itertools.groupby(order, key=lambda t: chances[t])]
    steps = first = 0.0
    orders = list(itertools.product(*(itertools.permutations(g) for g in groups)))
    for parts in orders:
        line = [t for part in parts for t in part][:count]
        if target in line:
            steps += line.index(target) + 1
        else:
            steps += count + (fallback.cost if fallback is not None else 0)
        first += (line[0] == target) if line else 1.0
    return steps / len(orders), first / len(orders)


class Played(Frozen):
    """One episode played by the ideal learner."""

    steps: float = Field(description="Expected steps.")
    first: float = Field(description="Expected decisions whose first call works.")
    decisions: int
    learned: list[tuple[str, dict[str, JsonValue], str]] = Field(
        description="(stage, feature values, the tool that works) for every visit that showed it."
    )


def play(episode: GeneratedEpisode, seen: Mapping[str, Seen], *, own_calls: bool = False) -> Played:
    """The ideal learner on ``episode``, knowing ``seen`` and what the episode shows it as it goes.

    With ``own_calls`` a visit shows which tool works only if the learner called it (the first of
    equally likely tools first), or called every other before the one that works everywhere;
    otherwise every visit shows it.
    """
    steps = first = 0.0
    decisions = 0
    local = {key: list(s) for key, s in seen.items()}
    learned = []
    for key in episode.order:
        stage = episode.stages[key]
        if stage.rule is None:
            steps += stage.tools[0].cost
            continue
        values = episode.values[key]
        target = stage.rule.target(values)
        chances = posterior(stage.rule, local.get(stage.key, []), values)
        order, count = plan = tries(stage, chances)
        cost, hit = steps_to(stage, chances, plan, target)
        steps += cost + episode.spec.noise
        first += hit * (1 - episode.spec.noise)
        decisions += 1
        if not own_calls or target in order[:count] or (count == len(order) and target not in order):
            local.setdefault(stage.key, []).append((values, target))
            learned.append((stage.key, dict(values), target))
    return Played(steps=steps, first=first, decisions=decisions, learned=learned)


class Row(Frozen):
    """One round over every family: the ideal learner's figures."""

    round: int
    ratio: Spread = Field(description="Expected steps ÷ oracle over families.")
    first_try: float = Field(description="Expected share of decisions whose first call works.")
    at_oracle: float = Field(description="Share of families where it needs no more than the oracle.")


def measure(config: RunConfig, *, own_calls: bool = False) -> tuple[list[Row], dict[str, float]]:
    """The ideal learner's figures per round, and its last round's steps ÷ oracle per family."""
    bench = bench_config(config)
    ratios: dict[int, list[float]] = {r: [] for r in range(1, config.rounds + 1)}
    hits: dict[int, float] = dict.fromkeys(ratios, 0.0)
    decisions: dict[int, int] = dict.fromkeys(ratios, 0)
    phases: tuple[tuple[Phase, int], ...] = (("eval", config.eval_episodes), ("train", config.train_episodes))
    for family in bench.families:
        cls = generated_class(family)
        seen: dict[str, Seen] = {}
        for round_ in ratios:
            # Episodes of one round learn from the rounds before it, not from each other.
            start = {key: list(visits) for key, visits in seen.items()}
            steps = oracle = 0.0
            for phase, count in phases:
                for index in range(count):
                    episode = cls(seed_for(bench, round_, phase, index))
                    played = play(episode, start, own_calls=own_calls)
                    for key, values, tool in played.learned:
                        seen.setdefault(key, []).append((values, tool))
                    if phase == "eval":
                        steps, oracle = steps + played.steps, oracle + episode.oracle_steps()
                        hits[round_] += played.first
                        decisions[round_] += played.decisions
            ratios[round_].append(steps / oracle)
    rows = [
        Row(
            round=r,
            ratio=spread(got),
            first_try=hits[r] / decisions[r] if decisions[r] else 0.0,
            at_oracle=sum(x <= 1 + TIE for x in got) / len(got),
        )
        for r, got in ratios.items()
    ]
    return rows, dict(zip(bench.families, ratios[config.rounds], strict=True))


def print_gaps(results: GeneratedResults, ideal: Mapping[str, float], console: Console, worst: int = 10) -> None:
    """Each condition's last round against the ideal learner's, family by family, and the widest gaps."""
    last = results.config.rounds
    cells = {(c.family, c.condition): c.ratio for c in results.cells if c.round == last and c.family in ideal}
    table = Table(title=f"Round {last} against the ideal learner, family by family (steps ÷ oracle)")
    for name in ("condition", "families", "mean gap", "within 0.03", "within 0.10"):
        table.add_column(name, justify="left" if name == "condition" else "right")
    for condition in results.config.conditions:
        gaps = [cells[f, condition] - ideal[f] for f in ideal if (f, condition) in cells]
        if gaps:
            table.add_row(
                condition,
                str(len(gaps)),
                f"{sum(gaps) / len(gaps):.3f}",
                f"{sum(g <= 0.03 for g in gaps) / len(gaps):.0%}",
                f"{sum(g <= 0.10 for g in gaps) / len(gaps):.0%}",
            )
    console.print(table)
    condition = featured(results.config)
    shapes = {f: generated_class(f).spec.shapes for f in ideal}
    widest = sorted((f for f in ideal if (f, condition) in cells), key=lambda f: ideal[f] - cells[f, condition])
    table = Table(title=f"Widest gaps: {condition} against the ideal learner")
    for name in ("family", condition, "ideal", "shapes"):
        table.add_column(name, justify="left" if name in ("family", "shapes") else "right")
    for family in widest[:worst]:
        table.add_row(family, f"{cells[family, condition]:.2f}", f"{ideal[family]:.2f}", ", ".join(shapes[family]))
    console.print(table)


def print_rows(config: RunConfig, rows: Sequence[Row], console: Console) -> None:
    """The figures as a table."""
    table = Table(
        title=f"Ideal learner on {config.families} generated families (seeds {config.seed_start}-"
        f"{config.seed_start + config.families - 1}), {config.train_episodes} train + "
        f"{config.eval_episodes} eval episodes a round: steps ÷ oracle over families"
    )
    for name in ("round", "mean", "p50", "p90", "worst 10%", "first try", "at the oracle"):
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(
            str(row.round),
            f"{row.ratio.mean:.3f}",
            f"{row.ratio.p50:.3f}",
            f"{row.ratio.p90:.3f}",
            f"{row.ratio.worst_decile:.3f}",
            f"{row.first_try:.1%}",
            f"{row.at_oracle:.0%}",
        )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, families=200, seed_start=100)
    parser.add_argument(
        "--against", type=Path, default=None, help="a generated run's JSON (generated_run --out) to compare with"
    )
    parser.add_argument(
        "--own-calls",
        action="store_true",
        help="learn which tool works only from the learner's own calls (not a floor then: a plain Bayesian agent)",
    )
    args = parser.parse_args(argv)
    if args.against is not None:
        results = GeneratedResults.model_validate_json(args.against.read_text(encoding="utf-8"))
        config = results.config  # the run's own families, sizes and instance seeds
    else:
        config = run_config(args, ("hindsight",))
    console = Console(width=None if Console().is_terminal else 140)
    rows, ideal = measure(config, own_calls=args.own_calls)
    print_rows(config, rows, console)
    if args.against is not None:
        print_gaps(results, ideal, console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
