"""A service stopped while its ingress is still coming up leaves nothing listening, and the next
start on the same port serves; a port another process holds is refused with its holder named."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

import pytest

from cluster.net import HaproxyGuard, free_port
from tests.reliability.service import ServeProcess, anything_listens_on, deadline_loop, health

pytestmark = [pytest.mark.reliability, pytest.mark.slow]


def stop_like_a_supervisor(serve: ServeProcess) -> None:
    """SIGTERM, then SIGKILL if the process has not ended 3 s later."""
    serve.process.send_signal(signal.SIGTERM)
    try:
        serve.process.wait(3)
    except subprocess.TimeoutExpired:
        serve.process.kill()
        serve.process.wait(30)


def test_a_stop_while_the_ingress_comes_up_leaves_nothing_listening_and_the_port_serves_again(
    tmp_path: Path, ray_tmp: Path, started: list[ServeProcess]
) -> None:
    port = free_port()
    data_dir = tmp_path / "data"
    first = ServeProcess.start(data_dir, port, ray_tmp)
    started.append(first)
    # The ingress is coming up: HAProxy runs (it reloads as replicas appear), the start still waits.
    for _ in deadline_loop(240, "HAProxy did not start"):
        if first.haproxies():
            break
        assert first.process.poll() is None, first.output()[-3000:]
    stop_like_a_supervisor(first)

    # Nothing of it is left for the next start to trip over: no HAProxy, nothing on the port.
    guard = HaproxyGuard.for_data_dir(data_dir, "127.0.0.1", base=ray_tmp)
    for _ in deadline_loop(60, f"HAProxy outlived the stopped service, or something listens on {port}"):
        if not guard.processes() and not anything_listens_on(port):
            break

    second = ServeProcess.start(data_dir, port, ray_tmp)
    started.append(second)
    second.wait_serving()
    assert health(second.url) == 200
    assert second.stop(signal.SIGTERM) == 0


def test_a_port_another_process_holds_is_refused_naming_the_holder(
    tmp_path: Path, ray_tmp: Path, started: list[ServeProcess]
) -> None:
    with socket.socket() as stale:
        stale.bind(("127.0.0.1", 0))
        stale.listen()
        port = stale.getsockname()[1]
        serve = ServeProcess.start(tmp_path / "data", port, ray_tmp, workers=0)
        started.append(serve)
        assert serve.process.wait(180) != 0
    output = serve.output()
    # One line naming the port, its holder and what to do (a traceback only with -v).
    assert f"error: 127.0.0.1:{port} is already in use by another process (pid " in output
    assert "stop it or choose another port" in output
    assert "Traceback" not in output
