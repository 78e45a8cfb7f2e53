"""Figures over many generated families: per-family cells, their distribution, and the worst families' shapes.

A family's figure for a condition and round is its steps ÷ oracle on unseen instances (mean steps
over mean oracle steps, failed episodes counting their whole budget, as the harness counts them).
Over families this reports the median, the 90th percentile and the mean of the worst tenth; the
success rate and the first-try accuracy (the share of decisions whose first call worked) pool
every episode. Hindsight is compared family by family with the naive baseline and with no memory.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import Field
from rich.console import Console
from rich.table import Table

from bench.procedural.generated.spec import SHAPES, Shape
from cluster.core.types import Frozen
from cluster.demo.harness import CONDITIONS, Condition

TIE = 1e-9
"""Two steps ÷ oracle figures closer than this are a tie."""


class RunConfig(Frozen):
    """What a generated run covers."""

    families: int = Field(default=200, ge=1, le=10_000)
    seed_start: int = Field(default=100, ge=0, description="First family seed; 0-99 are for tuning.")
    train_episodes: int = Field(default=3, ge=0, description="Per family and round.")
    eval_episodes: int = Field(default=3, ge=1, description="Per family and round; always unseen seeds.")
    rounds: int = Field(default=3, ge=1, le=20)
    conditions: tuple[Condition, ...] = Field(default=CONDITIONS, min_length=1)
    seed: int = Field(default=0, ge=0, le=999, description="Instance seeds (as BenchConfig.seed).")


class FamilyCell(Frozen):
    """One family × condition × round on unseen instances."""

    family: str
    condition: Condition
    round: int = Field(ge=1)
    episodes: int = Field(ge=1)
    successes: int = Field(ge=0)
    mean_steps: float = Field(ge=0.0)
    oracle_steps: float = Field(gt=0.0)
    decisions: int = Field(ge=0, description="Decisions reached (a repeated decision counts each time).")
    first_try: int = Field(ge=0, description="Decisions whose first call worked.")

    @property
    def ratio(self) -> float:
        """Steps ÷ oracle."""
        return self.mean_steps / self.oracle_steps


class Spread(Frozen):
    """How a figure is spread over families."""

    mean: float
    p50: float
    p90: float
    worst_decile: float = Field(description="Mean of the worst tenth of families (at least one).")


class ConditionRound(Frozen):
    """One condition and round over every family."""

    condition: Condition
    round: int
    families: int
    episodes: int
    success_rate: float = Field(ge=0.0, le=1.0)
    ratio: Spread = Field(description="Steps ÷ oracle over families.")
    first_try: float | None = Field(description="Share of decisions whose first call worked.")


class Comparison(Frozen):
    """Hindsight against the naive baseline and no memory, family by family, in one round."""

    round: int
    families: int
    beats_naive: float = Field(description="Share of families with fewer steps ÷ oracle than naive.")
    ties_naive: float
    loses_naive: float
    worse_than_none: float = Field(description="Share of families with more steps ÷ oracle than no memory.")


class WorstFamily(Frozen):
    """A family in hindsight's worst tenth on the last round."""

    family: str
    ratios: dict[Condition, float] = Field(description="Steps ÷ oracle per condition, last round.")
    first_try: float | None
    shapes: tuple[Shape, ...]


class ShapeShare(Frozen):
    """How common a shape is among the worst families and among all."""

    shape: Shape
    worst: float = Field(description="Share of the worst tenth that has it.")
    everywhere: float = Field(description="Share of all families that have it.")


class GeneratedResults(Frozen):
    """Everything a generated run measured."""

    config: RunConfig
    seconds: float = Field(ge=0.0)
    seconds_per_family: float = Field(ge=0.0)
    cells: tuple[FamilyCell, ...]
    summary: tuple[ConditionRound, ...]
    comparisons: tuple[Comparison, ...]
    worst: tuple[WorstFamily, ...]
    shapes: tuple[ShapeShare, ...]


def spread(values: Sequence[float]) -> Spread:
    """Mean, median, 90th percentile (linear between ranks) and worst-tenth mean of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return Spread(mean=0.0, p50=0.0, p90=0.0, worst_decile=0.0)

    def pct(q: float) -> float:
        at = q * (len(ordered) - 1)
        low, high = math.floor(at), math.ceil(at)
        return ordered[low] + (ordered[high] - ordered[low]) * (at - low)

    tail = ordered[-max(1, math.ceil(len(ordered) / 10)) :]
    return Spread(mean=sum(ordered) / len(ordered), p50=pct(0.5), p90=pct(0.9), worst_decile=sum(tail) / len(tail))


def summarize(
    config: RunConfig, cells: Sequence[FamilyCell], shapes: Mapping[str, tuple[Shape, ...]], seconds: float
) -> GeneratedResults:
    """Aggregate per-family cells into the run's figures."""
    index = {(c.family, c.condition, c.round): c for c in cells}
    summary = []
    for condition in config.conditions:
        for round_ in range(1, config.rounds + 1):
            picked = [c for c in cells if c.condition == condition and c.round == round_]
            if not picked:
                continue
            decisions = sum(c.decisions for c in picked)
            summary.append(
                ConditionRound(
                    condition=condition,
                    round=round_,
                    families=len(picked),
                    episodes=sum(c.episodes for c in picked),
                    success_rate=sum(c.successes for c in picked) / sum(c.episodes for c in picked),
                    ratio=spread([c.ratio for c in picked]),
                    first_try=sum(c.first_try for c in picked) / decisions if decisions else None,
                )
            )
    comparisons = [_compare(index, shapes, round_) for round_ in range(1, config.rounds + 1)]
    worst, shares = _worst(config, index, shapes)
    return GeneratedResults(
        config=config,
        seconds=seconds,
        seconds_per_family=seconds / config.families,
        cells=tuple(cells),
        summary=tuple(summary),
        comparisons=tuple(c for c in comparisons if c is not None),
        worst=worst,
        shapes=shares,
    )


