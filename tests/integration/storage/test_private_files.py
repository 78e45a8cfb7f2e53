"""The embedded stores are this user's only: the data directory 0700, its files 0600, and the Milvus
Lite engine on a unix socket no other user can reach (docs/reliability.md, "Local exposure")."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import text

from cluster.services import build_services
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.files import private_dir
from cluster.storage.migrate import upgrade
from cluster.storage.milvus import MilvusLiteServer, endpoint_file, lock_file, open_milvus

pytestmark = pytest.mark.milvus


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def connects_as_nobody(address: str) -> bool:
    """Whether another user's process can connect to the engine at ``address`` (a unix socket
    path, or host:port). The system Python: the venv's may not be readable to that user."""
    family = "AF_UNIX" if address.startswith("/") else "AF_INET"
    target = repr(address) if family == "AF_UNIX" else repr((address.rsplit(":", 1)[0], int(address.rsplit(":", 1)[1])))
    probe = f"import socket; s = socket.socket(socket.{family}); s.connect({target}); print('connected')"
    result = subprocess.run(
        ["/usr/bin/python3", "-c", probe], user="nobody", capture_output=True, text=True, timeout=30, check=False
    )
    if result.returncode != 0 and "PermissionError" not in result.stderr:
        raise AssertionError(result.stderr)
    return result.stdout.strip() == "connected"


def test_the_service_makes_its_data_directory_and_files_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    services = build_services(Settings(data_dir=data))
    try:
        with services.db.transaction() as session:
            session.execute(text("CREATE TABLE probe (x INTEGER)"))
    finally:
        services.close()
    assert mode(data) == 0o700
    written = sorted(p.name for p in data.iterdir() if p.is_file())
    assert {"hindsight.db", "milvus.db"} <= set(written), written
    assert {name: mode(data / name) for name in written} == dict.fromkeys(written, 0o600)


def test_an_existing_open_directory_and_database_are_closed(tmp_path: Path) -> None:
    data = tmp_path / "old"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    old = data / "hindsight.db"
    old.touch(mode=0o644)
    old.chmod(0o644)
    private_dir(data)
    url = f"sqlite:///{old}"
    upgrade(url)
    db = Database(url)
    with db.transaction() as session:
        session.execute(text("CREATE TABLE probe (x INTEGER)"))
    db.dispose()
    assert (mode(data), mode(old)) == (0o700, 0o600)
    assert all(mode(p) == 0o600 for p in data.iterdir()), {p.name: oct(mode(p)) for p in data.iterdir()}


def test_a_served_lite_file_is_reachable_by_this_user_only(tmp_path: Path) -> None:
    path = tmp_path / "milvus.db"
    with MilvusLiteServer(path) as server:
        assert server.uri.startswith("unix:")
        socket_path = Path(server.uri.removeprefix("unix:"))
        assert mode(socket_path.parent) == 0o700
        client = open_milvus(str(path))
        client.create_collection("secrets", dimension=2)
        assert client.list_collections() == ["secrets"]
        client.close()
        assert {mode(p) for p in (path, lock_file(path), endpoint_file(path))} == {0o600}
        if os.geteuid() == 0:
            assert not connects_as_nobody(str(socket_path))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a probe as another user")
def test_the_probe_finds_an_engine_served_on_tcp(tmp_path: Path) -> None:
    # What the default was: a loopback port any local user could connect to. The check above would
    # fail against it.
    with MilvusLiteServer(tmp_path / "milvus.db", unix_socket=False) as server:
        assert connects_as_nobody(server.uri.removeprefix("http://"))
