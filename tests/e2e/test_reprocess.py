"""The Ray Data re-processing job over a real SQLite store, read back through the import path."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from cluster.experience.exchange import parse_export
from cluster.experience.models import LibrarySource, content_hash
from cluster.experience.versions import LibraryVersions
from cluster.services import build_services
from cluster.settings import Settings
from pipelines.reprocess import reprocess
from tests.e2e.slow_scorer import SLOW_TASK_TYPE
from tests.integration.experience.test_learning_loop import store_runs
from tests.unit.engine.builders import bulk_vs_single_runs
from tests.unit.engine.fleet_roles import regional_fleet

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.milvus]


def test_reprocessing_with_another_scorer_writes_an_importable_library(ray_session: None, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    services = build_services(settings)
    try:
        store_runs(services.db, "team-a", bulk_vs_single_runs())
        store_runs(services.db, "team-b", bulk_vs_single_runs()[:2])
        summary = reprocess(settings, tmp_path / "out", scorer="failure_averse", actors=2)
        assert summary.trajectories == 8
        assert summary.groups == 2
        assert [p.name for p in summary.outputs] == ["team-a.jsonl", "team-b.jsonl"]
        assert summary.templates_by_owner["team-a"] >= 1
        report = services.experience.import_library(
            "team-a", (tmp_path / "out" / "team-a.jsonl").read_text().splitlines()
        )
        assert len(report.imported) == summary.templates_by_owner["team-a"]
        served = services.experience.query_experience(
            "team-a", "import 300 products", role="executor", min_confidence=0
        )
        assert served.templates[0].template.recommended.tool == "bulk_import"
    finally:
        services.close()


def test_reprocessing_builds_a_new_library_version_served_once_promoted(ray_session: None, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    services = build_services(settings)
    try:
        store_runs(services.db, "team-a", bulk_vs_single_runs())
        summary = reprocess(
            settings,
            tmp_path / "out",
            scorer="failure_averse",
            actors=1,
            new_version=True,
            experience=services.experience,
        )
        assert summary.versions == {"team-a": 2}
        versions = LibraryVersions(services.db)
        listed = versions.versions("team-a")
        assert [(v.version, v.source, v.active) for v in listed] == [
            (1, LibrarySource.LIVE, True),
            (2, LibrarySource.REPROCESS, False),
        ]
        assert listed[1].templates == summary.templates_by_owner["team-a"]
        assert listed[1].note == "scorer failure_averse"

        def served() -> list[str]:
            result = services.experience.query_experience(
                "team-a", "import 300 products", role="executor", min_confidence=0
            )
            return [s.template.recommended.tool for s in result.templates]

        assert served() == []  # nothing was learned live; the new version waits for its promotion
        versions.promote("team-a", 2)
        assert served()[0] == "bulk_import"
    finally:
        services.close()


def test_reprocessing_pools_the_roles_the_settings_share(ray_session: None, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, shared_roles={"deployer": ["deployer-eu", "deployer-us"]})
    services = build_services(settings)
    try:
        store_runs(services.db, "fleet", regional_fleet())
        summary = reprocess(settings, tmp_path / "out", actors=1, new_version=True, experience=services.experience)
        assert summary.groups == 1, "the two regional roles are one group"
        LibraryVersions(services.db).promote("fleet", summary.versions["fleet"])
        for role in ("deployer-eu", "deployer-us"):
            result = services.experience.query_experience(
                "fleet", "roll out the build", role=role, task_type="deploy", min_confidence=0
            )
            assert [(s.template.role, s.template.recommended.tool) for s in result.templates] == [
                ("deployer", "rolling_restart")
            ], role
    finally:
        services.close()


def test_the_library_does_not_depend_on_which_group_the_pool_finishes_first(ray_session: None, tmp_path: Path) -> None:
    # Merging near-duplicates depends on the order templates arrive in (seen on 30k fleet
    # trajectories: every shuffled group order gave another library), so the pool's results are
    # taken in the groups' order. Here the first group is slowed down, so on two actors the second
    # one finishes first.
    settings = Settings(data_dir=tmp_path)
    services = build_services(settings)
    runs = []
    for task_type in (SLOW_TASK_TYPE, "import-fast"):
        for run in bulk_vs_single_runs():
            header = run.header.model_copy(update={"trajectory_id": uuid.uuid4(), "task_type": task_type})
            runs.append(run.model_copy(update={"header": header}))
    try:
        store_runs(services.db, "team-a", runs)
    finally:
        services.close()
    libraries = []
    for actors in (1, 2):
        out = tmp_path / f"x{actors}"
        summary = reprocess(
            settings,
            out,
            scorer="slow_on_one_task_type",
            scorer_modules=["tests.e2e.slow_scorer"],
            actors=actors,
            num_cpus=0.5,
        )
        assert summary.groups == 2
        found = parse_export((out / "team-a.jsonl").read_text().splitlines())
        # Template ids are drawn anew each run: the rules, their confidences and their order must agree.
        libraries.append([(t.task_type, content_hash(t), t.confidence) for t in found])
    assert libraries[0][0][0] == SLOW_TASK_TYPE, "the slow group's templates come first"
    assert {task_type for task_type, _, _ in libraries[0]} == {SLOW_TASK_TYPE, "import-fast"}
    assert libraries[1] == libraries[0]
