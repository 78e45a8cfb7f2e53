"""The four-condition comparison: no memory, raw-trajectory replay, a naive rule learner and
hindsight, over rounds.

Round structure (the article's three-round story), identical for every condition and on the same
seeds:

1. each round first *evaluates* on instances no condition has seen before (fresh seeds per
   round), with the memory as it stood at the end of the previous round — so round 1 runs
   without experience, round 2 with the templates learned from round 1, round 3 with the
   supplementary edge-case templates and the confidence moved by round 2's outcome reports;
2. then *trains* on further fresh instances (more evidence for the memory);
3. then waits until hindsight has analysed everything finalized (the caller's
   ``wait_for_analysis``) and commits the replay memory and the naive rules, so every memory
   learns at round boundaries.

Hindsight's analysis runs in the background, so templates learned from episodes early in a round
may already be served later in the same round; the replay memory and the naive rules never update
mid-round.

Generalization: the families are split into two fixed groups (:data:`FAMILY_GROUPS`): the six
the service and agents were developed on (``tuning``) and the five written for the transfer issue
(``held_out``). Every choice the harness makes for an agent — ``top_k`` 8 and the service's own
confidence threshold for the hindsight agent, its follow rules (most specific applicable template
first), the naive baseline's definition — was made looking at the tuning group only;
``run_local --tune`` re-makes the ``top_k`` / ``min_confidence`` choice on the tuning group alone.
:class:`GeneralizationReport` shows both groups side by side; the held-out figures are the ones
nothing was tuned to.

Every condition gets its own client from the factory: give each a different owner (token) so
that hindsight learns only from the hindsight agent's own trajectories — or a service of its own
(separate data directories), which also sidesteps template-id collisions between owners.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Literal, Protocol

from pydantic import Field

from cluster.core.ports import Embedder
from cluster.core.types import Frozen
from cluster.demo.agents import EpisodeResult, ExplorePolicy, HindsightPolicy, Policy, ReplayPolicy, run_episode
from cluster.demo.env_base import Episode
from cluster.demo.envs import FAMILIES, NEW_FAMILIES, OLD_FAMILIES, EpisodeMaker, make_episode
from cluster.demo.naive import NaivePolicy, NaiveServer
from cluster.demo.recording import ToolClient
from cluster.demo.replay import ReplayMemory
from cluster.services import Services

logger = logging.getLogger(__name__)

Condition = Literal["none", "replay", "naive", "hindsight"]
Phase = Literal["train", "eval"]
CONDITIONS: tuple[Condition, ...] = ("none", "replay", "naive", "hindsight")
ALL = "all"
Group = Literal["tuning", "held_out"]
FAMILY_GROUPS: dict[Group, tuple[str, ...]] = {"tuning": OLD_FAMILIES, "held_out": NEW_FAMILIES}
"""Fixed split for the generalization report: agent choices are made on ``tuning`` only."""

ClientFactory = Callable[[Condition], AbstractAsyncContextManager[ToolClient]]
"""Makes the MCP client a condition talks through, e.g. ``lambda c: Client(url_or_server)``."""
WaitForAnalysis = Callable[[], Awaitable[None]]
"""Returns once the service has analysed every finalized trajectory (queue drained)."""


class EpisodeRunner(Protocol):
    """Runs one episode with a condition's client and policy (default :func:`run_episode`, which
    records through hindsight's tools; a runner may reach hindsight another way)."""

    async def __call__(
        self, client: ToolClient, episode: Episode, policy: Policy, *, agent_id: str
    ) -> EpisodeResult: ...


PolicyMaker = Callable[["Condition", "BenchConfig", Callable[[], Embedder]], Policy]
"""Makes a condition's agent (default :func:`make_policy`)."""


