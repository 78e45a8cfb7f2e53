"""``bench.fleet`` on a tiny store: its generator writes a fleet's worth of runs, its baseline learns from them,
and a library that differs from the baseline's is reported as different."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from actors.engine.model.trajectories import ResultStatus
from bench.fleet import OWNERS, ROLES, compare, fill, variant
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.trajectories.repository import SqlTrajectoryStore


def test_the_generator_writes_runs_of_every_role_for_every_owner(database: Database) -> None:
    fill(database.url, 72, nodes=8)

    with database.read() as session:
        store = SqlTrajectoryStore(session)
        groups = store.finalized_groups()
        trajectories = [t for (owner, _, _), ids in groups.items() for t in store.load_many(owner, ids)]
    assert len(trajectories) == 72
    assert {owner for owner, _, _ in groups} == set(OWNERS)
    assert {role for _, role, _ in groups} == set(ROLES)
    # A run's roles belong to one owner and one task type: the hand-offs attribution follows.
    runs = {(t.header.run_id, t.owner, t.header.task_type) for t in trajectories}
    assert len(runs) == 72 // len(ROLES)
    assert all(n == len(ROLES) for n in Counter(t.header.run_id for t in trajectories).values())
    results = Counter(n.execution_result.status for t in trajectories for n in t.nodes if n.is_decision)
    assert results[ResultStatus.SUCCESS] > 0
    assert results[ResultStatus.FAILURE] > 0


def test_the_plain_loop_learns_every_owner_and_a_different_library_is_flagged(
    database: Database, tmp_path: Path
) -> None:
    fill(database.url, 72, nodes=8)

    baseline = variant("loop", 1, Settings(data_dir=tmp_path, database_url=database.url))
    assert set(baseline["library"]) == set(OWNERS)
    assert all(o["templates"] > 0 for o in baseline["library"].values())
    assert baseline["driver_peak_rss_mb"] > 0
    assert compare(baseline, baseline) == "same"

    owner = OWNERS[0]
    fewer = {**baseline["library"], owner: {**baseline["library"][owner], "rules": "0" * 16}}
    assert compare({**baseline, "library": fewer}, baseline).startswith("DIFFERENT rules")
    weights = {**baseline["library"], owner: {**baseline["library"][owner], "confidences": "0" * 16}}
    assert compare({**baseline, "library": weights}, baseline) == f"same rules, DIFFERENT confidences: {owner}"
