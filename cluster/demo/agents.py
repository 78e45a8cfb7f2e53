"""Scripted agents (no LLM) and the loop that runs one episode through hindsight's MCP tools.

Four policies share one loop (:func:`run_episode`), so they differ only in how they choose:

* :class:`ExplorePolicy` — no memory: tries the calls a naive agent would think of, in a seeded
  random order, retrying until one works or the budget runs out.
* :class:`ReplayPolicy` — plain vector memory: replays the nearest stored successful trajectory
  verbatim, exploring when a replayed call is unavailable or fails.
* :class:`HindsightPolicy` — asks ``query_experience`` at each decision (with the structured
  situation — context snapshot, available actions, decision name — when the tool takes it),
  follows a served template whose condition holds, and explores otherwise (what the service
  says never worked at this decision last).
* :class:`cluster.demo.naive.NaivePolicy` — the naive baseline: one in-process rule per
  action that ever worked, with one separating context feature and a Laplace confidence.

All of them record every call and finalize through MCP, so all pay the same recording cost.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from mcp.shared.exceptions import MCPError
from pydantic import Field, JsonValue

from cluster.core.types import Frozen, canonical_json
from cluster.demo.env_base import Call, Episode, StepResult, StepView
from cluster.demo.following import Served, follow, never_worked, parse_served
from cluster.demo.recording import Recorder, ToolClient, call_checked, error_text
from cluster.demo.replay import RawTrajectory, RecordedStep, ReplayCursor, ReplayMemory

logger = logging.getLogger(__name__)

Source = Literal["explore", "replay", "template", "rule"]
REPORT_CHUNK = 8  # report_experience_outcome takes at most 8 template ids per call
STRUCTURED_ARGS = ("context_snapshot", "available_actions", "decision")
"""query_experience's optional structured-situation arguments, sent only when the tool takes them."""


class Decision(Frozen):
    """The call an agent makes and why."""

    call: Call
    source: Source
    template_id: str | None = Field(default=None, description="The template (or naive rule) followed.")

    @property
    def reasoning(self) -> str:
        if self.source == "template":
            return f"following experience template {self.template_id}"
        if self.source == "rule":
            return f"following naive rule {self.template_id}"
        return "replaying a stored trajectory" if self.source == "replay" else "exploring"


class EpisodeResult(Frozen):
    """How one episode went."""

    family: str
    seed: int
    succeeded: bool
    steps: int = Field(ge=0)
    oracle_steps: float = Field(default=0.0, ge=0.0, description="Fewest steps an agent knowing the rules needs.")
    latency_ms: int = Field(default=0, ge=0, description="Simulated latency of every call, summed.")
    served_template_ids: tuple[str, ...] = ()
    applied_template_ids: tuple[str, ...] = ()
    served_supplementary: int = Field(default=0, ge=0, description="Served edge-case templates (with a parent).")
    applied_confidences: tuple[float, ...] = Field(default=(), description="Confidence of each followed template.")
    trajectory_ids: dict[str, str] = Field(default_factory=dict, description="Role → trajectory id.")


class Policy(Protocol):
    """How an agent chooses its calls; one instance may serve many episodes."""

    async def begin(self, client: ToolClient, episode: Episode) -> None: ...

    async def choose(self, client: ToolClient, episode: Episode, view: StepView, tried: Sequence[Call]) -> Decision: ...

    def observe(self, view: StepView, decision: Decision, result: StepResult) -> None: ...

    async def finish(self, client: ToolClient, episode: Episode, result: EpisodeResult) -> EpisodeResult: ...

    def served_for(self, role: str) -> list[str]: ...


class Explorer:
    """Seeded trial and error over a view's naive options.

    Args:
        seed: Seeds the order; the same seed, family and instance give the same choices.
    """

    def __init__(self, seed: str) -> None:
        self._rng = random.Random(seed)
        self._orders: dict[str, list[Call]] = {}

    def pick(
        self,
        view: StepView,
        tried: Sequence[Call],
        last: set[str] | frozenset[str] = frozenset(),
    ) -> Call:
        """The first option of this stage's shuffled order tried the fewest times, those in
        ``last`` after the others.

        A tool in ``last`` never worked at this decision: it has been wrong everywhere. Once every
        option failed, they are called again in turn, ``last`` still after the others: the right
        one may have failed by bad luck, and calling one option again and again would never find
        out which.
        """
        order = self._orders.get(view.stage)
        if order is None:
            order = list(view.options)
            self._rng.shuffle(order)
            self._orders[view.stage] = order
        # min keeps the first of equals: the shuffled order within a tier.
        return min(order, key=lambda c: (tried.count(c), c.action in last))


