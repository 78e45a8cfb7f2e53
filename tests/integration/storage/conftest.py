"""A real Milvus server for the storage tests marked ``milvus_server``.

The ``milvus`` package (2.3.5) ships Milvus standalone, every component in one process with an
embedded etcd, local storage and rocksmq: no Docker. One server runs for the whole test session,
on a fresh data directory (so no "collection not loaded" after a restart), and every test talks to
it over loopback. Its components register themselves on 127.0.0.1 and its etcd listens on two free
loopback ports (by default etcd's peer port is always 2380, so a second server on the host could
not start), but most of its other ports bind every interface whatever the configuration says: run
it only inside tests. A server that does not come up fails the tests that need it, with its errors
and the end of its log; it never skips them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.net import free_port

STARTUP_TIMEOUT_S = 120.0  # the first start of a data directory unpacks 246 MB of binaries
STOP_GRACE_S = 5.0
# Components announce this address to each other instead of the host's first network address.
_COMPONENTS = ("rootCoord", "proxy", "queryCoord", "queryNode", "indexNode", "dataCoord", "dataNode")


def _log_tail(data_dir: Path, lines: int = 20) -> str:
    """The server's first errors (the cause; a panic's stack comes last) and the end of each log."""
    parts = []
    for name in ("milvus-stdout.log", "milvus-stderr.log"):
        log = data_dir / "logs" / name
        if not log.is_file():
            continue
        text = log.read_text(errors="replace").splitlines()
        errors = [line[:400] for line in text if "[ERROR]" in line or "[FATAL]" in line][:5]
        parts.append(f"--- {name}: first errors\n" + "\n".join(errors) if errors else f"--- {name}: no error lines")
        parts.append(f"--- {name}: last lines\n" + "\n".join(line[:400] for line in text[-lines:]))
    return "\n".join(parts) or "(no log)"


def _etcd_on_loopback(data_dir: Path) -> tuple[int, Path]:
    """An embedded-etcd config on two free loopback ports: the client port, and the file."""
    client, peer = free_port(), free_port()
    config = data_dir / "etcd.yaml"
    config.write_text(
        "name: default\n"
        f"listen-client-urls: http://127.0.0.1:{client}\n"
        f"advertise-client-urls: http://127.0.0.1:{client}\n"
        f"listen-peer-urls: http://127.0.0.1:{peer}\n"
        f"initial-advertise-peer-urls: http://127.0.0.1:{peer}\n"
        f"initial-cluster: default=http://127.0.0.1:{peer}\n"
    )
    return client, config


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as reply:
            return b"OK" in reply.read()
    except OSError:
        return False


def _answers(uri: str) -> bool:
    from pymilvus import MilvusClient

    try:
        client = MilvusClient(uri=uri, timeout=5)
    except Exception:  # not accepting connections yet, in any of the ways pymilvus reports it
        return False
    try:
        client.list_collections(timeout=5)
    except Exception:  # as above
        return False
    finally:
        client.close()
    return True


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL: a graceful stop would otherwise wait ``common.gracefulStopTimeout``."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_GRACE_S)


@pytest.fixture(scope="session")
def milvus_server_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URI of a Milvus standalone server started for this test session, on loopback."""
    try:
        from milvus import MilvusServer, MilvusServerConfig  # type: ignore[import-untyped]
    except ImportError as exc:
        pytest.fail(f"the milvus package (a Milvus server without Docker) is not installed: {exc}")
    data_dir = tmp_path_factory.mktemp("milvus-server")
    etcd_port, etcd_config = _etcd_on_loopback(data_dir)
    config = MilvusServerConfig(data_dir=str(data_dir), etcd_port=etcd_port)
    # The template has no key for etcd's own config file (milvus reads etcd.config.path): add it.
    config.template_text = re.sub(
        r"^etcd:\n", f"etcd:\n  config:\n    path: {etcd_config}\n", config.template_text, count=1, flags=re.M
    )
    # A stop gives up on in-flight work after a few seconds instead of 1800 (then SIGKILL backs it up).
    config.set("common.gracefulStopTimeout", 3)
    # Sessions of dead components expire in 10 s rather than 30.
    config.set("common.session.ttl", 10)
    # A strong-consistency read waits for the next time tick: 50 ms instead of 200 makes a search
    # 50-100 ms instead of 200-400 (measured here), for 5% of a core idle instead of 3%.
    config.set("proxy.timeTickInterval", 50)
    for component in _COMPONENTS:
        config.set(f"{component}.ip", "127.0.0.1")
    server = MilvusServer(config, wait_for_started=False)
    try:
        try:
            server.start()
        except Exception as exc:  # any failure to launch fails every test that needs the server
            pytest.fail(f"the Milvus server did not start: {exc}\n{_log_tail(data_dir)}")
        uri = f"http://127.0.0.1:{server.listen_port}"
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not (_healthy(server.webservice_port) and _answers(uri)):
            if server.server_proc.poll() is not None:
                pytest.fail(f"the Milvus server exited with {server.server_proc.returncode}\n{_log_tail(data_dir)}")
            if time.monotonic() > deadline:
                pytest.fail(f"the Milvus server was not healthy after {STARTUP_TIMEOUT_S:.0f} s\n{_log_tail(data_dir)}")
            time.sleep(0.25)  # polling a starting process: there is nothing to wait on
        yield uri
    finally:
        if server.server_proc is not None:
            _stop(server.server_proc)
        server.stop()  # closes its log files; the process is already gone
        shutil.rmtree(data_dir, ignore_errors=True)  # 550 MB of binaries and data
