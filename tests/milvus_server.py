"""A real Milvus server for the tests marked ``milvus_server``, one for the whole test session.

bench/milvus_server.py starts it (the ``milvus`` package: Milvus standalone without Docker) on a
fresh data directory, so no "collection not loaded" after a restart, and every test talks to it
over loopback. Most of its ports bind every interface whatever the configuration says: it runs
only inside tests. A server that does not come up fails the tests that need it, with its errors
and the end of its log; it never skips them.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from bench.milvus_server import MilvusServerFailed, milvus_server
from cluster.storage.milvus import MilvusLiteServer, open_milvus


@pytest.fixture(scope="session")
def milvus_server_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URI of a Milvus standalone server started for this test session, on loopback."""
    try:
        import milvus  # type: ignore[import-untyped]  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"the milvus package (a Milvus server without Docker) is not installed: {exc}")
    data_dir = tmp_path_factory.mktemp("milvus-server")
    try:
        with milvus_server(data_dir) as uri:
            yield uri
    except MilvusServerFailed as exc:
        pytest.fail(str(exc))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)  # 550 MB of binaries and data


@pytest.fixture(scope="session")
def shared_lite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusLiteServer]:
    """One Milvus Lite file for the session, served by this process as the embedded deployment
    serves it; tests empty what they made (:func:`emptied_after`). Starting a Lite server and
    making its collections for every test cost about a second each, minutes over the suite."""
    with MilvusLiteServer(tmp_path_factory.mktemp("lite") / "milvus.db") as server:
        yield server


# Collections tests made on a shared server (the Milvus server, or a session's Lite file), emptied
# after each test instead of dropped: making and loading a collection takes half a second on Lite
# and seconds on a busy server, deleting its rows a fraction of one.
_KEPT: set[str] = set()


@contextlib.contextmanager
def emptied_after(client: Any) -> Iterator[None]:
    """Empty, on the way out, every collection the tests made on the shared server (or Lite file).

    Tests share one server per session and several use the service's default collection names,
    so each test finds those collections empty. Collections that were there before the block and
    were not made by a test (a module's own) are left alone.
    """
    before = set(client.list_collections())
    try:
        yield
    finally:
        for name in client.list_collections():
            if name in before and name not in _KEPT:
                continue
            try:
                # Every collection of the project has an owner field (CollectionSpec). Milvus Lite
                # 2.5 matches nothing with `owner like "%"`, so the filter names both halves.
                client.delete(name, filter='owner != "" or owner == ""')
                _KEPT.add(name)
            except Exception:  # a collection without one: nothing to keep it for
                client.drop_collection(name)
                _KEPT.discard(name)


@pytest.fixture
def milvus_server_client(milvus_server_uri: str) -> Iterator[Any]:
    """A client of the session's Milvus server; the collections tests made are emptied after the test."""
    client = open_milvus(milvus_server_uri, dedicated=True)
    try:
        with emptied_after(client):
            yield client
    finally:
        client.close()
