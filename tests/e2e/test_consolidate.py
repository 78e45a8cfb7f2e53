"""The consolidation job on a real SQLite store, Milvus Lite and the shared Ray instance: a new
version that serves the held-out decisions better is promoted, a worse one is kept inactive."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.engine import attribute_batch
from actors.engine.model.templates import Predicate
from actors.engine.model.trajectories import Trajectory
from cluster.experience.models import LibrarySource
from cluster.experience.repository import SqlExperienceStore
from cluster.experience.versions import LibraryVersions
from cluster.jobs.runs import JobContext
from cluster.serve_config import ConsolidateParameters
from cluster.services import Services, build_services
from cluster.settings import Settings
from cluster.trajectories.repository import SqlTrajectoryStore
from pipelines.consolidate import consolidate
from tests.integration.experience.test_learning_loop import store_runs
from tests.unit.engine.builders import bulk_vs_single_runs, insert_run

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.milvus]

OWNER = "team-a"
# Four runs of eight held out is two: the large bulk import that worked, and a failed one-by-one.
PARAMETERS = ConsolidateParameters(actors=1, holdout=0.25)


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    built = build_services(Settings(data_dir=tmp_path))
    yield built
    built.close()


def store_in_order(services: Services, runs: list[Trajectory]) -> None:
    for run in runs:  # one at a time, so finalize times follow the list
        store_runs(services.db, OWNER, [run])


def run_pass(services: Services, tmp_path: Path, watermark: dict[str, Any] | None = None) -> tuple[Any, list[Any]]:
    checkpoints: list[dict[str, Any]] = []
    context = JobContext(name="consolidate", watermark=watermark, resumed=False, checkpoint=checkpoints.append)
    outcome = consolidate(
        services.settings, PARAMETERS, context, output_dir=tmp_path / "out", experience=services.experience
    )
    return outcome, checkpoints


def test_a_version_that_serves_better_is_promoted(ray_session: None, services: Services, tmp_path: Path) -> None:
    store_in_order(
        services,
        [*bulk_vs_single_runs(), insert_run(300, "bulk_import", True, run=7), insert_run(250, "add_item", False)],
    )
    outcome, checkpoints = run_pass(services, tmp_path)

    decision = outcome.result["owners"][OWNER]
    assert (decision["active_version"], decision["new_version"], decision["promoted"]) == (1, 2, True)
    assert (decision["active_hit_at_1"], decision["new_hit_at_1"], decision["judged"]) == (0.0, 1.0, 1)
    assert "1.00 ≥ 0.00" in decision["reason"]
    assert outcome.result["rows"] == 8
    assert outcome.result["decision"] == "team-a promoted v2"
    versions = LibraryVersions(services.db)
    assert versions.active(OWNER) == 2
    assert [v.source for v in versions.versions(OWNER)] == [LibrarySource.LIVE, LibrarySource.CONSOLIDATE]
    served = services.experience.query_experience(OWNER, "import 300 products", role="executor")
    assert served.templates[0].template.recommended.tool == "bulk_import"
    assert checkpoints == [outcome.watermark]

    # Nothing finalized since: the next pass builds nothing.
    again, _ = run_pass(services, tmp_path, outcome.watermark)
    assert again.result == {"rows": 0, "templates": 0, "decision": "nothing new", "owners": {}}
    assert len(versions.versions(OWNER)) == 2


def test_a_version_that_serves_worse_is_kept_inactive(ray_session: None, services: Services, tmp_path: Path) -> None:
    # The active version: lessons learned from another fleet's runs, imported and promoted.
    lessons = [t for result in attribute_batch(bulk_vs_single_runs()) for t in result.templates]
    versions = LibraryVersions(services.db)
    imported = services.experience.create_version(OWNER, lessons, LibrarySource.IMPORT, "from elsewhere")
    versions.promote(OWNER, imported)
    # Stored here: small imports done one by one, then large ones: nothing teaches the large case.
    runs = [insert_run(rows, "add_item", True, run=rows) for rows in (10, 20, 30, 40, 50, 60)]
    store_in_order(services, [*runs, insert_run(300, "bulk_import", True, run=7), insert_run(400, "bulk_import", True)])

    outcome, _ = run_pass(services, tmp_path)

    decision = outcome.result["owners"][OWNER]
    assert (decision["active_version"], decision["promoted"]) == (imported, False)
    assert decision["active_hit_at_1"] == 1.0
    assert decision["new_hit_at_1"] == 0.0
    assert "0.00 < 1.00" in decision["reason"]
    # Issue 48: it said "kept v2" while v1 stayed active.
    assert outcome.result["decision"] == (
        f"team-a kept v{decision['active_version']} active (v{decision['new_version']} built, not promoted)"
    )
    assert versions.active(OWNER) == imported  # still served
    assert decision["new_version"] in [v.version for v in versions.versions(OWNER)]  # kept for diff/promote


def test_a_resumed_pass_skips_the_owners_its_watermark_has_done(
    ray_session: None, services: Services, tmp_path: Path
) -> None:
    store_in_order(services, bulk_vs_single_runs())
    store_runs(services.db, "team-b", bulk_vs_single_runs())
    with services.db.read() as session:
        newest = SqlTrajectoryStore(session).newest_finalized()
    # What a run killed after its first owner checkpointed leaves for the next holder.
    done = {"owners": {OWNER: newest[OWNER].isoformat()}}
    checkpoints: list[dict[str, Any]] = []
    context = JobContext(name="consolidate", watermark=done, resumed=True, checkpoint=checkpoints.append)
    outcome = consolidate(
        services.settings, PARAMETERS, context, output_dir=tmp_path / "out", experience=services.experience
    )
    assert list(outcome.result["owners"]) == ["team-b"]
    assert outcome.result["rows"] == 6
    assert outcome.watermark == {"owners": {OWNER: done["owners"][OWNER], "team-b": newest["team-b"].isoformat()}}
    assert checkpoints == [outcome.watermark]
    versions = LibraryVersions(services.db)
    assert len(versions.versions(OWNER)) == 0  # never rebuilt, and nothing was learned live
    assert len(versions.versions("team-b")) == 2


def test_the_new_version_keeps_the_active_rules_its_evidence_contradicts_retired(
    ray_session: None, services: Services, tmp_path: Path
) -> None:
    # The active version says bulk_import for any import above 85 rows (learned elsewhere).
    lessons = [t for result in attribute_batch(bulk_vs_single_runs()) for t in result.templates]
    assert [t.condition.predicates for t in lessons] == [(Predicate(feature="row_count", op=">", value=85),)]
    versions = LibraryVersions(services.db)
    versions.promote(OWNER, services.experience.create_version(OWNER, lessons, LibrarySource.IMPORT, "elsewhere"))
    # Here bulk_import worked up to 800 rows and failed twice far above.
    late = [
        insert_run(800, "bulk_import", True, run=10),
        *(insert_run(n, "bulk_import", False, run=n) for n in (3000, 4000)),
    ]
    store_in_order(services, [*bulk_vs_single_runs(), *late])

    outcome, _ = run_pass(services, tmp_path)

    new_version = outcome.result["owners"][OWNER]["new_version"]
    with services.db.read() as session:
        rows = [t for t, _ in SqlExperienceStore(session).iter_owner(OWNER, version=new_version)]
    retired = [t for t in rows if t.retired_reason is not None]
    assert [t.condition.predicates for t in retired] == [lessons[0].condition.predicates]
    assert "bulk_import failed in 2 run(s) with row_count above 800" in (retired[0].retired_reason or "")
    live = [t.condition.predicates for t in rows if t.retired_reason is None and t.recommended.tool == "bulk_import"]
    assert live == [
        (Predicate(feature="row_count", op=">", value=85), Predicate(feature="row_count", op="<=", value=1900))
    ]
