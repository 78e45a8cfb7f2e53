"""``hindsight evaluate`` on a small SQLite store: a table on the console and the reports as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.cli import app
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from tests.integration.experience.test_learning_loop import store_runs
from tests.unit.engine.builders import bulk_vs_single_runs, insert_run


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HINDSIGHT_DATA_DIR", str(tmp_path))
    url = Settings(data_dir=tmp_path).sql_url()
    upgrade(url)
    db = Database(url)
    # Stored one at a time, so finalize times follow the list: the last two are held out.
    runs = [*bulk_vs_single_runs(), *bulk_vs_single_runs(), insert_run(300, "bulk_import", True, run=7)]
    for trajectory in runs:
        store_runs(db, "team-a", [trajectory])
    store_runs(db, "team-b", bulk_vs_single_runs()[:3])
    db.dispose()
    return tmp_path


def test_evaluate_prints_a_table_and_writes_a_report_per_scorer(data_dir: Path) -> None:
    out = data_dir / "eval.json"
    result = CliRunner().invoke(
        app,
        ["evaluate", "--owner", "team-a", "--scorer", "default", "--scorer", "failure_averse", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "hit@1" in result.output
    assert "failure_averse" in result.output
    reports = json.loads(out.read_text())["reports"]
    assert [(r["owner"], r["config"]["scorer"]) for r in reports] == [
        ("team-a", "default"),
        ("team-a", "failure_averse"),
    ]
    for report in reports:
        assert (report["train_trajectories"], report["test_trajectories"]) == (10, 3)
        assert report["token_counter"].startswith("all-MiniLM-L6-v2")
        overall = report["overall"]
        assert overall["decisions"] == 3
        assert set(overall) >= {"hit_at_1", "hit_at_k", "avoid_precision", "coverage", "tokens_per_decision"}
        assert [(g["role"], g["task_type"]) for g in report["by_group"]] == [("executor", "product_import")]


def test_evaluate_takes_every_owner_on_its_own(data_dir: Path) -> None:
    out = data_dir / "all.json"
    result = CliRunner().invoke(app, ["evaluate", "--min-confidence", "0", "--details", "--json", str(out)])
    assert result.exit_code == 0, result.output
    reports = json.loads(out.read_text())["reports"]
    assert [r["owner"] for r in reports] == ["team-a", "team-b"]
    team_b = reports[1]
    assert (team_b["train_trajectories"], team_b["test_trajectories"]) == (2, 1)
    assert len(team_b["decisions"]) == 1


def test_evaluate_refuses_an_unknown_scorer(data_dir: Path) -> None:
    result = CliRunner().invoke(app, ["evaluate", "--scorer", "no-such-scorer"])
    assert result.exit_code == 2
    assert "unknown scorer" in result.output