Index = Mapping[tuple[str, Condition, int], FamilyCell]


def _compare(index: Index, shapes: Mapping[str, tuple[Shape, ...]], round_: int) -> Comparison | None:
    beats = ties = loses = worse = counted = 0
    for family in shapes:
        hs, nv, none = (index.get((family, c, round_)) for c in ("hindsight", "naive", "none"))
        if hs is None or nv is None or none is None:
            continue
        counted += 1
        gap = hs.ratio - nv.ratio
        beats += gap < -TIE
        ties += abs(gap) <= TIE
        loses += gap > TIE
        worse += hs.ratio > none.ratio + TIE
    if not counted:
        return None
    return Comparison(
        round=round_,
        families=counted,
        beats_naive=beats / counted,
        ties_naive=ties / counted,
        loses_naive=loses / counted,
        worse_than_none=worse / counted,
    )


def featured(config: RunConfig) -> Condition:
    """The condition a run's family tables follow: hindsight when it ran, else the first."""
    return "hindsight" if "hindsight" in config.conditions else config.conditions[0]


def _worst(
    config: RunConfig, index: Index, shapes: Mapping[str, tuple[Shape, ...]]
) -> tuple[tuple[WorstFamily, ...], tuple[ShapeShare, ...]]:
    """Hindsight's worst tenth on the last round (or the first condition's, without hindsight)."""
    condition = featured(config)
    last = config.rounds
    scored = [(index[f, condition, last].ratio, f) for f in shapes if (f, condition, last) in index]
    if not scored:
        return (), ()
    scored.sort(key=lambda item: (-item[0], item[1]))
    tail = scored[: max(1, math.ceil(len(scored) / 10))]
    worst = []
    for _, family in tail:
        ratios = {c: index[family, c, last].ratio for c in config.conditions if (family, c, last) in index}
        cell = index[family, condition, last]
        worst.append(
            WorstFamily(
                family=family,
                ratios=ratios,
                first_try=cell.first_try / cell.decisions if cell.decisions else None,
                shapes=shapes[family],
            )
        )
    families = [f for _, f in scored]
    shares = tuple(
        ShapeShare(
            shape=shape,
            worst=sum(shape in shapes[w.family] for w in worst) / len(worst),
            everywhere=sum(shape in shapes[f] for f in families) / len(families),
        )
        for shape in SHAPES
    )
    return tuple(worst), shares


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def print_results(results: GeneratedResults, console: Console | None = None) -> None:
    """Print the distribution, the comparison and the worst families as tables."""
    # Wide enough for the shape lists when the output is not a terminal (a log, a pipe).
    console = console or Console(width=None if Console().is_terminal else 160)
    config = results.config
    table = Table(
        title=f"{config.families} generated families (seeds {config.seed_start}-"
        f"{config.seed_start + config.families - 1}), unseen instances: steps ÷ oracle over families"
    )
    for name in ("condition", "round", "episodes", "success", "mean", "p50", "p90", "worst 10%", "first try"):
        table.add_column(name, justify="left" if name == "condition" else "right")
    for row in results.summary:
        table.add_row(
            row.condition,
            str(row.round),
            str(row.episodes),
            _pct(row.success_rate),
            _num(row.ratio.mean),
            _num(row.ratio.p50),
            _num(row.ratio.p90),
            _num(row.ratio.worst_decile),
            _pct(row.first_try),
            end_section=row.round == config.rounds,
        )
    console.print(table)
    if results.comparisons:
        table = Table(title="Hindsight family by family (steps ÷ oracle)")
        for name in ("round", "families", "beats naive", "ties naive", "loses to naive", "worse than no memory"):
            table.add_column(name, justify="right")
        for c in results.comparisons:
            table.add_row(
                str(c.round),
                str(c.families),
                _pct(c.beats_naive),
                _pct(c.ties_naive),
                _pct(c.loses_naive),
                _pct(c.worse_than_none),
            )
        console.print(table)
    if results.worst:
        table = Table(title=f"Worst tenth of families, round {config.rounds} (by hindsight's steps ÷ oracle)")
        table.add_column("family")
        for condition in config.conditions:
            table.add_column(condition, justify="right")
        table.add_column("first try", justify="right")
        table.add_column("shapes")
        for w in results.worst:
            table.add_row(
                w.family,
                *(_num(w.ratios.get(c)) for c in config.conditions),
                _pct(w.first_try),
                ", ".join(w.shapes),
            )
        console.print(table)
        table = Table(title="Shapes: share of the worst tenth vs share of all families")
        for name in ("shape", "worst tenth", "all"):
            table.add_column(name, justify="left" if name == "shape" else "right")
        for s in sorted(results.shapes, key=lambda s: s.everywhere - s.worst):
            table.add_row(s.shape, _pct(s.worst), _pct(s.everywhere))
        console.print(table)
    console.print(
        f"{results.seconds:.0f} s in all, {results.seconds_per_family:.2f} s per family "
        f"({config.train_episodes} train + {config.eval_episodes} eval episodes per family, condition and round)"
    )


def write_json(results: GeneratedResults, path: Path) -> None:
    """Write the results as indented JSON (read back with ``GeneratedResults.model_validate_json``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(results.model_dump_json(indent=2) + "\n", encoding="utf-8")
