"""A rebuilt library version keeps what agents reported about the rules it replaces (SQLite, then
Postgres; Milvus Lite and the real embedder): when it is built, when it is switched to, and when an
outcome about a template served before the switch arrives after it."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from actors.engine import attribute_batch, carry_feedback
from actors.engine.model.templates import ExperienceTemplate, Predicate
from cluster.experience.models import ConfidenceReason, LibrarySource, TemplateEdit
from cluster.experience.repository import SqlExperienceStore
from cluster.experience.service import ExperienceService
from cluster.experience.versions import LibraryVersions
from cluster.serve_config import ConsolidateParameters
from cluster.settings import Settings
from cluster.storage.db import Database
from pipelines.consolidate import judge
from tests.integration.experience.test_learning_loop import store_runs
from tests.unit.engine.builders import insert_run

from .factories import template

pytestmark = pytest.mark.milvus

OWNER = "team-a"


def lessons() -> list[ExperienceTemplate]:
    """What attribution learns, every time, from four imports where add_item times out and bulk_import works."""
    runs = [insert_run(300 + i, "add_item" if i % 2 == 0 else "bulk_import", i % 2 == 1, run=i) for i in range(4)]
    return [t for result in attribute_batch(runs) for t in result.templates]


def library(experience: ExperienceService, version: int) -> list[ExperienceTemplate]:
    with experience.db.read() as session:
        return [t for t, _ in SqlExperienceStore(session).iter_owner(OWNER, version=version)]


def only(experience: ExperienceService, version: int) -> ExperienceTemplate:
    [found] = library(experience, version)
    return found


def served_counts(t: ExperienceTemplate) -> tuple[int, int]:
    assert t.belief is not None
    return t.belief.served_ok, t.belief.served_failed


def rebuild(experience: ExperienceService, templates: list[ExperienceTemplate] | None = None) -> int:
    return experience.create_version(OWNER, templates or lessons(), LibrarySource.CONSOLIDATE, "test rebuild")


def test_a_rebuilt_template_keeps_the_outcomes_reported_about_the_rule_it_replaces(
    experience: ExperienceService,
) -> None:
    experience.learn(OWNER, lessons())
    live = only(experience, 1)
    experience.report_outcome(OWNER, [live.template_id], succeeded=True, trajectory_id=uuid.uuid4())
    experience.report_outcome(OWNER, [live.template_id], succeeded=True, trajectory_id=uuid.uuid4())
    experience.report_outcome(OWNER, [live.template_id], succeeded=False, trajectory_id=uuid.uuid4())

    version = rebuild(experience)

    rebuilt = only(experience, version)
    assert rebuilt.template_id != live.template_id
    assert served_counts(rebuilt) == (2, 1)
    [evidence] = lessons()
    assert rebuilt.confidence == carry_feedback(evidence, 2, 1).confidence
    assert rebuilt.confidence == only(experience, 1).confidence  # where the live library was
    # A second rebuild, from the first once it is served, still knows them: nothing counted twice.
    LibraryVersions(experience.db).promote(OWNER, version)
    assert served_counts(only(experience, rebuild(experience))) == (2, 1)


def test_the_template_with_the_same_advice_on_the_same_features_gives_its_outcomes(
    experience: ExperienceService,
) -> None:
    signature = "executor|product_import|import"
    by_rows = template(
        signature=signature,
        avoid="add_item",
        predicates=(Predicate(feature="row_count", op=">", value=100),),
        rationale="large imports",
    )
    by_encoding = template(
        signature=signature,
        avoid="add_item",
        predicates=(Predicate(feature="file.encoding", op="==", value="utf-8"),),
        rationale="utf-8 files",
    )
    other_tool = template("stream_import", signature=signature, avoid="add_item", rationale="streamed")
    hand_set = template("validate_csv", signature=signature, rationale="checked first")
    ids = [experience.add_template(OWNER, t).template_id for t in (by_rows, by_encoding, other_tool, hand_set)]
    experience.report_outcome(OWNER, ids[:1], succeeded=True, trajectory_id=uuid.uuid4())
    experience.report_outcome(OWNER, ids[:1], succeeded=True, trajectory_id=uuid.uuid4())
    experience.report_outcome(OWNER, ids[1:3], succeeded=False, trajectory_id=uuid.uuid4())
    experience.report_outcome(OWNER, ids[3:], succeeded=True, trajectory_id=uuid.uuid4())
    # A confidence set by hand replaces what it was computed from, reported outcomes included.
    experience.edit_template(OWNER, ids[3], TemplateEdit(confidence=0.95))

    rows = template(
        signature=signature,
        avoid="add_item",
        predicates=(Predicate(feature="row_count", op=">", value=85),),
        rationale="rebuilt: large imports",
        confidence=0.6,
    )
    checked = template("validate_csv", signature=signature, rationale="rebuilt: checked first", confidence=0.6)
    elsewhere = template(signature="executor|product_import|export", avoid="add_item", confidence=0.6)
    version = rebuild(experience, [rows, checked, elsewhere])

    carried = {t.rationale: t for t in library(experience, version)}
    assert served_counts(carried["rebuilt: large imports"]) == (2, 0)
    assert carried["rebuilt: checked first"].confidence == 0.6  # nothing counted to give
    assert carried["rebuilt: checked first"].belief is None
    assert carried[elsewhere.rationale].confidence == 0.6  # no rule of the active version at its decision


def test_outcomes_reported_while_a_rebuilt_version_waits_are_taken_along_when_it_is_switched_to(
    experience: ExperienceService,
) -> None:
    experience.learn(OWNER, lessons())
    live = only(experience, 1)
    experience.report_outcome(OWNER, [live.template_id], succeeded=True, trajectory_id=uuid.uuid4())
    version = rebuild(experience)
    assert served_counts(only(experience, version)) == (1, 0)
    # While the new version is judged, agents go on reporting about the one they are served.
    late = uuid.uuid4()
    experience.report_outcome(OWNER, [live.template_id], succeeded=True, trajectory_id=late)
    experience.report_outcome(OWNER, [live.template_id], succeeded=False, trajectory_id=uuid.uuid4())

    LibraryVersions(experience.db).promote(OWNER, version)

    switched = only(experience, version)
    assert served_counts(switched) == (2, 1)
    assert experience.history(OWNER, switched.template_id)[-1].reason is ConfidenceReason.CARRIED
    # Served with that confidence: the index learns it too.
    experience.index_pending(OWNER)
    served = experience.query_experience(OWNER, "Import products", role="executor", min_confidence=0.0)
    assert [(s.template.template_id, s.template.confidence) for s in served.templates] == [
        (switched.template_id, switched.confidence)
    ]
    # A retried report of an outcome already taken along counts nowhere again.
    again = experience.report_outcome(OWNER, [live.template_id], succeeded=True, trajectory_id=late)
    assert (again.changes, again.already_counted) == ((), (live.template_id,))
    assert served_counts(only(experience, version)) == (2, 1)


def test_an_outcome_reported_after_a_switch_about_a_template_served_before_counts_on_its_successor(
    experience: ExperienceService,
) -> None:
    experience.learn(OWNER, lessons())
    before = only(experience, 1)
    versions = LibraryVersions(experience.db)
    version = rebuild(experience)
    versions.promote(OWNER, version)
    after = only(experience, version)

    run = uuid.uuid4()
    report = experience.report_outcome(OWNER, [before.template_id], succeeded=True, trajectory_id=run)

    assert [c.template_id for c in report.changes] == [before.template_id, after.template_id]
    assert served_counts(only(experience, version)) == (1, 0)
    retried = experience.report_outcome(OWNER, [before.template_id], succeeded=True, trajectory_id=run)
    assert retried.changes == ()
    assert served_counts(only(experience, version)) == (1, 0)
    # Rolled back, the version served before knows what was reported about its successor meanwhile.
    experience.report_outcome(OWNER, [after.template_id], succeeded=False, trajectory_id=uuid.uuid4())
    versions.rollback(OWNER)
    assert served_counts(only(experience, 1)) == (1, 1)


def test_outcomes_reported_while_the_library_switches_each_count_once_in_the_version_switched_to(
    experience: ExperienceService,
) -> None:
    experience.learn(OWNER, lessons())
    before = only(experience, 1)
    version = rebuild(experience)
    runs = [uuid.uuid4() for _ in range(8)]
    barrier = threading.Barrier(len(runs) + 1)
    errors: list[BaseException] = []

    def report(run: uuid.UUID) -> None:
        barrier.wait()
        try:
            for _ in range(2):  # each report retried once
                experience.report_outcome(OWNER, [before.template_id], succeeded=True, trajectory_id=run)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=report, args=(run,)) for run in runs]
    for t in threads:
        t.start()
    barrier.wait()
    LibraryVersions(experience.db).promote(OWNER, version)
    for t in threads:
        t.join(timeout=60)

    assert errors == []
    # Each outcome landed before the switch (taken along) or after it (counted on the successor too).
    assert served_counts(only(experience, 1)) == (len(runs), 0)
    assert served_counts(only(experience, version)) == (len(runs), 0)


def test_the_consolidation_judge_scores_the_rebuilt_library_with_the_outcomes_it_will_keep(
    database: Database, experience: ExperienceService, tmp_path: Path
) -> None:
    runs = [insert_run(300, "add_item", False, run=0)]
    runs += [insert_run(300 + i, "bulk_import", True, run=i) for i in (1, 2)]
    for run in runs:  # one at a time: the last one finalized is held out
        store_runs(database, OWNER, [run])
    # Learned from the first two runs, below the threshold; one success report lifts it above.
    experience.learn(OWNER, [t for result in attribute_batch(runs[:2]) for t in result.templates])
    live = only(experience, 1)
    assert live.confidence < 0.7
    experience.report_outcome(OWNER, [live.template_id], succeeded=True, trajectory_id=uuid.uuid4())
    assert only(experience, 1).confidence >= 0.7
    version = rebuild(experience, [t for result in attribute_batch(runs) for t in result.templates])

    settings = Settings(data_dir=tmp_path, database_url=database.url)
    decision = judge(database, settings, OWNER, version, ConsolidateParameters(holdout=0.2))

    # Learned from the same two runs and given the same report, the rebuilt rule serves the held-out run too.
    assert (decision.judged, decision.active_hit_at_1, decision.new_hit_at_1) == (1, 1.0, 1.0)
    assert decision.promoted
