"""``hindsight library`` on a real SQLite store: list, diff, promote, rollback, lean lines and JSON.

Each command runs in a process of its own (``tests.cli_process``), as an operator runs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.experience.models import LibrarySource
from cluster.experience.repository import SqlExperienceStore
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from tests.cli_process import cli, cli_json, cli_out
from tests.integration.experience.factories import template

OWNER = "team-a"


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Version 1 (live): bulk_import 0.9 and add_item 0.6; version 2 (reprocess): bulk_import 0.8 and stream_import."""
    monkeypatch.setenv("HINDSIGHT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("HINDSIGHT_LOCAL_OWNER", OWNER)
    url = Settings(data_dir=tmp_path).sql_url()
    upgrade(url)
    db = Database(url)
    with db.transaction() as session:
        store = SqlExperienceStore(session)
        live = store.writable_version(OWNER)
        first = [
            template("bulk_import", confidence=0.9),
            template("add_item", "a product import has few rows", confidence=0.6),
        ]
        for t in first:
            store.insert(OWNER, t, version=live)
        rebuilt = store.add_version(OWNER, LibrarySource.REPROCESS, "scorer failure_averse")
        second = [template("bulk_import", confidence=0.8), template("stream_import", "the import file is huge")]
        for t in second:
            store.insert(OWNER, t, version=rebuilt)
        store.mark_indexed(OWNER, [*first, *second])
    db.dispose()
    return tmp_path


def run(data_dir: Path, *args: str) -> str:
    return cli_out("library", *args, data_dir=data_dir)


def run_json(data_dir: Path, *args: str) -> Any:
    return cli_json("library", *args, data_dir=data_dir)


def test_list_shows_each_version_with_its_source_size_and_the_active_mark(data_dir: Path) -> None:
    lines = run(data_dir, "list", "--owner", OWNER).splitlines()
    assert lines[0].split() == ["version", "created", "source", "templates", "note"]  # headers (issue 48)
    assert lines[1].split()[:2] == ["*", "v1"]
    assert lines[2].split()[0] == "v2"
    assert lines[1].split()[4:6] == ["live", "2"]
    assert lines[2].split()[3:5] == ["reprocess", "2"]
    assert lines[2].rstrip().endswith("scorer failure_averse")
    listed = run_json(data_dir, "list")  # the local_owner setting by default
    assert [(v["version"], v["source"], v["templates"], v["active"]) for v in listed] == [
        (1, "live", 2, True),
        (2, "reprocess", 2, False),
    ]
    assert run(data_dir, "list", "--owner", "nobody").strip() == "no library versions"


def test_diff_lists_added_removed_and_changed_rules(data_dir: Path) -> None:
    lines = run(data_dir, "diff", "1", "2", "--owner", OWNER).splitlines()
    assert lines[0].split() == ["role", "confidence", "rule"]
    rows = [line for line in lines[1:-1] if not line.startswith(" ")]  # a long rule folds onto more lines
    assert [row[0] for row in rows] == ["+", "-", "~"]
    assert "stream_import" in rows[0]
    assert "add_item" in rows[1]
    assert "0.90→0.80" in rows[2]
    assert lines[-1] == "v1 → v2: 1 added, 1 removed, 1 changed, 0 unchanged"
    diff = run_json(data_dir, "diff", "1", "2")
    assert [e["confidence_b"] for e in diff["changed"]] == [0.8]


def test_promote_and_rollback_flip_the_active_version(data_dir: Path) -> None:
    assert run(data_dir, "promote", "2", "--owner", OWNER).strip() == "v2 active (rollback returns to v1)"
    assert run_json(data_dir, "list")[1]["active"] is True
    assert run_json(data_dir, "rollback") == {"owner": OWNER, "active": 1, "previous": 2}
    assert [v["active"] for v in run_json(data_dir, "list")] == [True, False]


def test_errors_are_one_line_and_a_failing_exit_code(data_dir: Path) -> None:
    failed = cli("library", "promote", "9", data_dir=data_dir)
    assert failed.returncode == 1
    assert failed.stderr.strip() == "error: library version 9 not found"
    failed = cli("library", "rollback", "--owner", OWNER, data_dir=data_dir)
    assert failed.returncode == 1
    assert "no previous library version" in failed.stderr


def test_a_rule_worded_anew_is_the_same_rule_in_a_diff(data_dir: Path) -> None:
    # Issue 48: one unchanged rule showed as one added and one removed (its rationale's run counts differed).
    url = Settings(data_dir=data_dir).sql_url()
    db = Database(url)
    with db.transaction() as session:
        store = SqlExperienceStore(session)
        third = store.add_version(OWNER, LibrarySource.IMPORT, "reworded")
        reworded = [
            template("bulk_import", confidence=0.8, rationale="In this situation bulk_import succeeded"),
            template("stream_import", "the import file is huge"),
        ]
        for t in reworded:
            store.insert(OWNER, t, version=third)
    db.dispose()
    assert run(data_dir, "diff", "2", "3", "--owner", OWNER).splitlines()[-1] == (
        "v2 → v3: 0 added, 0 removed, 0 changed, 2 unchanged"
    )


def test_export_is_what_import_reads_as_a_file_and_as_skills(
    data_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Issue 48: library import existed, nothing exported.
    out = tmp_path_factory.mktemp("export")
    exported = run(data_dir, "export", "--owner", OWNER)
    assert json.loads(exported.splitlines()[0])["format"] == "hindsight-experience"
    (out / "library.jsonl").write_text(exported)
    assert "built v3" in run(data_dir, "import", str(out / "library.jsonl"), "--owner", OWNER)
    assert (
        run(data_dir, "diff", "1", "3", "--owner", OWNER)
        .splitlines()[-1]
        .endswith("0 added, 0 removed, 0 changed, 2 unchanged")
    )

    cli_out(
        "library", "export", "--owner", OWNER, "--skills", str(out / "skills"), "--role", "executor", data_dir=data_dir
    )
    [skill] = (out / "skills").glob("*/SKILL.md")
    front = yaml.safe_load(skill.read_text().split("---\n")[1])
    assert front["name"] == skill.parent.name == "executor-catalog-import"
    assert "built v4" in run(data_dir, "import", str(out / "skills"), "--owner", OWNER)
    assert (
        run(data_dir, "diff", "1", "4", "--owner", OWNER)
        .splitlines()[-1]
        .endswith("0 added, 0 removed, 0 changed, 2 unchanged")
    )