class ExplorePolicy:
    """No memory: explore every time."""

    def __init__(self) -> None:
        self._explorer = Explorer("")

    async def begin(self, client: ToolClient, episode: Episode) -> None:
        self._explorer = Explorer(f"explore:{episode.family}:{episode.seed}")

    async def choose(self, client: ToolClient, episode: Episode, view: StepView, tried: Sequence[Call]) -> Decision:
        return Decision(call=self._explorer.pick(view, tried), source="explore")

    def observe(self, view: StepView, decision: Decision, result: StepResult) -> None:
        return None

    async def finish(self, client: ToolClient, episode: Episode, result: EpisodeResult) -> EpisodeResult:
        return result

    def served_for(self, role: str) -> list[str]:
        return []


class ReplayPolicy(ExplorePolicy):
    """Plain vector memory: replay the nearest successful trajectory verbatim.

    Args:
        memory: Where successful trajectories are stored; call ``memory.commit()`` between rounds.
    """

    def __init__(self, memory: ReplayMemory) -> None:
        super().__init__()
        self.memory = memory
        self._stored: RawTrajectory | None = None
        self._cursors: dict[str, ReplayCursor] = {}
        self._path: list[RecordedStep] = []

    async def begin(self, client: ToolClient, episode: Episode) -> None:
        await super().begin(client, episode)
        self._stored = self.memory.nearest(episode.task)
        self._cursors = {}
        self._path = []

    async def choose(self, client: ToolClient, episode: Episode, view: StepView, tried: Sequence[Call]) -> Decision:
        if self._stored is not None:
            cursor = self._cursors.setdefault(view.role, ReplayCursor(self._stored.steps, view.role))
            call = cursor.next_for(view.available_actions, tried)
            if call is not None:
                return Decision(call=call, source="replay")
        return await super().choose(client, episode, view, tried)

    def observe(self, view: StepView, decision: Decision, result: StepResult) -> None:
        if result.status == "success":
            self._path.append(RecordedStep(role=view.role, call=decision.call))

    async def finish(self, client: ToolClient, episode: Episode, result: EpisodeResult) -> EpisodeResult:
        if result.succeeded:
            self.memory.add(RawTrajectory(task=episode.task, steps=tuple(self._path)))
        return result


def describe(episode: Episode, view: StepView) -> str:
    """The situation in words for ``query_experience``: task, stage, role and context features."""
    features = ", ".join(
        f"{key}={value}" for key, value in view.context.items() if key != "goal" and not isinstance(value, list | dict)
    )
    goal = view.context.get("goal", view.stage)
    return (
        f"{episode.task}. Now ({view.role}, {episode.task_type}): {goal}. "
        f"{features + '. ' if features else ''}Options: {', '.join(view.available_actions)}."
    )


async def tool_arguments(client: ToolClient, name: str) -> frozenset[str] | None:
    """The argument names tool ``name`` advertises in its input schema; None when unknown."""
    list_tools = getattr(client, "list_tools", None)
    if list_tools is None:
        return None
    try:
        listed: Any = await list_tools()
    except MCPError as exc:  # a server without tool listing: fall back to trying the arguments
        logger.warning("list_tools failed (%s); will try the structured query_experience arguments", exc)
        return None
    for tool in getattr(listed, "tools", None) or []:
        if getattr(tool, "name", None) == name:
            schema = getattr(tool, "input_schema", None) or {}
            properties = schema.get("properties", {}) if isinstance(schema, dict) else {}
            return frozenset(properties) if isinstance(properties, dict) else frozenset()
    return None


def _rejects_arguments(result: Any) -> bool:
    text = error_text(result).lower()
    return any(arg in text for arg in STRUCTURED_ARGS) or "unexpected keyword" in text or "extra" in text


