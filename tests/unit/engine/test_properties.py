"""Property tests over random trajectories: no crash, bounded, deterministic, honest provenance."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.engine import attribute_batch, available_scorers, merge_into_library
from actors.engine.labels import label_paths
from actors.engine.model.templates import render_prompt_block
from actors.engine.model.trajectories import Trajectory
from tests.unit.engine.builders import Builder

ACTIONS = ["a", "b", "c"]
STATUS = st.sampled_from(["success", "failure", "partial"])


@st.composite
def trajectories(draw: st.DrawFn) -> Trajectory:
    b = Builder(role=draw(st.sampled_from(["executor", "planner"])), task_type=draw(st.sampled_from([None, "t"])))
    size = draw(st.integers(1, 25))
    ids: list[uuid.UUID] = []
    for i in range(size):
        available = draw(st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=3, unique=True))
        context: dict[str, Any] = {"n": draw(st.integers(0, 300))}
        if draw(st.booleans()):
            context["mode"] = draw(st.sampled_from(["x", "y"]))
        if draw(st.booleans()):
            context["deep"] = {"flag": draw(st.booleans()), "items": [1] * draw(st.integers(0, 3))}
        ids.append(
            b.add(
                draw(st.sampled_from(available)),
                available,
                parent=ids[draw(st.integers(0, i - 1))] if i else None,
                status=draw(STATUS),
                params={"path": f"/tmp/{i}.csv", "n": context["n"], "k": draw(st.sampled_from(["u", "v"]))},
                context=context,
                summary=draw(st.sampled_from([None, "boom at /tmp/x", "ok"])),
            )
        )
    return b.build(draw(st.sampled_from([None, "success", "failure", "partial"])))


batches = st.lists(trajectories(), min_size=1, max_size=5)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches, st.lists(trajectories(), max_size=3), st.sampled_from(sorted(available_scorers())))
def test_attribution_is_bounded_deterministic_and_points_at_real_nodes(
    batch: list[Trajectory], history: list[Trajectory], scorer: str
) -> None:
    results = attribute_batch(batch, history, scorer)
    assert [r.trajectory_id for r in results] == [t.trajectory_id for t in batch]
    assert attribute_batch(batch, history, scorer) == results

    real = {(t.trajectory_id, n.node_id) for t in [*batch, *history] for n in t.nodes}
    decisions = {(t.trajectory_id, n.node_id) for t in [*batch, *history] for n in t.nodes if n.is_decision}
    templates = []
    for trajectory, result in zip(batch, results, strict=True):
        assert len(result.path_labels) == len(label_paths(trajectory))
        assert all(-1.0 <= s.score <= 1.0 for s in result.node_scores)
        assert {s.node_id for s in result.node_scores} == {n.node_id for n in trajectory.nodes if n.is_decision}
        for contrast in result.contrasts:
            assert (contrast.good.trajectory_id, contrast.good.node_id) in decisions
            assert (contrast.bad.trajectory_id, contrast.bad.node_id) in decisions
            assert contrast.good.node_id != contrast.bad.node_id
        for template in result.templates:
            templates.append(template)
            assert 0.0 <= template.confidence <= 1.0
            assert template.avoid is not None
            assert template.avoid != template.recommended
            assert all((p.trajectory_id, nid) in real for p in template.provenance for nid in p.node_ids)
            assert "/tmp/" not in template.render()
    block = render_prompt_block(templates)
    assert block == render_prompt_block(templates)
    merged = merge_into_library([], templates)
    assert len(merged.library) == len(merged.new) + len(merged.supplementary) <= len(templates)
    # Merging the same findings again (a retried batch) changes nothing.
    assert merge_into_library(merged.library, templates).library == merged.library
