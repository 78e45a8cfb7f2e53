"""Run the ``hindsight`` CLI in a process of its own and read its ``--json`` answer.

A test process that holds the shared Ray session is a Ray driver, and Ray prints its workers'
messages (a killed actor's retried task, say) to the driver's stdout — into the output of a CLI
invoked in that process. The JSON an operator reads comes from a process of its own, so that is
where the tests read it too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def cli_json(*args: str, data_dir: Path) -> Any:
    """``hindsight ARGS --json`` with ``HINDSIGHT_DATA_DIR=data_dir``, parsed; fails on a non-zero exit."""
    done = subprocess.run(
        [sys.executable, "-m", "cluster.cli", *args, "--json"],
        env={**os.environ, "HINDSIGHT_DATA_DIR": str(data_dir)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