class BenchConfig(Frozen):
    """What to run."""

    families: tuple[str, ...] = Field(
        default=tuple(FAMILIES),
        min_length=1,
        description="Families the run's episode maker knows (default: the eleven hand-written).",
    )
    conditions: tuple[Condition, ...] = Field(default=CONDITIONS, min_length=1)
    rounds: int = Field(default=3, ge=1, le=20)
    train_episodes: int = Field(default=10, ge=0, description="Per family and round.")
    eval_episodes: int = Field(default=10, ge=1, description="Per family and round; always unseen seeds.")
    seed: int = Field(default=0, ge=0, le=999)
    top_k: int | None = Field(
        default=None,
        ge=1,
        le=8,
        description="query_experience top_k; None: the service default (experience_top_k, 5).",
    )
    min_confidence: float | None = Field(default=None, ge=0.0, le=1.0, description="None: service threshold.")
    choice_note: str = Field(
        default="the service's defaults (top_k 5, threshold 0.7), set before the held-out families existed",
        max_length=300,
        description="How top_k / min_confidence were chosen (recorded in the generalization report).",
    )

    def choices(self) -> AgentChoices:
        """The hindsight agent's knobs as chosen, for the report."""
        return AgentChoices(top_k=self.top_k, min_confidence=self.min_confidence, how=self.choice_note)


class CellResult(Frozen):
    """One condition × round × phase × family (``family == "all"`` aggregates the families)."""

    condition: Condition
    round: int = Field(ge=1)
    phase: Phase
    family: str
    episodes: int = Field(ge=0)
    successes: int = Field(ge=0)
    success_rate: float = Field(ge=0.0, le=1.0)
    mean_steps: float = Field(ge=0.0, description="Steps per episode; a failed episode counts its whole budget.")
    oracle_steps: float = Field(default=0.0, ge=0.0, description="Mean fewest steps an agent knowing the rules needs.")
    oracle_ratio: float | None = Field(default=None, description="mean_steps / oracle_steps (1.0 = optimal).")
    latency_ms: float = Field(default=0.0, ge=0.0, description="Mean simulated latency per episode.")
    templates_served: float = Field(ge=0.0, description="Mean distinct templates served per episode.")
    templates_applied: float = Field(ge=0.0, description="Mean distinct templates followed per episode.")
    supplementary_served: float = Field(default=0.0, ge=0.0, description="Mean edge-case templates served.")
    applied_confidence: float | None = Field(default=None, description="Mean confidence of followed templates.")


class LearnedTemplate(Frozen):
    """A template the hindsight agent was served, in readable form (latest version seen)."""

    template_id: str
    role: str
    task_type: str | None
    confidence: float
    supplementary: bool = Field(description="True for an edge-case template linked to a parent.")
    text: str


class TargetCheck(Frozen):
    """The issue's targets on the last round's unseen instances."""

    round: int
    hindsight_success: float | None
    none_steps: float | None
    hindsight_steps: float | None
    replay_success: float | None
    replay_steps: float | None
    naive_success: float | None = None
    naive_steps: float | None = None
    step_reduction: float | None = Field(description="1 - hindsight steps / no-memory steps.")
    success_ok: bool = Field(description="Hindsight success ≥ 95%.")
    steps_ok: bool = Field(description="At least 40% fewer steps than no memory.")
    beats_replay: bool = Field(description="Higher-or-equal success and fewer steps than replay.")
    beats_naive: bool = Field(default=False, description="Higher-or-equal success and fewer steps than naive.")


class AgentChoices(Frozen):
    """The knobs the harness sets for the hindsight agent, and where they were chosen."""

    top_k: int | None
    min_confidence: float | None
    chosen_on: Group = Field(default="tuning", description="The only group looked at when choosing.")
    how: str = Field(default="", description="How the choice was made.")


class GroupCell(Frozen):
    """One condition on one family group, last round, unseen instances (episode-weighted)."""

    group: Group
    families: tuple[str, ...]
    condition: Condition
    episodes: int = Field(ge=0)
    success_rate: float = Field(ge=0.0, le=1.0)
    mean_steps: float = Field(ge=0.0)
    oracle_steps: float = Field(ge=0.0)
    oracle_ratio: float | None
    templates_served: float = Field(ge=0.0)


