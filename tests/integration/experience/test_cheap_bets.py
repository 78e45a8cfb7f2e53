"""A template that prefers a call over a costlier one that works too is a cheap bet: it is served
from 1 / its cost ratio when that is under the threshold (SQLite, then Postgres; Milvus Lite and the
server; the real embedder)."""

from __future__ import annotations

import pytest
from pydantic import JsonValue

from actors.engine import attribute_batch
from actors.engine.model.templates import ExperienceTemplate
from actors.engine.model.trajectories import Trajectory
from cluster.experience.models import Situation
from cluster.experience.query import served_from
from cluster.experience.service import ExperienceService
from tests.unit.engine.builders import Builder

from .factories import template

pytestmark = pytest.mark.milvus

ACTIONS = ["paste_rows", "bulk_import"]
CONTEXT: dict[str, JsonValue] = {"goal": "import rows", "row_count": 40}


def import_run(action: str, steps: int) -> Trajectory:
    b = Builder(task_type="sheet_import")
    root = b.add("open_sheet", context={"goal": "import rows"})
    b.add(action, ACTIONS, parent=root, context=CONTEXT, data={"steps": steps})
    return b.build("success")


def cheap_lesson() -> ExperienceTemplate:
    """One import each way: paste_rows worked in 1 step, bulk_import in 3."""
    [lesson] = [
        t for r in attribute_batch([import_run("paste_rows", 1), import_run("bulk_import", 3)]) for t in r.templates
    ]
    return lesson


def query(experience: ExperienceService, owner: str) -> list[str]:
    situation = Situation(context_snapshot=CONTEXT, available_actions=ACTIONS)
    result = experience.query_experience(
        owner, "import rows", role="executor", task_type="sheet_import", situation=situation
    )
    return [e.recommended.tool for e in result.experiences]


def test_a_cheap_bet_is_served_below_the_threshold_from_one_over_its_cost_ratio(
    experience: ExperienceService,
) -> None:
    lesson = cheap_lesson()
    assert (lesson.recommended.tool, lesson.avoid_reason, lesson.cost_ratio) == ("paste_rows", "costlier", 3)
    # Two runs: a chance above 1/3 that paste_rows works is worth one cheap call, not yet 0.7.
    assert 1 / 3 < lesson.confidence < 0.7
    assert served_from(lesson, 0.7) == pytest.approx(1 / 3)
    experience.learn("team-a", [lesson])
    assert query(experience, "team-a") == ["paste_rows"]

    # The same evidence without the cost gap is held to the threshold.
    plain = lesson.model_copy(update={"cost_ratio": None})
    experience.learn("team-b", [plain])
    assert query(experience, "team-b") == []
    # A threshold under the bet's own bar is the one that counts.
    assert served_from(lesson, 0.2) == 0.2


def test_a_small_cost_gap_needs_more_confidence_than_a_large_one() -> None:
    lesson = cheap_lesson()
    assert served_from(lesson.model_copy(update={"cost_ratio": 1.25}), 0.7) == 0.7
    assert served_from(lesson.model_copy(update={"cost_ratio": 2.0}), 0.7) == 0.5


def test_a_bet_that_holds_here_ranks_before_a_surer_rule_it_puts_in_doubt(experience: ExperienceService) -> None:
    # A long shot worth its price (a chance above 1/3 pays at a 3x gap), against a near certainty
    # learned against a third tool: that rule says nothing about paste_rows, which the bet prefers to it.
    bet = cheap_lesson().model_copy(update={"confidence": 0.36, "belief": None})
    sure = template(
        "bulk_import", "imports", task_type="sheet_import", signature=bet.signature, avoid="wipe_sheet", confidence=0.99
    )
    experience.learn("team-a", [bet, sure])
    assert query(experience, "team-a") == ["paste_rows", "bulk_import"]


def test_a_bet_found_only_by_its_words_is_served_as_one_found_by_its_decision(experience: ExperienceService) -> None:
    # Learned at another decision, so only the search under the threshold (made on a miss) finds it.
    bet = cheap_lesson().model_copy(update={"signature": "executor|sheet_import|elsewhere"})
    assert bet.confidence < 0.7
    experience.learn("team-a", [bet])
    situation = Situation(context_snapshot=CONTEXT, available_actions=ACTIONS)
    result = experience.query_experience(
        "team-a", "import rows", role="executor", task_type="sheet_import", situation=situation
    )
    assert [e.recommended.tool for e in result.experiences] == ["paste_rows"]
    assert result.below_threshold is None
