"""The ``jobs:`` section of deploy/serve.yaml: kinds, intervals and parameters checked when the file is read."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from cluster.serve_config import ConsolidateJob, MaintenanceConfig, ServeConfig, load_serve_config


def test_jobs_parse_with_their_kind_parameters(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(
        "jobs:\n"
        "  nightly-consolidation: {kind: consolidate, interval_s: 3600, parameters: {holdout: 0.3}}\n"
        "  vectors: {kind: reindex, interval_s: 86400, enabled: false}\n"
        "  upkeep: {kind: maintenance, interval_s: 60}\n"
    )
    config = load_serve_config(path)
    job = config.jobs["nightly-consolidation"]
    assert isinstance(job, ConsolidateJob)
    assert (job.parameters.actors, job.parameters.holdout) == (1, 0.3)
    # Disabled jobs are not scheduled; a declared maintenance job replaces the maintenance: section's.
    assert list(config.scheduled_jobs()) == ["nightly-consolidation", "upkeep"]


def test_the_maintenance_section_still_schedules_its_job() -> None:
    job = ServeConfig(maintenance=MaintenanceConfig(interval_s=5)).scheduled_jobs()["maintenance"]
    # Its first pass when the service starts, as the maintenance actor did before jobs existed.
    assert (job.kind, job.interval_s, job.run_at_start) == ("maintenance", 5, True)
    assert ServeConfig(maintenance=MaintenanceConfig(enabled=False)).scheduled_jobs() == {}


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ({"kind": "compact", "interval_s": 60}, "does not match any of the expected tags: 'maintenance', 'reindex'"),
        ({"kind": "reindex", "interval_s": 0}, "greater than 0"),
        ({"kind": "reindex", "interval_s": "hourly"}, "valid number"),
        ({"kind": "reindex"}, "interval_s\n  Field required"),
        ({"kind": "reindex", "interval_s": 60, "parameters": {"actors": 0}}, "greater than or equal to 1"),
        ({"kind": "reindex", "interval_s": 60, "parameters": {"what": "vectors"}}, "'templates', 'memories' or 'all'"),
        ({"kind": "maintenance", "interval_s": 60, "parameters": {"owner": "x"}}, "Extra inputs are not permitted"),
        ({"interval_s": 60}, "Unable to extract tag using discriminator 'kind'"),
        # The scorer is one setting for every runtime, the consolidate job's too.
        ({"kind": "consolidate", "interval_s": 60, "parameters": {"scorer": "x"}}, "the scorer setting"),
    ],
)
def test_a_bad_job_fails_with_a_clear_error(job: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ServeConfig.model_validate({"jobs": {"nightly": job}})


def test_a_job_name_must_be_plain() -> None:
    with pytest.raises(ValidationError, match="String should match pattern"):
        ServeConfig.model_validate({"jobs": {"Nightly Run": {"kind": "maintenance", "interval_s": 60}}})


def test_the_attribution_batch_size_is_refused_here_as_a_setting() -> None:
    # One value for every runtime: HINDSIGHT_ANALYSIS_BATCH_SIZE, not a second one in the deployment file.
    with pytest.raises(ValidationError, match="HINDSIGHT_ANALYSIS_BATCH_SIZE"):
        ServeConfig.model_validate({"attribution": {"batch_size": 10}})
