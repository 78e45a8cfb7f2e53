"""Generated families are reproducible, solvable by the oracle within budget, cover every shape, and
bad generator configurations are refused naming the field."""

from __future__ import annotations

import copy
import statistics
from typing import Any

import pytest
from pydantic import ValidationError

from bench.procedural.families import is_family, make_episode
from bench.procedural.generated import (
    SHAPES,
    GeneratedEpisode,
    GeneratorConfig,
    episode_class,
    family_name,
    generate_family,
    generated_class,
)
from bench.procedural.generated.spec import VALUE_KINDS, FamilySpec
from cluster.demo.env_base import Call, Episode
from cluster.demo.envs import FAMILIES

SEEDS = range(300)
"""Tuning seeds only (0-99) would be too few to meet every shape often; none of this tunes anything."""


def play_oracle(episode: GeneratedEpisode) -> GeneratedEpisode:
    while (call := episode.oracle_call()) is not None:
        episode.act(call)
    return episode


def cheapest_by_trying(episode: Episode) -> float:
    """Steps of the cheapest path, found by trying every option on a copy at every stage.

    In a noise-free family a failed call changes nothing, so the cheapest path takes the cheapest
    working option at each stage in turn; this reads none of the family's hidden rules.
    """
    total = 0.0
    while (view := episode.view()) is not None:
        costs: list[tuple[int, Call]] = []
        for option in view.options:
            trial = copy.deepcopy(episode)
            result = trial.act(option)
            if result.status == "success":
                costs.append((result.steps, option))
        assert costs, f"no option works at {episode.stage}"
        cost, best = min(costs, key=lambda item: item[0])
        episode.act(best)
        total += cost
    return total


def vocabulary(spec: FamilySpec) -> set[str]:
    names = {spec.task_verb, spec.noun, spec.refs_key}
    for stage in spec.stages:
        names |= {stage.name, *stage.keys, *(t.name for t in stage.tools), *(d.name for d in stage.decoys)}
        names |= {p.key for t in stage.tools for p in t.params}
        if stage.rule is not None:
            names |= {v for f in stage.rule.features for v in f.values}
    return names


def test_the_same_seed_gives_the_same_family_and_the_same_instances() -> None:
    for seed in (0, 7, 42):
        assert generate_family(seed) == generate_family(seed)
        cls = episode_class(generate_family(seed))
        first, second = cls(11), cls(11)
        assert first.task == second.task
        while (view := first.view()) is not None:
            assert view == second.view()
            call = first.oracle_call()
            assert call is not None
            assert first.act(call) == second.act(call)
        assert second.done


def test_different_seeds_give_different_families_and_instances() -> None:
    specs = [generate_family(seed) for seed in range(50)]
    assert len({s.task_type for s in specs}) == 50
    cls = generated_class(family_name(5))
    assert cls(1).task != cls(2).task


@pytest.mark.parametrize("seed", SEEDS)
def test_the_oracle_solves_every_instance_within_budget(seed: int) -> None:
    cls = generated_class(family_name(seed))
    spec = cls.spec
    for instance in range(6):
        episode = play_oracle(cls(instance))
        assert episode.succeeded, (seed, instance, episode.history)
        assert episode.steps <= episode.budget
        if spec.noise == 0:
            assert episode.steps == episode.oracle_steps()
        else:
            # At most one random failure per decision.
            assert episode.oracle_steps() - spec.noise * len(episode.order) <= episode.steps
            assert episode.steps <= episode.oracle_steps() + len(episode.order)


@pytest.mark.parametrize("seed", [s for s in range(0, 300, 3) if generate_family(s).noise == 0])
def test_the_oracle_is_the_cheapest_path_that_trying_every_option_finds(seed: int) -> None:
    # Noise-free families only: a noisy family's oracle is an expectation (see the noise test).
    cls = generated_class(family_name(seed))
    for instance in range(3):
        episode = cls(instance)
        assert cheapest_by_trying(episode) == cls(instance).oracle_steps()


def test_a_noisy_familys_oracle_is_its_expected_steps() -> None:
    noisy = [generated_class(family_name(s)) for s in SEEDS if generated_class(family_name(s)).spec.noise > 0]
    assert len(noisy) >= 20
    cls = noisy[0]
    assert 0.05 <= cls.spec.noise <= 0.10
    runs = [play_oracle(cls(i)) for i in range(3000)]
    spent = statistics.fmean(e.steps for e in runs)
    expected = statistics.fmean(e.oracle_steps() for e in runs)
    assert spent == pytest.approx(expected, abs=0.05)
    # The luck is the instance's and the step's: the same instance fails at the same step again.
    assert [r.status for *_, r in play_oracle(cls(17)).history] == [r.status for *_, r in runs[17].history]


