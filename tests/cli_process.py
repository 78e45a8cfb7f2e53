"""Run the ``hindsight`` CLI in a process of its own, as an operator does.

A test process that holds the shared Ray session is a Ray driver, and Ray prints its workers'
messages (a killed actor's retried task, say) to the driver's stdout at any moment — into the
output of a CLI invoked in that process (typer's ``CliRunner``). What an operator reads comes from
a process of its own, so that is where the tests read it too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def cli(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    """``hindsight ARGS`` with ``HINDSIGHT_DATA_DIR=data_dir`` (and this process's environment)."""
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli", *args],
        env={**os.environ, "HINDSIGHT_DATA_DIR": str(data_dir)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def cli_out(*args: str, data_dir: Path) -> str:
    """The stdout of ``hindsight ARGS``; fails on a non-zero exit."""
    done = cli(*args, data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    return done.stdout


def cli_json(*args: str, data_dir: Path) -> Any:
    """``hindsight ARGS --json``, parsed; fails on a non-zero exit."""
    return json.loads(cli_out(*args, "--json", data_dir=data_dir))
