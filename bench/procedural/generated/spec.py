"""What a generated family is made of, and the ranges the generator draws it from.

A :class:`FamilySpec` is plain data: an opening execution stage, then decision stages, each with
a hidden :class:`Rule` over context features choosing which of its tools works, plus harmless
features, decoy tools and typed parameters. :mod:`~bench.procedural.generated.grammar` draws
specs, :mod:`~bench.procedural.generated.episode` plays them.

:class:`GeneratorConfig` refuses, when it is built, any configuration some family drawn from it
could not be solved under (more actions than tools, a budget below the oracle, noise of 1, no
decision stage, fewer categorical values than actions): the error names the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Self

from pydantic import Field, JsonValue, model_validator

from cluster.core.types import Frozen

RuleKind = Literal["categorical", "threshold", "bands", "boolean", "conjunction"]
RULE_KINDS: tuple[RuleKind, ...] = ("categorical", "threshold", "bands", "boolean", "conjunction")
Shape = Literal[
    "categorical",
    "threshold",
    "bands",
    "boolean",
    "conjunction",
    "repeated",
    "dependent",
    "distractors",
    "decoys",
    "cost_pair",
    "noise",
    "uneven_latency",
    "typed_constant",
    "typed_varying",
]
SHAPES: tuple[Shape, ...] = (
    *RULE_KINDS,
    "repeated",
    "dependent",
    "distractors",
    "decoys",
    "cost_pair",
    "noise",
    "uneven_latency",
    "typed_constant",
    "typed_varying",
)
"""Every rule shape a family may record, in a fixed order."""
ValueKind = Literal[
    "date", "time", "datetime", "duration", "version", "mime_type", "path", "url", "email", "id", "number", "text"
]
VALUE_KINDS: tuple[ValueKind, ...] = (
    "date",
    "time",
    "datetime",
    "duration",
    "version",
    "mime_type",
    "path",
    "url",
    "email",
    "id",
    "number",
    "text",
)
FeatureKind = Literal["category", "number", "flag", "typed"]


class Span(Frozen):
    """An inclusive integer range ``low..high``."""

    low: int = Field(ge=0)
    high: int = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is above high ({self.high})")
        return self


class Rate(Frozen):
    """An inclusive range of probabilities ``low..high``, each below 1."""

    low: float = Field(ge=0.0, lt=1.0)
    high: float = Field(ge=0.0, lt=1.0, description="Below 1: a call that always fails can never be solved.")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is above high ({self.high})")
        return self


class GeneratorConfig(Frozen):
    """The ranges a family is drawn from. Defaults give every shape a fair share of families.

    Raises:
        pydantic.ValidationError: A range is out of bounds, or some family drawn from this
            configuration could not be solved; the message names the field.
    """

    decision_stages: Span = Field(default=Span(low=1, high=3), description="Decision stages after the opening step.")
    rule_kinds: tuple[RuleKind, ...] = Field(default=RULE_KINDS, min_length=1, description="Rule shapes to draw from.")
    actions_per_rule: Span = Field(default=Span(low=2, high=4), description="Actions a categorical rule maps onto.")
    categorical_values: Span = Field(default=Span(low=2, high=8), description="Values of a categorical feature.")
    bands: Span = Field(default=Span(low=2, high=3), description="Numeric bands of a band rule, one action each.")
    tools_per_stage: int = Field(default=6, ge=2, le=12, description="Most tools offered at a decision stage.")
    decoys: Span = Field(default=Span(low=0, high=2), description="Always-failing tools per decision stage.")
    distractors: Span = Field(default=Span(low=0, high=4), description="Harmless features per decision stage.")
    repeat_share: float = Field(default=0.3, ge=0.0, le=1.0, description="Families with a repeated decision.")
    repeats: Span = Field(default=Span(low=1, high=3), description="Times the repeated decision is taken per task.")
    dependent_share: float = Field(
        default=0.3, ge=0.0, le=1.0, description="Families where a stage's rule reads the step before's answer."
    )
    cost_pair_share: float = Field(
        default=0.3, ge=0.0, le=1.0, description="Decision stages with an always-working, costlier tool."
    )
    expensive_cost: Span = Field(default=Span(low=2, high=3), description="Steps the costlier tool is charged.")
    noise_share: float = Field(default=0.25, ge=0.0, le=1.0, description="Families whose working calls fail at random.")
    noise: Rate = Field(default=Rate(low=0.05, high=0.10), description="How often a working call fails, when noisy.")
    uneven_latency_share: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="Families whose tools answer at very different speeds (else all within a few percent).",
    )
    typed_params: Span = Field(default=Span(low=0, high=2), description="Typed parameters per tool (besides its ref).")
    constant_share: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Typed parameters that are one constant for the whole family."
    )
    budget: int | None = Field(
        default=None, ge=1, description="Steps per episode; None: enough for an agent that tries every option once."
    )

    @model_validator(mode="after")
    def _solvable(self) -> Self:
        if self.decision_stages.low < 1:
            raise ValueError("decision_stages: a family needs at least one decision stage (low >= 1)")
        if self.actions_per_rule.low < 2:
            raise ValueError("actions_per_rule: a rule chooses among at least 2 actions (low >= 2)")
        if self.bands.low < 2:
            raise ValueError("bands: a band rule needs at least 2 bands (low >= 2)")
        if self.repeats.low < 1:
            raise ValueError("repeats: a repeated decision is taken at least once (low >= 1)")
        if self.expensive_cost.low < 2:
            raise ValueError("expensive_cost: the costlier tool of a pair costs at least 2 steps (low >= 2)")
        if self.expensive_cost.high > 10:
            raise ValueError("expensive_cost: a call is charged at most 10 steps")
        if "categorical" in self.rule_kinds and self.categorical_values.high < self.actions_per_rule.high:
            raise ValueError(
                f"categorical_values: at most {self.categorical_values.high} values cannot map onto "
                f"{self.actions_per_rule.high} actions (actions_per_rule.high); every action needs a value"
            )
        if "categorical" in self.rule_kinds and self.categorical_values.low < 2:
            raise ValueError("categorical_values: a categorical feature needs at least 2 values (low >= 2)")
        widest = max(rule_actions(kind, self) for kind in self.rule_kinds)
        if widest > self.tools_per_stage:
            raise ValueError(
                f"tools_per_stage: {self.tools_per_stage} tools cannot offer a rule's {widest} actions "
                "(actions_per_rule.high or bands.high)"
            )
        if self.budget is not None and self.budget < self.worst_oracle():
            raise ValueError(
                f"budget: {self.budget} steps is below the oracle's worst case of {self.worst_oracle()} steps "
                "for this configuration (decision_stages.high x repeats.high x expensive_cost.high, plus "
                "one retry per decision when noisy, plus the opening step)"
            )
        return self

    def worst_oracle(self) -> int:
        """The most steps the oracle can need on any instance of any family drawn from this config."""
        per_visit = self.expensive_cost.high if self.cost_pair_share > 0 else 1
        if self.noise_share > 0 and self.noise.high > 0:
            per_visit += 1  # at most one random failure per decision (see GeneratedEpisode)
        repeats = self.repeats.high if self.repeat_share > 0 else 1
        return 1 + self.decision_stages.high * repeats * per_visit


def rule_actions(kind: RuleKind, config: GeneratorConfig) -> int:
    """The most actions a rule of ``kind`` can have under ``config``."""
    if kind == "categorical":
        return config.actions_per_rule.high
    if kind == "bands":
        return config.bands.high
    return 2


class Feature(Frozen):
    """An observable context feature and how its value is drawn per instance."""

    name: str = Field(min_length=1)
    kind: FeatureKind
    values: tuple[str, ...] = Field(default=(), description="category: the values, drawn uniformly.")
    low: float = Field(default=0.0, description="number: smallest value.")
    high: float = Field(default=1.0, description="number: largest value.")
    integer: bool = Field(default=True, description="number: whole numbers.")
    log_scale: bool = Field(default=False, description="number: spread evenly over orders of magnitude.")
    p_true: float = Field(default=0.5, ge=0.0, le=1.0, description="flag: chance of true.")
    value_kind: ValueKind | None = Field(default=None, description="typed: what the string is.")
    style: int = Field(default=0, ge=0, description="typed: which of the kind's formats.")


class Rule(Frozen):
    """The hidden rule of a decision stage: which of its actions works, from the features' values.

    * categorical: ``mapping[i]`` is the action for ``features[0].values[i]``;
    * threshold / bands: ascending ``cuts``; a value ``<= cuts[i]`` (and above the cut before)
      picks action ``i``, above the last cut the last action;
    * boolean: true picks action 0, false action 1;
    * conjunction: action 0 when ``features[0]`` is true and ``features[1]`` is above ``cuts[0]``
      (a number) or one of ``subset`` (a category), else action 1.
    """

    kind: RuleKind
    features: tuple[Feature, ...] = Field(min_length=1, max_length=2)
    actions: tuple[str, ...] = Field(min_length=2)
    mapping: tuple[int, ...] = ()
    cuts: tuple[float, ...] = ()
    subset: tuple[str, ...] = ()

    def target(self, values: Mapping[str, JsonValue]) -> str:
        """The action that works for these feature values."""
        first = values[self.features[0].name]
        if self.kind == "categorical":
            return self.actions[self.mapping[self.features[0].values.index(str(first))]]
        if self.kind in ("threshold", "bands"):
            return self.actions[sum(_number(first) > cut for cut in self.cuts)]
        if self.kind == "boolean":
            return self.actions[0 if first is True else 1]
        second = values[self.features[1].name]
        if self.features[1].kind == "number":
            holds = _number(second) > self.cuts[0]
        else:
            holds = second in self.subset
        return self.actions[0 if first is True and holds else 1]


def _number(value: JsonValue) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


class Param(Frozen):
    """One parameter of a tool: the instance's ref, a family constant, or a value from the context."""

    key: str = Field(min_length=1)
    kind: ValueKind | Literal["ref"]
    constant: JsonValue = Field(default=None, description="The one value every call must pass (constants).")
    feature: str | None = Field(default=None, description="The context feature holding the value (varying).")


