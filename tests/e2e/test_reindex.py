"""The Ray Data reindex job: after it, queries give the answers they gave before the index was damaged."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.core.types import utcnow
from cluster.experience.ports import IndexRow
from cluster.experience.repository import SqlExperienceStore
from cluster.memory.models import MemoryQuery, MemoryWrite
from cluster.services import Services, build_services
from cluster.settings import Settings
from cluster.storage.milvus import MilvusLiteServer
from pipelines.reindex import reindex
from tests.cli_process import cli
from tests.integration.experience.factories import template

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.milvus]

LESSONS = {
    "team-a": [
        ("bulk_import", "a product import has more than 20 rows with a uniform schema"),
        ("add_item", "a product import has a handful of rows"),
        ("set_encoding", "an export holds non-ASCII names"),
        ("retry_with_backoff", "the payment gateway answers 429"),
        ("resize_first", "an upload is larger than 10 MB"),
        ("geocode_batch", "more than 50 addresses need coordinates"),
    ],
    "team-b": [
        ("bulk_import", "a catalog sync has more than 100 rows"),
        ("scrape_api", "the page renders with JavaScript"),
        ("transcode_padded", "a video has odd dimensions"),
    ],
}
QUERIES = ["import 300 products from a CSV file", "export customer names with accents", "upload a 40 MB photo"]


@pytest.fixture
def settings(tmp_path: Path) -> Iterator[Settings]:
    # The test owns the Lite file and serves it, as the service does; the job's actors connect by URI.
    with MilvusLiteServer(tmp_path / "milvus.db") as server:
        yield Settings(data_dir=tmp_path, milvus_uri=server.uri)


@pytest.fixture
def services(settings: Settings) -> Iterator[Services]:
    svc = build_services(settings)
    for owner, lessons in LESSONS.items():
        for tool, when in lessons:
            svc.experience.add_template(owner, template(tool, when, task_type=None))
    yield svc
    svc.close()


def answers(services: Services, owner: str) -> list[list[uuid.UUID]]:
    return [
        [s.template.template_id for s in services.experience.query_experience(owner, q, "executor").templates]
        for q in QUERIES
    ]


def test_queries_answer_as_before_after_a_ray_data_reindex(
    ray_session: None, settings: Settings, services: Services
) -> None:
    before = {owner: answers(services, owner) for owner in LESSONS}
    index = services.experience.index
    with services.db.read() as session:
        team_a = [t.template_id for t, _ in SqlExperienceStore(session).iter_owner("team-a")]
    # Damage the index: two vectors lost, one left behind by a template SQL no longer has.
    index.delete("team-a", team_a[:2])
    ghost = uuid.uuid4()
    now = utcnow()
    index.upsert([IndexRow(ghost, "team-a", "executor", None, 0.99, now, now, [1.0] + [0.0] * 383)])
    assert answers(services, "team-a") != before["team-a"]

    summary = reindex(settings, actors=2, batch_size=2)

    assert summary.written == {"team-a": 6, "team-b": 3}
    assert summary.stale_removed == {"team-a": 1, "team-b": 0}
    assert {owner: answers(services, owner) for owner in LESSONS} == before
    assert ghost not in index.ids("team-a")
    assert (index.count("team-a"), index.count("team-b")) == (6, 3)
    with services.db.read() as session:
        assert SqlExperienceStore(session).index_backlog_size() == 0


def test_a_full_reindex_removes_the_vectors_of_an_owner_sql_no_longer_has(
    ray_session: None, settings: Settings, services: Services
) -> None:
    index = services.experience.index
    ghost = uuid.uuid4()
    now = utcnow()
    index.upsert([IndexRow(ghost, "team-c", "executor", None, 0.99, now, now, [1.0] + [0.0] * 383)])
    assert index.owners() == {"team-a", "team-b", "team-c"}
    assert reindex(settings, owner="team-b", actors=1).stale_removed == {"team-b": 0}
    assert index.ids("team-c") == {ghost}  # one owner's run touches only that owner

    summary = reindex(settings, actors=1)

    assert summary.stale_removed == {"team-a": 0, "team-b": 0, "team-c": 1}
    assert index.owners() == {"team-a", "team-b"}


def test_reindexing_one_owner_leaves_the_others_alone(
    ray_session: None, settings: Settings, services: Services
) -> None:
    before = answers(services, "team-b")
    index = services.experience.index
    index.delete("team-a", sorted(index.ids("team-a")))
    summary = reindex(settings, owner="team-b", actors=1)
    assert summary.written == {"team-b": 3}
    assert answers(services, "team-b") == before
    assert index.ids("team-a") == set()


def test_hindsight_reindex_rebuilds_lost_memory_vectors(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """``hindsight reindex --what memories``, run by an operator beside the service after Milvus lost vectors."""
    facts = {
        "deploy": "The billing service deploys to eu-west-1 every Tuesday",
        "db": "Search runs on Postgres 16 with pgvector",
        "oncall": "Dana is on call for checkout this week",
    }
    svc = build_services(settings)
    try:
        for key, value in facts.items():
            svc.memory.apply_write("ops", MemoryWrite(key=key, value=value))
        svc.memory.apply_write("other", MemoryWrite(key="note", value="An unrelated owner's memory"))
        question = "which region does billing deploy to"
        before = [h.memory.key for h in svc.memory.run_query("ops", MemoryQuery(query=question, top_k=3)).hits]
        seqs = sorted(svc.memory.index.seqs("ops"))
        svc.memory.index.delete("ops", seqs)  # Milvus lost this owner's vectors
        assert svc.memory.index.seqs("ops") == set()

        # The command runs in a process of its own, against the Milvus the service uses.
        monkeypatch.setenv("HINDSIGHT_MILVUS_URI", str(settings.milvus_uri))
        done = cli("reindex", "--what", "memories", "--owner", "ops", data_dir=settings.data_dir)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("3 memory vectors written")

        assert sorted(svc.memory.index.seqs("ops")) == seqs
        assert len(svc.memory.index.seqs("other")) == 1
        hits = svc.memory.run_query("ops", MemoryQuery(query=question, top_k=3)).hits
        assert [h.memory.key for h in hits] == before
        assert "dense" in hits[0].why.stages

        refused = cli("reindex", "--what", "memories", "--owner", "", data_dir=settings.data_dir)
        assert refused.returncode == 1
        assert "owner" in refused.stderr
    finally:
        svc.close()
