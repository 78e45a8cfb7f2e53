"""``hindsight jobs list`` and ``hindsight jobs run`` on a SQLite store, each in a process of its own."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from cluster.jobs.repository import SqlJobStore
from cluster.memory.models import MemoryWrite
from cluster.services import build_services
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from cluster.storage.milvus import MilvusLiteServer
from tests.cli_process import cli, cli_json

pytestmark = pytest.mark.milvus


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HINDSIGHT_DATA_DIR", str(tmp_path / "data"))
    path = tmp_path / "serve.yaml"
    path.write_text(
        "maintenance: {enabled: false}\n"
        "jobs:\n"
        "  upkeep: {kind: maintenance, interval_s: 600}\n"
        "  vectors: {kind: reindex, interval_s: 86400, parameters: {actors: 1}}\n"
    )
    return path


def jobs(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("jobs", *args, "-c", str(config), data_dir=config.parent / "data")


def listed(config: Path) -> dict[str, dict[str, object]]:
    return {job["name"]: job for job in cli_json("jobs", "list", "-c", str(config), data_dir=config.parent / "data")}


def test_jobs_run_runs_one_pass_and_jobs_list_shows_it(config: Path) -> None:
    before = listed(config)
    assert set(before) == {"upkeep", "vectors"}
    assert "runs" not in before["upkeep"]  # never run: no state yet

    result = jobs(config, "run", "upkeep")
    assert result.returncode == 0, result.stderr
    assert "upkeep done in" in result.stdout

    upkeep = listed(config)["upkeep"]
    assert (upkeep["kind"], upkeep["interval_s"], upkeep["runs"], upkeep["holder"]) == ("maintenance", 600, 1, None)
    assert upkeep["result"] == {"rows": 0, "promoted": 0, "archived": 0, "purged": 0, "indexed": 0}
    assert upkeep["last_success_at"] is not None
    table = jobs(config, "list")
    assert table.returncode == 0, table.stderr
    assert "upkeep" in table.stdout
    assert "rows=0" in table.stdout
    assert "never" in table.stdout  # vectors has not run

    # `jobs run` does not wait for the interval: a second pass now.
    assert jobs(config, "run", "upkeep").returncode == 0
    assert listed(config)["upkeep"]["runs"] == 2


def test_an_unknown_job_is_a_clear_error(config: Path) -> None:
    result = jobs(config, "run", "nightly")
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: no job named 'nightly' in {config} (jobs: upkeep, vectors)"


def test_a_disabled_job_runs_on_demand_and_says_it_is_disabled(config: Path) -> None:
    # Issue 48: serve.yaml says "on demand: hindsight jobs run reindex" beside enabled: false, and
    # jobs run answered "no job named 'reindex'".
    config.write_text(config.read_text() + "  idle: {kind: maintenance, interval_s: 600, enabled: false}\n")
    result = jobs(config, "run", "idle")
    assert result.returncode == 0, result.stderr
    assert f"job idle is disabled in {config}: not scheduled; running it once on demand" in result.stderr
    assert "idle done in" in result.stdout
    assert listed(config)["idle"]["configured"] is False  # still off the schedule


def test_a_job_another_scheduler_runs_is_not_run_again(config: Path) -> None:
    url = Settings(data_dir=config.parent / "data").sql_url()
    (config.parent / "data").mkdir()
    upgrade(url)
    db = Database(url)
    try:
        with db.transaction() as session:
            store = SqlJobStore(session)
            store.ensure("upkeep", "maintenance")
            store.acquire("upkeep", "host-b/scheduler", interval=timedelta(hours=1), lease=timedelta(hours=1))
    finally:
        db.dispose()
    result = jobs(config, "run", "upkeep")
    assert result.returncode == 1
    assert "job upkeep is being run by host-b/scheduler" in result.stderr
    upkeep = listed(config)["upkeep"]
    assert (upkeep["holder"], upkeep["runs"], upkeep["result"]) == ("host-b/scheduler", 1, None)


def test_a_bad_jobs_section_is_one_line_per_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_DATA_DIR", str(tmp_path / "data"))
    path = tmp_path / "serve.yaml"
    path.write_text("jobs:\n  nightly: {kind: compact, interval_s: 60}\n  vectors: {kind: reindex, interval_s: -1}\n")
    result = cli("jobs", "list", "-c", str(path), data_dir=tmp_path / "data")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[0].endswith(
        "jobs.nightly: Input tag 'compact' found using 'kind' does not match any of the expected "
        "tags: 'maintenance', 'reindex', 'consolidate'"
    )
    assert lines[1].endswith("jobs.vectors.reindex.interval_s: Input should be greater than 0")


def test_a_reindex_job_of_the_memories_rebuilds_them_without_ray(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("HINDSIGHT_DATA_DIR", str(data))
    # The Lite file served, as a running service serves it: the command's process connects to it.
    served = MilvusLiteServer(data / "milvus.db")
    settings = Settings(data_dir=data, milvus_uri=served.start())
    services = build_services(settings)
    try:
        for key, value in (("tea", "Alice drinks green tea"), ("car", "The car needs new tyres")):
            services.memory.apply_write("alice", MemoryWrite(key=key, value=value))
        index = services.memory.index
        index.delete("alice", sorted(index.seqs("alice"))[:1])  # a vector lost
        assert len(index.seqs("alice")) == 1
    finally:
        services.close()
    config = tmp_path / "serve.yaml"
    config.write_text("jobs:\n  memories: {kind: reindex, interval_s: 86400, parameters: {what: memories}}\n")

    try:
        result = jobs(config, "run", "memories")
        assert result.returncode == 0, result.stderr
        assert "Started a local Ray instance" not in result.stderr  # no Ray for the memories
        assert listed(config)["memories"]["result"] == {"rows": 2, "memories": 2}
        services = build_services(settings)
        try:
            assert len(services.memory.index.seqs("alice")) == 2
        finally:
            services.close()
    finally:
        served.stop()
