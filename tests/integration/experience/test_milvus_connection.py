"""One process owns a Lite file and serves it; every other process connects by URI."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster.core.errors import InvalidInput, StoreUnavailable
from cluster.services import milvus_client
from cluster.settings import load_settings
from cluster.storage.milvus import MilvusLiteServer, endpoint_file, open_milvus, served_uri

pytestmark = pytest.mark.milvus


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)


def test_another_process_reads_and_writes_through_the_served_uri(milvus_server: MilvusLiteServer) -> None:
    client = open_milvus(str(milvus_server.path))
    client.create_collection("t", dimension=4)
    client.insert("t", [{"id": 1, "vector": [0.1, 0.2, 0.3, 0.4]}])
    child = run_python(
        "from cluster.storage.milvus import open_milvus\n"
        f"c = open_milvus({str(milvus_server.path)!r})\n"
        "c.insert('t', [{'id': 2, 'vector': [0.4, 0.3, 0.2, 0.1]}])\n"
        "print(sorted(r['id'] for r in c.query('t', filter='id >= 0', output_fields=['id'])))\n"
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "[1, 2]"
    assert sorted(r["id"] for r in client.query("t", filter="id >= 0", output_fields=["id"])) == [1, 2]
    client.close()


def test_a_second_owner_is_refused_in_this_and_in_another_process(milvus_server: MilvusLiteServer) -> None:
    with pytest.raises(StoreUnavailable):
        MilvusLiteServer(milvus_server.path).start()
    child = run_python(
        "from cluster.storage.milvus import MilvusLiteServer\n"
        "from cluster.core.errors import StoreUnavailable\n"
        "try:\n"
        f"    MilvusLiteServer({str(milvus_server.path)!r}).start()\n"
        "except StoreUnavailable:\n"
        "    print('refused')\n"
    )
    assert child.stdout.strip() == "refused", child.stderr


def test_data_survive_a_restart_of_the_owner(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with MilvusLiteServer(path, unix_socket=False):
        client = open_milvus(str(path))
        client.create_collection("t", dimension=4)
        client.insert("t", [{"id": 7, "vector": [1.0, 0.0, 0.0, 0.0]}])
        client.close()
    assert served_uri(path) is None
    assert not endpoint_file(path).exists()
    with MilvusLiteServer(path, unix_socket=True) as server:
        assert server.uri.startswith("unix:")
        client = open_milvus(str(path))
        assert [r["id"] for r in client.query("t", filter="id >= 0", output_fields=["id"])] == [7]
        client.close()


def test_the_engine_exits_when_its_owner_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from cluster.storage.milvus import MilvusLiteServer\n"
            f"s = MilvusLiteServer({str(path)!r}); print(s.start(), flush=True); sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    uri = owner.stdout.readline().strip()
    engine = uri.removeprefix("unix:")

    def connect() -> None:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(0.5)
            sock.connect(engine)

    connect()
    assert served_uri(path) == uri
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(timeout=10)
    # The engine notices the released lock and stops accepting connections.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            connect()
        except OSError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the engine outlived its owner")
    assert served_uri(path) is None  # the endpoint file is stale: its pid is gone
    with MilvusLiteServer(path):  # the file can be taken over
        pass


def test_without_a_server_the_file_opens_in_process(tmp_path: Path) -> None:
    client = milvus_client(load_settings(data_dir=tmp_path))
    client.create_collection("t", dimension=4)
    assert client.list_collections() == ["t"]
    client.close()


def test_bad_targets_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput):
        open_milvus(str(tmp_path / "no-suffix"))
    with pytest.raises(InvalidInput):
        open_milvus(str(tmp_path / "missing-dir" / "m.db"))
    with pytest.raises(StoreUnavailable):
        open_milvus("http://127.0.0.1:9", timeout=1)
