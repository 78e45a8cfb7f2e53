"""The experience library on Milvus Lite and SQL (SQLite, then Postgres), with the real ONNX embedder."""

from __future__ import annotations

import itertools
import json
import logging
import random
import threading
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from pymilvus import MilvusClient

from actors.engine import carry_feedback
from actors.engine.model.templates import (
    EvidenceKind,
    ExperienceTemplate,
    Predicate,
    Provenance,
    Support,
    TemplateSource,
)
from cluster.core.errors import Conflict, InvalidInput, NotFound
from cluster.experience.index import MilvusExperienceIndex
from cluster.experience.models import ConfidenceReason, TemplateEdit
from cluster.experience.ports import IndexRow
from cluster.experience.repository import SqlExperienceStore
from cluster.experience.service import IMPORT_NAMESPACE, ExperienceService

from .factories import template

pytestmark = pytest.mark.milvus

OWNER = "team-a"
# (tool, condition, rationale, a context an agent would query with)
TOPICS = [
    (
        "bulk_import",
        "a product import has more than 20 rows with a uniform schema",
        "one-by-one add_item times out on large imports",
        "Import 500 products from a CSV file into the shop catalog",
    ),
    (
        "click",
        "submitting a web form whose button id changes between deployments",
        "select the submit button by its type, not its generated id",
        "Fill in the signup form on the website and press the submit button",
    ),
    (
        "backup_database",
        "running a schema migration on a production database",
        "a failed migration cannot be rolled back without a backup",
        "Apply the new schema migration to the production Postgres database",
    ),
    (
        "send_email_batch",
        "sending more than 100 notification emails at once",
        "the mail API rate-limits single sends",
        "Email the weekly newsletter to all 3000 subscribers",
    ),
    (
        "upload_chunked",
        "uploading a file larger than 100 MB",
        "single-request uploads time out",
        "Upload the 2 GB video recording to cloud storage",
    ),
]


def topic(i: int, **kwargs: Any) -> ExperienceTemplate:
    tool, when, why, _ = TOPICS[i]
    kwargs.setdefault("rationale", why)
    return template(tool, when, **kwargs)


def add_topics(service: ExperienceService, owner: str = OWNER, **kwargs: Any) -> list[uuid.UUID]:
    return [service.add_template(owner, topic(i, **kwargs)).template_id for i in range(len(TOPICS))]


def test_an_empty_library_gives_an_empty_result(experience: ExperienceService) -> None:
    result = experience.query_experience(OWNER, "Import products from a CSV", role="executor")
    assert result.templates == ()
    assert result.prompt_block == ""


def test_the_most_relevant_template_ranks_first(experience: ExperienceService) -> None:
    ids = add_topics(experience)
    for i, (_, _, _, context) in enumerate(TOPICS):
        result = experience.query_experience(OWNER, context, role="executor")
        assert result.templates[0].template.template_id == ids[i], context
        scores = [s.relevance for s in result.templates]
        assert scores == sorted(scores, reverse=True)
    block = experience.query_experience(OWNER, TOPICS[0][3], role="executor").prompt_block
    assert block.startswith("[EXPERIENCE]\n1. When a product import has more than 20 rows")
    assert block.endswith("[/EXPERIENCE]")


def test_roles_are_filtered_unless_other_roles_are_asked_for(experience: ExperienceService) -> None:
    planner = experience.add_template(OWNER, topic(0, role="planner")).template_id
    executor = experience.add_template(OWNER, topic(1, role="executor")).template_id
    context = TOPICS[0][3]
    only_executor = experience.query_experience(OWNER, context, role="executor")
    assert [s.template.template_id for s in only_executor.templates] == [executor]
    both = experience.query_experience(OWNER, context, role="executor", include_other_roles=True)
    assert [s.template.template_id for s in both.templates] == [planner, executor]


def test_task_type_matches_that_type_or_templates_for_any_type(experience: ExperienceService) -> None:
    typed = experience.add_template(OWNER, topic(0, task_type="catalog_import")).template_id
    general = experience.add_template(OWNER, topic(0, task_type=None, rationale="general advice")).template_id
    other = experience.add_template(OWNER, topic(0, task_type="inventory_sync", rationale="other")).template_id
    found = experience.query_experience(OWNER, TOPICS[0][3], role="executor", task_type="catalog_import")
    assert {s.template.template_id for s in found.templates} == {typed, general}
    everything = experience.query_experience(OWNER, TOPICS[0][3], role="executor")
    assert {s.template.template_id for s in everything.templates} == {typed, general, other}


