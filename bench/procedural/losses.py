"""Where hindsight's steps over the oracle go, decision by decision, on generated families.

Runs generated families as :mod:`bench.procedural.generated_run` does (hindsight only: the same
rounds, instances and service defaults) and reads every decision of one round's evaluation
episodes (default: the last). A *visit* is one decision reached in an episode, from its first
call to the call that worked (or the episode's end). It is charged the steps it took beyond the
oracle's cheapest right call, and given one cause, read from its first call:

* ``right``: the oracle's tool, and it worked (nothing over the oracle);
* ``costlier advice``: advice followed, and it worked, but a cheaper tool works here (a costly
  tool that works everywhere, advised where a cheap one works too);
* ``advice failed, right tool avoided``: the advice failed here, and the rule followed avoids
  the tool that works here (as failing, or in an "also avoid" caveat);
* ``advice failed``: the advice failed here, and the rule followed does not name the right tool;
* ``explored``: no advice applied, and the agent tried what it had not tried;
* ``right call failed``: the oracle's tool was called first and failed (noise).

Usage: ``python -m bench.procedural.losses [--families 100] [--seed-start 0] [--round 3]
[--train 3] [--eval 3] [--out losses.json]`` (seeds 0-99 are the tuning seeds).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, get_args

from pydantic import Field

from actors.engine.templates import also_avoided
from bench.procedural.generated import GeneratedEpisode
from bench.procedural.generated.report import RunConfig
from bench.procedural.generated_run import add_run_arguments, bench_config, run_config, run_generated
from bench.procedural.run_local import local_services, run_in_data_dir
from cluster.core.types import Frozen
from cluster.demo.agents import Decision, EpisodeResult, HindsightPolicy, Policy
from cluster.demo.env_base import Call, Episode, StepResult, StepView
from cluster.demo.harness import seed_for
from cluster.demo.recording import ToolClient

Cause = Literal[
    "right",
    "costlier advice",
    "advice failed, right tool avoided",
    "advice failed",
    "explored",
    "right call failed",
]
CAUSES: tuple[Cause, ...] = get_args(Cause)


class Step(Frozen):
    """One call at a decision: what was called, why, what the oracle would call, what it cost."""

    call: Call
    source: str
    avoided: tuple[str, ...] = Field(default=(), description="Tools the followed rule avoids or says also fail.")
    oracle: str
    cheapest: int = Field(description="Steps the oracle's call costs here.")
    cost: int = Field(description="Steps this call took.")
    worked: bool


class Visit(Frozen):
    """One decision reached in one episode."""

    family: str
    seed: int
    stage: str
    steps: tuple[Step, ...]

    @property
    def extra(self) -> int:
        """Steps over the oracle's call (never below 0: the oracle's call may fail by noise too)."""
        return max(0, sum(s.cost for s in self.steps) - self.steps[0].cheapest)

    @property
    def cause(self) -> Cause:
        first = self.steps[0]
        if first.call.action == first.oracle:
            return "right" if first.worked else "right call failed"
        if first.source != "template":
            return "explored" if not first.worked or self.extra else "right"
        if first.worked:
            return "costlier advice"
        return "advice failed, right tool avoided" if first.oracle in first.avoided else "advice failed"


class Tracer:
    """A policy that records every decision of chosen episodes and leaves the choices to ``inner``."""

    def __init__(self, inner: HindsightPolicy, seeds: frozenset[int]) -> None:
        self.inner = inner
        self.seeds = seeds
        self.visits: list[Visit] = []
        self._open: list[Step] = []
        self._where: tuple[str, int, str] | None = None
        self._pending: tuple[Step, int] | None = None
        self._episode: GeneratedEpisode | None = None

    async def begin(self, client: ToolClient, episode: Episode) -> None:
        self._close()
        self._episode = episode if isinstance(episode, GeneratedEpisode) and episode.seed in self.seeds else None
        await self.inner.begin(client, episode)

    async def choose(self, client: ToolClient, episode: Episode, view: StepView, tried: Sequence[Call]) -> Decision:
        traced = self._episode
        oracle = traced.oracle_call() if traced is not None and view.is_decision else None
        key = traced.stage if traced is not None else None
        decision = await self.inner.choose(client, episode, view, tried)
        if traced is not None and oracle is not None and key is not None:
            where = (traced.family, traced.seed, key)
            if where != self._where:
                self._close()
                self._where = where
            step = Step(
                call=decision.call,
                source=decision.source,
                avoided=self._avoided(decision),
                oracle=oracle.action,
                cheapest=traced.cheapest_cost(key),
                cost=0,
                worked=False,
            )
            self._pending = (step, traced.steps)
        return decision

    def observe(self, view: StepView, decision: Decision, result: StepResult) -> None:
        self.inner.observe(view, decision, result)
        if self._pending is not None and self._episode is not None:
            step, before = self._pending
            worked = result.status == "success"
            self._open.append(step.model_copy(update={"cost": self._episode.steps - before, "worked": worked}))
            self._pending = None
            if worked:
                self._close()

    async def finish(self, client: ToolClient, episode: Episode, result: EpisodeResult) -> EpisodeResult:
        self._close()
        return await self.inner.finish(client, episode, result)

    def served_for(self, role: str) -> list[str]:
        return self.inner.served_for(role)

    def _avoided(self, decision: Decision) -> tuple[str, ...]:
        served = self.inner.library.get(decision.template_id or "")
        if served is None or decision.source != "template":
            return ()
        template = served.template
        named = [template.avoid.tool] if template.avoid is not None else []
        named += [tool for tool in map(also_avoided, template.caveats) if tool is not None]
        return tuple(named)

    def _close(self) -> None:
        if self._open and self._where is not None:
            family, seed, stage = self._where
            self.visits.append(Visit(family=family, seed=seed, stage=stage, steps=tuple(self._open)))
        self._open, self._where = [], None


class CauseRow(Frozen):
    cause: Cause
    visits: int
    extra_steps: int


class Losses(Frozen):
    """The breakdown of one round: per cause, and the families that lose most."""

    families: int
    round: int
    visits: int
    extra_steps: int
    causes: tuple[CauseRow, ...]
    worst: tuple[tuple[str, int], ...] = Field(description="Families by steps over the oracle, most first (top ten).")


def breakdown(visits: Sequence[Visit], families: int, round_: int) -> Losses:
    """Sum the visits per cause and per family."""
    per_family: dict[str, int] = {}
    for v in visits:
        per_family[v.family] = per_family.get(v.family, 0) + v.extra
    rows = tuple(
        CauseRow(
            cause=c,
            visits=sum(v.cause == c for v in visits),
            extra_steps=sum(v.extra for v in visits if v.cause == c),
        )
        for c in CAUSES
    )
    worst = sorted(((f, n) for f, n in per_family.items() if n), key=lambda x: (-x[1], x[0]))[:10]
    return Losses(
        families=families,
        round=round_,
        visits=len(visits),
        extra_steps=sum(v.extra for v in visits),
        causes=rows,
        worst=tuple(worst),
    )


async def trace(config: RunConfig, round_: int, data_dir: Path) -> list[Visit]:
    """Run ``config`` (hindsight only) and return the decisions of round ``round_``'s evaluation episodes."""
    bench = bench_config(config)
    seeds = frozenset(seed_for(bench, round_, "eval", i) for i in range(config.eval_episodes))
    tracers: list[Tracer] = []

    def wrap(policy: Policy) -> Policy:
        if not isinstance(policy, HindsightPolicy):
            raise TypeError("only hindsight's decisions are traced")
        tracers.append(Tracer(policy, seeds))
        return tracers[-1]

    with local_services(config.conditions, data_dir) as (clients, drain):
        await run_generated(config, clients, drain, wrap=wrap)
    return [v for t in tracers for v in t.visits]


