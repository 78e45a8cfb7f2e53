"""The generated-family run works end to end on a few families in process, and its JSON reads back."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.procedural.generated.report import GeneratedResults
from bench.procedural.generated_run import main


def test_a_small_generated_run_measures_every_condition_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "generated.json"
    argv = ["--families", "3", "--seed-start", "0", "--rounds", "1", "--train", "1", "--eval", "2"]
    assert main([*argv, "--out", str(out), "--data-dir", str(tmp_path / "data"), "--quiet"]) == 0
    results = GeneratedResults.model_validate_json(out.read_text(encoding="utf-8"))
    assert {(c.family, c.condition) for c in results.cells} == {
        (f"gen-000{i}", c) for i in range(3) for c in ("none", "replay", "naive", "hindsight")
    }
    assert all(c.episodes == 2 and c.ratio > 0 and c.first_try <= c.decisions for c in results.cells)
    # Round 1 runs before anything is learned, on the same instances: every condition behaves alike.
    assert len({(r.success_rate, r.ratio, r.first_try) for r in results.summary}) == 1
    assert len(results.comparisons) == 1
    assert results.comparisons[0].ties_naive == 1.0
    assert len(results.worst) == 1
    assert set(results.worst[0].shapes) <= {s.shape for s in results.shapes}
    assert results.seconds_per_family > 0
    printed = capsys.readouterr().out
    assert "steps ÷ oracle" in printed
    assert "Worst tenth" in printed