def test_confidence_threshold_defaults_to_the_setting_and_can_be_lowered(experience: ExperienceService) -> None:
    confidences = [0.5, 0.69, 0.7, 0.95]
    ids = {
        c: experience.add_template(OWNER, topic(0, confidence=c, rationale=f"variant {c}")).template_id
        for c in confidences
    }
    default = experience.query_experience(OWNER, TOPICS[0][3], role="executor")
    assert {s.template.template_id for s in default.templates} == {ids[0.7], ids[0.95]}
    lowered = experience.query_experience(OWNER, TOPICS[0][3], role="executor", min_confidence=0.4)
    assert {s.template.template_id for s in lowered.templates} == set(ids.values())


def test_top_k_defaults_to_five_and_is_capped_at_eight(experience: ExperienceService) -> None:
    for i in range(12):
        experience.add_template(OWNER, topic(i % len(TOPICS), rationale=f"lesson number {i}"))
    context = TOPICS[0][3]
    assert len(experience.query_experience(OWNER, context, role="executor").templates) == 5
    assert len(experience.query_experience(OWNER, context, role="executor", top_k=3).templates) == 3
    assert len(experience.query_experience(OWNER, context, role="executor", top_k=50).templates) == 8


def test_owners_never_see_each_others_templates(experience: ExperienceService) -> None:
    rng = random.Random(20261129)
    owners = [f"owner-{i}" for i in range(5)] + ['quote"d\\owner']
    mine: dict[str, set[uuid.UUID]] = {o: set() for o in owners}
    roles = ["planner", "executor", "verifier"]
    for owner in owners:
        for i in rng.sample(range(len(TOPICS)), k=rng.randint(1, len(TOPICS))):
            t = topic(i, role=rng.choice(roles), confidence=rng.uniform(0.0, 1.0), rationale=f"{owner} {i}")
            mine[owner].add(experience.add_template(owner, t).template_id)
    for owner in owners:
        for _, _, _, context in TOPICS:
            result = experience.query_experience(
                owner, context, role=rng.choice(roles), top_k=8, min_confidence=0.0, include_other_roles=True
            )
            found = {s.template.template_id for s in result.templates}
            assert found <= mine[owner]
            assert len(found) == min(8, len(mine[owner]))
    stranger = next(iter(mine["owner-0"]))
    with pytest.raises(NotFound):
        experience.get_template("owner-1", stranger)
    with pytest.raises(NotFound):
        experience.report_outcome("owner-1", [stranger], succeeded=True)
    with pytest.raises(NotFound):
        experience.edit_template("owner-1", stranger, TemplateEdit(confidence=0.1))
    assert experience.get_template("owner-0", stranger).confidence != 0.1


def evidence(kind: EvidenceKind = EvidenceKind.RECOMMENDED_SUCCEEDED) -> Provenance:
    return Provenance(trajectory_id=uuid.uuid4(), node_ids=(uuid.uuid4(),), kind=kind)


def test_near_duplicates_merge_and_support_adds_up(experience: ExperienceService) -> None:
    first = evidence()
    report = experience.learn(OWNER, [topic(0, provenance=(first,), support=Support(successes=1, trajectories=1))])
    (kept,) = report.new
    second = evidence()
    again = experience.learn(OWNER, [topic(0, provenance=(second,), support=Support(successes=1, trajectories=1))])
    assert again.new == ()
    assert again.merged == (kept,)
    merged = experience.get_template(OWNER, kept)
    assert merged.support.successes == 2
    assert merged.support.trajectories == 2
    assert {p.trajectory_id for p in merged.provenance} == {first.trajectory_id, second.trajectory_id}
    assert experience.count(OWNER) == 1
    # The same evidence again (a retried batch) changes nothing.
    retry = experience.learn(OWNER, [topic(0, provenance=(second,), support=Support(successes=1, trajectories=1))])
    assert retry.merged == ()
    assert experience.get_template(OWNER, kept).support == merged.support