def print_losses(losses: Losses) -> None:
    print(
        f"{losses.families} families, round {losses.round}: {losses.visits} decision visits, "
        f"{losses.extra_steps} steps over the oracle"
    )
    print(f"{'cause':<36}{'visits':>8}{'extra steps':>13}")
    for row in losses.causes:
        print(f"{row.cause:<36}{row.visits:>8}{row.extra_steps:>13}")
    print("most steps over the oracle: " + ", ".join(f"{f} {n}" for f, n in losses.worst))


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, families=100, seed_start=0)
    parser.add_argument("--round", type=int, default=None, help="the round read (default: the last)")
    parser.add_argument("--out", type=Path, default=Path("losses.json"))
    args = parser.parse_args(argv)
    round_ = args.rounds if args.round is None else args.round
    if not 1 <= round_ <= args.rounds:
        print(f"--round must be between 1 and {args.rounds}, not {round_}", file=sys.stderr)
        return 2
    config = run_config(args, ("hindsight",))

    async def go(data_dir: Path) -> list[Visit]:
        return await trace(config, round_, data_dir)

    losses = breakdown(run_in_data_dir(go, args.data_dir, prefix="hindsight-losses-"), args.families, round_)
    print_losses(losses)
    args.out.write_text(losses.model_dump_json(indent=2) + "\n", encoding="utf-8")
    print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