def test_every_shape_and_value_kind_appears_across_seeds() -> None:
    specs = [generate_family(seed) for seed in SEEDS]
    for shape in SHAPES:
        share = sum(shape in s.shapes for s in specs) / len(specs)
        assert share >= 0.05, (shape, share)
    assert {k for s in specs for k in s.value_kinds} == set(VALUE_KINDS)
    assert sum(len({st.rule.kind for st in s.stages if st.rule}) >= 2 for s in specs) >= 100


def test_rules_stay_inside_the_default_ranges() -> None:
    for seed in SEEDS:
        spec = generate_family(seed)
        decisions = [s for s in spec.stages if s.rule is not None]
        assert 1 <= len(decisions) <= 3
        assert spec.stages[0].rule is None
        assert len(spec.stages[0].tools) == 1
        for stage in decisions:
            assert stage.rule is not None
            rule = stage.rule
            if rule.kind == "categorical":
                assert 2 <= len(rule.actions) <= 4
                assert 2 <= len(rule.features[0].values) <= 8
                assert set(rule.mapping) == set(range(len(rule.actions)))
            elif rule.kind == "bands":
                assert 2 <= len(rule.actions) <= 3
                assert list(rule.cuts) == sorted(set(rule.cuts))
            else:
                assert len(rule.actions) == 2
            assert len(stage.tools) + len(stage.decoys) <= 6
            assert sum(t.always_works for t in stage.tools) <= 1
            assert all(t.cost == 1 or (t.always_works and 2 <= t.cost <= 3) for t in stage.tools)


def test_a_repeated_decision_shows_the_same_stage_and_keys_for_each_item() -> None:
    seen = 0
    for seed in SEEDS:
        cls = generated_class(family_name(seed))
        if "repeated" not in cls.spec.shapes:
            continue
        for instance in range(5):
            episode = cls(instance)
            views = []
            while (view := episode.view()) is not None:
                views.append(view)
                call = episode.oracle_call()
                assert call is not None
                episode.act(call)
            names = [v.stage for v in views]
            for name in set(names):
                if names.count(name) > 1:
                    seen += 1
                    repeats = [v for v in views if v.stage == name]
                    assert len({tuple(v.context) for v in repeats}) == 1
                    assert all(v.options == repeats[0].options for v in repeats)  # the items differ in context only
    assert seen >= 20


def test_a_dependent_stage_reads_the_answer_of_the_step_before() -> None:
    seen = 0
    for seed in SEEDS:
        cls = generated_class(family_name(seed))
        if "dependent" not in cls.spec.shapes:
            continue
        episode = play_oracle(cls(3))
        for (before, _, answer), (key, _, _) in zip(episode.history, episode.history[1:], strict=False):
            stage = episode.stages[key]
            if stage.dependent and key != before and stage.rule is not None:
                feature = stage.rule.features[0].name
                assert f"{feature}: {episode.values[key][feature]}" in answer.summary
                seen += 1
    assert seen >= 20


def test_the_costlier_tool_works_everywhere_and_charges_its_cost() -> None:
    seen = 0
    for seed in SEEDS:
        cls = generated_class(family_name(seed))
        if "cost_pair" not in cls.spec.shapes or cls.spec.noise > 0:
            continue
        for instance in range(4):
            episode = cls(instance)
            while (key := episode.stage) is not None:
                costly = [t for t in episode.stages[key].tools if t.always_works]
                if costly:
                    trial = copy.deepcopy(episode)
                    result = trial.act(trial.right_call(key, costly[0]))
                    assert result.status == "success"
                    assert result.steps == costly[0].cost >= 2
                    seen += 1
                call = episode.oracle_call()
                assert call is not None
                episode.act(call)
    assert seen >= 50