def test_each_learned_template_is_one_line_at_info_and_a_merge_none(
    experience: ExperienceService, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 48: nothing was logged when a template was learned, only counts.
    with caplog.at_level(logging.INFO, logger="cluster.experience.learning"):
        (kept,) = experience.learn(OWNER, [topic(0, provenance=(evidence(),))]).new
        experience.learn(OWNER, [topic(0, provenance=(evidence(),))])
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"learned new template {kept.hex[:8]} for {OWNER} (")
    assert "prefer " in lines[0]


def test_an_edge_case_becomes_a_supplementary_template_linked_to_its_parent(experience: ExperienceService) -> None:
    (parent,) = experience.learn(OWNER, [topic(0, provenance=(evidence(),))]).new
    edge = topic(0, provenance=(evidence(),), predicates=(Predicate(feature="rows", op=">", value=100_000),))
    report = experience.learn(OWNER, [edge])
    (child,) = report.supplementary
    assert experience.get_template(OWNER, child).parent_id == parent
    assert experience.count(OWNER) == 2


def test_feedback_moves_confidence_both_ways_and_a_retry_counts_once(experience: ExperienceService) -> None:
    tid = experience.add_template(OWNER, topic(0, confidence=0.72)).template_id
    run1, run2 = uuid.uuid4(), uuid.uuid4()
    up = experience.report_outcome(OWNER, [tid], succeeded=True, trajectory_id=run1)
    assert up.changes[0].before == 0.72
    assert up.changes[0].after > 0.72
    retried = experience.report_outcome(OWNER, [tid], succeeded=True, trajectory_id=run1)
    assert retried.changes == ()
    assert retried.already_counted == (tid,)
    high = experience.get_template(OWNER, tid).confidence
    assert high == up.changes[0].after
    down = experience.report_outcome(OWNER, [tid], succeeded=False, trajectory_id=run2)
    low = experience.get_template(OWNER, tid).confidence
    assert low < high
    assert down.changes[0].after == low
    history = experience.history(OWNER, tid)
    assert [(h.reason, h.before, h.after, h.trajectory_id) for h in history] == [
        (ConfidenceReason.MANUAL, None, 0.72, None),
        (ConfidenceReason.SUCCESS, 0.72, high, run1),
        (ConfidenceReason.FAILURE, high, low, run2),
    ]
    # Below the 0.7 threshold now: the index knows, so it is no longer served.
    assert low < 0.7
    assert experience.query_experience(OWNER, TOPICS[0][3], role="executor").templates == ()


def test_feedback_without_a_trajectory_counts_every_time(experience: ExperienceService) -> None:
    tid = experience.add_template(OWNER, topic(0, confidence=0.5)).template_id
    experience.report_outcome(OWNER, [tid, tid], succeeded=True)
    once = experience.get_template(OWNER, tid).confidence
    experience.report_outcome(OWNER, [tid], succeeded=True)
    assert experience.get_template(OWNER, tid).confidence > once > 0.5


def test_a_confidence_change_the_index_cannot_apply_in_place_rewrites_the_vector(
    experience: ExperienceService,
) -> None:
    ids = add_topics(experience)
    # The in-place update reads the row back by key first; a row that read misses (Milvus Lite can,
    # after heavy writes) must not be marked indexed with its old confidence.
    experience.index.delete(OWNER, [ids[0]])
    (change,) = experience.report_outcome(OWNER, [ids[0]], succeeded=True).changes
    assert experience.index.ids(OWNER) == set(ids)
    (row,) = experience.index.rows.query(OWNER, [str(ids[0])], ["confidence"])
    assert row["confidence"] == pytest.approx(change.after)
    with experience.db.read() as session:
        assert SqlExperienceStore(session).index_backlog_size() == 0


def test_reindex_from_sql_gives_the_same_answers(experience: ExperienceService) -> None:
    add_topics(experience, "a")
    add_topics(experience, "b", role="planner")
    tid = add_topics(experience, "c")[0]
    experience.report_outcome("c", [tid], succeeded=False)  # a confidence change after the first write

    def answers() -> list[list[tuple[uuid.UUID, float]]]:
        return [
            [
                (s.template.template_id, round(s.relevance, 4))
                for s in experience.query_experience(
                    owner, ctx, role="executor", min_confidence=0.0, include_other_roles=True
                ).templates
            ]
            for owner in ("a", "b", "c")
            for *_, ctx in TOPICS
        ]

    before = answers()
    experience.index.drop()
    assert experience.reindex() == 3 * len(TOPICS)
    assert answers() == before


