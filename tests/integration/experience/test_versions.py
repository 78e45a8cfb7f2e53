"""Versioned experience libraries on Milvus Lite and SQL (SQLite, then Postgres), with the real embedder."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from pymilvus import MilvusClient

from actors.engine.model.templates import ExperienceTemplate, Predicate
from actors.engine.retire import ActionOutcome
from cluster.core.errors import Conflict, InvalidInput, NotFound
from cluster.embedding import CachedEmbedder
from cluster.experience.exchange import parse_export
from cluster.experience.index import MilvusExperienceIndex
from cluster.experience.models import LibrarySource
from cluster.experience.repository import SqlExperienceStore
from cluster.experience.service import ExperienceService
from cluster.experience.tables import ConfidenceChangeRow, ExperienceTemplateRow
from cluster.experience.versions import LibraryVersions
from cluster.storage.db import Database
from cluster.storage.migrate import alembic_config

from .factories import template

pytestmark = pytest.mark.milvus

OWNER = "team-a"
CONTEXT = "Import 500 products from a CSV file into the shop catalog"
# Three rules on one topic; a version tags its tools with a suffix, so every served template says
# which version it came from while the texts (and so the vectors) of two versions nearly agree.
RULES = [
    ("bulk_import", "a product import has more than 20 rows with a uniform schema"),
    ("stream_import", "a product import file is larger than the memory of the worker"),
    ("validate_csv", "a product import file comes from a supplier for the first time"),
]


def tagged(tag: str, confidence: float = 0.9) -> list[ExperienceTemplate]:
    return [template(f"{tool}_{tag}", when, confidence=confidence) for tool, when in RULES]


def tags(experience: ExperienceService, owner: str = OWNER) -> set[str]:
    served = experience.query_experience(owner, CONTEXT, role="executor", min_confidence=0)
    return {s.template.recommended.tool.rsplit("_", 1)[1] for s in served.templates}


def test_a_new_version_is_not_served_until_it_is_promoted(experience: ExperienceService) -> None:
    versions = LibraryVersions(experience.db)
    experience.learn(OWNER, tagged("a"))
    built = experience.create_version(OWNER, tagged("b"), LibrarySource.REPROCESS, "scorer failure_averse")
    assert built == 2
    assert tags(experience) == {"a"}
    assert experience.count(OWNER) == 3
    listed = versions.versions(OWNER)
    assert [(v.version, v.source, v.templates, v.active) for v in listed] == [
        (1, LibrarySource.LIVE, 3, True),
        (2, LibrarySource.REPROCESS, 3, False),
    ]
    assert listed[1].note == "scorer failure_averse"

    switch = versions.promote(OWNER, 2)
    assert (switch.active, switch.previous) == (2, 1)
    assert tags(experience) == {"b"}
    # Another owner's library is untouched by the switch.
    experience.learn("team-b", tagged("c"))
    assert tags(experience, "team-b") == {"c"}
    assert versions.active("team-b") == 1


def test_rollback_serves_the_previous_version_and_a_second_rollback_undoes_it(experience: ExperienceService) -> None:
    versions = LibraryVersions(experience.db)
    experience.learn(OWNER, tagged("a"))
    experience.create_version(OWNER, tagged("b"), LibrarySource.REPROCESS)
    with pytest.raises(NotFound, match="no previous"):
        versions.rollback(OWNER)
    versions.promote(OWNER, 2)
    assert (versions.rollback(OWNER).active, tags(experience)) == (1, {"a"})
    assert (versions.rollback(OWNER).active, tags(experience)) == (2, {"b"})
    with pytest.raises(NotFound):
        versions.promote(OWNER, 7)
    assert versions.active(OWNER) == 2


def test_live_learning_writes_into_whatever_version_is_active(experience: ExperienceService) -> None:
    versions = LibraryVersions(experience.db)
    first = experience.learn(OWNER, [template("bulk_import", confidence=0.9)])
    experience.create_version(OWNER, [template("bulk_import", confidence=0.9)], LibrarySource.REPROCESS)
    versions.promote(OWNER, 2)
    after = experience.learn(OWNER, [template("add_item_batch", "a product import has fewer than 20 rows")])
    assert [(v.version, v.templates) for v in versions.versions(OWNER)] == [(1, 1), (2, 2)]
    # The same rule in two versions is two templates: ids are a version's own.
    assert set(first.new).isdisjoint(after.new)
    with experience.db.read() as session:
        store = SqlExperienceStore(session)
        assert set(store.get_many(OWNER, list(after.new), 2)) == set(after.new)
        assert store.get_many(OWNER, list(after.new), 1) == {}
    served = experience.query_experience(
        OWNER, "Import 12 products into the catalog", role="executor", min_confidence=0
    )
    assert {s.template.recommended.tool for s in served.templates} == {"bulk_import", "add_item_batch"}


def test_a_version_whose_vectors_are_missing_is_promoted_only_when_forced(experience: ExperienceService) -> None:
    versions = LibraryVersions(experience.db)
    experience.learn(OWNER, tagged("a"))
    experience.create_version(OWNER, tagged("b"), LibrarySource.REPROCESS)
    with experience.db.transaction() as session:
        session.execute(
            sa.update(ExperienceTemplateRow).where(ExperienceTemplateRow.version == 2).values(index_pending=True)
        )
    with pytest.raises(Conflict, match="3 templates not yet indexed"):
        versions.promote(OWNER, 2)
    assert versions.active(OWNER) == 1
    assert versions.promote(OWNER, 2, force=True).active == 2


def test_only_the_newest_versions_are_kept_with_the_active_one(
    database: Database, milvus: MilvusClient, embedder: CachedEmbedder
) -> None:
    experience = ExperienceService(database, MilvusExperienceIndex(milvus), embedder, versions_kept=2)
    versions = LibraryVersions(database)
    experience.learn(OWNER, tagged("a"))
    v1_ids = experience.index.ids(OWNER)
    built = [experience.create_version(OWNER, tagged(t), LibrarySource.REPROCESS) for t in "bcde"]
    assert built == [2, 3, 4, 5]
    # Version 1 is active, so it stays beside the two newest.
    assert [v.version for v in versions.versions(OWNER)] == [1, 4, 5]
    versions.promote(OWNER, 4)
    experience.create_version(OWNER, tagged("f"), LibrarySource.REPROCESS)
    # Now 4 is active, 1 the previous (rollback target); 5 and 6 are the newest.
    assert [v.version for v in versions.versions(OWNER)] == [1, 4, 5, 6]
    experience.create_version(OWNER, tagged("g"), LibrarySource.REPROCESS)
    assert [v.version for v in versions.versions(OWNER)] == [1, 4, 6, 7]
    with database.read() as session:
        store = SqlExperienceStore(session)
        assert store.count(OWNER) == 4 * 3
        kept = {t.template_id for t, _ in store.iter_owner(OWNER)}
        history = set(session.scalars(sa.select(ConfidenceChangeRow.template_id).distinct()))
    # Pruned templates leave SQL (history too) and Milvus.
    assert history == kept
    assert experience.index.ids(OWNER) == kept
    assert v1_ids <= kept
    assert tags(experience) == {"d"}


def test_diff_names_the_rules_added_removed_and_changed(experience: ExperienceService) -> None:
    versions = LibraryVersions(experience.db)
    (bulk, stream, validate) = RULES
    experience.learn(OWNER, [template(bulk[0], bulk[1], confidence=0.9), template(stream[0], stream[1])])
    experience.create_version(
        OWNER,
        [template(bulk[0], bulk[1], confidence=0.75), template(validate[0], validate[1])],
        LibrarySource.REPROCESS,
    )
    diff = versions.diff(OWNER, 1, 2)
    assert [e.rule.split(",")[1].split("(")[0].strip() for e in diff.added] == ["prefer validate_csv"]
    assert [e.rule.split(",")[1].split("(")[0].strip() for e in diff.removed] == ["prefer stream_import"]
    assert [(e.confidence_a, e.confidence_b) for e in diff.changed] == [(0.9, 0.75)]
    assert diff.unchanged == 0
    assert versions.diff(OWNER, 2, 2).unchanged == 2
    with pytest.raises(NotFound):
        versions.diff(OWNER, 1, 3)


def test_an_import_builds_a_version_and_live_is_not_a_source_of_new_versions(experience: ExperienceService) -> None:
    experience.learn(OWNER, tagged("a"))
    lines = list(experience.export_library(OWNER))
    version = experience.create_version(OWNER, parse_export(lines), LibrarySource.IMPORT, "file")
    assert [(v.version, v.source, v.templates) for v in LibraryVersions(experience.db).versions(OWNER)] == [
        (1, LibrarySource.LIVE, 3),
        (version, LibrarySource.IMPORT, 3),
    ]
    with pytest.raises(InvalidInput):
        experience.create_version(OWNER, tagged("b"), LibrarySource.LIVE)


def test_version_switch_is_atomic_under_concurrent_queries(experience: ExperienceService) -> None:
    versions = LibraryVersions(experience.db)
    experience.learn(OWNER, tagged("a"))
    experience.create_version(OWNER, tagged("b"), LibrarySource.REPROCESS)
    answers: list[frozenset[str]] = []
    errors: list[BaseException] = []
    done = threading.Event()
    answered = threading.Condition()
    queriers = 3

    def query() -> None:
        try:
            while not done.is_set():
                served = experience.query_experience(OWNER, CONTEXT, role="executor", min_confidence=0)
                tools = frozenset(s.template.recommended.tool for s in served.templates)
                with answered:
                    answers.append(tools)
                    answered.notify_all()
        except BaseException as exc:
            errors.append(exc)
            done.set()

    def flip(switch: object) -> None:
        # Queries run on while each switch commits; the next switch waits until a query that
        # started after this one has answered, so both versions are served in turn.
        with answered:
            target = len(answers) + queriers + 1
            assert answered.wait_for(lambda: len(answers) >= target or done.is_set(), timeout=60)

    threads = [threading.Thread(target=query) for _ in range(queriers)]
    for thread in threads:
        thread.start()
    try:
        flip(versions.promote(OWNER, 2))
        for _ in range(15):
            flip(versions.rollback(OWNER))
    finally:
        done.set()
        for thread in threads:
            thread.join(timeout=60)
    assert not errors, errors
    whole = {tag: frozenset(f"{tool}_{tag}" for tool, _ in RULES) for tag in "ab"}
    seen = Counter(answers)
    # Every answer is one version's three templates: none empty, none a mix.
    assert set(seen) <= set(whole.values()), [sorted(a) for a in seen if a not in whole.values()]
    assert seen[whole["a"]] > 0
    assert seen[whole["b"]] > 0


def test_the_migration_makes_existing_templates_version_1_of_their_owner(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    config = alembic_config(url)
    command.upgrade(config, "0005_leases")
    db = Database(url)
    now = "2026-01-02 03:04:05"
    with db.engine.begin() as conn:
        for owner, n in (("team-a", 2), ("team-b", 1)):
            for i in range(n):
                conn.execute(
                    sa.text(
                        "INSERT INTO experience_templates (template_id, owner, role, task_type, signature, source, "
                        "parent_id, confidence, model, text, content_hash, created_at, updated_at, index_pending) "
                        "VALUES (:id, :owner, 'executor', NULL, 's', 'attribution', NULL, 0.9, '{}', 't', 'h', "
                        ":now, :now, 0)"
                    ),
                    {"id": f"{owner[-1]}{i:031d}", "owner": owner, "now": now},
                )
    command.upgrade(config, "head")
    with db.read() as session:
        store = SqlExperienceStore(session)
        listed = {owner: store.versions(owner) for owner in ("team-a", "team-b")}
        pending = store.index_backlog_size()
    assert {o: [(v.version, v.source, v.templates, v.active) for v in vs] for o, vs in listed.items()} == {
        "team-a": [(1, LibrarySource.LIVE, 2, True)],
        "team-b": [(1, LibrarySource.LIVE, 1, True)],
    }
    # The new collection has the version field: every template is indexed again.
    assert pending == 3
    command.downgrade(config, "0005_leases")
    db.dispose()


def test_a_rebuilt_version_keeps_what_its_evidence_contradicts_retired_and_never_serves_it(
    experience: ExperienceService,
) -> None:
    signature = "executor|catalog_import|import"
    band = (Predicate(feature="rows", op=">", value=20), Predicate(feature="rows", op="<=", value=5000))
    stale = template("bulk_import", signature=signature, predicates=band)
    kept = template("validate_csv", "a supplier sends a file the first time", signature=signature)
    experience.learn(OWNER, [stale, kept])

    def run(rows: int, ok: bool) -> ActionOutcome:
        return ActionOutcome(signature=signature, action="bulk_import", context={"rows": rows}, succeeded=ok)

    # bulk_import worked up to 800 rows and failed at 3000 and 4000: the bound of 5000 is wrong.
    outcomes = [run(100, True), run(800, True), run(3000, False), run(4000, False)]
    fresh = template(
        "bulk_import", signature=signature, predicates=(band[0], Predicate(feature="rows", op="<=", value=1900))
    )
    version = experience.create_version(OWNER, [fresh], LibrarySource.CONSOLIDATE, "", outcomes)

    with experience.db.read() as session:
        rows = [t for t, _ in SqlExperienceStore(session).iter_owner(OWNER, version=version)]
    retired = [t for t in rows if t.retired_reason is not None]
    assert [t.condition.predicates for t in retired] == [band]
    assert "bulk_import failed in 2 run(s) with rows above 800" in (retired[0].retired_reason or "")
    assert retired[0].template_id != stale.template_id
    # The template the evidence does not contradict is not carried: the rebuild is what it learned.
    assert [t.condition.predicates for t in rows if t.retired_reason is None] == [fresh.condition.predicates]

    LibraryVersions(experience.db).promote(OWNER, version, force=True)
    served = experience.query_experience(OWNER, CONTEXT, role="executor", min_confidence=0)
    assert [s.template.condition.predicates for s in served.templates] == [fresh.condition.predicates]
