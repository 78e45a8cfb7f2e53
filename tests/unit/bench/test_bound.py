"""The ideal learner of the generated families: exact where the evidence decides, a true posterior
where it does not, and never below the oracle."""

from __future__ import annotations

import random

import pytest

from bench.procedural.bound import _unseen_value, main, measure, play, posterior, steps_to, tries
from bench.procedural.generated import GeneratorConfig, Span, generated_class
from bench.procedural.generated.grammar import _Builder
from bench.procedural.generated.report import RunConfig
from bench.procedural.generated.spec import Param, Stage, Tool
from bench.procedural.generated.values import Namer

SEEDS = [f"gen-{seed:04d}" for seed in range(60)]


@pytest.mark.parametrize("family", SEEDS)
def test_with_its_own_visits_known_it_needs_exactly_the_oracles_steps(family: str) -> None:
    episode = generated_class(family)(seed=7)
    seen: dict = {}
    for key, values, tool in play(episode, {}).learned:
        seen.setdefault(key, []).append((values, tool))
    assert play(episode, seen).steps == pytest.approx(episode.oracle_steps())


@pytest.mark.parametrize("family", SEEDS)
def test_knowing_nothing_it_needs_at_least_the_oracle_and_every_posterior_is_a_distribution(family: str) -> None:
    episode = generated_class(family)(seed=3)
    for key in episode.order:
        rule = episode.stages[key].rule
        if rule is not None:
            chances = posterior(rule, [], episode.values[key])
            assert sum(chances.values()) == pytest.approx(1.0)
            assert set(chances) == set(rule.actions)
    played = play(episode, {})
    assert played.decisions >= 1
    assert played.steps >= episode.oracle_steps() - 1e-9


def test_the_categorical_prior_is_the_generators_own_draw() -> None:
    """Three actions over five values, two values seen on one action: the chance a third value has it too.

    A uniform prior would say 1/3; the generator gives every action a value first, which this must
    follow. Measured by drawing the generator's own rules.
    """
    config = GeneratorConfig(actions_per_rule=Span(low=3, high=3), categorical_values=Span(low=5, high=5))
    same = cases = 0
    for seed in range(20_000):
        rng = random.Random(seed)
        rule = _Builder(rng, Namer(rng), config, Param(key="ref", kind="ref"), None).rule("categorical")
        if rule.mapping[0] == rule.mapping[1]:
            cases += 1
            same += rule.mapping[2] == rule.mapping[0]
    predicted = _unseen_value(3, (2, 0, 0), 3)
    assert sum(predicted) == pytest.approx(1.0)
    assert abs(predicted[0] - 1 / 3) > 0.05
    assert same / cases == pytest.approx(predicted[0], abs=0.02)


def test_a_seen_category_is_known_and_an_unseen_one_leans_to_an_action_without_a_value() -> None:
    rule = next(
        s.rule
        for f in (f"gen-{i:04d}" for i in range(200))
        for s in generated_class(f).spec.stages
        if s.rule is not None and s.rule.kind == "categorical" and len(s.rule.actions) == 2
        if len(s.rule.features[0].values) == 3
    )
    name = rule.features[0].name
    first, second, third = rule.features[0].values
    seen = [({name: first}, rule.actions[0]), ({name: second}, rule.actions[0])]
    assert posterior(rule, seen, {name: first}) == {rule.actions[0]: 1.0, rule.actions[1]: 0.0}
    # Two values of three on one action: the last must be the other's, or it would have none.
    assert posterior(rule, seen, {name: third})[rule.actions[1]] == pytest.approx(1.0)


def _steps(stage: Stage, chances: dict[str, float], target: str) -> tuple[float, float]:
    return steps_to(stage, chances, tries(stage, chances), target)


def test_it_tries_the_likeliest_first_and_falls_back_when_that_is_cheaper() -> None:
    cheap = (Tool(name="a"), Tool(name="b"))
    plain = Stage(key="d1", name="s", goal="g", tools=cheap)
    assert _steps(plain, {"a": 0.2, "b": 0.8}, "b") == (1.0, 1.0)
    assert _steps(plain, {"a": 0.2, "b": 0.8}, "a") == (2.0, 0.0)
    # Equally likely: charged the average of both orders, not the lucky one.
    assert _steps(plain, {"a": 0.5, "b": 0.5}, "a") == (1.5, 0.5)
    paired = Stage(key="d1", name="s", goal="g", tools=(*cheap, Tool(name="c", cost=2, always_works=True)))
    # Trying a and b expects 1 + 0.7 + 0.4 x 2 = 2.5 steps; the fallback at once 2, and it always works.
    assert tries(paired, {"a": 0.3, "b": 0.3, "c": 0.4}) == (["a", "b"], 0)
    assert _steps(paired, {"a": 0.3, "b": 0.3, "c": 0.4}, "a") == (2.0, 1.0)
    # Likely enough, a cheap tool goes first; where it fails the fallback follows.
    assert tries(paired, {"a": 0.8, "b": 0.1, "c": 0.1}) == (["a", "b"], 1)
    assert _steps(paired, {"a": 0.8, "b": 0.1, "c": 0.1}, "b") == (3.0, 0.0)


def test_more_rounds_leave_the_ideal_learner_nearer_the_oracle(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--families", "30", "--seed-start", "0", "--rounds", "3"]) == 0
    rows = [line.split("│")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("│")]
    means = [float(row[1]) for row in rows]
    assert len(means) == 3
    assert means[0] > means[1] > means[2] >= 1.0


def test_learning_only_from_its_own_calls_it_knows_less_than_from_every_visit() -> None:
    """Where a tool works everywhere, calling it at once shows nothing of which cheap tool works."""
    config = RunConfig(families=40, seed_start=0, conditions=("hindsight",))
    every, _ = measure(config)
    own, _ = measure(config, own_calls=True)
    assert own[-1].ratio.mean > every[-1].ratio.mean
    assert own[0].ratio.mean == pytest.approx(every[0].ratio.mean)  # round 1 knows nothing either way
