"""``hindsight library`` on a real SQLite store: list, diff, promote, rollback, lean lines and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.cli import app
from cluster.experience.models import LibrarySource
from cluster.experience.repository import SqlExperienceStore
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
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


def run(*args: str) -> str:
    result = CliRunner().invoke(app, ["library", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_list_shows_each_version_with_its_source_size_and_the_active_mark(data_dir: Path) -> None:
    lines = run("list", "--owner", OWNER).splitlines()
    assert lines[0].startswith("* v1 ")
    assert lines[1].startswith("  v2 ")
    assert lines[0].split()[4:6] == ["live", "2"]
    assert lines[1].split()[3:5] == ["reprocess", "2"]
    assert lines[1].endswith("scorer failure_averse")
    listed = json.loads(run("list", "--json"))  # the local_owner setting by default
    assert [(v["version"], v["source"], v["templates"], v["active"]) for v in listed] == [
        (1, "live", 2, True),
        (2, "reprocess", 2, False),
    ]
    assert run("list", "--owner", "nobody").strip() == "no library versions"


def test_diff_lists_added_removed_and_changed_rules(data_dir: Path) -> None:
    lines = run("diff", "1", "2", "--owner", OWNER).splitlines()
    assert [line[0] for line in lines[:-1]] == ["+", "-", "~"]
    assert "stream_import" in lines[0]
    assert "add_item" in lines[1]
    assert "0.90→0.80" in lines[2]
    assert lines[-1] == "v1 → v2: 1 added, 1 removed, 1 changed, 0 unchanged"
    diff = json.loads(run("diff", "1", "2", "--json"))
    assert [e["confidence_b"] for e in diff["changed"]] == [0.8]


def test_promote_and_rollback_flip_the_active_version(data_dir: Path) -> None:
    assert run("promote", "2", "--owner", OWNER).strip() == "v2 active (rollback returns to v1)"
    assert json.loads(run("list", "--json"))[1]["active"] is True
    assert json.loads(run("rollback", "--json")) == {"owner": OWNER, "active": 1, "previous": 2}
    assert [v["active"] for v in json.loads(run("list", "--json"))] == [True, False]


def test_errors_are_one_line_and_a_failing_exit_code(data_dir: Path) -> None:
    result = CliRunner().invoke(app, ["library", "promote", "9"])
    assert result.exit_code == 1
    assert "library version 9 not found" in result.output
    result = CliRunner().invoke(app, ["library", "rollback", "--owner", OWNER])
    assert result.exit_code == 1
    assert "no previous library version" in result.output
