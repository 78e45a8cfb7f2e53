"""The naive baseline: one rule per action that ever worked, with one separating feature each.

This is a yardstick for the benchmark, not part of the service. It answers "how far does the
simplest learner that reads context get?" so hindsight's figures have something to beat besides
no memory and verbatim replay. It lives entirely in the benchmark, in process: the naive agent
records its trajectories to the service like every other condition (same recording cost), but
learns only from what it observed itself, on the same training and evaluation episodes as the
other conditions, at the same round boundaries as the replay memory (:meth:`NaiveServer.commit`).

What it learns, per ``(role, decision signature, action)`` where the action succeeded at least once:

* the decision signature is the role, the task type, the sorted available actions and the sorted
  context keys (values left out, so instances of one decision pool);
* the *separating feature*: over every try of that action at that signature, the single test
  ``feature == value`` (strings, booleans), ``feature <= t`` or ``feature > t`` (numbers; ``t``
  midway between two observed values) that best separates its successes from its failures by
  Youden's J (share of successes covered minus share of failures covered); none when it never
  failed or when no test separates (J ≤ 0);
* a Laplace confidence ``(successes + 1) / (tries + 2)`` over the tries where that test holds.

At a decision it recommends the highest-confidence rule whose test holds on the context (ties:
more tries, then action name), taking the first untried naive call of that action. It knows
nothing of cost, of parameters (it replays the environment's naive call) or of other
signatures, and it has no tunable knobs.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import Field, JsonValue

from cluster.core.types import Frozen
from cluster.demo.agents import Decision, EpisodeResult, ExplorePolicy
from cluster.demo.env_base import Call, Episode, StepResult, StepView
from cluster.demo.recording import ToolClient

Scalar = str | int | float | bool | None
NaiveOp = Literal["==", "<=", ">"]


def signature_of(view: StepView, task_type: str) -> str:
    """The decision signature: role, task type, sorted actions, sorted context keys."""
    return "|".join(
        [view.role, task_type, ",".join(sorted(set(view.available_actions))), ",".join(sorted(view.context))]
    )


def features_of(context: Mapping[str, JsonValue], prefix: str = "") -> dict[str, Scalar]:
    """Scalar features of a context: nested keys dotted, a list as ``len(key)``."""
    out: dict[str, Scalar] = {}
    for key, value in context.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= features_of(value, f"{path}.")
        elif isinstance(value, list):
            out[f"len({path})"] = len(value)
        else:
            out[path] = value
    return out


def _is_number(value: Scalar) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class Split(Frozen):
    """One test on one feature."""

    feature: str
    op: NaiveOp
    value: JsonValue

    def holds(self, features: Mapping[str, Scalar]) -> bool:
        """Whether the test holds; a missing feature never does."""
        if self.feature not in features:
            return False
        got = features[self.feature]
        if self.op == "==":
            return got == self.value and isinstance(got, bool) == isinstance(self.value, bool)
        if isinstance(got, bool) or not isinstance(got, int | float) or not isinstance(self.value, int | float):
            return False
        return got <= self.value if self.op == "<=" else got > self.value

    def render(self) -> str:
        return f"{self.feature} {self.op} {self.value!r}"


class Try(Frozen):
    """One observed try of an action at a decision."""

    role: str
    signature: str
    action: str
    features: dict[str, Scalar]
    succeeded: bool


class NaiveRule(Frozen):
    """A learned rule: at this signature, when the test holds (or always), try this action."""

    rule_id: str
    role: str
    signature: str
    action: str
    split: Split | None = Field(description="None: always.")
    successes: int = Field(ge=0, description="Successes where the test holds.")
    tries: int = Field(ge=1, description="Tries where the test holds.")

    @property
    def confidence(self) -> float:
        """Laplace: ``(successes + 1) / (tries + 2)``."""
        return (self.successes + 1) / (self.tries + 2)

    def holds(self, features: Mapping[str, Scalar]) -> bool:
        return self.split is None or self.split.holds(features)

    def render(self) -> str:
        when = "always" if self.split is None else f"when {self.split.render()}"
        return f"{when}: {self.action} ({self.successes}/{self.tries}, confidence {self.confidence:.2f})"


def _candidates(tries: Sequence[Try]) -> list[Split]:
    values: dict[str, set[Scalar]] = {}
    for t in tries:
        for name, value in t.features.items():
            values.setdefault(name, set()).add(value)
    tests: list[Split] = []
    for name in sorted(values):
        seen = values[name]
        if all(_is_number(v) for v in seen):
            ordered = sorted(float(v) for v in seen if isinstance(v, int | float))
            for low, high in itertools.pairwise(ordered):
                cut = (low + high) / 2
                tests += [Split(feature=name, op="<=", value=cut), Split(feature=name, op=">", value=cut)]
        else:
            tests += [Split(feature=name, op="==", value=v) for v in sorted(seen, key=repr)]
    return tests


def separating_split(tries: Sequence[Try]) -> Split | None:
    """The test that best separates an action's successes from its failures (None: nothing does)."""
    wins = [t for t in tries if t.succeeded]
    losses = [t for t in tries if not t.succeeded]
    if not wins or not losses:
        return None
    best: tuple[float, int] | None = None
    chosen: Split | None = None
    for test in _candidates(tries):
        covered_wins = sum(test.holds(t.features) for t in wins)
        covered_losses = sum(test.holds(t.features) for t in losses)
        score = (covered_wins / len(wins) - covered_losses / len(losses), covered_wins)
        # Strictly better only: the first candidate in the fixed order wins ties (deterministic).
        if best is None or score > best:
            best, chosen = score, test
    return chosen if best is not None and best[0] > 0 else None