def test_decoys_always_fail_and_wrong_parameters_are_rejected() -> None:
    checked_constant = checked_varying = 0
    for seed in range(100):
        cls = generated_class(family_name(seed))
        episode, other = cls(1), cls(2)
        while (view := episode.view()) is not None and (key := episode.stage) is not None:
            stage = episode.stages[key]
            for decoy in stage.decoys:
                assert copy.deepcopy(episode).act(Call(action=decoy.name)).status == "failure"
            right = episode.oracle_call()
            assert right is not None
            tool = next(t for t in stage.tools if t.name == right.action)
            for param in tool.params:
                if param.kind == "ref":
                    wrong: Any = other.ref
                elif param.feature is not None:
                    assert episode.values[key][param.feature] in view.context.values()
                    wrong = f"{right.params[param.key]}x"
                    checked_varying += 1
                else:
                    wrong = "not the constant"
                    checked_constant += 1
                call = Call(action=right.action, params={**right.params, param.key: wrong})
                assert copy.deepcopy(episode).act(call).status == "failure"
            episode.act(right)
    assert checked_constant >= 20
    assert checked_varying >= 20


def test_names_are_made_up_and_share_nothing_with_the_hand_written_families() -> None:
    written: set[str] = set()
    for family in FAMILIES:
        episode = make_episode(family, 0, budget=100)
        while (view := episode.view()) is not None:
            written |= set(view.context) | set(view.available_actions) | {view.stage}
            written |= {k for o in view.options for k in o.params}
            _advance(episode, view.options)
    written.discard("goal")
    for seed in range(100):
        assert not vocabulary(generate_family(seed)) & written


def _advance(episode: Episode, options: tuple[Call, ...]) -> None:
    assert any(episode.act(o).status == "success" for _ in range(4) for o in options)


def test_generated_families_are_registered_by_name() -> None:
    episode = make_episode("gen-0042", 3)
    assert isinstance(episode, GeneratedEpisode)
    assert episode.family == "gen-0042"
    assert episode.spec == generate_family(42)
    assert is_family("gen-0042")
    assert is_family("asset_preview")
    assert not is_family("gen-42")
    assert not is_family("gen-abcd")
    with pytest.raises(KeyError):
        make_episode("no_such_family", 0)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"decision_stages": {"low": 0, "high": 2}}, "decision_stages"),
        ({"actions_per_rule": {"low": 2, "high": 5}, "tools_per_stage": 4}, "tools_per_stage"),
        ({"bands": {"low": 2, "high": 7}}, "tools_per_stage"),
        ({"budget": 5}, "budget"),
        ({"noise": {"low": 0.5, "high": 1.0}}, "noise"),
        ({"noise": {"low": 0.2, "high": 0.1}}, "noise"),
        ({"categorical_values": {"low": 2, "high": 3}}, "categorical_values"),
        ({"actions_per_rule": {"low": 1, "high": 3}}, "actions_per_rule"),
        ({"expensive_cost": {"low": 1, "high": 3}}, "expensive_cost"),
        ({"expensive_cost": {"low": 2, "high": 11}}, "expensive_cost"),
        ({"repeats": {"low": 0, "high": 3}}, "repeats"),
        ({"repeat_share": 1.5}, "repeat_share"),
        ({"rule_kinds": []}, "rule_kinds"),
        ({"rule_kinds": ["spiral"]}, "rule_kinds"),
        ({"stages": 3}, "stages"),
    ],
)
def test_a_config_that_cannot_give_solvable_families_is_refused_naming_the_field(
    fields: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        GeneratorConfig.model_validate(fields)
    assert named in str(refused.value)


def test_the_config_is_frozen() -> None:
    config = GeneratorConfig()
    with pytest.raises(ValidationError):
        config.budget = 3  # type: ignore[misc]


def test_an_edge_config_still_gives_solvable_families() -> None:
    # Every modifier on, the widest rules, and a budget at the config's worst oracle exactly.
    config = GeneratorConfig.model_validate(
        {
            "decision_stages": {"low": 3, "high": 3},
            "repeat_share": 1.0,
            "dependent_share": 1.0,
            "cost_pair_share": 1.0,
            "noise_share": 1.0,
            "noise": {"low": 0.3, "high": 0.3},
            "categorical_values": {"low": 4, "high": 4},
            "typed_params": {"low": 2, "high": 2},
        }
    )
    config = config.model_copy(update={"budget": config.worst_oracle()})
    GeneratorConfig.model_validate(config.model_dump())  # still valid
    for seed in range(40):
        spec = generate_family(seed, config)
        assert spec.budget == config.worst_oracle()
        assert {"repeated", "dependent", "cost_pair", "noise"} <= set(spec.shapes)
        cls = episode_class(spec)
        for instance in range(5):
            episode = play_oracle(cls(instance))
            assert episode.succeeded
            assert episode.steps <= spec.budget
