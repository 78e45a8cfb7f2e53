"""One Ray instance for the whole test session (Ray costs seconds and ~0.5 GiB to start)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, _temp_dir="/tmp/ray-tests", log_to_driver=False)
    yield
    from ray import serve

    serve.shutdown()
    ray.shutdown()
