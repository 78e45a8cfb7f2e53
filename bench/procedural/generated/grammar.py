"""Drawing a family from a seed: stages, hidden rules, decoys, harmless features, typed parameters.

The same ``(seed, config)`` always gives the same :class:`FamilySpec` (the draws come from one
``random.Random`` seeded by a string, which does not depend on the interpreter's hash seed).
Every family opens with a one-tool execution step, so a failed first decision has a parent, and
then takes one to three decisions, each under a rule shape of its own where there are enough
shapes to go round.
"""

from __future__ import annotations

import math
import random

from bench.procedural.generated.spec import (
    SHAPES,
    VALUE_KINDS,
    Decoy,
    FamilySpec,
    Feature,
    GeneratorConfig,
    Param,
    Rule,
    RuleKind,
    Shape,
    Stage,
    Tool,
    ValueKind,
)
from bench.procedural.generated.values import STYLES, Namer, quantile, typed_value

DEFAULT_CONFIG = GeneratorConfig()
DISTRACTOR_KINDS: tuple[ValueKind, ...] = (
    "date",
    "time",
    "datetime",
    "duration",
    "version",
    "mime_type",
    "email",
    "number",
)


def family_name(seed: int) -> str:
    """The registered name of the default-config family drawn from ``seed``: ``gen-0042``."""
    return f"gen-{seed:04d}"


def generate_family(seed: int, config: GeneratorConfig = DEFAULT_CONFIG) -> FamilySpec:
    """Draw the family for ``seed``.

    Args:
        seed: Family seed (0-99 for tuning, 100 and up for reporting).
        config: The ranges to draw from.

    Returns:
        The family: stages, hidden rules, budget and the shapes it has.
    """
    rng = random.Random(f"generated-family:{seed}")
    namer = Namer(rng)
    verb, noun = namer.word(), namer.word()
    count = rng.randint(config.decision_stages.low, config.decision_stages.high)
    dependent = rng.randrange(count) if rng.random() < config.dependent_share else None
    free = [i for i in range(count) if i != dependent]
    repeated = rng.choice(free) if free and rng.random() < config.repeat_share else None
    noisy = rng.random() < config.noise_share and config.noise.high > 0
    noise = round(rng.uniform(config.noise.low, config.noise.high), 3) if noisy else 0.0
    # Uneven: each tool 40-900 ms. Even: every tool within 5% of one speed, so latency tells no
    # tools apart and only steps can make one of them the costlier.
    latency = None if rng.random() < config.uneven_latency_share else rng.randint(100, 400)
    builder = _Builder(rng, namer, config, Param(key=namer.word(), kind="ref"), latency)
    stages = [builder.opening(noun)]
    for index, kind in enumerate(_kinds(rng, config.rule_kinds, count)):
        stages.append(builder.decision(index, kind, dependent=index == dependent, repeated=index == repeated))
    worst = worst_oracle(stages, noise)
    budget = config.budget if config.budget is not None else blind_budget(stages, noise)
    if budget < worst:  # the config's own check makes this unreachable; kept as the invariant's guard
        raise ValueError(f"budget {budget} is below this family's worst oracle {worst}")
    return FamilySpec(
        seed=seed,
        name=family_name(seed),
        task_type=f"{verb}_{noun}",
        task_verb=verb,
        noun=noun,
        ref_prefix=namer.word()[:4],
        stages=tuple(stages),
        noise=noise,
        budget=budget,
        shapes=shapes_of(stages, noise, uneven_latency=latency is None),
        value_kinds=tuple(
            k for k in VALUE_KINDS if any(p.kind == k for s in stages for t in s.tools for p in t.params)
        ),
    )


def _kinds(rng: random.Random, kinds: tuple[RuleKind, ...], count: int) -> list[RuleKind]:
    # Distinct shapes while they last, so a family with several decisions has several shapes.
    picked = rng.sample(kinds, min(count, len(kinds)))
    return picked + [rng.choice(kinds) for _ in range(count - len(picked))]


def visits(stage: Stage) -> int:
    """The most times an instance can take ``stage``."""
    return stage.max_repeats if stage.repeated else 1


def worst_oracle(stages: list[Stage] | tuple[Stage, ...], noise: float) -> int:
    """The most steps the oracle needs on any instance: the costliest target at every visit."""
    total = 0
    for stage in stages:
        if stage.rule is None:
            total += stage.tools[0].cost
            continue
        costs = {t.name: t.cost for t in stage.tools}
        costliest = max(costs[a] for a in stage.rule.actions)
        total += visits(stage) * (costliest + (1 if noise > 0 else 0))
    return total


