"""The reindex job's closing check against a real Milvus Lite: it counts templates SQL holds that
have no vector, and keys held twice (Milvus does not enforce unique primary keys)."""

from __future__ import annotations

import uuid

import pytest
from pymilvus import MilvusClient

from cluster.core.types import utcnow
from cluster.experience.index import MilvusExperienceIndex
from cluster.experience.ports import IndexRow
from pipelines.reindex import ReindexIncomplete, ReindexSummary, check_index

pytestmark = pytest.mark.milvus


def row(template_id: uuid.UUID) -> IndexRow:
    now = utcnow()
    return IndexRow(template_id, "team-a", "executor", None, 0.9, now, now, [1.0] + [0.0] * 383)


def test_the_check_counts_what_has_no_vector_and_what_is_held_twice(milvus: MilvusClient) -> None:
    index = MilvusExperienceIndex(milvus)
    index.ensure_collection()
    kept, twice, lost = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    index.upsert([row(kept), row(twice)])
    assert check_index(index, "team-a", {kept, twice}) == (0, 0)
    # An insert that skips the delete (as a retried write whose delete was not seen would) doubles a key.
    (duplicate,) = index.rows.query("team-a", [str(twice)], list(index.rows.spec.fields), with_vector=True)
    index.rows.upsert([duplicate], fresh=True)
    assert check_index(index, "team-a", {kept, twice, lost}) == (1, 1)
    assert check_index(index, "team-b", set()) == (0, 0)


def test_an_incomplete_run_says_what_is_wrong() -> None:
    summary = ReindexSummary(written={"team-a": 3}, missing={"team-a": 2}, duplicates={"team-b": 1})
    error = ReindexIncomplete(summary)
    assert error.summary is summary
    assert str(error) == (
        "reindex incomplete: templates without a vector {'team-a': 2}, duplicate vectors {'team-b': 1}; run it again"
    )