def test_a_full_reindex_keeps_every_library_findable_while_it_runs(
    experience: ExperienceService, monkeypatch: pytest.MonkeyPatch
) -> None:
    for owner in ("a", "b"):
        add_topics(experience, owner)
    # Vectors of an owner SQL no longer knows (a lost delete).
    now = datetime.now(UTC)
    vector = experience.embedder.embed(["Import 500 products from a CSV file"])[0]
    experience.index.upsert([IndexRow(uuid.uuid4(), "ghost", "executor", "catalog_import", 0.9, now, now, vector)])
    seen: list[int] = []
    index_batch = experience.indexing._index

    def observing(owner: str, items: Sequence[tuple[ExperienceTemplate, str, int]]) -> None:
        # Mid-rebuild, before each owner's batch is written: the other owner's library is served.
        other = "b" if owner == "a" else "a"
        seen.append(len(experience.query_experience(other, TOPICS[0][3], role="executor").templates))
        index_batch(owner, items)

    monkeypatch.setattr(experience.indexing, "_index", observing)
    assert experience.reindex() == 2 * len(TOPICS)
    assert seen
    assert all(n > 0 for n in seen)
    assert experience.index.ids("ghost") == set()


def test_reindex_of_one_owner_repairs_a_stale_index(experience: ExperienceService) -> None:
    ids = add_topics(experience)
    ghost = uuid.uuid4()
    row = experience.get_template(OWNER, ids[0])
    vector = experience.embedder.embed(["Import 500 products from a CSV file"])[0]
    experience.index.upsert(
        [IndexRow(ghost, OWNER, "executor", "catalog_import", 0.99, row.created_at, row.updated_at, vector)]
    )
    experience.index.set_confidence(OWNER, {ids[0]: (0.1, row.updated_at)})
    # SQL has the last word even before the repair: no ghost, and the stale low confidence only hides.
    served = experience.query_experience(OWNER, TOPICS[0][3], role="executor")
    assert ghost not in {s.template.template_id for s in served.templates}
    assert experience.reindex(OWNER) == len(TOPICS)
    assert experience.index.ids(OWNER) == set(ids)
    repaired = experience.query_experience(OWNER, TOPICS[0][3], role="executor")
    assert repaired.templates[0].template.template_id == ids[0]


def test_export_then_import_round_trips_with_provenance(experience: ExperienceService) -> None:
    proof = evidence()
    (parent,) = experience.learn(OWNER, [topic(0, provenance=(proof,), support=Support(successes=3))]).new
    edge = topic(0, provenance=(evidence(),), predicates=(Predicate(feature="rows", op=">", value=100_000),))
    (child,) = experience.learn(OWNER, [edge]).supplementary
    for i in range(1, len(TOPICS)):
        experience.add_template(OWNER, topic(i))

    lines = list(experience.export_library(OWNER))
    header = json.loads(lines[0])
    assert header["format"] == "hindsight-experience"
    assert header["version"] == 1
    assert header["count"] == len(lines) - 1 == experience.count(OWNER)

    report = experience.import_library("team-b", lines)
    assert len(report.imported) == len(lines) - 1
    assert report.duplicates == 0
    copies = {experience.get_template("team-b", i).template_id for i in report.imported}
    exported_ids = [uuid.UUID(json.loads(line)["template"]["template_id"]) for line in lines[1:]]
    # Another owner's import gets stable new ids, uuid5(IMPORT_NAMESPACE, "owner:original id").
    copy_id = {i: uuid.uuid5(IMPORT_NAMESPACE, f"team-b:{i}") for i in exported_ids}
    assert copies == set(copy_id.values())
    copy_of_parent = experience.get_template("team-b", copy_id[parent])
    copy_of_child = experience.get_template("team-b", copy_id[child])
    assert copy_of_child.parent_id == copy_of_parent.template_id
    assert copy_of_parent.provenance == (proof,)
    assert copy_of_parent.source is TemplateSource.IMPORT

    for *_, context in TOPICS:
        a = experience.query_experience(OWNER, context, role="executor", min_confidence=0.0)
        b = experience.query_experience("team-b", context, role="executor", min_confidence=0.0)
        assert [(s.template.render(), round(s.relevance, 4)) for s in a.templates] == [
            (s.template.render(), round(s.relevance, 4)) for s in b.templates
        ]

    again = experience.import_library("team-b", lines)
    assert (again.imported, again.merged, again.duplicates) == ((), (), len(lines) - 1)
    into_self = experience.import_library(OWNER, lines)
    assert (into_self.imported, into_self.duplicates) == ((), len(lines) - 1)