class GeneralizationReport(Frozen):
    """Tuning group vs held-out group: the held-out figures are the ones nothing was tuned to."""

    round: int
    choices: AgentChoices
    groups: dict[Group, tuple[str, ...]]
    cells: tuple[GroupCell, ...]


class BenchResults(Frozen):
    """Everything a run measured."""

    config: BenchConfig
    cells: tuple[CellResult, ...]
    templates: tuple[LearnedTemplate, ...]
    targets: TargetCheck
    generalization: GeneralizationReport | None = None

    def cell(self, condition: Condition, round_: int, family: str = ALL, phase: Phase = "eval") -> CellResult | None:
        """The cell for these keys, if measured."""
        return next(
            (c for c in self.cells if (c.condition, c.round, c.family, c.phase) == (condition, round_, family, phase)),
            None,
        )


def seed_for(config: BenchConfig, round_: int, phase: Phase, index: int) -> int:
    """Instance seed; disjoint across rounds and phases, equal across conditions."""
    return config.seed * 1_000_000 + round_ * 10_000 + (5_000 if phase == "eval" else 0) + index


def summarize(
    condition: Condition, round_: int, phase: Phase, family: str, results: Sequence[EpisodeResult]
) -> CellResult:
    """Aggregate episodes into one cell."""
    n = len(results)
    wins = sum(r.succeeded for r in results)
    confidences = [c for r in results for c in r.applied_confidences]
    steps = sum(r.steps for r in results) / n if n else 0.0
    oracle = sum(r.oracle_steps for r in results) / n if n else 0.0
    return CellResult(
        condition=condition,
        round=round_,
        phase=phase,
        family=family,
        episodes=n,
        successes=wins,
        success_rate=wins / n if n else 0.0,
        mean_steps=steps,
        oracle_steps=oracle,
        oracle_ratio=steps / oracle if oracle else None,
        latency_ms=sum(r.latency_ms for r in results) / n if n else 0.0,
        templates_served=sum(len(r.served_template_ids) for r in results) / n if n else 0.0,
        templates_applied=sum(len(r.applied_template_ids) for r in results) / n if n else 0.0,
        supplementary_served=sum(r.served_supplementary for r in results) / n if n else 0.0,
        applied_confidence=sum(confidences) / len(confidences) if confidences else None,
    )


def check_targets(cells: Sequence[CellResult], round_: int) -> TargetCheck:
    """Compare the conditions on the given round's evaluation."""
    by = {c.condition: c for c in cells if c.round == round_ and c.family == ALL and c.phase == "eval"}
    hs, none, rp, nv = by.get("hindsight"), by.get("none"), by.get("replay"), by.get("naive")
    reduction = 1 - hs.mean_steps / none.mean_steps if hs and none and none.mean_steps else None
    return TargetCheck(
        round=round_,
        hindsight_success=hs.success_rate if hs else None,
        none_steps=none.mean_steps if none else None,
        hindsight_steps=hs.mean_steps if hs else None,
        replay_success=rp.success_rate if rp else None,
        replay_steps=rp.mean_steps if rp else None,
        naive_success=nv.success_rate if nv else None,
        naive_steps=nv.mean_steps if nv else None,
        step_reduction=reduction,
        success_ok=bool(hs and hs.success_rate >= 0.95),
        steps_ok=reduction is not None and reduction >= 0.40,
        beats_replay=bool(hs and rp and hs.success_rate >= rp.success_rate and hs.mean_steps < rp.mean_steps),
        beats_naive=bool(hs and nv and hs.success_rate >= nv.success_rate and hs.mean_steps < nv.mean_steps),
    )


def group_cell(group: Group, condition: Condition, cells: Sequence[CellResult]) -> GroupCell:
    """Episode-weighted aggregate of per-family cells."""
    n = sum(c.episodes for c in cells)

    def mean(field: str) -> float:
        return sum(getattr(c, field) * c.episodes for c in cells) / n if n else 0.0

    steps, oracle = mean("mean_steps"), mean("oracle_steps")
    return GroupCell(
        group=group,
        families=tuple(c.family for c in cells),
        condition=condition,
        episodes=n,
        success_rate=sum(c.successes for c in cells) / n if n else 0.0,
        mean_steps=steps,
        oracle_steps=oracle,
        oracle_ratio=steps / oracle if oracle else None,
        templates_served=mean("templates_served"),
    )


