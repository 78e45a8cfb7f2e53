"""The shape every benchmark environment shares: stages, calls, results and the step budget.

An :class:`Episode` is one randomized task instance. At each step it shows a :class:`StepView`
(the role acting, a flat context snapshot, the actions available and the calls a naive agent
would think of trying) and judges the :class:`Call` the agent makes. A successful call moves the
episode to its next stage; a failed one leaves it where it is, so the agent can retry with
another call. A call costs one step unless the environment charges more (a slow tool that does
the work of three calls costs three); the episode fails when the budget runs out.

Every family also computes its *oracle*: the fewest steps an agent that knew the hidden rules
would spend on an instance (for a family with random tool failures, the expected fewest).

Hidden rules live in the family subclasses (:mod:`cluster.demo.envs`): they decide from the
instance's observable facts whether a call works. Failures that are the *tool's* fault are
``failure``; calls that ran but did something other than intended (clicking the wrong button)
are ``partial``, so hindsight does not blame the tool for the agent's aim.
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar, Literal

from pydantic import Field, JsonValue

from cluster.core.types import Frozen

Status = Literal["success", "failure", "partial"]


class Call(Frozen):
    """One tool call: an action name and its parameters."""

    action: str = Field(min_length=1)
    params: dict[str, JsonValue] = Field(default_factory=dict)


class StepResult(Frozen):
    """What the environment answered to a call, and what the call cost."""

    status: Status
    summary: str
    steps: int = Field(default=1, ge=1, le=10, description="Steps the call is charged (its cost).")
    latency_ms: int | None = Field(default=None, ge=0, description="Simulated wall time, where natural.")
    tokens: int | None = Field(default=None, ge=0, description="Simulated token use, where natural.")

    def cost(self) -> dict[str, JsonValue]:
        """The cost fields for ``execution_result.data`` (``steps`` always, the others when known)."""
        out: dict[str, JsonValue] = {"steps": self.steps}
        if self.latency_ms is not None:
            out["latency_ms"] = self.latency_ms
        if self.tokens is not None:
            out["tokens"] = self.tokens
        return out


class StepView(Frozen):
    """What an agent sees before a step."""

    stage: str = Field(description="The stage of the task, e.g. 'submit'.")
    role: str = Field(description="Who acts at this stage: agent, planner, executor or verifier.")
    context: dict[str, JsonValue] = Field(description="Flat-ish observable features; stable keys per stage.")
    available_actions: tuple[str, ...] = Field(min_length=1)
    options: tuple[Call, ...] = Field(min_length=1, description="Calls a naive agent would try, unordered.")

    @property
    def is_decision(self) -> bool:
        """More than one action to choose from."""
        return len(set(self.available_actions)) > 1


def ok(summary: str, *, steps: int = 1, latency_ms: int | None = None) -> StepResult:
    return StepResult(status="success", summary=summary, steps=steps, latency_ms=latency_ms)


def fail(summary: str, *, steps: int = 1, latency_ms: int | None = None) -> StepResult:
    return StepResult(status="failure", summary=summary, steps=steps, latency_ms=latency_ms)


def partial(summary: str, *, steps: int = 1, latency_ms: int | None = None) -> StepResult:
    return StepResult(status="partial", summary=summary, steps=steps, latency_ms=latency_ms)


class Episode(ABC):
    """One seeded task instance of a family.

    Subclasses draw their instance in ``__init__`` (from ``self.rng``), then implement
    :meth:`_view`, :meth:`_judge` and :meth:`_next`.

    Args:
        seed: Instance seed; the same seed always gives the same instance.
        budget: Steps (calls) allowed before the episode fails.
    """

    family: str = ""
    task_type: str = ""
    default_budget: int = 8
    first_stage: str = ""
    decoys: ClassVar[Mapping[str, tuple[tuple[str, str], ...]]] = MappingProxyType({})
    """Per stage, plausible tools that never work here: ``(action, failure summary)``."""
    steps_stand_alone: ClassVar[bool] = False
    """Each step's result is complete in itself (a game whose score rises or falls per step): a
    step is recorded under the first, never under the success before it, so what it scored is
    its own and the rest of the game is not in its subtree (:mod:`cluster.demo.recording`)."""

    def __init__(self, seed: int, budget: int | None = None) -> None:
        self.seed = seed
        self.budget = budget if budget is not None else self.default_budget
        self.rng = random.Random(f"{self.family}:{seed}")
        self.steps = 0
        self.stage: str | None = self.first_stage
        self.history: list[tuple[str, Call, StepResult]] = []

    @property
    @abstractmethod
    def task(self) -> str:
        """The task in words, as an agent would be given it."""

    @abstractmethod
    def _view(self, stage: str) -> StepView:
        """The view at ``stage``."""

    @abstractmethod
    def _judge(self, stage: str, call: Call) -> StepResult:
        """Apply the hidden rules to a call at ``stage``."""

    @abstractmethod
    def _next(self, stage: str, call: Call) -> str | None:
        """The stage after a successful ``call`` at ``stage``; None when the task is complete."""

    @abstractmethod
    def oracle_steps(self) -> float:
        """The fewest steps this instance can be solved in by an agent that knows the hidden rules.

        Read from the instance as drawn (not from what happened since); for a family whose right
        call fails at random, the expected fewest steps given the failure rate.
        """

    @property
    def succeeded(self) -> bool:
        """True once every stage is complete."""
        return self.stage is None

    @property
    def done(self) -> bool:
        """Complete, or out of budget."""
        return self.stage is None or self.steps >= self.budget

    def view(self) -> StepView | None:
        """The current view, or None when the episode is over."""
        if self.done or self.stage is None:
            return None
        return self._with_decoys(self.stage)

    def recorded_view(self, view: StepView, call: Call) -> StepView:
        """The view a call is recorded (and its experience asked for) in: ``view`` itself here.

        An environment whose calls act on one of many things narrows it to the thing acted on
        (:mod:`bench.textworld.game`), so the learner sees the aim decided for that thing.
        """
        return view

    def _with_decoys(self, stage: str) -> StepView:
        view = self._view(stage)
        extra = [Call(action=a) for a, _ in self.decoys.get(stage, ()) if a not in view.available_actions]
        if not extra:
            return view
        return view.model_copy(
            update={
                "available_actions": (*view.available_actions, *(c.action for c in extra)),
                "options": (*view.options, *extra),
            }
        )

    def act(self, call: Call) -> StepResult:
        """Make one call at the current stage; costs its steps (at least one) whatever happens.

        Raises:
            RuntimeError: The episode is already over.
        """
        if self.done or self.stage is None:
            raise RuntimeError("the episode is over")
        stage = self.stage
        decoys = dict(self.decoys.get(stage, ()))
        if call.action in decoys:
            result = fail(decoys[call.action])
        elif call.action not in self._view(stage).available_actions:
            result = fail(f"unknown action {call.action!r} here")
        else:
            result = self._judge(stage, call)
        self.steps += result.steps
        self.history.append((stage, call, result))
        if result.status == "success":
            self.stage = self._next(stage, call)
        return result


def token(rng: random.Random, n: int = 6) -> str:
    """A random lower-case hex token, for ids and file names that differ per instance."""
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def log_uniform(rng: random.Random, low: int, high: int) -> int:
    """An integer spread evenly over orders of magnitude between ``low`` and ``high``."""
    return round(math.exp(rng.uniform(math.log(low), math.log(high))))


def make_view(stage: str, context: dict[str, JsonValue], *options: Call, role: str = "agent") -> StepView:
    """A view whose available actions are the options' actions, in order."""
    actions = tuple(dict.fromkeys(o.action for o in options))
    return StepView(stage=stage, role=role, context=context, available_actions=actions, options=options)


def tool_call(action: str, **params: JsonValue) -> Call:
    """A call from keyword params."""
    return Call(action=action, params=params)


def mismatch(call: Call, key: str, expected: str, what: str) -> StepResult | None:
    """A failure when a parameter names another instance's resource, else None."""
    got = call.params.get(key)
    return None if got == expected else fail(f"{what} {got!r} not found")


def date_text(rng: random.Random, first_year: int = 2024, last_year: int = 2026) -> str:
    """A day as clerks write it in Europe, ``dd/mm/yyyy`` (e.g. ``14/03/2026``)."""
    day = rng.randint(1, 28)  # every month has a 28th: no invalid dates
    return f"{day:02d}/{rng.randint(1, 12):02d}/{rng.randint(first_year, last_year)}"