@pytest.mark.parametrize(
    "lines",
    [
        [],
        ["not json"],
        [json.dumps({"format": "something-else", "version": 1})],
        [json.dumps({"format": "hindsight-experience", "version": 99})],
        [json.dumps({"format": "hindsight-experience", "version": 1}), json.dumps({"template": {"role": "x"}})],
    ],
)
def test_a_malformed_import_is_rejected_whole(experience: ExperienceService, lines: list[str]) -> None:
    with pytest.raises(InvalidInput):
        experience.import_library(OWNER, lines)
    assert experience.count(OWNER) == 0


def test_hand_edits_change_the_served_text_and_record_confidence(experience: ExperienceService) -> None:
    tid = experience.add_template(OWNER, topic(0)).template_id
    edited = experience.edit_template(
        OWNER, tid, TemplateEdit(rationale="the import API accepts at most 10k rows per file", confidence=0.75)
    )
    assert edited.source is TemplateSource.MANUAL
    served = experience.query_experience(OWNER, TOPICS[0][3], role="executor")
    assert "at most 10k rows" in served.prompt_block
    assert experience.history(OWNER, tid)[-1].reason is ConfidenceReason.MANUAL
    moved = experience.edit_template(OWNER, tid, TemplateEdit(role="planner"))
    assert moved.role == "planner"
    assert experience.query_experience(OWNER, TOPICS[0][3], role="executor").templates == ()


def test_adding_an_existing_id_is_a_conflict(experience: ExperienceService) -> None:
    t = experience.add_template(OWNER, topic(0))
    with pytest.raises(Conflict):
        experience.add_template(OWNER, t)
    with pytest.raises(Conflict):
        experience.add_template("someone-else", t)


@pytest.mark.parametrize(
    "kwargs",
    [{"context": "   "}, {"top_k": 0}, {"min_confidence": 1.5}, {"owner": ""}, {"context": "nul\x00"}],
)
def test_bad_queries_are_invalid_input(experience: ExperienceService, kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"owner": OWNER, "context": "import products", "role": "executor", **kwargs}
    with pytest.raises(InvalidInput):
        experience.query_experience(**args)  # type: ignore[arg-type]


def test_concurrent_reports_each_count_once_and_chain_in_the_history(experience: ExperienceService) -> None:
    tid = experience.add_template(OWNER, topic(0, confidence=0.5)).template_id
    runs = [uuid.uuid4() for _ in range(8)]
    barrier = threading.Barrier(len(runs))
    errors: list[BaseException] = []

    def report(run: uuid.UUID) -> None:
        barrier.wait()
        try:
            for _ in range(2):  # each report retried once
                experience.report_outcome(OWNER, [tid], succeeded=True, trajectory_id=run)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=report, args=(run,)) for run in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    stored = experience.get_template(OWNER, tid)
    assert stored.belief is not None
    assert stored.belief.served_ok == len(runs)
    as_added = stored.model_copy(update={"belief": None, "confidence": 0.5})
    assert stored.confidence == pytest.approx(carry_feedback(as_added, len(runs), 0).confidence)
    history = experience.history(OWNER, tid)[1:]
    assert sorted(h.trajectory_id for h in history if h.trajectory_id) == sorted(runs)
    assert all(a.after == b.before for a, b in itertools.pairwise(history))


def test_the_index_reports_readiness_for_health_checks(milvus: MilvusClient) -> None:
    index = MilvusExperienceIndex(milvus, collection="readiness")
    assert not index.ready()
    index.ensure_collection()
    assert index.ready()
    index.drop()
    assert not index.ready()