def blind_budget(stages: list[Stage] | tuple[Stage, ...], noise: float) -> int:
    """Enough steps for an agent that tries every option once at every visit (plus one random failure)."""
    total = 0
    for stage in stages:
        every = sum(t.cost for t in stage.tools) + len(stage.decoys) + (1 if noise > 0 and stage.rule else 0)
        total += visits(stage) * every
    return total


def shapes_of(
    stages: list[Stage] | tuple[Stage, ...], noise: float, *, uneven_latency: bool = False
) -> tuple[Shape, ...]:
    """The rule shapes the stages have, in :data:`SHAPES` order."""
    found: set[str] = {s.rule.kind for s in stages if s.rule is not None}
    params = [p for s in stages for t in s.tools for p in t.params]
    flags = {
        "repeated": any(s.repeated for s in stages),
        "dependent": any(s.dependent for s in stages),
        "distractors": any(s.distractors for s in stages),
        "decoys": any(s.decoys for s in stages),
        "cost_pair": any(t.always_works for s in stages for t in s.tools),
        "noise": noise > 0,
        "uneven_latency": uneven_latency,
        "typed_constant": any(p.kind != "ref" and p.feature is None for p in params),
        "typed_varying": any(p.feature is not None for p in params),
    }
    found |= {name for name, present in flags.items() if present}
    return tuple(s for s in SHAPES if s in found)


