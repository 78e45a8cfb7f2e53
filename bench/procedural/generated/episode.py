"""Playing a generated family: an :class:`~cluster.demo.env_base.Episode` per :class:`FamilySpec`.

Each family is an ``Episode`` subclass made by :func:`episode_class` (the harness builds episodes
from a class and a seed, as it does for the hand-written families); the default-config family of
seed 42 is registered as ``gen-0042`` (:func:`generated_episode`).

An instance draws a ref (``<prefix>_<hex>``, listed in the context under the family's noun +
``s`` and passed back by every tool), the values of every feature, and how many items a repeated
decision takes. A repeated decision shows the same stage name, context keys and calls for every
item; only the item's feature values differ (the bench's agents remember what they tried and were
served per stage name, as an agent would per step of a plan). A decision call works when its
parameters are right (the ref, each constant, each varying value as the context shows it) and the
stage's rule picks its tool, or the tool is the costlier one of a cost pair, which works
everywhere. Noise: in a noisy family the first
working call of a decision fails with the family's probability, drawn from the instance seed and
the step number, so every condition meets the same luck at the same step; it fails at most once
per decision, so the oracle's worst case stays inside the budget.
"""

from __future__ import annotations

import functools
import random
import re
from types import MappingProxyType
from typing import ClassVar

from pydantic import JsonValue

from bench.procedural.generated.grammar import generate_family
from bench.procedural.generated.spec import FamilySpec, Param, Stage, Tool
from bench.procedural.generated.values import draw
from cluster.demo.env_base import Call, Episode, StepResult, StepView, fail, make_view, ok, token

OPENING = "open"
NAME = re.compile(r"^gen-(\d{4,})$")


def _same(got: JsonValue, expected: JsonValue) -> bool:
    # JSON true is not 1 here, whatever Python says.
    return got == expected and isinstance(got, bool) == isinstance(expected, bool)


