"""The one Milvus adapter: owner isolation, the filter-literal policy, upserts, timeouts and errors."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import net
from cluster.core.errors import InvalidInput, StoreUnavailable
from cluster.storage.milvus import MilvusLiteServer, open_milvus
from cluster.storage.milvus_collection import CollectionSpec, Kind, MilvusCollection, ScalarField, literal

pytestmark = pytest.mark.milvus

OWNERS = ["alice", 'd"ave', "back\\slash", "it's", "中文 owner", 'x" or owner != "']


@pytest.fixture(scope="module", params=["lite", pytest.param("server", marks=pytest.mark.milvus_server)])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A client of a served Lite file, then of the session's Milvus server."""
    if request.param == "server":
        c = open_milvus(request.getfixturevalue("milvus_server_uri"), dedicated=True)
        yield c
        c.close()
        return
    path: Path = tmp_path_factory.mktemp("milvus") / "collection.db"
    with MilvusLiteServer(path):
        c = open_milvus(str(path))
        yield c
        c.close()


@pytest.fixture
def rows(client: Any) -> Iterator[MilvusCollection]:
    spec = CollectionSpec(
        name=f"c_{uuid.uuid4().hex[:12]}",
        primary=ScalarField("key", Kind.INT64),
        dimension=2,
        scalars=(ScalarField("tag", Kind.VARCHAR, 100), ScalarField("weight", Kind.FLOAT)),
    )
    collection = MilvusCollection(client, spec, timeout=5.0)
    collection.ensure()
    yield collection
    collection.drop()


def row(key: int, owner: str, tag: str = "", weight: float = 1.0, vector: tuple[float, float] = (1.0, 0.0)) -> dict:
    return {"key": key, "owner": owner, "tag": tag, "weight": weight, "vector": list(vector)}


def test_every_read_is_confined_to_the_owner_whatever_its_characters(rows: MilvusCollection) -> None:
    rows.upsert([row(i, owner) for i, owner in enumerate(OWNERS)])
    for i, owner in enumerate(OWNERS):
        assert rows.ids(owner) == {i}
        assert [key for key, _, _ in rows.search(owner, [1.0, 0.0], 10)] == [i]
        assert rows.count(owner) == 1
        assert [r["key"] for r in rows.query(owner, list(range(len(OWNERS))), ["key"])] == [i]


def test_a_delete_removes_exactly_the_keys_it_names(rows: MilvusCollection) -> None:
    # Keys are unique across owners (SQL primary keys); the delete goes by key, not by a filter.
    rows.upsert([row(i, OWNERS[i % 2]) for i in range(6)])
    rows.delete([0, 3, 99])
    assert rows.ids(OWNERS[0]) == {2, 4}
    assert rows.ids(OWNERS[1]) == {1, 5}
    assert rows.count(OWNERS[0]) + rows.count(OWNERS[1]) == 4


def test_a_retried_upsert_replaces_the_row_instead_of_duplicating_it(rows: MilvusCollection) -> None:
    rows.upsert([row(1, "alice", tag="old")])
    rows.upsert([row(1, "alice", tag="new")])
    assert rows.count("alice") == 1
    assert rows.query("alice", [1], ["tag"])[0]["tag"] == "new"


def test_filters_on_scalar_fields(rows: MilvusCollection) -> None:
    rows.upsert([row(1, "alice", tag='a"b', weight=0.2), row(2, "alice", tag="", weight=0.9), row(3, "alice", "c")])
    assert {k for k, _, _ in rows.search("alice", [1.0, 0.0], 10, equals={"tag": 'a"b'})} == {1}
    assert {k for k, _, _ in rows.search("alice", [1.0, 0.0], 10, any_of={"tag": ["c", ""]})} == {2, 3}
    assert {k for k, _, _ in rows.search("alice", [1.0, 0.0], 10, at_least={"weight": 0.5})} == {2, 3}


def test_control_characters_are_refused_before_anything_is_stored(rows: MilvusCollection) -> None:
    with pytest.raises(InvalidInput, match="owner"):
        rows.upsert([row(1, "ali\nce")])
    with pytest.raises(InvalidInput, match="tag"):
        rows.upsert([row(1, "alice", tag="a\tb")])
    with pytest.raises(InvalidInput):
        rows.search("ali\x00ce", [1.0, 0.0], 1)
    assert rows.count("alice") == 0
    assert literal('say "hi" \\ bye') == '"say \\"hi\\" \\\\ bye"'


def test_malformed_rows_are_refused(rows: MilvusCollection) -> None:
    with pytest.raises(InvalidInput):
        rows.upsert([{"key": 1, "owner": "alice", "vector": [1.0, 0.0]}])
    with pytest.raises(InvalidInput):
        rows.upsert([row(1, "alice", vector=(1.0, float("nan")))])


def test_a_milvus_that_went_away_is_store_unavailable_within_the_timeout(tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    server = MilvusLiteServer(path).__enter__()
    client = open_milvus(str(path))
    spec = CollectionSpec(name="gone", primary=ScalarField("key", Kind.INT64), dimension=2)
    collection = MilvusCollection(client, spec, timeout=2.0)
    collection.ensure()
    server.stop()
    try:
        with pytest.raises(StoreUnavailable):
            collection.upsert([{"key": 1, "owner": "alice", "vector": [1.0, 0.0]}])
        with pytest.raises(StoreUnavailable):
            collection.search("alice", [1.0, 0.0], 1)
        assert not collection.ready()
    finally:
        client.close()


def test_a_new_engine_never_takes_a_port_an_engine_of_this_process_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first engine stops while a client still holds its shared connection, and a call then
    # leaves that connection's subchannel in reconnect backoff. Had the next engine been given the
    # same port, its first call would fail at once on that subchannel.
    first = MilvusLiteServer(tmp_path / "first.db", unix_socket=False).__enter__()
    old_port = int(first.uri.rsplit(":", 1)[1])
    stale = open_milvus(str(first.path))
    first.stop()
    with pytest.raises(Exception, match=r"(?i)unavailable|connect"):
        stale.list_collections(timeout=2.0)

    offered = iter([old_port])
    monkeypatch.setattr("cluster.storage.milvus.free_port", lambda host: next(offered, None) or net.free_port(host))
    with MilvusLiteServer(tmp_path / "second.db", unix_socket=False) as second:
        assert int(second.uri.rsplit(":", 1)[1]) != old_port
        fresh = open_milvus(str(second.path))
        assert fresh.list_collections() == []
        fresh.close()
    stale.close()
