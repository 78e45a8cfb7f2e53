"""A Milvus standalone server (the ``milvus`` package, 2.3.5) on free ports, for tests and benchmarks.

The package ships Milvus standalone, every component in one process with an embedded etcd, local
storage and rocksmq: no Docker. :func:`milvus_server` starts one on a fresh data directory and
stops it. Its components register themselves on 127.0.0.1 and its etcd listens on two free
loopback ports (by default etcd's peer port is always 2380, so a second server on the host could
not start), but most of its other ports bind every interface whatever the configuration says: run
it only inside tests and benchmarks, never as a deployment's store.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from cluster.net import free_port

STARTUP_TIMEOUT_S = 120.0  # the first start of a data directory unpacks 246 MB of binaries
STOP_GRACE_S = 5.0
# Components announce this address to each other instead of the host's first network address.
_COMPONENTS = ("rootCoord", "proxy", "queryCoord", "queryNode", "indexNode", "dataCoord", "dataNode")


class MilvusServerFailed(RuntimeError):
    """The server did not start or did not become healthy; the message ends with its log."""


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


@contextlib.contextmanager
def milvus_server(data_dir: Path | None = None, *, time_tick_ms: int = 50) -> Iterator[str]:
    """Run a Milvus server on a fresh data directory (a temporary one by default); yields its URI.

    ``time_tick_ms`` is ``proxy.timeTickInterval``: a strong-consistency read waits for the next tick.

    Raises:
        MilvusServerFailed: it did not start, exited, or was not healthy within ``STARTUP_TIMEOUT_S``.
    """
    from milvus import MilvusServer, MilvusServerConfig  # type: ignore[import-untyped]

    owned = data_dir is None
    data = Path(tempfile.mkdtemp(prefix="milvus-server-")) if data_dir is None else data_dir
    etcd_port, etcd_config = _etcd_on_loopback(data)
    config = MilvusServerConfig(data_dir=str(data), etcd_port=etcd_port)
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
    config.set("proxy.timeTickInterval", time_tick_ms)
    for component in _COMPONENTS:
        config.set(f"{component}.ip", "127.0.0.1")
    server = MilvusServer(config, wait_for_started=False)
    try:
        try:
            server.start()
        except Exception as exc:  # any failure to launch
            raise MilvusServerFailed(f"the Milvus server did not start: {exc}\n{_log_tail(data)}") from exc
        uri = f"http://127.0.0.1:{server.listen_port}"
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not (_healthy(server.webservice_port) and _answers(uri)):
            if server.server_proc.poll() is not None:
                raise MilvusServerFailed(
                    f"the Milvus server exited with {server.server_proc.returncode}\n{_log_tail(data)}"
                )
            if time.monotonic() > deadline:
                raise MilvusServerFailed(
                    f"the Milvus server was not healthy after {STARTUP_TIMEOUT_S:.0f} s\n{_log_tail(data)}"
                )
            time.sleep(0.25)  # polling a starting process: there is nothing to wait on
        yield uri
    finally:
        if server.server_proc is not None:
            _stop(server.server_proc)
        server.stop()  # closes its log files; the process is already gone
        if owned:
            shutil.rmtree(data, ignore_errors=True)  # 550 MB of binaries and data