class GeneratedEpisode(Episode):
    """One instance of a generated family; subclasses made by :func:`episode_class` set ``spec``."""

    spec: ClassVar[FamilySpec]

    def __init__(self, seed: int, budget: int | None = None) -> None:
        super().__init__(seed, budget)
        spec, rng = self.spec, self.rng
        self.ref = f"{spec.ref_prefix}_{token(rng, 8)}"
        self.stages: dict[str, Stage] = {}
        self.order: list[str] = []
        self.values: dict[str, dict[str, JsonValue]] = {}
        """Per internal stage key (``d2.1`` for a repeated stage's second item): its features' values."""
        task_values: dict[str, JsonValue] = {}
        for stage in spec.stages:
            items = rng.randint(stage.min_repeats, stage.max_repeats) if stage.repeated else 1
            # Varying parameters belong to the task, not the item: every repeat passes the same ones.
            for feature in stage.varying:
                task_values[feature.name] = draw(feature, rng)
            for item in range(items):
                key = f"{stage.key}.{item + 1}" if stage.repeated else stage.key
                values = {f.name: task_values[f.name] for f in stage.varying}
                for feature in (*(stage.rule.features if stage.rule else ()), *stage.distractors):
                    values[feature.name] = draw(feature, rng)
                self.stages[key] = stage
                self.order.append(key)
                self.values[key] = values
        self._noisy: set[str] = set()

    @property
    def task(self) -> str:
        return f"{self.spec.task_verb.capitalize()} the {self.spec.noun} {self.ref}"

    def is_decision(self, key: str) -> bool:
        """Whether the internal stage ``key`` (as in ``history``) is a decision."""
        return self.stages[key].rule is not None

    def param_value(self, key: str, param: Param) -> JsonValue:
        """What a right call passes for ``param`` at stage ``key``."""
        if param.kind == "ref":
            return self.ref
        if param.feature is not None:
            return self.values[key][param.feature]
        return param.constant

    def right_call(self, key: str, tool: Tool) -> Call:
        """``tool`` called with the right parameters at stage ``key``."""
        return Call(action=tool.name, params={p.key: self.param_value(key, p) for p in tool.params})

    def _view(self, stage: str) -> StepView:
        spec_stage = self.stages[stage]
        context: dict[str, JsonValue] = {"goal": spec_stage.goal}
        for name in spec_stage.keys:
            context[name] = self.values[stage][name]
        context[self.spec.refs_key] = [self.ref]
        return make_view(spec_stage.name, context, *(self.right_call(stage, t) for t in spec_stage.tools))

    def works(self, key: str, tool: Tool) -> bool:
        """Whether a right call of ``tool`` works at stage ``key`` (noise aside)."""
        rule = self.stages[key].rule
        return rule is None or tool.always_works or rule.target(self.values[key]) == tool.name

    def luck(self) -> float:
        """This step's draw in [0, 1): seeded by instance and step number, not by call history."""
        return random.Random(f"{self.family}:{self.seed}:noise:{self.steps}").random()

    def _judge(self, stage: str, call: Call) -> StepResult:
        spec_stage = self.stages[stage]
        tool = next(t for t in spec_stage.tools if t.name == call.action)
        for param in tool.params:
            got = call.params.get(param.key)
            if not _same(got, self.param_value(stage, param)):
                what = "not found" if param.kind == "ref" else "rejected"
                return fail(f"{param.key} {got!r} {what}", latency_ms=20)
        if not self.works(stage, tool):
            return fail(tool.error or f"{tool.name} failed", latency_ms=tool.latency_ms // 3)
        if spec_stage.rule is not None and self.spec.noise > 0 and stage not in self._noisy:
            if self.luck() < self.spec.noise:
                self._noisy.add(stage)
                return fail("503 busy, try again", latency_ms=tool.latency_ms)
        self._noisy.add(stage)
        return ok(self._answer(stage), steps=tool.cost, latency_ms=tool.latency_ms * tool.cost)

    def _answer(self, stage: str) -> str:
        """A success summary; it carries the next stage's dependent feature when there is one."""
        index = self.order.index(stage)
        following = self.order[index + 1] if index + 1 < len(self.order) else None
        if following is not None:
            nxt = self.stages[following]
            if nxt.dependent and nxt.rule is not None and nxt is not self.stages[stage]:
                name = nxt.rule.features[0].name
                return f"done; {name}: {self.values[following][name]}"
        return "done"

    def _next(self, stage: str, call: Call) -> str | None:
        index = self.order.index(stage)
        return self.order[index + 1] if index + 1 < len(self.order) else None

    def cheapest_cost(self, key: str) -> int:
        """The fewest steps a right call at stage ``key`` costs (noise aside)."""
        return min(t.cost for t in self.stages[key].tools if self.works(key, t))

    def oracle_call(self) -> Call | None:
        """The call an agent that knows the hidden rules makes now (None when the episode is over)."""
        if self.done or self.stage is None:
            return None
        key = self.stage
        tool = min((t for t in self.stages[key].tools if self.works(key, t)), key=lambda t: (t.cost, t.name))
        return self.right_call(key, tool)

    def oracle_steps(self) -> float:
        # Every stage at its cheapest working tool; a noisy decision adds one failed call with
        # the family's probability (it fails at most once per decision).
        total = 0.0
        for key in self.order:
            total += self.cheapest_cost(key)
            if self.is_decision(key):
                total += self.spec.noise
        return total


def episode_class(spec: FamilySpec) -> type[GeneratedEpisode]:
    """The ``Episode`` subclass that plays ``spec``."""
    decoys: dict[str, tuple[tuple[str, str], ...]] = {}
    for stage in spec.stages:
        keys = [f"{stage.key}.{i + 1}" for i in range(stage.max_repeats)] if stage.repeated else [stage.key]
        for key in keys:
            decoys[key] = tuple((d.name, d.summary) for d in stage.decoys)

    class Family(GeneratedEpisode):
        pass

    Family.spec = spec
    Family.family = spec.name
    Family.task_type = spec.task_type
    Family.first_stage = OPENING
    Family.default_budget = spec.budget
    Family.decoys = MappingProxyType(decoys)
    Family.__name__ = Family.__qualname__ = f"Generated{spec.seed:04d}"
    return Family


def family_seed(name: str) -> int | None:
    """The seed of a registered generated family name (``gen-0042`` → 42), None for any other name."""
    match = NAME.match(name)
    return int(match.group(1)) if match else None


@functools.lru_cache(maxsize=4096)
def generated_class(name: str) -> type[GeneratedEpisode]:
    """The default-config family registered as ``name``.

    Raises:
        KeyError: ``name`` is not ``gen-<seed>`` (at least four digits).
    """
    seed = family_seed(name)
    if seed is None:
        raise KeyError(name)
    return episode_class(generate_family(seed))


def generated_episode(name: str, seed: int, budget: int | None = None) -> GeneratedEpisode:
    """A fresh instance of the registered generated family ``name``."""
    return generated_class(name)(seed, budget)
