"""The notebook runs in CI as `make notebook` runs it (notebooks/run.py, executed by nbclient), on a
small demo dataset made in process, and draws its three plots instead of printing pages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
PLOTS = ("credit_dag.png", "scorers.png", "learning_curves.png")

pytestmark = [pytest.mark.slow, pytest.mark.milvus]


@pytest.mark.timeout(900)
def test_the_notebook_runs_on_the_demo_data_and_draws_its_plots(tmp_path: Path) -> None:
    plots, executed = tmp_path / "plots", tmp_path / "executed.ipynb"
    env = {**os.environ, "HINDSIGHT_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [sys.executable, "notebooks/run.py", "--plots", str(plots), "--output", str(executed)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert (tmp_path / "data" / "demo" / "hindsight.db").exists(), "the data is where `hindsight demo` puts it"
    for name in PLOTS:
        assert (plots / name).stat().st_size > 10_000, name
    outputs = [
        o for cell in nbformat.read(executed, as_version=4).cells if cell.cell_type == "code" for o in cell.outputs
    ]
    assert [o for o in outputs if o.output_type == "error"] == []
    assert sum("image/png" in o.get("data", {}) for o in outputs) == len(PLOTS)
    text = sum(len(o.get("text", "")) + len(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert text < 2_000, f"{text} characters of text: the notebook should draw, not print"