class HindsightPolicy(ExplorePolicy):
    """Follow served experience templates where their conditions hold; explore elsewhere.

    The structured situation (``context_snapshot``, ``available_actions``, ``decision``) is sent
    only when ``query_experience`` advertises those arguments (read once per client from
    ``list_tools``); when the schema cannot be read, they are sent and, if the tool rejects them,
    dropped for that client from then on. So the agent works against services with and without
    situation-aware serving.

    Args:
        top_k: Passed to ``query_experience`` (None: the service default).
        min_confidence: Passed to ``query_experience`` (None: the service threshold).
    """

    def __init__(self, *, top_k: int | None = None, min_confidence: float | None = None) -> None:
        super().__init__()
        self.top_k = top_k
        self.min_confidence = min_confidence
        self.library: dict[str, Served] = {}
        self._accepts: dict[int, tuple[ToolClient, frozenset[str] | None]] = {}
        self._served: dict[tuple[str, str, str], list[Served]] = {}
        self._never_worked: dict[tuple[str, str, str], frozenset[str]] = {}
        self._served_ids: dict[str, list[str]] = {}
        self._applied: list[tuple[str, str, bool]] = []

    async def begin(self, client: ToolClient, episode: Episode) -> None:
        await super().begin(client, episode)
        self._served, self._served_ids, self._applied = {}, {}, []
        self._never_worked = {}

    async def accepted(self, client: ToolClient) -> frozenset[str] | None:
        """The structured arguments ``query_experience`` takes on this client (None: not known yet)."""
        # Keyed by identity, holding the client so its id cannot be reused while we remember it.
        if id(client) not in self._accepts:
            names = await tool_arguments(client, "query_experience")
            self._accepts[id(client)] = (client, None if names is None else names & frozenset(STRUCTURED_ARGS))
        return self._accepts[id(client)][1]

    def situation(self, view: StepView, accepted: frozenset[str] | None) -> dict[str, JsonValue]:
        """The structured arguments to send: those the tool takes (all of them when unknown)."""
        values: dict[str, JsonValue] = {
            "context_snapshot": dict(view.context),
            "available_actions": list(view.available_actions),
            "decision": view.stage,
        }
        return {k: v for k, v in values.items() if accepted is None or k in accepted}

    async def query(self, client: ToolClient, episode: Episode, view: StepView) -> list[Served]:
        """Ask hindsight once per situation; an error (e.g. the tool is not deployed yet) serves nothing.

        A situation is a stage with what the agent sees there: a decision taken again in the same
        task (the next item of a list) is a new situation, and what was served for the last one,
        filtered by its context, says nothing about this one's.
        """
        key = (view.role, view.stage, canonical_json(view.context))
        if key not in self._served:
            args: dict[str, JsonValue] = {
                "context": describe(episode, view),
                "role": view.role,
                "task_type": episode.task_type,
            }
            if self.top_k is not None:
                args["top_k"] = self.top_k
            if self.min_confidence is not None:
                args["min_confidence"] = self.min_confidence
            accepted = await self.accepted(client)
            structured = self.situation(view, accepted)
            result: Any = await client.call_tool("query_experience", args | structured)
            if structured and accepted is None and getattr(result, "is_error", False) and _rejects_arguments(result):
                # An older tool that validates strictly: drop the situation for this client from now on.
                self._accepts[id(client)] = (client, frozenset())
                result = await client.call_tool("query_experience", args)
            content = None
            if getattr(result, "is_error", False):
                logger.warning("query_experience failed: %s", error_text(result))
            else:
                content = getattr(result, "structured_content", None)
            served = parse_served(content, role=view.role, task_type=episode.task_type)
            self._served[key] = served
            self._never_worked[key] = never_worked(content)
            ids = self._served_ids.setdefault(view.role, [])
            for item in served:
                tid = str(item.template.template_id)
                self.library[tid] = item
                if tid not in ids:
                    ids.append(tid)
        return self._served[key]

    async def choose(self, client: ToolClient, episode: Episode, view: StepView, tried: Sequence[Call]) -> Decision:
        if not view.is_decision:
            return await super().choose(client, episode, view, tried)
        served = await self.query(client, episode, view)
        failing = self._never_worked.get((view.role, view.stage, canonical_json(view.context)), frozenset())
        return self.decide(served, episode, view, tried, never_worked=failing)

    def decide(
        self,
        served: Sequence[Served],
        episode: Episode,
        view: StepView,
        tried: Sequence[Call],
        never_worked: frozenset[str] = frozenset(),
    ) -> Decision:
        """The decision at one step given what was served (no I/O; testable on its own).

        ``never_worked``: actions the service says never worked at this decision; exploring, they
        come last.
        """
        choice = follow(served, view, episode.task_type, tried)
        if choice is not None:
            return Decision(call=choice.call, source="template", template_id=choice.template_id)
        return Decision(call=self._explorer.pick(view, tried, last=never_worked), source="explore")

    def observe(self, view: StepView, decision: Decision, result: StepResult) -> None:
        if decision.template_id is not None:
            self._applied.append((view.role, decision.template_id, result.status == "success"))

    async def finish(self, client: ToolClient, episode: Episode, result: EpisodeResult) -> EpisodeResult:
        # A template was right if every step it advised worked and the task ended well; where
        # each step's result stands alone (a game's score), if every step it advised worked.
        verdicts: dict[tuple[str, str], bool] = {}
        ended_well = result.succeeded or episode.steps_stand_alone
        for role, tid, worked in self._applied:
            verdicts[role, tid] = verdicts.get((role, tid), True) and worked and ended_well
        await self.report(client, verdicts, result)
        applied = sorted({t for _, t in verdicts})
        served = [self.library[t].template for t in result.served_template_ids if t in self.library]
        return result.model_copy(
            update={
                "applied_template_ids": tuple(applied),
                "served_supplementary": sum(t.parent_id is not None for t in served),
                "applied_confidences": tuple(self.library[t].template.confidence for t in applied if t in self.library),
            }
        )

    async def report(self, client: ToolClient, verdicts: dict[tuple[str, str], bool], result: EpisodeResult) -> None:
        """Tell hindsight whether each followed template was right (``report_experience_outcome``)."""
        for (role, succeeded), ids in sorted(_group(verdicts).items()):
            for start in range(0, len(ids), REPORT_CHUNK):
                args: dict[str, Any] = {"template_ids": ids[start : start + REPORT_CHUNK], "succeeded": succeeded}
                if role in result.trajectory_ids:
                    args["trajectory_id"] = result.trajectory_ids[role]
                outcome: Any = await client.call_tool("report_experience_outcome", args)
                if getattr(outcome, "is_error", False):
                    logger.warning("report_experience_outcome failed: %s", error_text(outcome))

    def served_for(self, role: str) -> list[str]:
        return list(self._served_ids.get(role, []))


