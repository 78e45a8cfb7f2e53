"""A query that serves nothing names the templates just below the confidence threshold (SQLite, then
Postgres; Milvus Lite and the real embedder)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import JsonValue
from pymilvus import MilvusClient

from actors.engine import attribute_batch
from actors.engine.model.templates import ExperienceTemplate, Predicate
from cluster.embedding import CachedEmbedder
from cluster.experience.index import MilvusExperienceIndex
from cluster.experience.models import Situation
from cluster.experience.ports import Hit
from cluster.experience.service import ExperienceService
from cluster.storage.db import Database
from cluster.tools.experience import nothing_served
from tests.unit.engine.builders import INSERT_ACTIONS, Builder, insert_run

from .factories import template

pytestmark = pytest.mark.milvus

OWNER = "team-a"
IMPORT = "Import 500 products from a CSV file into the shop catalog"
WHEN = "a product import has more than 20 rows with a uniform schema"


class CountingIndex(MilvusExperienceIndex):
    """The Milvus index, counting the searches a query makes."""

    searches = 0

    def search(
        self,
        owner: str,
        vector: Sequence[float],
        *,
        limit: int,
        version: int,
        roles: Sequence[str] | None = None,
        task_type: str | None = None,
        min_confidence: float = 0.0,
    ) -> list[Hit]:
        self.searches += 1
        return super().search(
            owner,
            vector,
            limit=limit,
            version=version,
            roles=roles,
            task_type=task_type,
            min_confidence=min_confidence,
        )


@pytest.fixture
def counted(database: Database, milvus: MilvusClient, embedder: CachedEmbedder) -> ExperienceService:
    return ExperienceService(database, CountingIndex(milvus), embedder)


def searches(experience: ExperienceService) -> int:
    assert isinstance(experience.index, CountingIndex)
    return experience.index.searches


def add(experience: ExperienceService, confidence: float, **kwargs: Any) -> uuid.UUID:
    kwargs.setdefault("rationale", f"variant {confidence}")
    return experience.add_template(OWNER, template(confidence=confidence, **kwargs)).template_id


def test_nothing_served_names_the_nearest_templates_below_the_threshold_most_confident_first(
    counted: ExperienceService,
) -> None:
    nearest = add(counted, 0.69, avoid="add_item")
    weak = add(counted, 0.41, tool="stream_import", avoid="add_item")
    plain = add(counted, 0.55, tool="validate_csv", when="a product import file comes from a new supplier")
    # What this caller would never be served, whatever the threshold.
    add(counted, 0.68, role="planner")
    counted.add_template("team-b", template(confidence=0.68))
    retired = template(confidence=0.68, rationale="contradicted").model_copy(update={"retired_reason": "contradicted"})
    counted.add_template(OWNER, retired)
    # Far from the query: a fourth candidate, beyond the three named.
    add(counted, 0.6, tool="backup_database", when="running a schema migration on a production database")

    result = counted.query_experience(OWNER, IMPORT, role="executor")

    assert result.experiences == ()
    assert result.prompt_block == ""
    assert result.below_threshold is not None
    assert result.below_threshold.threshold == 0.7
    assert [c.id for c in result.below_threshold.candidates] == [nearest, plain, weak]
    assert result.below_threshold.line() == (
        "3 candidates below 0.70: prefer bulk_import over add_item (0.69); prefer validate_csv (0.55); "
        "prefer stream_import over add_item (0.41)"
    )
    # The first search filters on the threshold and found nothing: one more, on the miss only.
    assert searches(counted) == 2

    lowered = counted.query_experience(OWNER, IMPORT, role="executor", min_confidence=0.5)
    assert lowered.below_threshold is None
    assert {nearest, plain} <= {s.template.template_id for s in lowered.templates}


def test_an_answer_that_serves_something_names_nothing_below(counted: ExperienceService) -> None:
    served = add(counted, 0.9)
    add(counted, 0.69, avoid="add_item")

    result = counted.query_experience(OWNER, IMPORT, role="executor")

    assert [e.id for e in result.experiences] == [served]
    assert result.below_threshold is None
    assert "below_threshold" not in result.model_dump(mode="json")
    assert searches(counted) == 1


def test_a_confidence_that_would_round_up_to_the_threshold_is_shown_below_it(counted: ExperienceService) -> None:
    add(counted, 0.6999, avoid="add_item")
    result = counted.query_experience(OWNER, IMPORT, role="executor")
    assert result.below_threshold is not None
    assert result.below_threshold.line() == "1 candidate below 0.70: prefer bulk_import over add_item (0.69)"


def learned(runs: int) -> list[ExperienceTemplate]:
    """What attribution learns from ``runs`` imports of 300+ rows: add_item times out, bulk_import works."""
    trajectories = [
        insert_run(300 + i, "add_item" if i % 2 == 0 else "bulk_import", i % 2 == 1, run=i) for i in range(runs)
    ]
    return [t for result in attribute_batch(trajectories) for t in result.templates]


def situation(rows: int) -> Situation:
    snapshot: dict[str, JsonValue] = {
        "goal": "Import products from a CSV file",
        "row_count": rows,
        "file": {"path": f"/tmp/products_{rows}.csv", "encoding": "utf-8"},
    }
    return Situation(context_snapshot=snapshot, available_actions=INSERT_ACTIONS)


def test_with_a_situation_the_decisions_own_templates_below_are_named_without_another_search(
    counted: ExperienceService,
) -> None:
    [lesson] = learned(2)  # two runs: below the threshold
    assert lesson.confidence < 0.7
    counted.learn(OWNER, [lesson])
    # Another rule of this decision, whose condition is false at 300 rows: it would not be served here.
    small = template(
        "add_item",
        "small imports",
        task_type=lesson.task_type,
        signature=lesson.signature,
        avoid="bulk_import",
        predicates=(Predicate(feature="row_count", op="<=", value=20),),
        confidence=0.6,
    )
    counted.add_template(OWNER, small)

    result = counted.query_experience(
        OWNER, "Import products", role="executor", task_type="product_import", situation=situation(300)
    )

    assert result.experiences == ()
    assert result.below_threshold is not None
    [candidate] = result.below_threshold.candidates
    assert (candidate.recommended, candidate.avoid) == ("bulk_import", "add_item")
    assert candidate.confidence == counted.get_template(OWNER, candidate.id).confidence
    # Templates learned at this decision are read from SQL whatever their confidence: no second search.
    assert searches(counted) == 1


def test_actions_that_never_worked_at_the_decision_are_named_in_the_answer(
    counted: ExperienceService,
) -> None:
    # Large imports: bulk_import works and a decoy, purge_catalog, fails; small ones were never seen.
    actions = (*INSERT_ACTIONS, "purge_catalog")
    trajectories = []
    for i in range(4):
        b = Builder()
        root = b.add("open_file", context={"goal": "Import products from a CSV file"})
        context = {"goal": "Import products from a CSV file", "row_count": 300 + 100 * i}
        b.add("purge_catalog", actions, parent=root, status="failure", context=context, summary="refused")
        b.add("add_item", actions, parent=root, status="failure", context=context, summary="timeout")
        b.add("bulk_import", actions, parent=root, context=context)
        trajectories.append(b.build())
    lessons = [t for result in attribute_batch(trajectories) for t in result.templates]
    assert lessons
    counted.learn(OWNER, lessons)

    snapshot: dict[str, JsonValue] = {"goal": "Import products from a CSV file", "row_count": 5}
    small = Situation(context_snapshot=snapshot, available_actions=actions)
    result = counted.query_experience(
        OWNER, "Import products", role="executor", task_type="product_import", situation=small
    )

    assert "purge_catalog" in result.never_worked
    assert "bulk_import" not in result.never_worked
    assert "Never worked at this step" in (result.prompt_block or nothing_served(result))
    # Without a situation there is no decision to speak of.
    plain = counted.query_experience(OWNER, "Import products", role="executor", task_type="product_import")
    assert plain.never_worked == ()
