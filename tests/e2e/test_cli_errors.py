"""What an operator reads when a command cannot run: one line naming what to fix, exit code 1 (issue 48).

It was a traceback of 500 lines for a bad database URL, 46 for a missing config and 43 for a busy
port, the last after a Ray instance had started for 24 s. ``-v`` still shows the traceback.
Each command runs in a process of its own, as an operator runs it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_process import cli


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    return errors[0]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql+psycopg://nobody@127.0.0.1:1/none", "cannot use the database: "),
        ("not a url", "the database URL cannot be read"),
    ],
)
def test_a_bad_database_url_is_one_line_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, expected: str
) -> None:
    monkeypatch.setenv("HINDSIGHT_DATABASE_URL", url)
    line = one_line_error(cli("library", "list", data_dir=tmp_path))
    assert expected in line
    assert "HINDSIGHT_DATABASE_URL" in line


def test_a_missing_config_is_one_line_naming_the_file(tmp_path: Path) -> None:
    line = one_line_error(cli("jobs", "list", "-c", str(tmp_path / "nope.yaml"), data_dir=tmp_path))
    assert line == f"error: no such file: {tmp_path / 'nope.yaml'} (check the path given to --config or the command)"


def test_verbose_shows_the_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cluster.cli", "-v", "jobs", "list", "-c", str(tmp_path / "nope.yaml")],
        env={**os.environ, "HINDSIGHT_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "FileNotFoundError" in done.stderr


def test_a_busy_port_is_refused_before_ray_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("serve", "--port", str(port), data_dir=tmp_path)
    line = one_line_error(done)
    assert f"127.0.0.1:{port} is already in use" in line
    assert "Ray" not in done.stderr, done.stderr  # refused before a Ray instance started


def test_flags_read_as_flags_in_help(tmp_path: Path) -> None:
    # Issue 48: every flag showed "<bool>" beside it.
    done = cli("reprocess", "--help", data_dir=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "--new-version / --no-new-version" in done.stdout
    assert "<bool>" not in done.stdout
