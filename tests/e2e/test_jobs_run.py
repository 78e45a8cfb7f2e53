"""``hindsight jobs run`` of a Ray Data kind on the shared Ray instance: the reindex job writes every
template's vector and records how many in its result."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.cli import app
from cluster.embedding import embedder_identity
from cluster.services import build_services
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.vector_builds import record_vector_build, vector_builds
from tests.cli_process import cli_json
from tests.integration.experience.factories import template

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.milvus]


def test_jobs_run_reindex_rebuilds_the_vectors_and_records_the_rows(
    ray_session: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(data_dir=tmp_path)
    services = build_services(settings)
    try:
        for tool, when in (("bulk_import", "more than 20 rows"), ("add_item", "a handful of rows")):
            services.experience.add_template("team-a", template(tool, when))
        # As if the templates had been embedded by another embedder: the full rebuild records this one.
        record_vector_build(services.db, "experience_library", "another-embedder")
    finally:
        services.close()
    monkeypatch.setenv("HINDSIGHT_DATA_DIR", str(tmp_path))
    config = tmp_path / "serve.yaml"
    config.write_text("jobs:\n  vectors: {kind: reindex, interval_s: 86400, parameters: {actors: 1}}\n")

    result = CliRunner().invoke(app, ["jobs", "run", "vectors", "-c", str(config)])
    assert result.exit_code == 0, result.output
    assert "vectors done in" in result.output

    listed = cli_json("jobs", "list", "-c", str(config), data_dir=tmp_path)
    vectors = next(job for job in listed if job["name"] == "vectors")
    assert vectors["result"] == {"rows": 2, "written": {"team-a": 2}, "stale_removed": 0}
    assert vectors["last_error"] is None
    database = Database(settings.sql_url())
    try:
        assert vector_builds(database)["experience_library"] == embedder_identity(settings.embedding)
    finally:
        database.dispose()
