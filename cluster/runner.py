"""Start and stop the whole service on Ray: the Serve app with the MCP endpoint and the attribution pool.

Used by ``hindsight serve``, the demo, benchmarks and the end-to-end tests, so they all run the same
thing.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

import anyio
import ray
from ray import serve

from actors.pool import start_background, stop_pool
from cluster.experience.repository import SqlExperienceStore
from cluster.serve_app import build_app, ingress_env
from cluster.serve_config import ServeConfig
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from cluster.storage.milvus import MilvusLiteServer, is_lite_target
from cluster.trajectories.repository import SqlTrajectoryStore

logger = logging.getLogger(__name__)

APP_NAME = "hindsight"


def ensure_ray(settings: Settings, num_cpus: int | None = None, *, quiet: bool = False) -> None:
    """Join the configured cluster, or start a local Ray instance once per process.

    ``quiet`` keeps the workers' and replicas' logs out of this terminal (they stay in Ray's log
    folder): for the demo and benchmarks, whose output is a table.
    """
    if ray.is_initialized():
        return
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": not quiet}
    if quiet:
        options["logging_level"] = logging.WARNING
        logging.getLogger("ray").setLevel(logging.WARNING)
    if settings.ray_address:
        ray.init(address=settings.ray_address, **options)
        return
    # Unix socket paths are limited to ~100 bytes: keep Ray's session directory short.
    temp_dir = os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()
    ray.init(num_cpus=num_cpus, _temp_dir=os.path.join(temp_dir, "ray"), **options)


@dataclass
class RunningService:
    settings: Settings
    config: ServeConfig
    url: str
    workers: list[Any] = field(default_factory=list)
    milvus_server: MilvusLiteServer | None = None

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp/"

    def start_workers(self) -> None:
        if not self.workers:
            self.workers = start_background(self.settings, self.config)

    def stop_workers(self) -> None:
        stop_pool(self.workers)
        self.workers = []

    def stop(self) -> None:
        """Stop the pool and the Serve app; Ray itself stays up for whoever started it."""
        self.stop_workers()
        serve.delete(APP_NAME)
        if self.milvus_server is not None:
            self.milvus_server.stop()


async def wait_until_analysed(db: Database, timeout_s: float = 300) -> None:
    """Return once the attribution queue is empty and every learned template is indexed."""
    with anyio.fail_after(timeout_s):
        while True:
            with db.read() as session:
                if (
                    SqlTrajectoryStore(session).queue_depth() == 0
                    and SqlExperienceStore(session).index_backlog_size() == 0
                ):
                    return
            await anyio.sleep(0.1)


def start_service(settings: Settings, config: ServeConfig, *, quiet: bool = False) -> RunningService:
    """Migrate the SQL store, deploy the MCP app and start the attribution workers.

    Stops what it started if any step fails, so a failed start leaves no engine behind.
    """
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.sql_url())
    milvus_server = None
    if is_lite_target(settings.milvus_target()):
        # This process owns the Lite file and serves it; replicas and workers connect by URI.
        milvus_server = MilvusLiteServer(settings.milvus_target())
        settings = settings.model_copy(update={"milvus_uri": milvus_server.start()})
    running = RunningService(
        settings, config, f"http://{config.http.host}:{config.http.port}", milvus_server=milvus_server
    )
    try:
        ensure_ray(settings, quiet=quiet)
        env = ingress_env(config.http)
        serve.start(
            http_options={"host": config.http.host, "port": config.http.port},
            controller_options={"runtime_env": {"env_vars": env}} if env else None,
        )
        serve.run(build_app(settings, config.ingress, env), name=APP_NAME, route_prefix="/")
        running.start_workers()
    except BaseException:
        if milvus_server is not None:
            milvus_server.stop()
        raise
    logger.info("hindsight is serving MCP at %s", running.mcp_url)
    return running
