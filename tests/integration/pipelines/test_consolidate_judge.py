"""The consolidation judge reads the stored history a batch (or a page) at a time and gets what the
whole history in memory gives: the same split, the same rebuilt library, the same scores."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fleet import OWNERS, fill
from cluster.experience.models import content_hash
from cluster.settings import Settings
from cluster.storage.db import Database
from pipelines import consolidate
from pipelines.consolidate import evaluate_stored, rebuild, rebuild_stored, split_stored
from pipelines.evaluate import Metrics, evaluate_library, split_by_time
from pipelines.evaluate_job import load_trajectories


@pytest.mark.parametrize("shared_roles", [{}, {"worker": ["executor", "verifier"]}])
def test_the_streamed_judge_splits_rebuilds_and_scores_as_the_history_in_memory_does(
    database: Database, tmp_path: Path, shared_roles: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(database.url, 480, nodes=8)  # 40 runs of three roles per owner
    settings = Settings(data_dir=tmp_path, database_url=database.url, shared_roles=shared_roles)
    roles = settings.role_libraries()
    owner = OWNERS[1]
    reference = split_by_time(load_trajectories(settings, owner)[owner], 0.25)

    train, test = split_stored(database, owner, roles, 0.25)
    assert [e.trajectory_id for e in train] == [t.trajectory_id for t in reference.train]
    assert [e.trajectory_id for e in test] == [t.trajectory_id for t in reference.test]
    assert {e.role for e in train} == {t.header.role for t in reference.train}

    # Small batches and pages, so runs span batches and a page boundary falls inside the held-out share.
    rebuilt = rebuild_stored(database, owner, train, roles, "default", group_size=16)
    expected = rebuild(reference.train, "default", group_size=16)
    assert len(expected) > 1
    assert [(content_hash(t), t.confidence) for t in rebuilt] == [(content_hash(t), t.confidence) for t in expected]
    # A cache too small for the runs a batch shares with the next: trajectories are read again, same library.
    monkeypatch.setattr(consolidate, "CACHED_TRAJECTORIES", 40)
    reread = rebuild_stored(database, owner, train, roles, "default", group_size=16)
    assert [(content_hash(t), t.confidence) for t in reread] == [(content_hash(t), t.confidence) for t in expected]

    scored = evaluate_stored(
        database, owner, test, roles, {"new": rebuilt, "none": []}, top_k=5, min_confidence=0.0, page=7
    )
    assert scored["new"] == Metrics.of(evaluate_library(expected, reference.test, top_k=5, min_confidence=0.0))
    assert scored["new"].judged > 0
    assert scored["none"].hit_at_1 == 0.0
