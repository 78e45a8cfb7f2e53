"""Notebooks stay runnable: execute every code cell in order, as a kernel would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.engine import unregister_scorer

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_DATA_DIR", str(tmp_path))
    namespace: dict[str, object] = {}
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    assert cells
    try:
        for number, cell in enumerate(cells):
            exec(compile("".join(cell["source"]), f"{path.name}[{number}]", "exec"), namespace)
    finally:
        # The notebook registers a scorer; leave the registry as other tests expect it.
        unregister_scorer("all_or_nothing")
    comparison = namespace["comparison"]
    assert isinstance(comparison, dict)
    # Every scorer, the notebook's own included, should find the bulk-import lesson.
    assert "all_or_nothing" in comparison
    assert all(counts.get("bulk_import") for counts in comparison.values())


def test_there_is_a_notebook() -> None:
    assert NOTEBOOKS