def learn_rule(tries: Sequence[Try]) -> NaiveRule | None:
    """The rule for one ``(role, signature, action)``; None when the action never succeeded."""
    if not any(t.succeeded for t in tries):
        return None
    first = tries[0]
    split = separating_split(tries)
    covered = [t for t in tries if split is None or split.holds(t.features)]
    key = f"{first.role}|{first.signature}|{first.action}"
    return NaiveRule(
        rule_id="naive-" + hashlib.sha256(key.encode()).hexdigest()[:12],
        role=first.role,
        signature=first.signature,
        action=first.action,
        split=split,
        successes=sum(t.succeeded for t in covered),
        tries=len(covered),
    )


class NaiveServer:
    """Keeps the naive agent's tries and the rules learned from them (in process, no service)."""

    def __init__(self) -> None:
        self._pending: list[Try] = []
        self._tries: dict[tuple[str, str, str], list[Try]] = {}
        self.rules: dict[tuple[str, str], list[NaiveRule]] = {}
        """(role, signature) → rules, best first."""

    def add(self, attempt: Try) -> None:
        """Queue a try for the next :meth:`commit`."""
        self._pending.append(attempt)

    def commit(self) -> int:
        """Learn from the queued tries; returns how many there were."""
        added = len(self._pending)
        for t in self._pending:
            self._tries.setdefault((t.role, t.signature, t.action), []).append(t)
        self._pending = []
        rules: dict[tuple[str, str], list[NaiveRule]] = {}
        for tries in self._tries.values():
            rule = learn_rule(tries)
            if rule is not None:
                rules.setdefault((rule.role, rule.signature), []).append(rule)
        for found in rules.values():
            found.sort(key=lambda r: (-r.confidence, -r.tries, r.action))
        self.rules = rules
        return added

    def recommend(self, view: StepView, task_type: str) -> list[NaiveRule]:
        """Rules for this decision whose test holds, highest confidence first."""
        features = features_of(view.context)
        found = self.rules.get((view.role, signature_of(view, task_type)), [])
        return [r for r in found if r.holds(features)]


def naive_call(rules: Sequence[NaiveRule], view: StepView, tried: Sequence[Call]) -> tuple[Call, NaiveRule] | None:
    """The first untried naive call of the best rule that has one; None: explore."""
    for rule in rules:
        call = next((o for o in view.options if o.action == rule.action and o not in tried), None)
        if call is not None:
            return call, rule
    return None


class NaivePolicy(ExplorePolicy):
    """Follow the naive server's best rule whose test holds; explore where none does.

    Args:
        server: The rules; call ``server.commit()`` between rounds.
    """

    def __init__(self, server: NaiveServer) -> None:
        super().__init__()
        self.server = server
        self._task_type = ""
        self._offered: list[str] = []
        self._followed: list[str] = []

    async def begin(self, client: ToolClient, episode: Episode) -> None:
        await super().begin(client, episode)
        self._task_type = episode.task_type
        self._offered, self._followed = [], []

    async def choose(self, client: ToolClient, episode: Episode, view: StepView, tried: Sequence[Call]) -> Decision:
        if not view.is_decision:
            return await super().choose(client, episode, view, tried)
        rules = self.server.recommend(view, episode.task_type)
        self._offered += [r.rule_id for r in rules if r.rule_id not in self._offered]
        picked = naive_call(rules, view, tried)
        if picked is None:
            return await super().choose(client, episode, view, tried)
        call, rule = picked
        return Decision(call=call, source="rule", template_id=rule.rule_id)

    def observe(self, view: StepView, decision: Decision, result: StepResult) -> None:
        if decision.template_id is not None and decision.template_id not in self._followed:
            self._followed.append(decision.template_id)
        if view.is_decision:
            self.server.add(
                Try(
                    role=view.role,
                    signature=signature_of(view, self._task_type),
                    action=decision.call.action,
                    features=features_of(view.context),
                    succeeded=result.status == "success",
                )
            )

    async def finish(self, client: ToolClient, episode: Episode, result: EpisodeResult) -> EpisodeResult:
        # The rules never reach the service (finalize has already run): they are counted here only.
        return result.model_copy(
            update={"served_template_ids": tuple(self._offered), "applied_template_ids": tuple(self._followed)}
        )