def generalization(cells: Sequence[CellResult], config: BenchConfig, round_: int) -> GeneralizationReport:
    """Both family groups per condition on the given round's unseen instances."""
    out: list[GroupCell] = []
    for group, families in FAMILY_GROUPS.items():
        for condition in config.conditions:
            picked = [
                c
                for c in cells
                if c.condition == condition and c.round == round_ and c.phase == "eval" and c.family in families
            ]
            if picked:
                out.append(group_cell(group, condition, picked))
    return GeneralizationReport(round=round_, choices=config.choices(), groups=FAMILY_GROUPS, cells=tuple(out))


TUNING_GRID: tuple[tuple[int | None, float | None], ...] = ((8, None), (5, None), (8, 0.5), (5, 0.5))
"""(top_k, min_confidence) candidates ``run_local --tune`` tries on the tuning group."""


def pick_choice(candidates: Sequence[BenchResults]) -> AgentChoices:
    """The hindsight settings that did best on the tuning group's last round, from tuning-only runs.

    Best = highest success, then lowest steps/oracle, then the earlier candidate. Only families of
    the tuning group may appear in the runs: choosing must never look at the held-out group.

    Raises:
        ValueError: No candidates, or a candidate ran a held-out family or no hindsight condition.
    """
    scored: list[tuple[float, float, int, BenchConfig]] = []
    for index, run in enumerate(candidates):
        config = run.config
        if not set(config.families) <= set(FAMILY_GROUPS["tuning"]):
            raise ValueError("a tuning run may only use tuning-group families")
        cell = run.cell("hindsight", config.rounds)
        if cell is None:
            raise ValueError("a tuning run needs the hindsight condition")
        scored.append((-cell.success_rate, cell.oracle_ratio or float("inf"), index, config))
    if not scored:
        raise ValueError("no candidates")
    scored.sort(key=lambda item: item[:3])
    best = scored[0][3]
    tried = ", ".join(
        f"top_k {c.top_k}/min_confidence {c.min_confidence}" for *_, c in sorted(scored, key=lambda i: i[2])
    )
    return AgentChoices(
        top_k=best.top_k,
        min_confidence=best.min_confidence,
        how=f"best success, then steps/oracle, on the tuning group alone among {tried}",
    )


def make_policy(condition: Condition, config: BenchConfig, embedder: Callable[[], Embedder]) -> Policy:
    """The agent of ``condition``, with its memory (one per run, shared by every family)."""
    if condition == "hindsight":
        return HindsightPolicy(top_k=config.top_k, min_confidence=config.min_confidence)
    if condition == "replay":
        return ReplayPolicy(ReplayMemory(embedder()))
    if condition == "naive":
        return NaivePolicy(NaiveServer())
    return ExplorePolicy()


async def _run_phase(
    client: ToolClient,
    policy: Policy,
    condition: Condition,
    config: BenchConfig,
    round_: int,
    phase: Phase,
    make: EpisodeMaker,
    run: EpisodeRunner,
) -> list[CellResult]:
    count = config.eval_episodes if phase == "eval" else config.train_episodes
    per_family: dict[str, list[EpisodeResult]] = {f: [] for f in config.families}
    for index in range(count):
        # Interleave families, so no family's instances all come first.
        for family in config.families:
            episode = make(family, seed_for(config, round_, phase, index))
            result = await run(client, episode, policy, agent_id=f"bench-{condition}")
            per_family[family].append(result)
    if not count:
        return []
    cells = [summarize(condition, round_, phase, f, rs) for f, rs in per_family.items()]
    everything = [r for rs in per_family.values() for r in rs]
    return [*cells, summarize(condition, round_, phase, ALL, everything)]


