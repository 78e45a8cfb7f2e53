"""Consolidation's rebuild follows hand-offs as live learning does: it sees the whole history."""

from __future__ import annotations

from pipelines.consolidate import rebuild
from tests.unit.engine.roles import sync_runs


def test_rebuild_charges_a_failed_verification_to_the_planner() -> None:
    lessons = [t for t in rebuild(sync_runs(), "default") if t.role == "planner"]
    assert [(t.recommended.tool, t.avoid and t.avoid.tool) for t in lessons] == [("plan_incremental", "plan_bulk")]


def test_rebuild_without_runs_attributes_each_role_on_its_own() -> None:
    assert [t for t in rebuild(sync_runs(with_run_ids=False), "default") if t.role == "planner"] == []
