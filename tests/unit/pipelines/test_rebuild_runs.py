"""Consolidation's rebuild follows hand-offs as live learning does: it sees the whole history."""

from __future__ import annotations

import random

from actors.engine import attribute_batch, merge_into_library
from actors.engine.model.templates import ExperienceTemplate
from actors.engine.model.trajectories import Trajectory
from actors.engine.retire import ActionOutcome
from bench import fleet
from cluster.experience.models import content_hash
from pipelines.consolidate import rebuild
from tests.unit.engine.roles import sync_runs


def test_rebuild_charges_a_failed_verification_to_the_planner() -> None:
    lessons = [t for t in rebuild(sync_runs(), "default") if t.role == "planner"]
    assert [(t.recommended.tool, t.avoid and t.avoid.tool) for t in lessons] == [("plan_incremental", "plan_bulk")]


def test_rebuild_without_runs_attributes_each_role_on_its_own() -> None:
    assert [t for t in rebuild(sync_runs(with_run_ids=False), "default") if t.role == "planner"] == []


def test_rebuild_hands_each_batch_only_its_own_runs_and_learns_the_same() -> None:
    # Blame is decided within a run, so a batch needs its own runs' members only; reference: every
    # batch attributed against all the trajectories (the rebuild before, quadratic in the history).
    rng = random.Random(3)
    trajectories = [fleet.synthetic(rng, i, 8) for i in range(360)]
    trajectories = [t for t in trajectories if t.owner == fleet.OWNERS[0]]
    groups: dict[tuple[str, str | None], list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault((t.header.role, t.header.task_type), []).append(t)
    found: list[ExperienceTemplate] = []
    outcomes: list[ActionOutcome] = []
    for _, group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        for start in range(0, len(group), 20):
            results = attribute_batch(group[start : start + 20], run_members=trajectories)
            found.extend(t for r in results for t in r.templates)
            outcomes.extend(o for r in results for o in r.outcomes)
    reference = merge_into_library([], found, outcomes).library
    rebuilt = rebuild(trajectories, "default", group_size=20)
    assert len(rebuilt) > 1
    assert [(content_hash(t), t.confidence) for t in rebuilt] == [(content_hash(t), t.confidence) for t in reference]