def _group(verdicts: dict[tuple[str, str], bool]) -> dict[tuple[str, bool], list[str]]:
    groups: dict[tuple[str, bool], list[str]] = {}
    for (role, tid), verdict in sorted(verdicts.items()):
        groups.setdefault((role, verdict), []).append(tid)
    return groups


async def run_episode(client: ToolClient, episode: Episode, policy: Policy, *, agent_id: str) -> EpisodeResult:
    """Run one episode to the end, recording every call through MCP and finalizing.

    Args:
        client: An MCP client (in-process or HTTP).
        episode: A fresh episode.
        policy: How to choose calls.
        agent_id: Sent with every trajectory.

    Returns:
        Outcome, steps and the templates served and applied.

    Raises:
        ToolCallFailed: Recording or finalizing failed.
    """
    await policy.begin(client, episode)
    recorder = Recorder(client, episode, agent_id)
    tried: list[Call] = []
    stage = None
    while (view := episode.view()) is not None:
        if view.stage != stage:
            tried, stage = [], view.stage  # calls that did nothing count within one stage only
        decision = await policy.choose(client, episode, view, tried)
        result = episode.act(decision.call)
        await recorder.record(episode.recorded_view(view, decision.call), decision.call, result, decision.reasoning)
        policy.observe(view, decision, result)
        tried = [] if result.status == "success" else [*tried, decision.call]
    served = {role: policy.served_for(role) for role in recorder.trajectories}
    await recorder.finalize(served)
    trajectory_ids = {role: str(tid) for role, tid in recorder.trajectories.items()}
    return await policy.finish(client, episode, episode_result(episode, served, trajectory_ids))


def episode_result(
    episode: Episode, served: dict[str, list[str]], trajectory_ids: dict[str, str] | None = None
) -> EpisodeResult:
    """What a played episode gives the harness: its outcome, its cost and the templates served per role."""
    return EpisodeResult(
        family=episode.family,
        seed=episode.seed,
        succeeded=episode.succeeded,
        steps=episode.steps,
        oracle_steps=episode.oracle_steps(),
        latency_ms=sum(r.latency_ms or 0 for _, _, r in episode.history),
        served_template_ids=tuple(sorted({t for ids in served.values() for t in ids})),
        trajectory_ids=trajectory_ids or {},
    )


__all__ = [
    "Decision",
    "EpisodeResult",
    "ExplorePolicy",
    "Explorer",
    "HindsightPolicy",
    "Policy",
    "ReplayPolicy",
    "call_checked",
    "describe",
    "episode_result",
    "run_episode",
    "tool_arguments",
]
