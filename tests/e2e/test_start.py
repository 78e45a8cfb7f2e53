"""A start of the service that cannot finish leaves nothing behind, and says why.

Each test begins without Serve, as a fresh ``hindsight serve`` would (Ray is shared, see conftest).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray import serve

from cluster.net import free_port
from cluster.runner import APP_NAME, PortInUse, StartFailed, port_taken, start_service, wait_healthy
from cluster.serve_config import AttributionConfig, HttpConfig, MaintenanceConfig, ServeConfig
from cluster.settings import Settings
from cluster.storage.milvus import endpoint_file, lock_file

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture
def no_serve(ray_session: None) -> Iterator[None]:
    serve.shutdown()
    yield
    serve.shutdown()


def unschedulable(port: int) -> ServeConfig:
    """A deployment whose attribution worker asks for more CPUs than the machine has: the Serve app
    deploys, then the start waits for a worker Ray can never place."""
    return ServeConfig(
        http=HttpConfig(port=port),
        attribution=AttributionConfig(workers=1, num_cpus=64),
        maintenance=MaintenanceConfig(enabled=False),
    )


def assert_nothing_left(settings: Settings) -> None:
    assert APP_NAME not in serve.status().applications
    milvus = settings.data_dir / "milvus.db"
    assert not endpoint_file(milvus).exists()
    # The Lite file's lock is free again: the engine is gone.
    with lock_file(milvus).open("a") as fd:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_port_held_by_another_process_is_refused_before_anything_starts(no_serve: None, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    with socket.socket() as stale:
        stale.bind(("127.0.0.1", 0))
        stale.listen()
        port = stale.getsockname()[1]
        assert port_taken("127.0.0.1", port)
        with pytest.raises(PortInUse, match=f"127.0.0.1:{port} is already in use"):
            start_service(settings, unschedulable(port))
    assert serve.status().applications == {}
    assert not endpoint_file(tmp_path / "milvus.db").exists()
    assert not port_taken("127.0.0.1", port)


def test_a_start_that_fails_midway_leaves_no_application(no_serve: None, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    port = free_port()
    with pytest.raises(StartFailed, match=r"did not start|did not answer"):
        start_service(settings, unschedulable(port), start_timeout_s=1)
    assert_nothing_left(settings)
    # Serve was started by the failed attempt, so it went with it, HAProxy included.
    assert serve.status().proxies == {}


def test_sigterm_during_start_up_leaves_no_application(no_serve: None, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    port = free_port()

    def terminate_once_serving() -> None:
        # The app answers on the port while the start still waits for its worker.
        with contextlib.suppress(StartFailed):
            wait_healthy(f"http://127.0.0.1:{port}", 120)
        os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=terminate_once_serving, daemon=True)
    killer.start()
    with pytest.raises(SystemExit):
        start_service(settings, unschedulable(port), start_timeout_s=300)
    killer.join()
    assert_nothing_left(settings)
