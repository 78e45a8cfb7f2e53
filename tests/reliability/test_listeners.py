"""The embedded service listens on the loopback only, and leaves nothing listening when it ends.

Runs ``hindsight serve`` as a process, as a person would, and audits every socket of its process
tree: Ray's GCS, raylet, agents and workers, the Serve replicas, HAProxy and Milvus Lite.
"""

from __future__ import annotations

import signal
from pathlib import Path

import psutil
import pytest

from cluster.net import HaproxyGuard, free_port
from tests.reliability.service import (
    ServeProcess,
    anything_listens_on,
    deadline_loop,
    health,
    is_exposed,
    listeners,
)

pytestmark = [pytest.mark.reliability, pytest.mark.slow]


def test_the_embedded_service_listens_on_loopback_only_and_leaves_nothing_listening(
    tmp_path: Path, ray_tmp: Path, started: list[ServeProcess]
) -> None:
    port = free_port()
    serve = ServeProcess.start(tmp_path / "data", port, ray_tmp)
    started.append(serve)
    serve.wait_serving()
    assert health(serve.url) == 200

    found = listeners(serve.tree())
    kinds = {(item.process, item.kind) for item in found}
    # The audit saw the processes it is about (else an empty list would pass).
    assert ("haproxy", "tcp") in kinds
    assert any(item.process == "gcs_server" for item in found)
    assert any(item.address.endswith(f":{port}") for item in found)
    exposed = [item for item in found if is_exposed(item)]
    assert exposed == [], "\n".join(f"{i.pid} {i.process} {i.kind} {i.address}" for i in exposed)

    # HAProxy's admin socket (admin level) is private to this user.
    guard_dir = HaproxyGuard.for_data_dir(serve.data_dir, "127.0.0.1", base=ray_tmp).run_dir
    admin_sockets = list(guard_dir.glob("*/admin.sock"))
    assert admin_sockets
    assert all(path.stat().st_mode & 0o077 == 0 for path in admin_sockets)

    # An HAProxy whose manager dies goes with it, instead of holding ports for nobody.
    before = serve.haproxies()
    managers = {p.ppid() for p in before}
    for pid in managers:
        psutil.Process(pid).send_signal(signal.SIGKILL)
    for _ in deadline_loop(30, "HAProxy processes outlived their killed manager"):
        if not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in before):
            break

    tree = serve.tree()
    assert serve.stop(signal.SIGTERM) == 0
    for _ in deadline_loop(60, f"something still listens on {port} after the service stopped"):
        if not anything_listens_on(port) and not any(p.is_running() for p in tree):
            break
