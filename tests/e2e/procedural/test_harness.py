"""The four-condition harness runs end to end on a tiny configuration, and its report prints."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from rich.console import Console
from sqlalchemy import text

from cluster.demo.harness import (
    ALL,
    BenchConfig,
    BenchResults,
    check_targets,
    in_process_clients,
    pick_choice,
    run_bench,
    seed_for,
)
from cluster.demo.report import print_report, write_json
from cluster.services import Services, build_services
from cluster.settings import Settings

TINY = BenchConfig(
    families=("product_import", "data_sync"),
    conditions=("none", "replay", "naive", "hindsight"),
    rounds=2,
    train_episodes=1,
    eval_episodes=2,
)


@pytest.fixture(scope="module")
def bench_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    svc = build_services(Settings(data_dir=tmp_path_factory.mktemp("bench")))
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def results(bench_services: Services) -> BenchResults:
    """One tiny run shared by the tests below (it is read-only)."""
    waits: list[int] = []

    async def wait_for_analysis() -> None:
        waits.append(1)

    async def run() -> BenchResults:
        return await run_bench(in_process_clients(bench_services), wait_for_analysis, TINY)

    out = anyio.run(run)
    assert len(waits) == TINY.rounds
    return out


def test_every_condition_round_phase_and_family_is_measured(results: BenchResults) -> None:
    keys = {(c.condition, c.round, c.phase, c.family) for c in results.cells}
    families = (*TINY.families, ALL)
    expected = {
        (cond, r, phase, fam)
        for cond in TINY.conditions
        for r in (1, 2)
        for phase in ("eval", "train")
        for fam in families
    }
    assert keys == expected
    for cell in results.cells:
        per_family = TINY.eval_episodes if cell.phase == "eval" else TINY.train_episodes
        assert cell.episodes == per_family * (len(TINY.families) if cell.family == ALL else 1)
        assert cell.mean_steps >= 2


def test_round_one_is_the_same_for_every_condition(results: BenchResults) -> None:
    # No memory exists yet, and exploration is seeded by the instance: identical behaviour.
    first = {c.condition: (c.successes, c.mean_steps) for c in results.cells if c.round == 1 and c.family == ALL}
    assert len(set(first.values())) == 1


def test_each_condition_records_under_its_own_owner(results: BenchResults, bench_services: Services) -> None:
    with bench_services.db.transaction() as session:
        owners: dict[str, int] = dict(
            session.execute(text("SELECT owner, count(*) FROM trajectories GROUP BY owner")).all()
        )
    assert set(owners) == {"bench-none", "bench-replay", "bench-naive", "bench-hindsight"}
    # One trajectory per role: product_import has one role, data_sync three.
    per_condition = TINY.rounds * (TINY.train_episodes + TINY.eval_episodes) * (1 + 3)
    assert all(count == per_condition for count in owners.values())


def test_the_report_prints_and_the_json_round_trips(results: BenchResults, tmp_path: Path) -> None:
    buffer = io.StringIO()
    print_report(results, Console(file=buffer, width=160))
    printed = buffer.getvalue()
    assert "Unseen instances" in printed
    assert "product_import" in printed
    assert "Targets, round 2" in printed
    path = tmp_path / "out" / "results.json"
    write_json(results, path)
    assert BenchResults.model_validate_json(path.read_text(encoding="utf-8")) == results


def test_instance_seeds_never_repeat_across_rounds_and_phases() -> None:
    config = BenchConfig(eval_episodes=50, train_episodes=50)
    seeds = [seed_for(config, r, p, i) for r in (1, 2, 3) for p in ("train", "eval") for i in range(50)]
    assert len(set(seeds)) == len(seeds)


def test_targets_compare_hindsight_with_both_baselines(results: BenchResults) -> None:
    cells = [
        c.model_copy(update={"success_rate": rate, "mean_steps": steps})
        for c in results.cells
        for rate, steps in [
            {"none": (0.9, 5.0), "replay": (0.8, 6.0), "naive": (0.9, 3.5), "hindsight": (1.0, 2.9)}[c.condition]
        ]
    ]
    check = check_targets(cells, 2)
    assert check.success_ok
    assert check.steps_ok
    assert check.beats_replay
    assert check.beats_naive
    assert check.step_reduction == pytest.approx(0.42)


def test_hindsight_learns_between_rounds_and_follows_what_it_learned(tmp_path: Path) -> None:
    """End to end: MCP capture, background attribution (drained by the caller), query, outcome report."""
    from cluster.analysis import AnalysisService

    services = build_services(Settings(data_dir=tmp_path))
    analysis = AnalysisService(services.db, services.experience, batch_size=10)
    config = BenchConfig(
        families=("table_lookup",), conditions=("hindsight",), rounds=2, train_episodes=6, eval_episodes=3
    )

    async def drain() -> None:
        while analysis.run_once().trajectories:
            pass

    async def run() -> BenchResults:
        return await run_bench(in_process_clients(services), drain, config)

    try:
        out = anyio.run(run)
    finally:
        services.close()
    first, second = out.cell("hindsight", 1), out.cell("hindsight", 2)
    assert first is not None
    assert second is not None
    assert first.templates_served == 0
    assert second.templates_served > 0
    assert second.templates_applied > 0
    assert out.templates
    assert all(t.task_type == "scrape" for t in out.templates)


def test_every_cell_carries_its_oracle_and_the_ratio_to_it(results: BenchResults) -> None:
    for cell in results.cells:
        assert cell.oracle_steps > 0
        assert cell.oracle_ratio == pytest.approx(cell.mean_steps / cell.oracle_steps)
        # No agent beats an oracle that knows the rules (product_import and data_sync are not noisy).
        assert cell.mean_steps >= cell.oracle_steps


def test_the_generalization_report_keeps_the_fixed_groups_apart(results: BenchResults) -> None:
    report = results.generalization
    assert report is not None
    assert set(report.groups["tuning"]).isdisjoint(report.groups["held_out"])
    assert report.choices.chosen_on == "tuning"
    assert report.choices.top_k == TINY.top_k
    # TINY runs two tuning families only: one group, every condition, both families' episodes.
    assert {(c.group, c.condition) for c in report.cells} == {("tuning", cond) for cond in TINY.conditions}
    for cell in report.cells:
        assert cell.families == TINY.families
        assert cell.episodes == TINY.eval_episodes * len(TINY.families)
        last = results.cell(cell.condition, TINY.rounds)
        assert last is not None
        assert cell.success_rate == pytest.approx(last.success_rate)
        assert cell.mean_steps == pytest.approx(last.mean_steps)


def test_the_report_shows_every_family_for_every_condition(results: BenchResults) -> None:
    buffer = io.StringIO()
    print_report(results, Console(file=buffer, width=200))
    printed = buffer.getvalue()
    assert "Per family, round 2" in printed
    assert "steps/oracle" in printed
    assert "Generalization, round 2" in printed
    assert "naive" in printed


def test_agent_settings_are_picked_on_the_tuning_group_alone(results: BenchResults) -> None:
    def run(top_k: int, success: float, ratio: float, families: tuple[str, ...] = TINY.families) -> BenchResults:
        cells = tuple(c.model_copy(update={"success_rate": success, "oracle_ratio": ratio}) for c in results.cells)
        config = results.config.model_copy(update={"top_k": top_k, "families": families})
        return results.model_copy(update={"config": config, "cells": cells})

    choice = pick_choice([run(8, 0.9, 1.1), run(5, 1.0, 1.4), run(3, 1.0, 1.2)])
    assert (choice.top_k, choice.chosen_on) == (3, "tuning")
    assert "top_k 8" in choice.how
    with pytest.raises(ValueError, match="tuning-group"):
        pick_choice([run(8, 1.0, 1.0, families=("product_import", "asset_preview"))])
    with pytest.raises(ValueError, match="no candidates"):
        pick_choice([])
