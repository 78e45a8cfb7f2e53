"""One service for the console tests: real stores with real data, the service's HTTP app on a real
port (uvicorn, as a Serve replica runs it), two owners with their own bearer tokens."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn

from cluster.auth import OwnerResolver
from cluster.http import build_http_app
from cluster.net import free_port
from cluster.services import Services, build_services
from cluster.settings import Settings
from tests.e2e.console.data import TOKENS, Seeded, seed


@dataclass
class Console:
    url: str
    services: Services
    seeded: Seeded


@pytest.fixture(scope="package")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    data_dir: Path = tmp_path_factory.mktemp("console")
    services = build_services(Settings(data_dir=data_dir))
    seeded = seed(services)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            build_http_app(services, OwnerResolver(TOKENS)), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, name="console-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive(), "the HTTP app did not start"
        assert time.monotonic() < deadline, "the HTTP app did not start in 30 s"
        time.sleep(0.05)
    try:
        yield Console(f"http://127.0.0.1:{port}", services, seeded)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        services.close()