class _Builder:
    """Draws stages for one family, sharing its random source and its names."""

    def __init__(
        self, rng: random.Random, namer: Namer, config: GeneratorConfig, ref: Param, latency: int | None
    ) -> None:
        self.rng = rng
        self.namer = namer
        self.config = config
        self.ref = ref
        self.latency = latency
        """Every tool's speed in an even family (ms); None: each tool its own."""

    def latency_ms(self) -> int:
        if self.latency is None:
            return self.rng.randint(40, 900)
        return round(self.latency * self.rng.uniform(0.95, 1.05))

    def opening(self, noun: str) -> Stage:
        varying: list[tuple[Feature, str]] = []
        tool = Tool(
            name=f"{self.namer.word()}_{noun}",
            params=(self.ref, *self.params(varying)),
            latency_ms=self.latency_ms(),
        )
        return Stage(
            key="open",
            name=self.namer.word(),
            goal=self.namer.phrase(2),
            tools=(tool,),
            varying=tuple(f for f, _ in varying),
            keys=tuple(f.name for f, _ in varying),
        )

    def decision(self, index: int, kind: RuleKind, *, dependent: bool, repeated: bool) -> Stage:
        rule = self.rule(kind)
        varying: list[tuple[Feature, str]] = []
        tools = [
            Tool(
                name=action,
                params=(self.ref, *self.params(varying)),
                latency_ms=self.latency_ms(),
                error=f"E{self.rng.randint(100, 999)} {self.namer.phrase(3)}",
            )
            for action in rule.actions
        ]
        if self.rng.random() < self.config.cost_pair_share:
            costly = self.rng.randrange(len(tools))
            cost = self.rng.randint(self.config.expensive_cost.low, self.config.expensive_cost.high)
            tools[costly] = tools[costly].model_copy(update={"cost": cost, "always_works": True})
        room = self.config.tools_per_stage - len(tools)
        decoys = tuple(
            Decoy(name=self.namer.name(), summary=f"E{self.rng.randint(100, 999)} {self.namer.phrase(4)}")
            for _ in range(min(room, self.rng.randint(self.config.decoys.low, self.config.decoys.high)))
        )
        count = self.rng.randint(self.config.distractors.low, self.config.distractors.high)
        distractors = tuple(self.distractor() for _ in range(count))
        keys = [*(f.name for f in rule.features), *(f.name for f in distractors), *(f.name for f, _ in varying)]
        self.rng.shuffle(keys)
        return Stage(
            key=f"d{index + 1}",
            name=self.namer.word(),
            goal=self.namer.phrase(2),
            tools=tuple(tools),
            rule=rule,
            decoys=decoys,
            distractors=distractors,
            varying=tuple(f for f, _ in varying),
            repeated=repeated,
            min_repeats=self.config.repeats.low if repeated else 1,
            max_repeats=self.config.repeats.high if repeated else 1,
            dependent=dependent,
            keys=tuple(keys),
        )

    def rule(self, kind: RuleKind) -> Rule:
        rng, config = self.rng, self.config
        if kind == "categorical":
            actions = rng.randint(config.actions_per_rule.low, config.actions_per_rule.high)
            count = rng.randint(max(config.categorical_values.low, actions), config.categorical_values.high)
            # Every action gets at least one value; the rest go anywhere.
            mapping = list(range(actions)) + [rng.randrange(actions) for _ in range(count - actions)]
            rng.shuffle(mapping)
            feature = Feature(name=self.feature_name(), kind="category", values=self.values(count))
            return Rule(kind=kind, features=(feature,), actions=self.actions(actions), mapping=tuple(mapping))
        if kind == "threshold":
            feature = self.number(self.feature_name())
            cut = quantile(feature, rng.uniform(0.25, 0.75))
            return Rule(kind=kind, features=(feature,), actions=self.actions(2), cuts=(cut,))
        if kind == "bands":
            feature = self.number(self.feature_name())
            bands = rng.randint(config.bands.low, config.bands.high)
            cuts = sorted({quantile(feature, i / bands + rng.uniform(-0.04, 0.04)) for i in range(1, bands)})
            if len(cuts) < bands - 1:  # jitter made two cuts equal: fall back to even shares
                cuts = [quantile(feature, i / bands) for i in range(1, bands)]
            return Rule(kind=kind, features=(feature,), actions=self.actions(bands), cuts=tuple(cuts))
        if kind == "boolean":
            flag = Feature(name=self.feature_name(), kind="flag", p_true=round(rng.uniform(0.3, 0.7), 2))
            return Rule(kind=kind, features=(flag,), actions=self.actions(2))
        # Conjunction: both parts hold about 70% of the time, so the joint case is about half.
        flag = Feature(name=self.feature_name(), kind="flag", p_true=round(rng.uniform(0.6, 0.8), 2))
        if rng.random() < 0.5:
            number = self.number(self.feature_name())
            cut = quantile(number, rng.uniform(0.2, 0.4))
            return Rule(kind=kind, features=(flag, number), actions=self.actions(2), cuts=(cut,))
        values = self.values(rng.randint(3, 5))
        subset = tuple(sorted(rng.sample(values, math.ceil(0.7 * len(values)))))
        category = Feature(name=self.feature_name(), kind="category", values=values)
        return Rule(kind=kind, features=(flag, category), actions=self.actions(2), subset=subset)

    def feature_name(self) -> str:
        return self.namer.name(self.rng.choice((1, 2)))

    def actions(self, count: int) -> tuple[str, ...]:
        return tuple(self.namer.name() for _ in range(count))

    def values(self, count: int) -> tuple[str, ...]:
        return tuple(self.namer.word() for _ in range(count))

    def number(self, name: str) -> Feature:
        rng = self.rng
        integer = rng.random() < 0.7
        if rng.random() < 0.5:
            low = rng.choice((1.0, 2.0, 5.0, 10.0))
            return Feature(
                name=name, kind="number", low=low, high=low * 10 ** rng.randint(2, 4), integer=integer, log_scale=True
            )
        low = rng.choice((0.0, 1.0, 10.0, 100.0))
        high = low + rng.choice((20.0, 50.0, 100.0, 1000.0))
        return Feature(name=name, kind="number", low=low, high=high, integer=integer)

    def distractor(self) -> Feature:
        rng, name = self.rng, self.feature_name()
        pick = rng.choice(("category", "number", "flag", "typed"))
        if pick == "category":
            return Feature(name=name, kind="category", values=self.values(rng.randint(2, 6)))
        if pick == "number":
            return self.number(name)
        if pick == "flag":
            return Feature(name=name, kind="flag", p_true=round(rng.uniform(0.2, 0.8), 2))
        kind = rng.choice(DISTRACTOR_KINDS)
        return Feature(name=name, kind="typed", value_kind=kind, style=rng.randrange(STYLES[kind]))

    def params(self, varying: list[tuple[Feature, str]]) -> list[Param]:
        """A tool's typed parameters; varying ones come from (and may share) the stage's ``varying`` features."""
        rng, out = self.rng, []
        for kind in rng.sample(VALUE_KINDS, rng.randint(self.config.typed_params.low, self.config.typed_params.high)):
            style = rng.randrange(STYLES[kind])
            if rng.random() < self.config.constant_share:
                value = typed_value(kind, style, rng, ext=self.namer.word()[:3])
                out.append(Param(key=self.namer.word(), kind=kind, constant=value))
                continue
            shared = [(f, key) for f, key in varying if _kind_of(f) == kind]
            if shared and rng.random() < 0.5:
                feature, key = rng.choice(shared)
            else:
                name = self.feature_name()
                if kind == "number":
                    feature = Feature(name=name, kind="number", low=1.0, high=5000.0, integer=style == 0)
                else:
                    feature = Feature(name=name, kind="typed", value_kind=kind, style=style)
                key = self.namer.word()
                varying.append((feature, key))
            out.append(Param(key=key, kind=kind, feature=feature.name))
        return out


def _kind_of(feature: Feature) -> str:
    return "number" if feature.kind == "number" else str(feature.value_kind)