def _templates(policy: Policy | None) -> tuple[LearnedTemplate, ...]:
    if not isinstance(policy, HindsightPolicy):
        return ()
    out = [
        LearnedTemplate(
            template_id=tid,
            role=served.template.role,
            task_type=served.template.task_type,
            confidence=served.template.confidence,
            supplementary=served.template.parent_id is not None,
            text=served.rendered(),
        )
        for tid, served in policy.library.items()
    ]
    return tuple(sorted(out, key=lambda t: (t.task_type or "", t.role, -t.confidence, t.template_id)))


def in_process_clients(services: Services) -> ClientFactory:
    """A client factory for an in-process server, one owner (``bench-<condition>``) per condition."""
    from mcp import Client

    from cluster.auth import OwnerResolver
    from cluster.tools import build_server

    def factory(condition: Condition) -> AbstractAsyncContextManager[ToolClient]:
        return Client(build_server(services, OwnerResolver({}, f"bench-{condition}")))

    return factory


def default_embedder() -> Embedder:
    """The offline ONNX MiniLM embedder the service uses by default."""
    from cluster.embedding import build_embedder
    from cluster.settings import EmbeddingSettings

    return build_embedder(EmbeddingSettings())


def _knows(make: EpisodeMaker, family: str) -> bool:
    try:
        make(family, 0)
    except KeyError:
        return False
    return True


async def run_bench(
    client_factory: ClientFactory,
    wait_for_analysis: WaitForAnalysis,
    config: BenchConfig | None = None,
    *,
    embedder: Callable[[], Embedder] = default_embedder,
    make: EpisodeMaker = make_episode,
    run: EpisodeRunner = run_episode,
    agent: PolicyMaker = make_policy,
) -> BenchResults:
    """Run every condition through every round on the same seeds.

    Args:
        client_factory: One MCP client per condition (see :data:`ClientFactory`); entered once
            for the whole run.
        wait_for_analysis: Awaited at the end of every round.
        config: What to run; defaults to :class:`BenchConfig`.
        embedder: Makes the replay baseline's embedder (default: offline MiniLM).
        make: Makes a family's instance for a seed (default: the hand-written families).
        run: Runs one episode (default: :func:`run_episode`, recording through MCP).
        agent: Makes each condition's agent (default: :func:`make_policy`).

    Returns:
        Per condition × round × phase × family results, the templates hindsight served, and the
        target check on the last round.

    Raises:
        ToolCallFailed: Recording or finalizing a trajectory failed.

    Example:
        In process, one owner per condition, printing the table and saving JSON::

            results = await run_bench(in_process_clients(services), drain_analysis_queue, BenchConfig())
            print_report(results)
            write_json(results, Path("procedural.json"))

        Over HTTP, return ``mcp.Client`` on a transport that carries that condition's bearer token.
    """
    config = config or BenchConfig()
    unknown = {f for f in config.families if not _knows(make, f)}
    if unknown:
        raise ValueError(f"unknown families: {sorted(unknown)}")
    cells: list[CellResult] = []
    async with AsyncExitStack() as stack:
        clients = {c: await stack.enter_async_context(client_factory(c)) for c in config.conditions}
        policies = {c: agent(c, config, embedder) for c in config.conditions}
        for round_ in range(1, config.rounds + 1):
            for condition in config.conditions:
                for phase in ("eval", "train"):
                    cells += await _run_phase(
                        clients[condition], policies[condition], condition, config, round_, phase, make, run
                    )
            for policy in policies.values():
                if isinstance(policy, ReplayPolicy):
                    policy.memory.commit()
                elif isinstance(policy, NaivePolicy):
                    policy.server.commit()
            await wait_for_analysis()
            logger.info("round %s done", round_)
    return BenchResults(
        config=config,
        cells=tuple(cells),
        templates=_templates(policies.get("hindsight")),
        targets=check_targets(cells, config.rounds),
        generalization=generalization(cells, config, config.rounds),
    )