class Tool(Frozen):
    """A tool offered at a stage."""

    name: str = Field(min_length=1)
    params: tuple[Param, ...] = ()
    cost: int = Field(default=1, ge=1, le=10, description="Steps a call is charged when it works.")
    always_works: bool = Field(default=False, description="The costlier tool of a cost pair: works everywhere.")
    latency_ms: int = Field(default=100, ge=0)
    error: str = Field(default="", description="What the tool answers when the rule says no.")


class Decoy(Frozen):
    """A plausible tool that never works at its stage."""

    name: str = Field(min_length=1)
    summary: str = Field(min_length=1)


class Stage(Frozen):
    """One stage: the opening execution step (no rule, one tool) or a decision."""

    key: str = Field(min_length=1, description="Internal stage key; a repeated stage adds '.<item>'.")
    name: str = Field(min_length=1, description="The stage name an agent sees (the same for every repeat).")
    goal: str = Field(min_length=1)
    tools: tuple[Tool, ...] = Field(min_length=1)
    rule: Rule | None = None
    decoys: tuple[Decoy, ...] = ()
    distractors: tuple[Feature, ...] = ()
    varying: tuple[Feature, ...] = Field(default=(), description="Features whose values tools pass as parameters.")
    repeated: bool = Field(default=False, description="Taken once per item, 1 to max_repeats items per task.")
    max_repeats: int = Field(default=1, ge=1)
    min_repeats: int = Field(default=1, ge=1)
    dependent: bool = Field(default=False, description="The rule's first feature is the step before's answer.")
    keys: tuple[str, ...] = Field(default=(), description="Context keys in the order shown (goal and refs aside).")


class FamilySpec(Frozen):
    """A generated family: everything an episode needs, drawn from one seed."""

    seed: int = Field(ge=0)
    name: str = Field(min_length=1)
    task_type: str = Field(min_length=1)
    task_verb: str = Field(min_length=1)
    noun: str = Field(min_length=1, description="What the task works on; the context lists it under noun + 's'.")
    ref_prefix: str = Field(min_length=1)
    stages: tuple[Stage, ...] = Field(min_length=2)
    noise: float = Field(default=0.0, ge=0.0, lt=1.0, description="Chance a working decision call fails once.")
    budget: int = Field(ge=1)
    shapes: tuple[Shape, ...] = Field(description="The rule shapes this family has, in SHAPES order.")
    value_kinds: tuple[ValueKind, ...] = Field(default=(), description="Typed parameter kinds its tools take.")

    @property
    def refs_key(self) -> str:
        """The context key listing the instance's ref."""
        return f"{self.noun}s"
